"""`hepix bench --suite ops`: iCHEETAH's §4.4 cases encrypted in both layouts (a tiny configuration)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.schemas import BENCH_OPS, BENCH_TABLES
from bench.suites import ops as bench_ops
from hecore.ops.matching import plain_distances
from jobs.cli import main

#: --quick, smaller still: every case and configuration, a few seconds of encryption.
TINY = replace(bench_ops.QUICK, meanfilter_size=16, brightness_size=32, watermark_size=16, match_size=32,
               pixel_brightness_full_size=32, pixel_brightness_fresh_size=8, pixel_extras_size=8,
               pixel_match=(("tenseal-8192", ("l2",), 4),), watermark=(3, 5, 5.0))

IMAGE_CASES = ("meanfilter", "brightness", "watermark", "brightness-60", "contrast")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One run through the command line with --quick shrunk to TINY."""
    out = tmp_path_factory.mktemp("bench-ops")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_ops, "QUICK", TINY)
        assert main(["bench", "--suite", "ops", "--quick", "--out", str(out)]) == 0
    (path,) = (out / "bench_ops").glob("*.parquet")
    table = pq.read_table(path)
    own.extend(pq.read_table(next((out / "bench_imageops").glob("*.parquet"))).to_pylist())
    return table, table.to_pylist()


#: The rows of hepix's own image ops the run wrote beside iCHEETAH's (filled by the ``bench`` fixture).
own: list = []


