"""The corpus benchmark's machinery (bench.suites.corpus) without Spark: the corpus, the one-core
baseline on a small generated image, and the ratios of the jobs to it."""
from __future__ import annotations

import numpy as np
import pytest

from bench.suites import corpus
from hecore.images import load_image
from hecore.seal.keys import keygen
from hecore.seal.params import preset


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


def test_each_job_is_measured_against_its_limit_process_against_the_copy_when_slower():
    core = {j: _row(j, "hecore, one core", 2.0) for j in corpus.JOBS}
    spark = {j: _row(j, "spark local[2]", 2.0) for j in corpus.JOBS}
    spark["process"].copy_seconds = 1.6                     # slower than the core's 2.0 s on two cores
    rows = {(r.job, r.implementation): r for r in corpus.compare_rows(core, spark)}
    e, p, d = (rows[(j, "spark local[2]")] for j in corpus.JOBS)
    assert (e.limit_seconds, e.vs_limit) == (1.0, 0.5)
    assert (p.limit_seconds, p.vs_limit) == (1.6, 0.8)
    assert d.vs_limit == 0.5


def test_the_copy_limit_reads_and_writes_every_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "ciphertexts"
    src.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"ct": [bytes(1000)] * 4}), src / f"part-{i}.parquet")
    (src / "_SUCCESS").write_bytes(b"")
    seconds = corpus.pyarrow_copy(src, tmp_path / "copy")
    assert seconds > 0 and list((tmp_path / "copy").iterdir()) == []        # the copies are removed after


def test_the_atrest_suite_writes_its_rows_to_its_table(tmp_path):
    """``hepix bench --suite atrest`` on one small image: every path, one row each, in ``bench_atrest``."""
    from types import SimpleNamespace

    import pyarrow.parquet as pq
    from PIL import Image

    from bench.schemas import BENCH_ATREST
    from bench.suites import atrest

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


# --- the jobs' rows and report (no Spark: a fake manifest and fake process-tree peaks) ----------------

def _peaks(py: float, jvm: float, worker: float, cpu=(1.0, 30.0, 20.0)):
    from bench.proctree import MemoryPeaks

    return MemoryPeaks(driver_python_mb=py, driver_jvm_mb=jvm, worker_python_max_mb=worker,
                       workers_together_mb=2 * worker, worker_processes=2, samples=50,
                       driver_python_cpu=cpu[0], driver_jvm_cpu=cpu[1], worker_python_cpu=cpu[2])


def _manifest(timings: dict) -> dict:
    return {"counts": {"ciphertexts": 10, "ciphertext_bytes": 6000}, "timings": timings}


def test_a_job_row_has_its_stages_and_its_process_tree_by_role():
    run = corpus.JobRun(_manifest({"decode_seconds": 1.5, "encrypt_seconds": 4.0, "commit_seconds": 0.5}),
                        wall=12.0, peaks=_peaks(200.0, 1000.0, 300.0))
    r = corpus.job_row("packed", "public", "encrypt", run, core=3.5)
    assert r.seconds == 5.5 and r.startup_seconds == 6.5            # the stages of the work; the rest start-up
    assert (r.decode_seconds, r.cache_build_seconds, r.encrypt_seconds) == (1.5, None, 4.0)
    assert r.driver_peak_rss == 1200 * 2**20 and r.workers_peak_rss == 300 * 2**20
    assert r.workers_together_peak_rss == 600 * 2**20 and r.worker_processes == 2
    assert (r.driver_python_cpu_seconds, r.jvm_cpu_seconds, r.workers_cpu_seconds, r.core_seconds) == \
        (1.0, 30.0, 20.0, 3.5)
    assert "commit 0.5" in corpus._stages(r)                        # every timing the job wrote is shown


def test_a_decrypt_without_its_check_timing_still_has_a_row():
    run = corpus.JobRun(_manifest({"decrypt_seconds": 8.0}), wall=20.0, peaks=_peaks(1, 1, 1))
    r = corpus.job_row("packed", "public", "decrypt", run, core=None)
    assert r.seconds == 8.0 and r.check_seconds is None and r.scored_seconds is None


