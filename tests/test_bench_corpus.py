"""The corpus benchmark's machinery (jobs.bench.suites.corpus) without Spark: the corpus, the one-core
baseline on a small generated image, and the ratios of the jobs to it."""
from __future__ import annotations

import numpy as np
import pytest

from hecore.images import load_image
from hecore.keys import keygen
from hecore.params import preset
from jobs.bench.suites import corpus


def test_without_the_data_set_the_corpus_is_generated_at_the_asked_size(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "DATASETS", tmp_path / "nonexistent")
    dataset, folder = corpus.corpus_images(2, tmp_path / "images", width=48, height=24)
    files = sorted(folder.iterdir())
    assert dataset.startswith("generated 48x24") and len(files) == 2
    for f in files:
        assert load_image(f).pixels.shape == (24, 48, 3)


def test_with_the_data_set_the_corpus_links_the_files_in_place(tmp_path, monkeypatch):
    from PIL import Image

    src = tmp_path / "sets" / corpus.CORPUS_DIR
    src.mkdir(parents=True)
    for name in ("b.png", "a.png", "c.png"):
        Image.fromarray(np.zeros((4, 8, 3), dtype=np.uint8)).save(src / name)
    monkeypatch.setattr(corpus, "DATASETS", tmp_path / "sets")
    dataset, folder = corpus.corpus_images(2, tmp_path / "images")
    files = sorted(folder.iterdir())
    assert dataset.startswith("div2k") and [f.name for f in files] == ["a.png", "b.png"]
    assert all(f.is_symlink() and f.resolve().parent == src.resolve() for f in files)


@pytest.mark.parametrize("layout, encryption", corpus.MODES)
def test_the_baseline_does_every_job_and_decrypts_exactly(tmp_path, monkeypatch, layout, encryption):
    monkeypatch.setattr(corpus, "DATASETS", tmp_path / "nonexistent")
    keygen(preset("paper-4096"), tmp_path / "keys")
    _, folder = corpus.corpus_images(1, tmp_path / "images", width=96, height=64)
    rows = corpus.baseline_one_core(sorted(folder.iterdir()), tmp_path / "keys", layout, encryption)
    assert sorted(rows) == sorted(corpus.JOBS)
    counts = {r.ciphertexts for r in rows.values()}
    assert len(counts) == 1 and counts.pop() > 0
    assert all(r.pixels == 96 * 64 * 3 and r.seconds > 0 and r.cores == 1 for r in rows.values())
    d = rows["decrypt"]
    assert d.min_exact_fraction == 1.0 and d.max_abs_err < 0.5
    assert rows["encrypt"].bytes_per_pixel > 1


def _row(job: str, impl: str, seconds: float, cts: int = 10) -> corpus.CorpusRow:
    return corpus.CorpusRow(layout="packed", encryption="public", job=job, implementation=impl, cores=1, images=1,
                            pixels=300, ciphertexts=cts, seconds=seconds, seconds_per_ciphertext=seconds / cts,
                            pixels_per_second=300 / seconds)


def test_the_ratios_are_the_jobs_rates_over_the_baselines():
    core = {j: _row(j, "hecore, one core", 2.0) for j in corpus.JOBS}
    spark = {j: _row(j, "spark local[2]", s, cts) for j, s, cts in (("encrypt", 1.0, 10), ("process", 4.0, 10),
                                                                     ("decrypt", 1.0, 9))}
    spark["encrypt"].bytes_at_rest = 600
    rows = {(r.job, r.implementation): r for r in corpus.compare_rows(core, spark)}
    e, p, d = (rows[(j, "spark local[2]")] for j in corpus.JOBS)
    assert (e.vs_core, e.vs_core_x2, e.bytes_per_pixel) == (2.0, 1.0, 2.0)
    assert (p.vs_core, p.vs_core_x2) == (0.5, 0.25)
    assert d.vs_core is None                      # not the same ciphertexts: no ratio


def test_the_atrest_suite_writes_its_rows_to_its_table(tmp_path):
    """``hepix bench --suite atrest`` on one small image: every path, one row each, in ``bench_atrest``."""
    from types import SimpleNamespace

    import pyarrow.parquet as pq
    from PIL import Image

    from jobs.bench.suites import atrest
    from schemas.bench import BENCH_ATREST

    path = tmp_path / "small.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (16, 24), dtype=np.uint8)).save(path)
    args = SimpleNamespace(out=str(tmp_path / "out"), quick=True, images=None, image=str(path), preset=None,
                           repeats=1)
    assert atrest.run(args) == 0
    (written,) = (tmp_path / "out" / "bench_atrest").glob("*.parquet")
    table = pq.read_table(written)
    assert table.schema.equals(BENCH_ATREST, check_metadata=False)
    rows = table.to_pylist()
    assert {r["image"] for r in rows} == {"small.png"} and atrest.PIXEL_FULL in {r["implementation"] for r in rows}
    assert all(r["bytes_per_pixel"] > 0 and r["pixels"] == 16 * 24 for r in rows)
