"""The packed layout through the Spark jobs: encrypt (default layout, halo) -> process -> decrypt,
matching, BFV, and the refusals.  Images are generated; sizes do not divide the tiles."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore.ops.matching import plain_distances
from jobs.cli import main

pytestmark = [pytest.mark.seconds(55), pytest.mark.spark, pytest.mark.slow]

SPARK = ["--master", "local[2]", "--quiet"]


def _keys(root, preset):
    assert main(["keygen", "--out", str(root / "keys"), "--preset", preset]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0


@pytest.fixture(scope="module")
def ckks_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed-ckks")
    src = root / "in"
    src.mkdir()
    rng = np.random.default_rng(5)
    Image.fromarray(rng.integers(0, 256, (40, 70, 3), dtype=np.uint8)).save(src / "rgb.png")
    Image.fromarray(rng.integers(0, 256, (33, 20), dtype=np.uint8)).save(src / "grey.png")
    _keys(root, "paper-4096")
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(root / "enc")] + SPARK) == 0
    return root, src


def test_encrypt_defaults_to_the_packed_layout_with_a_halo_of_one(ckks_run):
    root, _ = ckks_run
    m = json.loads((root / "enc" / "_manifest.json").read_text())
    assert (m["layout"], m["security"], m["options"]["halo"], m["options"]["tile"]) == ("packed", "ind-cpa", 1, [30, 62])
    t = ds.dataset(root / "enc" / "ciphertexts").to_table()
    assert set(t.column("halo").to_pylist()) == {1}


def test_packed_chain_decrypts_exactly_to_the_plaintext_chain(ckks_run):
    root, src = ckks_run
    ops = ["brightness:20", "watermark:3,4,5", "meanfilter:3", "contrast:1.5"]
    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc")]
    for op in ops:
        argv += ["--op", op]
    assert main(argv + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc"), "--out", str(root / "dec"),
                 "--owner", str(root / "enc.owner"), "--images", str(src)] + SPARK) == 0
    metrics = ds.dataset(root / "dec" / "metrics").to_table().to_pylist()
    assert len(metrics) == 2
    for r in metrics:
        assert r["reference"] == "plaintext-processed" and r["ops"] == "|".join(ops), r
        assert r["exact_fraction"] == 1.0, (r["source"], r["exact_fraction"], r["max_abs_err"])
        assert r["max_abs_err"] < 1e-2


def _process_and_decrypt(root, src, ops: list[str], name: str, *decrypt_flags, owner: bool = True) -> dict:
    """``process --op OPS`` on the shared run into ``proc-NAME`` (unless done), then decrypt it into ``dec-NAME``
    (with or without the owner map): the metrics rows by image file name."""
    if not (root / f"proc-{name}" / "_manifest.json").exists():
        argv = ["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out",
                str(root / f"proc-{name}"), *[a for op in ops for a in ("--op", op)]]
        assert main(argv + SPARK) == 0
    out = root / f"dec-{name}{'' if owner else '-no-owner'}"
    where = ["--owner", str(root / "enc.owner")] if owner else []
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / f"proc-{name}"), "--out", str(out),
                 *where, "--images", str(src), *decrypt_flags] + SPARK) == 0
    return {r["source"].rsplit("/", 1)[-1]: r for r in ds.dataset(out / "metrics").to_table().to_pylist()}


def test_a_packed_convolution_chain_decrypts_exactly(ckks_run):
    ops = ["contrast:0.5", "conv:sharpen", "brightness:-10"]
    for r in _process_and_decrypt(*ckks_run, ops, "conv").values():
        assert r["ops"] == "|".join(ops) and (r["mse"], r["exact_fraction"]) == (0, 1.0), r


def test_packed_grey_decrypts_one_channel_exactly(ckks_run):
    root, _ = ckks_run
    ops = ["conv:gauss3", "grey", "brightness:3"]
    metrics = _process_and_decrypt(*ckks_run, ops, "grey", "--png", "--contact-sheet", str(root / "sheet-grey.png"))
    assert len(metrics) == 2
    for r in metrics.values():
        assert r["ops"] == "|".join(ops) and (r["channels"], r["mse"], r["exact_fraction"]) == (1, 0, 1.0), r
    assert all(np.array(Image.open(p)).ndim == 2 for p in (root / "dec-grey" / "images").glob("*.png"))
    assert (root / "sheet-grey.png").is_file()


def test_packed_downsample_decrypts_the_smaller_image_exactly(ckks_run):
    root, _ = ckks_run
    ops = ["brightness:-4", "downsample:2", "contrast:1.25"]
    for owner in (True, False):
        metrics = _process_and_decrypt(*ckks_run, ops, "small", owner=owner)
        assert {k: (r["height"], r["width"], r["channels"]) for k, r in metrics.items()} == \
            {"rgb.png": (20, 35, 3), "grey.png": (17, 10, 1)}
        for r in metrics.values():
            assert (r["mse"], r["exact_fraction"]) == (0, 1.0), r
    assert json.loads((root / "proc-small" / "_manifest.json").read_text())["options"]["tile"] == [15, 31]


def test_a_second_mean_filter_is_refused_naming_the_pixel_layout(ckks_run, capsys):
    root, _ = ckks_run
    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / "proc"), "--out", str(root / "again"),
            "--op", "meanfilter:3"]
    assert main(argv + SPARK) == 2
    err = capsys.readouterr().err
    assert "at most one mean filter" in err and "--layout pixel" in err
    assert not (root / "again" / "_manifest.json").exists()


def test_a_filter_wider_than_the_halo_is_refused_naming_the_halo_needed(ckks_run, capsys):
    root, _ = ckks_run
    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "wide"),
            "--op", "meanfilter:5"]
    assert main(argv + SPARK) == 2
    assert "--halo 2" in capsys.readouterr().err


def test_matching_on_a_two_level_preset_is_refused_naming_match_8192(ckks_run, capsys):
    root, _ = ckks_run
    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "m"),
            "--op", "match:grey.png"]
    assert main(argv + SPARK) == 2
    assert "match-8192" in capsys.readouterr().err


def test_bfv_packed_chain_is_exact_and_the_pixel_layout_refuses_bfv(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(9)
    Image.fromarray(rng.integers(0, 256, (25, 47, 3), dtype=np.uint8)).save(src / "a.png")
    _keys(tmp_path, "bfv-4096")
    assert main(["encrypt", "--keys", str(tmp_path / "pub"), "--input", str(src), "--out", str(tmp_path / "px"),
                 "--layout", "pixel"] + SPARK) == 2
    assert "CKKS-only" in capsys.readouterr().err
    assert main(["encrypt", "--keys", str(tmp_path / "pub"), "--input", str(src), "--out", str(tmp_path / "enc")]
                + SPARK) == 0
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"), "--out",
                 str(tmp_path / "proc"), "--op", "brightness:60", "--op", "meanfilter:3"] + SPARK) == 0
    assert main(["decrypt", "--keys", str(tmp_path / "keys"), "--input", str(tmp_path / "proc"), "--out",
                 str(tmp_path / "dec"), "--owner", str(tmp_path / "enc.owner"), "--images", str(src)] + SPARK) == 0
    (r,) = ds.dataset(tmp_path / "dec" / "metrics").to_table().to_pylist()
    assert r["exact_fraction"] == 1.0 and r["max_abs_err"] < 1e-9, r


def test_match_gives_every_image_its_exact_l2_and_rejects_other_sizes(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(3)
    one = rng.integers(0, 200, (36, 70), dtype=np.uint8)
    imgs = {"one": one, "two": (one + 40).astype(np.uint8), "three": rng.integers(0, 256, (36, 70), dtype=np.uint8),
            "small": one[:20]}
    for name, a in imgs.items():
        Image.fromarray(a).save(src / f"{name}.png")
    _keys(tmp_path, "tenseal-8192")
    pub, keys = str(tmp_path / "pub"), str(tmp_path / "keys")
    assert main(["encrypt", "--keys", pub, "--input", str(src), "--out", str(tmp_path / "enc")] + SPARK) == 0
    # the cluster knows images by id only: the owner looks the query's id up in its owner map
    owner = ds.dataset(tmp_path / "enc.owner" / "images").to_table().to_pylist()
    ids = {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in owner}
    assert main(["process", "--keys", pub, "--input", str(tmp_path / "enc"), "--out", str(tmp_path / "m"),
                 "--op", f"match:{ids['one.png']},l2"] + SPARK) == 0
    rejects = ds.dataset(tmp_path / "m" / "rejects").to_table().to_pylist()
    assert [(r["image_id"], r["reason"]) for r in rejects] == [(ids["small.png"], "size-mismatch")]
    assert main(["decrypt", "--keys", keys, "--input", str(tmp_path / "m"), "--out", str(tmp_path / "d"),
                 "--owner", str(tmp_path / "enc.owner")] + SPARK) == 0
    rows = ds.dataset(tmp_path / "d" / "distances").to_table().to_pylist()
    got = {r["source"].rsplit("/", 1)[-1]: r["distance"] for r in rows if r["metric"] == "l2"}
    assert set(got) == {"two.png", "three.png"}
    for name in ("two", "three"):
        want = plain_distances(one, imgs[name])["l2"]
        assert round(got[f"{name}.png"]) == want, (name, got[f"{name}.png"], want)
    assert got["two.png"] < got["three.png"]


def test_complex_packing_runs_the_chain_exactly_and_refuses_matching(ckks_run, capsys):
    root, src = ckks_run
    enc = root / "enc-complex"
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(enc),
                 "--layout", "packed-complex"] + SPARK) == 0
    m = json.loads((enc / "_manifest.json").read_text())
    assert (m["layout"], m["options"]["tile"]) == ("packed-complex", [60, 62])
    t = ds.dataset(enc / "ciphertexts").to_table()
    # rgb 40x70: 1x2 tiles x 3 channels; grey 33x20: 1 tile (real packing: 2x2x3 + 2)
    assert t.num_rows == 7 and set(t.column("layout").to_pylist()) == {"packed-complex"}
    ops = ["brightness:20", "watermark:3,30,5", "meanfilter:3", "contrast:1.5"]
    argv = ["process", "--keys", str(root / "pub"), "--input", str(enc), "--out", str(root / "proc-complex")]
    for op in ops:
        argv += ["--op", op]
    assert main(argv + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc-complex"),
                 "--out", str(root / "dec-complex"), "--owner", str(root / "enc-complex.owner"),
                 "--images", str(src)] + SPARK) == 0
    metrics = ds.dataset(root / "dec-complex" / "metrics").to_table().to_pylist()
    assert len(metrics) == 2
    for r in metrics:
        assert r["layout"] == "packed-complex" and r["ops"] == "|".join(ops), r
        assert r["exact_fraction"] == 1.0, (r["source"], r["exact_fraction"], r["max_abs_err"])
    capsys.readouterr()
    assert main(["process", "--keys", str(root / "pub"), "--input", str(enc), "--out", str(root / "m"),
                 "--op", f"match:{src / 'grey.png'}"] + SPARK) == 2
    assert "--layout packed" in capsys.readouterr().err


def test_complex_packing_refuses_bfv_keys(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(src / "z.png")
    _keys(tmp_path, "bfv-4096")
    assert main(["encrypt", "--keys", str(tmp_path / "pub"), "--input", str(src), "--out", str(tmp_path / "enc"),
                 "--layout", "packed-complex"] + SPARK) == 2
    assert "needs CKKS" in capsys.readouterr().err