def test_core_seconds_sums_the_output_rows_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "metrics").mkdir()
    pq.write_table(pa.table({"decrypt_seconds": [1.0, 2.5, None]}), tmp_path / "metrics" / "part-0.parquet")
    assert corpus.core_seconds("decrypt", tmp_path) == 3.5
    assert corpus.core_seconds("process", tmp_path) is None         # no ciphertexts table


def _suite_rows(sizes=(4, 10)) -> list[corpus.CorpusRow]:
    rows = []
    for n in sizes:
        for layout, encryption in corpus.MODES:
            core = {j: _row(j, "hecore, one core", 2.0) for j in corpus.JOBS}
            spark = {}
            for j in corpus.JOBS:
                grow = 1.0 if n == sizes[0] else 1.05
                run = corpus.JobRun(_manifest({corpus.WORK[j][-1]: 1.0}), wall=5.0,
                                    peaks=_peaks(200.0 * grow, 800.0 * grow, 400.0 * grow))
                spark[j] = corpus.job_row(layout, encryption, j, run, core=0.5)
            for r in corpus.compare_rows(core, spark):
                r.layout, r.encryption, r.images = layout, encryption, n
                rows.append(r)
    return rows


def test_the_report_breaks_each_job_down_and_shows_memory_growth_by_corpus_size():
    text = corpus.report(_suite_rows(), "generated", "paper-4096")
    assert "where the jobs' time and memory go" in text and "JVM cpu s" in text and "core s" in text
    growth = [line for line in text.splitlines() if line.strip().startswith(("encrypt:", "process:", "decrypt:"))]
    assert len(growth) == 3
    assert all("1,000 -> 1,050 MB" in line and "driver +5.0%" in line and "worker +5.0%" in line
               for line in growth)
    assert "memory of packed public at 4, 10 images" in text and "largest here 420 MB" in text


def test_the_rows_fit_the_corpus_table(tmp_path):
    import pyarrow.parquet as pq

    from bench.rows import write_rows
    from bench.schemas import BENCH_CORPUS

    common = {"run_id": "r", "started": corpus.runinfo.now(), "preset": "paper-4096", "dataset": "generated",
              "op": corpus.OP}
    path = write_rows(_suite_rows(), BENCH_CORPUS, tmp_path, "r", common)
    table = pq.read_table(path)
    assert table.schema.equals(BENCH_CORPUS, check_metadata=False)
    jobs = [r for r in table.to_pylist() if r["implementation"].startswith("spark")]
    assert {r["images"] for r in jobs} == {4, 10} and all(r["jvm_cpu_seconds"] == 30.0 for r in jobs)


@pytest.mark.parametrize("given, counts", [(None, [corpus.DEFAULT_IMAGES]), (1, [1]), ([10, 4, 10], [4, 10])])
def test_images_takes_a_count_or_a_list_of_sizes(given, counts):
    from types import SimpleNamespace

    assert corpus.image_counts(SimpleNamespace(images=given, quick=False)) == counts


def test_only_the_corpus_suite_takes_a_list_of_image_counts(tmp_path):
    from bench.command import _counts
    from jobs.cli import main

    assert (_counts("4"), _counts("4,10")) == (4, [4, 10])      # one count stays a number for the other suites

    with pytest.raises(SystemExit) as e:
        main(["bench", "--suite", "packed", "--images", "4,10", "--out", str(tmp_path)])
    assert "takes one --images count" in str(e.value)
    with pytest.raises(SystemExit):                          # not a count: argparse's error
        main(["bench", "--suite", "corpus", "--images", "4,x", "--out", str(tmp_path)])


def test_the_jvm_cost_per_gb_is_what_grows_between_corpus_sizes():
    rows = []
    for n, read, jvm in ((4, 2 * 10**9, 20.0), (10, 5 * 10**9, 23.0)):
        enc = _row("encrypt", "spark local[2]", 1.0)
        enc.bytes_at_rest, enc.images = read, n
        proc = _row("process", "spark local[2]", 1.0)
        proc.jvm_cpu_seconds, proc.images = jvm, n
        rows += [enc, proc]
    lines = corpus.jvm_slopes(rows)
    assert lines == ["packed public process: the JVM's CPU grows 1.0 s per GB read from 4 to 10 images (goal <= 1)"]