def _find(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def _one(rows, **match):
    found = _find(rows, **match)
    assert len(found) == 1, (match, found)
    return found[0]


def test_the_table_has_the_bench_ops_schema(bench):
    table, rows = bench
    assert BENCH_TABLES["bench_ops"] is BENCH_OPS
    assert table.schema.remove_metadata().equals(BENCH_OPS)
    assert len({r["run_id"] for r in rows}) == 1


def test_every_case_has_its_rows_in_both_layouts(bench):
    _, rows = bench
    for case in IMAGE_CASES:
        _one(rows, case=case, layout="packed", preset="paper-4096", strategy="fresh")
        for strategy in ("fresh", "full"):
            _one(rows, case=case, layout="pixel", preset="paper-4096", strategy=strategy)
        bfv = _find(rows, case=case, layout="packed", preset="bfv-4096")
        assert len(bfv) == (1 if case in bench_ops.BFV_CASES else 0)
    for preset, metric in (("tenseal-8192", "l2"), ("match-8192", "l1"), ("match-8192", "l2"), ("bfv-8192", "l2")):
        _one(rows, case="matching", layout="packed", preset=preset, metric=metric)
    _one(rows, case="matching", layout="pixel", preset="tenseal-8192", metric="l2")
    assert len(rows) == 5 * 3 + 3 + 4 + 1


def test_sections_schemes_and_security_labels(bench):
    _, rows = bench
    sections = {r["case"]: r["section"] for r in rows}
    assert sections == {"meanfilter": "4.4.1", "brightness": "4.4.2", "matching": "4.4.3", "watermark": "4.4.4",
                        "brightness-60": "Saker et al. 2025 §5.1", "contrast": "hepix"}
    for r in rows:
        assert r["security"] == ("leaks" if r["strategy"] == "full" else "ind-cpa")
        assert r["scheme"] == ("bfv" if r["preset"].startswith("bfv") else "ckks")
        assert r["strategy"] == "fresh" or r["layout"] == "pixel"


def test_sizes_follow_the_configuration(bench):
    _, rows = bench
    assert _one(rows, case="meanfilter", layout="packed", preset="paper-4096")["size"] == 16
    assert _one(rows, case="brightness", layout="pixel", strategy="full")["size"] == 32
    assert _one(rows, case="brightness", layout="pixel", strategy="fresh")["size"] == 8
    assert _one(rows, case="contrast", layout="pixel", strategy="full")["size"] == 8
    assert _one(rows, case="matching", layout="pixel")["size"] == 4
    for r in rows:
        assert r["pixels"] == r["size"] ** 2 * r["channels"]
        assert f"@{r['size']}" in r["image"]
        pixel_cts = r["pixels"] * (3 if r["case"] == "matching" else 1)
        if r["layout"] == "pixel":
            assert r["ciphertexts"] == pixel_cts
        else:
            assert r["ciphertexts"] < pixel_cts
        assert r["bytes"] > 0
        assert min(r["encrypt_seconds"], r["op_seconds"], r["decrypt_seconds"]) >= 0


def test_image_operations_are_exact(bench):
    _, rows = bench
    for r in rows:
        if r["case"] == "matching":
            assert r["exact_fraction"] is None and r["max_abs_err"] is None
            continue
        assert r["exact_fraction"] == 1.0, r
        assert r["max_abs_err"] < 1e-3, r
        if r["scheme"] == "bfv":
            assert r["max_abs_err"] < 1e-6
        assert r["metric"] is None and r["d12"] is None


def test_the_watermark_is_detected_at_its_pixel(bench):
    _, rows = bench
    marks = _find(rows, case="watermark")
    assert len(marks) == 4
    for r in marks:
        assert r["ops"] == "watermark:3,5,5"
        assert r["detected"] is True and r["detected_pixels"] == "(3,5)"
    assert all(r["detected"] is None for r in rows if r["case"] != "watermark")


def test_matching_reports_three_distances_and_the_paper_order(bench):
    _, rows = bench
    for r in _find(rows, case="matching"):
        d = (r["d12"], r["d13"], r["d23"])
        ref = (r["ref_d12"], r["ref_d13"], r["ref_d23"])
        assert all(v is not None for v in d + ref)
        assert r["order_as_paper"] == (r["d12"] < r["d23"] < r["d13"])
        assert r["ref_order_as_paper"] == (r["ref_d12"] < r["ref_d23"] < r["ref_d13"])
        assert r["distance_rel_err"] < 1e-6, r
        assert r["exact_fraction"] is None and r["detected"] is None
        if r["metric"] == "l2":
            assert d == pytest.approx(ref, rel=1e-6)
        if r["scheme"] == "bfv":
            assert d == ref                    # exact integers
    l1 = _one(rows, case="matching", preset="match-8192", metric="l1")
    # The encrypted L1 is the polynomial stand-in for |d|: near, not equal to, the plain L1.
    assert l1["d12"] == pytest.approx(l1["ref_d12"], rel=0.5)


def test_matching_reference_distances_are_the_plain_ones():
    config = replace(TINY, match_size=16)
    sources = bench_ops.load_sources(None, config)           # scikit-image: no folder given
    images, label = bench_ops.match_images(sources, 16, config)
    a, b, c = images
    assert np.array_equal(b, np.clip(a.astype(int) + 30, 0, 255))
    assert label.startswith("skimage-camera | +30 | ") and label.endswith("@16")
    d = plain_distances(a, c)
    assert d["l2"] > 0 and d["l1"] > 0


def test_sources_pick_an_image_3_that_allows_the_paper_order():
    sources = bench_ops.load_sources(None, bench_ops.DEFAULT)
    assert sources.origin == "skimage"
    images, _ = bench_ops.match_images(sources, 128, bench_ops.DEFAULT)
    a, b, c = images
    dist = [plain_distances(x, y) for x, y in ((a, b), (a, c), (b, c))]
    for metric in ("l2", "l1"):
        assert bench_ops.paper_order(*(x[metric] for x in dist))


def test_sources_without_a_candidate_fall_back_to_the_first_and_say_so(caplog):
    one = np.full((64, 64), 100, np.uint8)
    same = ("same", one.copy())                               # d13 = 0: the order cannot hold
    assert bench_ops.pick_image3(one, [same], TINY)[0] == "same"
    assert "no candidate image 3" in caplog.text


def test_usc_sipi_sources_when_present(usc_sipi):
    sources = bench_ops.load_sources(usc_sipi, bench_ops.DEFAULT)
    assert sources.origin == "usc-sipi"
    assert sources.main[0] == f"usc-sipi/{bench_ops.USC_SIPI_MAIN}"
    assert sources.match3[0] != sources.match1[0]
    assert all(p.ndim == 2 and p.dtype == np.uint8 for _, p in (sources.main, sources.match1, sources.match3))


@pytest.mark.parametrize("extra", [["--preset", "paper-4096"], ["--images", "2"], ["--sizes", "64"],
                                   ["--strategies", "fresh"], ["--repeats", "3"]])
def test_ops_suite_refuses_options_it_does_not_use(tmp_path, extra, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--suite", "ops", "--out", str(tmp_path)] + extra)
    assert "takes only --out and --quick" in str(e.value)
    assert not (tmp_path / "bench_ops").exists()


def test_icheetah_times_are_set_next_to_pixel_rows_of_the_paper_s_size():
    row = {"case": "meanfilter", "layout": "pixel", "size": 64, "strategy": "full"}
    assert bench_ops.paper_encrypt_seconds(row) == 4.65
    assert bench_ops.paper_encrypt_seconds({**row, "strategy": "fresh"}) == 84.29
    assert bench_ops.paper_encrypt_seconds({**row, "size": 32}) is None          # not the paper's size
    assert bench_ops.paper_encrypt_seconds({**row, "layout": "packed"}) is None
    assert bench_ops.paper_encrypt_seconds({**row, "case": "contrast"}) is None  # not iCHEETAH's case


def test_hepix_own_ops_run_exactly_in_every_layout_in_their_own_table(bench):
    from bench.suites.imageops import COLOUR_CASES

    assert BENCH_TABLES["bench_imageops"] is BENCH_OPS
    for case, specs in COLOUR_CASES:
        for layout, preset in (("packed", "paper-4096"), ("packed", "bfv-4096"), ("pixel", "paper-4096")):
            r = _one(own, case=case, layout=layout, preset=preset)
            assert r["ops"] == "|".join(specs) and r["exact_fraction"] == 1.0, r
            assert r["section"] == "hepix" and r["channels"] == 3
    assert len(own) == 3 * len(COLOUR_CASES)
