"""The contact sheet: per image its original, the plaintext-processed reference, the decrypted image and
their difference -- drawn by tasks/contactsheet.py, written by `hepix decrypt --contact-sheet`."""
from __future__ import annotations

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from hecore.ops.spec import parse_ops, reference
from hecore.quality import round_to_uint8
from jobs.cli import main
from tasks import contactsheet as cs
from tasks.contactsheet import DIFF_GAIN, LAYOUT_KEY, MAX_SIDE, PANEL_NAMES, SheetRow, caption, panels

SPARK = ["--master", "local[2]", "--quiet"]


def crops(path) -> dict[tuple[str, str], np.ndarray]:
    """Every panel of the sheet at ``path``, cut out along the boxes it records."""
    sheet = np.asarray(Image.open(path).convert("RGB"))
    return {(b["image"], b["panel"]): sheet[b["box"][1]:b["box"][3], b["box"][0]:b["box"][2]]
            for b in cs.read_layout(path)}


def grey(a: np.ndarray) -> np.ndarray:
    """A grey panel cut from the RGB sheet: its three channels are equal."""
    assert np.array_equal(a[:, :, 0], a[:, :, 1]) and np.array_equal(a[:, :, 0], a[:, :, 2])
    return a[:, :, 0]


def _metrics(mse=1.5, **kw) -> dict:
    return {"image_id": "a1", "source": "file:/x/cat.png", "ops": "brightness:20", "width": 7, "height": 5,
            "channels": 1, "mse": mse, "psnr": 46.4, "ssim": 0.99, "max_abs_err": 2.0, "exact_fraction": 0.5,
            "ciphertexts": 1, "ciphertext_bytes": 131185, **kw}


# --- the drawing, without Spark ----------------------------------------------------------------------------

def test_each_panel_crops_back_out_of_the_sheet_as_it_was_given(tmp_path):
    rng = np.random.default_rng(1)
    orig, ref, dec = (rng.integers(0, 256, (5, 7), dtype=np.uint8) for _ in range(3))
    rgb = [rng.integers(0, 256, (9, 4, 3), dtype=np.uint8) for _ in range(3)]
    rows = [SheetRow("grey", "one\ntwo", cs.read_panels(panels(orig, ref, dec))),
            SheetRow("rgb", "three", cs.read_panels(panels(*rgb)))]
    boxes = cs.draw(rows, str(tmp_path / "s.png"), ["a header"])
    assert len(boxes) == 2 * len(PANEL_NAMES) and boxes == cs.read_layout(str(tmp_path / "s.png"))
    got = crops(tmp_path / "s.png")
    for name, want in zip(PANEL_NAMES, (orig, ref, dec)):
        assert np.array_equal(grey(got[("grey", name)]), want), name
    assert np.array_equal(grey(got[("grey", "difference")]),
                          np.minimum(np.abs(dec.astype(int) - ref.astype(int)) * DIFF_GAIN, 255))
    for name, want in zip(PANEL_NAMES, rgb):
        assert np.array_equal(got[("rgb", name)], want), name


def test_the_difference_is_black_where_decrypted_and_reference_agree_and_amplified_where_not():
    ref = np.full((4, 4), 100, dtype=np.uint8)
    dec = ref.copy()
    dec[1, 2], dec[3, 3] = 101, 90
    diff = cs.read_panels(panels(ref, ref, dec))["difference"]
    assert diff[1, 2] == DIFF_GAIN and diff[3, 3] == 255
    assert np.count_nonzero(diff) == 2


def test_a_large_image_is_drawn_downscaled_and_its_caption_says_so():
    big = np.zeros((300, 2 * MAX_SIDE + 10), dtype=np.uint8)
    p = cs.read_panels(panels(big, big, big))
    assert max(p["original"].shape) == MAX_SIDE and tuple(p["full_size"]) == big.shape
    assert all(p[n].shape == p["original"].shape for n in PANEL_NAMES)
    assert "drawn at" in caption(_metrics(), tuple(p["full_size"]), p["original"].shape)
    assert "drawn at" not in caption(_metrics(), (5, 7), (5, 7))


def test_the_caption_holds_the_metrics_and_the_ciphertext_bytes():
    text = caption(_metrics(mse=1.25), (5, 7), (5, 7))
    assert "MSE 1.250" in text and "PSNR 46.40 dB" in text and "SSIM 0.9900" in text
    assert "131,185 bytes" in text and f"({131185 / 35:.1f} per pixel value)" in text


def test_panels_of_one_image_must_have_one_shape():
    with pytest.raises(ValueError, match="one shape"):
        panels(np.zeros((4, 4), np.uint8), np.zeros((4, 4), np.uint8), np.zeros((4, 5), np.uint8))


