"""`hepix bench --suite packed`: the packed layout against TenSEAL and the pixel layout's full caching."""
from __future__ import annotations

import logging
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.schemas import BENCH_PACKED, BENCH_TABLES
from bench.suites.packed import HEPIX_PACKED, HEPIX_PACKED_COMPLEX, PIXEL_FULL, TENSEAL, run_packed_bench
from jobs.cli import main


def _camera(size: int) -> np.ndarray:
    import skimage.data

    from hecore.images import center_crop, resize
    return resize(center_crop(skimage.data.camera()), size)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One tiny run through the command line: a 64x64 grey image, paper-4096, one pass."""
    from PIL import Image

    tmp = tmp_path_factory.mktemp("bench-packed")
    Image.fromarray(_camera(64)).save(tmp / "camera64.png")
    assert main(["bench", "--suite", "packed", "--image", str(tmp / "camera64.png"), "--sizes", "64",
                 "--preset", "paper-4096", "--repeats", "1", "--out", str(tmp / "out")]) == 0
    (path,) = (tmp / "out" / "bench_packed").glob("*.parquet")
    table = pq.read_table(path)
    return table, table.to_pylist()


def _one(rows, implementation, encryption=None, serialization=None):
    found = [r for r in rows if r["implementation"] == implementation
             and (encryption is None or r["encryption"] == encryption)
             and (serialization is None or r["serialization"] == serialization)]
    assert len(found) == 1, (implementation, encryption, serialization, found)
    return found[0]


def test_the_table_has_the_bench_packed_schema(bench):
    table, rows = bench
    assert BENCH_TABLES["bench_packed"] is BENCH_PACKED
    assert table.schema.remove_metadata().equals(BENCH_PACKED)
    assert len({r["run_id"] for r in rows}) == 1


def test_rows_exist_for_packed_and_pixel_full_with_their_security_labels(bench):
    _, rows = bench
    packed, full = _one(rows, HEPIX_PACKED), _one(rows, PIXEL_FULL)
    assert (packed["encryption"], packed["security"]) == ("public", "ind-cpa")
    assert (full["encryption"], full["security"]) == ("cached", "leaks")
    for r in (packed, full):
        assert (r["preset"], r["n"], r["qi_sizes"], r["scale_bits"]) == ("paper-4096", 4096, [40, 30, 39], 30)
        assert (r["width"], r["height"], r["channels"], r["pixels"]) == (64, 64, 1, 4096)
        assert r["pixels_per_second"] == pytest.approx(r["pixels"] / r["seconds"])


def test_bytes_per_pixel_follow_from_the_ciphertext_size(bench, he_paper4096):
    _, rows = bench
    ctx, _ = he_paper4096
    ct_size = len(ctx.encrypt_vector(np.zeros(2048)))        # 131,185 bytes at paper-4096
    packed, full = _one(rows, HEPIX_PACKED), _one(rows, PIXEL_FULL)
    assert (packed["tile_h"], packed["tile_w"]) == (32, 64)
    assert packed["ciphertexts"] == 2                        # 64x64 pixels in 2048-slot ciphertexts
    assert packed["bytes"] == 2 * ct_size
    assert full["ciphertexts"] == 4096 and full["bytes"] == 4096 * ct_size
    for r in rows:
        assert r["bytes_per_pixel"] == pytest.approx(r["bytes"] / r["pixels"])
    assert full["bytes_per_pixel"] / packed["bytes_per_pixel"] == pytest.approx(2048)


def test_packed_round_trip_is_exact_and_its_ratio_to_pixel_full_is_the_rates(bench):
    _, rows = bench
    packed, full = _one(rows, HEPIX_PACKED), _one(rows, PIXEL_FULL)
    assert packed["exact_fraction"] == 1.0
    assert packed["encrypt_seconds"] > 0 and packed["serialize_seconds"] > 0
    assert full["exact_fraction"] is None                    # not decrypted: 4096 pixel ciphertexts
    assert full["vs_pixel_full"] == pytest.approx(1.0)
    assert packed["vs_pixel_full"] == pytest.approx(packed["pixels_per_second"] / full["pixels_per_second"])


def test_complex_packing_holds_two_pixels_per_slot(bench, he_paper4096):
    _, rows = bench
    ctx, _ = he_paper4096
    ct_size = len(ctx.encrypt_vector(np.zeros(2048)))
    real, cplx = _one(rows, HEPIX_PACKED), _one(rows, HEPIX_PACKED_COMPLEX)
    assert (cplx["tile_h"], cplx["tile_w"], cplx["ciphertexts"]) == (64, 64, 1)
    assert cplx["bytes"] == ct_size and cplx["bytes_per_pixel"] == pytest.approx(real["bytes_per_pixel"] / 2)
    assert (cplx["encryption"], cplx["security"], cplx["exact_fraction"]) == ("public", "ind-cpa", 1.0)
    assert cplx["vs_pixel_full"] == pytest.approx(cplx["pixels_per_second"] / _one(rows, PIXEL_FULL)["pixels_per_second"])


def test_tenseal_rows_at_equal_parameters_public_and_symmetric(bench):
    pytest.importorskip("tenseal")
    _, rows = bench
    packed = _one(rows, HEPIX_PACKED)
    pub, sym = _one(rows, TENSEAL, "public", "zstd"), _one(rows, TENSEAL, "symmetric", "zstd")
    for r in (pub, sym):
        assert (r["n"], r["qi_sizes"], r["scale_bits"], r["security"]) == (4096, [40, 30, 39], 30, "ind-cpa")
        assert (r["tile_h"], r["tile_w"], r["ciphertexts"]) == (32, 64, 2)
        assert r["exact_fraction"] == 1.0
        assert r["library"].startswith("TenSEAL")
    assert packed["vs_tenseal_public"] == pytest.approx(packed["pixels_per_second"] / pub["pixels_per_second"])
    assert packed["vs_tenseal_symmetric"] == pytest.approx(packed["pixels_per_second"] / sym["pixels_per_second"])
    assert pub["vs_tenseal_public"] == pytest.approx(1.0)


def test_without_tenseal_its_rows_are_skipped_with_a_message(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tenseal", None)        # makes `import tenseal` raise ImportError
    with caplog.at_level(logging.WARNING, logger="bench.suites.packed"):
        rows = run_packed_bench({"camera@32": _camera(32)}, presets=("paper-4096",), repeats=1, pixel_full=False,
                                symmetric=False)
    assert [r.implementation for r in rows] == [HEPIX_PACKED, HEPIX_PACKED_COMPLEX]
    assert rows[0].exact_fraction == 1.0
    assert rows[0].vs_tenseal_public is None and rows[0].vs_pixel_full is None
    assert any("TenSEAL rows skipped" in m for m in caplog.messages)


def test_repeats_must_be_positive():
    with pytest.raises(ValueError, match="repeats"):
        run_packed_bench({}, repeats=0, tenseal=False, pixel_full=False)


def test_tenseal_rows_in_both_serialisations(bench, he_paper4096):
    """TenSEAL as it ships (zstd) and uncompressed: the uncompressed rows take SEAL's uncompressed
    size at the same parameters (hepix's own ciphertext size), more than zstd's."""
    pytest.importorskip("tenseal")
    _, rows = bench
    ctx, _ = he_paper4096
    ct_size = len(ctx.encrypt_vector(np.zeros(2048)))
    for encryption in ("public", "symmetric"):
        shipped, raw = _one(rows, TENSEAL, encryption, "zstd"), _one(rows, TENSEAL, encryption, "none")
        assert raw["ciphertexts"] == shipped["ciphertexts"] == 2
        assert raw["bytes"] == 2 * ct_size == _one(rows, HEPIX_PACKED)["bytes"]
        assert shipped["bytes"] < raw["bytes"]
        assert raw["exact_fraction"] == shipped["exact_fraction"] == 1.0
        for r in (shipped, raw):
            assert r["seconds"] > 0 and r["encrypt_seconds"] > 0 and r["serialize_seconds"] > 0
    packed = _one(rows, HEPIX_PACKED)
    assert packed["serialization"] == "none"
    for encryption in ("public", "symmetric"):
        raw = _one(rows, TENSEAL, encryption, "none")
        assert packed[f"vs_tenseal_{encryption}_uncompressed"] == pytest.approx(
            packed["pixels_per_second"] / raw["pixels_per_second"])
    # the bytes ratio stays against TenSEAL as it ships
    assert packed["bytes_vs_tenseal_symmetric"] == pytest.approx(
        packed["bytes_per_pixel"] / _one(rows, TENSEAL, "symmetric", "zstd")["bytes_per_pixel"])


def test_every_row_is_the_median_of_its_repeats_pixel_full_included():
    rows = run_packed_bench({"camera@32": _camera(32)}, presets=("paper-4096",), repeats=3, tenseal=False,
                            symmetric=False)
    assert {r.implementation for r in rows} == {HEPIX_PACKED, HEPIX_PACKED_COMPLEX, PIXEL_FULL}
    assert all(r.repeats == 3 for r in rows)
    full = next(r for r in rows if r.implementation == PIXEL_FULL)
    assert full.pixels_per_second == pytest.approx(full.pixels / full.seconds)
    assert full.serialization == "none" and full.security == "leaks"


def test_an_image_may_be_named_by_its_path_under_the_data_sets(tmp_path, monkeypatch):
    from PIL import Image

    from bench import datasets

    (tmp_path / "usc-sipi").mkdir()
    Image.fromarray(np.full((8, 8), 7, dtype=np.uint8)).save(tmp_path / "usc-sipi" / "x.png")
    monkeypatch.setattr(datasets, "DATASETS", tmp_path)
    monkeypatch.chdir(tmp_path / "usc-sipi")                 # no usc-sipi/x.png from here
    name, pixels = datasets.source_image("usc-sipi/x.png")
    assert name == "x.png" and pixels.shape[:2] == (8, 8) and int(pixels.max()) == 7
    from hecore.errors import UnreadableImage

    with pytest.raises(UnreadableImage, match="missing.png"):
        datasets.source_image("usc-sipi/missing.png")