def test_the_sheet_rows_follow_the_metrics_and_skip_images_without_panels():
    a = np.zeros((5, 7), np.uint8)
    rows = cs.sheet_rows([_metrics(image_id="b2", source="file:/x/b.png"), _metrics()], {"a1": panels(a, a, a)})
    assert [r.title.split()[0] for r in rows] == ["cat.png"]


# --- hepix decrypt --contact-sheet --------------------------------------------------------------------------

OPS = ["brightness:20", "watermark:3,4,60", "meanfilter:3"]


@pytest.fixture(scope="module")
def sheet_run(tmp_path_factory):
    """Two small images encrypted, processed and decrypted with noise flooding, so that the decrypted images
    differ from the plaintext-processed ones and the metrics are not all zero."""
    root = tmp_path_factory.mktemp("sheet")
    src = root / "in"
    src.mkdir()
    rng = np.random.default_rng(7)
    Image.fromarray(rng.integers(0, 256, (21, 34), dtype=np.uint8)).save(src / "grey.png")
    Image.fromarray(rng.integers(0, 256, (18, 25, 3), dtype=np.uint8)).save(src / "rgb.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(root / "enc")] + SPARK) == 0
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc"),
                 *[a for op in OPS for a in ("--op", op)]] + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc"), "--out", str(root / "dec"),
                 "--owner", str(root / "enc.owner"), "--images", str(src), "--flood-std", "3",
                 "--contact-sheet", str(root / "sheet.png")] + SPARK) == 0
    metrics = {r["source"].rsplit("/", 1)[-1]: r for r in ds.dataset(root / "dec" / "metrics").to_table().to_pylist()}
    return root, src, metrics


@pytest.mark.spark
@pytest.mark.slow
def test_decrypt_draws_four_panels_per_image_at_its_size(sheet_run):
    root, _, metrics = sheet_run
    boxes = cs.read_layout(str(root / "sheet.png"))
    assert len(boxes) == len(PANEL_NAMES) * len(metrics) == 8
    got = crops(root / "sheet.png")
    for name, m in metrics.items():
        title = next(b["image"] for b in boxes if b["image"].startswith(name))
        for panel in PANEL_NAMES:
            assert got[(title, panel)].shape[:2] == (m["height"], m["width"]), (name, panel)


@pytest.mark.spark
@pytest.mark.slow
def test_the_sheet_panels_agree_with_the_metrics_table(sheet_run):
    root, src, metrics = sheet_run
    got = crops(root / "sheet.png")
    assert any(m["mse"] > 0 for m in metrics.values())          # the flooding made the two differ
    for name, m in metrics.items():
        title = next(t for t, _ in got if t.startswith(name))
        cut = {p: got[(title, p)] if m["channels"] == 3 else grey(got[(title, p)]) for p in PANEL_NAMES}
        original = np.asarray(Image.open(src / name))
        assert np.array_equal(cut["original"], original)
        assert np.array_equal(cut["plaintext-processed"], round_to_uint8(reference(original, parse_ops(OPS))))
        err = cut["decrypted"].astype(float) - cut["plaintext-processed"].astype(float)
        assert np.mean(err ** 2) == pytest.approx(m["mse"], rel=1e-9, abs=1e-12), name
        assert np.mean(err == 0) == pytest.approx(m["exact_fraction"], rel=1e-9), name
        assert np.array_equal(cut["difference"], np.minimum(np.abs(err) * DIFF_GAIN, 255).astype(np.uint8))


@pytest.mark.spark
@pytest.mark.slow
def test_the_sheet_captions_every_image_and_keeps_its_layout(sheet_run):
    root, _, metrics = sheet_run
    with Image.open(root / "sheet.png") as im:
        assert LAYOUT_KEY in im.text
    titles = {b["image"] for b in cs.read_layout(str(root / "sheet.png"))}
    assert sorted(t.split()[0] for t in titles) == sorted(metrics)


@pytest.mark.spark
@pytest.mark.slow
def test_without_an_owner_map_the_sheet_shows_the_originals_found_by_their_result(sheet_run):
    root, src, _ = sheet_run
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc"), "--out",
                 str(root / "dec-no-owner"), "--images", str(src), "--contact-sheet", str(root / "no-owner.png")]
                + SPARK) == 0
    got = crops(root / "no-owner.png")
    assert len(got) == 8
    for name in ("grey.png", "rgb.png"):
        title = next(t for t, _ in got if t.startswith(name))
        original = np.asarray(Image.open(src / name))
        cut = got[(title, "original")]
        assert np.array_equal(cut if original.ndim == 3 else grey(cut), original)
        assert not got[(title, "difference")].any()          # exact without flooding


def test_decrypt_refuses_a_contact_sheet_without_the_originals(tmp_path, capsys):
    rc = main(["decrypt", "--keys", str(tmp_path / "k"), "--input", str(tmp_path / "in"), "--out",
               str(tmp_path / "out"), "--contact-sheet", str(tmp_path / "s.png")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--contact-sheet" in err and "--images" in err
    assert not (tmp_path / "s.png").exists()
