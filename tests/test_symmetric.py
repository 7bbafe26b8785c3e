"""hecore.encrypt.symmetric: seeded secret-key CKKS encryption through the native extension hepix_seal.

Round trips on 64x64 USC-SIPI crops (real and complex packing), Pyfhel loading the bytes, packed
ops on them, fresh randomness, key refusals, the bench rows, and `hepix encrypt --encryption
symmetric` -> process (public keys only) -> decrypt.  `make setup` builds the extension; these
tests skip (saying so) only where it is not installed.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow.dataset as ds
import pytest
from he_pipeline import COLOUR, GREY, usc_crop
from PIL import Image
from secretbytes import files_holding

from hecore.encrypt import symmetric
from hecore.encrypt.symmetric import NativeExtensionMissing, SymmetricEncryptor
from hecore.errors import KeyDirectoryError, KeyMismatch, SecretKeyMissing
from hecore.layouts import Layout
from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_ops, reference
from hecore.quality import round_to_uint8
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.keys import keygen
from hecore.seal.params import preset

pytestmark = pytest.mark.seconds(40)

needs_native = pytest.mark.skipif(
    not symmetric.available(),
    reason="the native extension hepix_seal is not installed (make setup builds it with tools/build_native.sh)")

SEED_BYTES = 64     # SEAL stores the seed of a symmetric ciphertext's second component last


@pytest.fixture(scope="module")
def owner(he_paper4096):
    ctx, secret = he_paper4096
    return ctx, secret, SymmetricEncryptor(ctx.public, secret)


@pytest.fixture(scope="module", params=["grey", "colour"])
def crop(request):
    return usc_crop(GREY if request.param == "grey" else COLOUR)


@needs_native
def test_real_packing_round_trip_is_exact(owner, crop):
    ctx, _, enc = owner
    th, tw = default_tile(ctx.params, halo=1)
    grid, tiles = encrypt_tiles(crop, enc, th, tw, halo=1)
    tiles = list(tiles)
    assert len(tiles) == grid.count * grid.channels
    raw = decrypt_tiles(ctx, grid, tiles)
    assert np.array_equal(round_to_uint8(raw), crop), float(np.max(np.abs(raw - crop)))
    assert float(np.max(np.abs(raw - crop))) < 1e-3


@needs_native
def test_complex_packing_round_trip_is_exact_with_two_pixels_per_slot(owner, crop):
    ctx, _, enc = owner
    th, tw = default_tile(ctx.params, halo=1, complex_packing=True)     # 60x62: twice the real tile
    grid, tiles = encrypt_tiles(crop, enc, th, tw, halo=1, complex_packing=True)
    tiles = list(tiles)
    real_grid, real_tiles = encrypt_tiles(crop, enc, *default_tile(ctx.params, halo=1), halo=1)
    assert len(tiles) == grid.count * grid.channels < len(list(real_tiles))
    assert all(t.layout is Layout.PACKED_COMPLEX for t in tiles)
    raw = decrypt_tiles(ctx, grid, tiles)                    # hecore.layouts.packed's decryption of packed-complex
    assert np.array_equal(round_to_uint8(raw), crop), float(np.max(np.abs(raw - crop)))
    assert float(np.max(np.abs(raw - crop))) < 1e-3


@needs_native
def test_seeded_ciphertexts_load_in_pyfhel_at_half_the_size(owner):
    ctx, secret, enc = owner
    values = np.linspace(-100.0, 300.0, ctx.params.slots)
    (ct,) = enc.encrypt_real(values[None, :])
    public = ctx.encrypt_vector(values)
    assert len(ct) < 0.55 * len(public), (len(ct), len(public))
    loaded = ctx.load_ciphertext(ct)                         # a Pyfhel PyCtxt: SEAL expanded the seed
    assert type(loaded).__name__ == "PyCtxt"
    assert np.allclose(ctx.decrypt_slots(loaded, values.size), values, atol=1e-3)
    # Once loaded, the ciphertext serializes like any other (expanded, full size).
    assert len(loaded.to_bytes(compr_mode="none")) == len(public)
    (cz,) = SymmetricEncryptor(ctx.public, secret, compression="zstd").encrypt_real(values[None, :])
    assert len(cz) < len(ct)
    assert np.allclose(ctx.decrypt_slots(cz, values.size), values, atol=1e-3)


@needs_native
@pytest.mark.parametrize("complex_packing", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("specs", [["brightness:20", "meanfilter:3"], ["contrast:1.5", "watermark:5,31,3"]])
def test_packed_ops_work_on_symmetric_ciphertexts(owner, specs, complex_packing):
    ctx, _, enc = owner
    img = usc_crop(COLOUR)
    halo = 1
    th, tw = default_tile(ctx.params, halo, complex_packing=complex_packing)
    ops = parse_ops(specs)
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, enc, th, tw, halo, complex_packing=complex_packing)
    out, scales = [], set()
    for t in tiles:
        geom = PackedGeometry(th, tw, halo, t.y, t.x, grid.height, grid.width, complex_packing)
        c, ps = apply_ops(ev, ev.load(t.ct), ops, geom)
        scales.add(ps)
        out.append(t.with_ct(ev.dump(c)))
    (ps,) = scales
    values = finish_for(ops).apply(decrypt_tiles(ctx, grid, out))
    expected = round_to_uint8(reference(img, ops))
    assert np.array_equal(round_to_uint8(values), expected), float(np.mean(round_to_uint8(values) == expected))


@needs_native
def test_every_encryption_is_fresh(owner):
    ctx, _, enc = owner
    tile = usc_crop(GREY)[:32, :64].astype(np.float64).reshape(1, -1)
    a, b = enc.encrypt_real(np.vstack([tile, tile]))
    c = enc.encrypt_real(tile)[0]
    assert len({a, b, c}) == 3, "two encryptions of the same tile are byte-identical"
    seeds = {ct[-SEED_BYTES:] for ct in (a, b, c)}
    assert len(seeds) == 3, "two encryptions share the seed of their uniform component"
    body = slice(200, len(a) - SEED_BYTES)                    # the first component's coefficients
    assert a[body] != b[body] and a[body] != c[body]
    for ct in (a, b, c):
        assert np.allclose(ctx.decrypt_slots(ct, tile.size), tile[0], atol=1e-3)


@needs_native
def test_a_secret_key_of_another_key_set_is_refused(owner, he_addonly2048, tmp_path):
    ctx, _, _ = owner
    other, other_secret = HEContext.generate(preset("paper-4096"), rotations=False)
    with pytest.raises(KeyMismatch, match="does not belong to key"):
        SymmetricEncryptor(ctx.public, other_secret)
    _, small_secret = he_addonly2048                           # another context altogether
    with pytest.raises(KeyMismatch, match="cannot set up symmetric encryption|does not load"):
        SymmetricEncryptor(ctx.public, small_secret)
    with pytest.raises(KeyMismatch, match="secret key given is empty"):
        SymmetricEncryptor(ctx.public, b"")
    with pytest.raises(KeyMismatch, match="cannot set up symmetric encryption"):
        SymmetricEncryptor(ctx.public, b"\x00" * 100)


@needs_native
def test_key_directories_without_a_private_secret_key_are_refused(tmp_path):
    keys = tmp_path / "keys"
    keygen(preset("addonly-2048"), keys)
    enc = SymmetricEncryptor.from_key_directory(keys)
    assert len(enc.encrypt_real(np.arange(8.0)[None, :])) == 1
    os.chmod(keys / "secret.key", 0o644)
    with pytest.raises(KeyDirectoryError, match="chmod 600"):
        SymmetricEncryptor.from_key_directory(keys)
    (keys / "secret.key").unlink()
    with pytest.raises(SecretKeyMissing, match="no secret.key"):
        SymmetricEncryptor.from_key_directory(keys)


@needs_native
def test_bad_values_are_refused_naming_them(owner):
    _, _, enc = owner
    with pytest.raises(ValueError, match="not finite"):
        enc.encrypt_real(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="does not fit"):
        enc.encrypt_real(np.zeros((1, enc.slots + 1)))


def test_a_missing_extension_is_a_clear_error(monkeypatch, he_addonly2048):
    ctx, secret = he_addonly2048
    monkeypatch.setitem(sys.modules, "hepix_seal", None)      # import hepix_seal now raises ImportError
    assert not symmetric.available()
    with pytest.raises(NativeExtensionMissing, match="make setup"):
        SymmetricEncryptor(ctx.public, secret)


@needs_native
def test_bench_has_symmetric_rows_next_to_the_baselines():
    from bench.suites.packed import HEPIX_SYMMETRIC, PIXEL_FULL, PIXEL_SYMMETRIC, run_packed_bench

    img = usc_crop(GREY)
    try:
        import tenseal  # noqa: F401  (the baseline of the bytes ratio, when installed)
        with_tenseal = True
    except Exception:
        with_tenseal = False
    rows = run_packed_bench({"grey": img}, presets=("paper-4096",), repeats=1, tenseal=with_tenseal,
                            pixel_full=True)
    sym = [r for r in rows if r.implementation.startswith(HEPIX_SYMMETRIC)]
    assert {r.implementation for r in sym} == {HEPIX_SYMMETRIC, HEPIX_SYMMETRIC + "-complex",
                                               HEPIX_SYMMETRIC + "-complex-zstd"}
    pub = next(r for r in rows if r.implementation == "hepix-packed")
    for r in sym:
        assert (r.encryption, r.security, r.exact_fraction) == ("symmetric", "ind-cpa", 1.0)
        assert r.bytes_per_pixel < pub.bytes_per_pixel
    cplx = next(r for r in sym if r.implementation == HEPIX_SYMMETRIC + "-complex")
    real = next(r for r in sym if r.implementation == HEPIX_SYMMETRIC)
    assert cplx.ciphertexts * 2 == real.ciphertexts
    pixel = next(r for r in rows if r.implementation == PIXEL_SYMMETRIC)
    full = next(r for r in rows if r.implementation == PIXEL_FULL)
    assert (pixel.security, pixel.width, pixel.height, pixel.pixels, pixel.ciphertexts) == ("ind-cpa", 32, 32, 1024, 1024)
    assert pixel.exact_fraction == 1.0
    assert pixel.vs_pixel_full == pytest.approx(pixel.pixels_per_second / full.pixels_per_second)
    if with_tenseal:
        ts = next(r for r in rows if r.implementation == "tenseal" and r.encryption == "symmetric")
        for r in sym:
            assert r.bytes_vs_tenseal_symmetric == pytest.approx(r.bytes_per_pixel / ts.bytes_per_pixel)
            assert r.vs_tenseal_symmetric == pytest.approx(r.pixels_per_second / ts.pixels_per_second)


# --- the Spark jobs ------------------------------------------------------------------------------

SPARK = ["--master", "local[2]", "--quiet"]


@pytest.fixture(scope="module")
def sym_run(tmp_path_factory):
    if not symmetric.available():
        pytest.skip("the native extension hepix_seal is not installed (make setup builds it)")
    from jobs.cli import main

    root = tmp_path_factory.mktemp("symmetric")
    src = root / "in"
    src.mkdir()
    rng = np.random.default_rng(11)
    Image.fromarray(rng.integers(0, 256, (40, 70, 3), dtype=np.uint8)).save(src / "rgb.png")
    Image.fromarray(rng.integers(0, 256, (33, 20), dtype=np.uint8)).save(src / "grey.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt", "--keys", str(root / "keys"), "--input", str(src), "--out", str(root / "enc"),
                 "--encryption", "symmetric"] + SPARK) == 0
    return root, src, main


def _process_and_decrypt(root, src, main, enc: str, ops: list[str]) -> list[dict]:
    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / enc), "--out", str(root / f"{enc}-proc")]
    for op in ops:
        argv += ["--op", op]
    assert main(argv + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / f"{enc}-proc"),
                 "--out", str(root / f"{enc}-dec"), "--owner", str(root / f"{enc}.owner"), "--images", str(src)] + SPARK) == 0
    return ds.dataset(root / f"{enc}-dec" / "metrics").to_table().to_pylist()


@pytest.mark.spark
@pytest.mark.slow
def test_encrypt_symmetric_rows_are_labelled_and_seeded(sym_run):
    root, _, _ = sym_run
    m = json.loads((root / "enc" / "_manifest.json").read_text())
    assert (m["strategy"], m["security"], m["options"]["encryption"]) == ("symmetric", "ind-cpa", "symmetric")
    t = ds.dataset(root / "enc" / "ciphertexts").to_table()
    assert set(t.column("strategy").to_pylist()) == {"symmetric"}
    sizes = [len(b) for b in t.column("ct").to_pylist()]
    assert max(sizes) < 70_000                 # seeded: about half of the 131,185 bytes of a full ciphertext
    assert m["counts"]["ciphertext_bytes"] == sum(sizes)
    assert len(set(t.column("ct").to_pylist())) == t.num_rows
    secret = (root / "keys" / "secret.key").read_bytes()
    assert files_holding(secret, root / "enc") == [], "secret key bytes in the output"


@pytest.mark.spark
@pytest.mark.slow
def test_symmetric_ciphertexts_go_through_process_with_public_keys_and_decrypt_exactly(sym_run):
    root, src, main = sym_run
    ops = ["brightness:20", "meanfilter:3"]
    metrics = _process_and_decrypt(root, src, main, "enc", ops)
    assert len(metrics) == 2
    for r in metrics:
        assert r["strategy"] == "symmetric" and r["ops"] == "|".join(ops), r
        assert r["exact_fraction"] == 1.0, (r["source"], r["exact_fraction"], r["max_abs_err"])


@pytest.mark.spark
@pytest.mark.slow
def test_symmetric_complex_packing_goes_through_the_pipeline_exactly(sym_run):
    root, src, main = sym_run
    assert main(["encrypt", "--keys", str(root / "keys"), "--input", str(src), "--out", str(root / "encc"),
                 "--encryption", "symmetric", "--layout", "packed-complex", "--compression", "zstd"] + SPARK) == 0
    m = json.loads((root / "encc" / "_manifest.json").read_text())
    assert (m["layout"], m["strategy"], m["options"]["compression"]) == ("packed-complex", "symmetric", "zstd")
    ops = ["watermark:3,4,5", "meanfilter:3"]
    metrics = _process_and_decrypt(root, src, main, "encc", ops)
    assert len(metrics) == 2
    for r in metrics:
        assert r["layout"] == "packed-complex" and r["strategy"] == "symmetric", r
        assert r["exact_fraction"] == 1.0, (r["source"], r["exact_fraction"], r["max_abs_err"])


@pytest.mark.spark
@pytest.mark.slow
def test_encrypt_symmetric_refuses_a_public_only_key_directory(sym_run, capsys):
    root, src, main = sym_run
    argv = ["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(root / "nope"),
            "--encryption", "symmetric"] + SPARK
    assert main(argv) == 2
    assert "no secret.key" in capsys.readouterr().err
    assert not (root / "nope").exists()
    argv = ["encrypt", "--keys", str(root / "keys"), "--input", str(src), "--out", str(root / "nope"),
            "--encryption", "symmetric", "--layout", "pixel"] + SPARK
    assert main(argv) == 2
    assert "in --layout packed or --layout packed-complex" in capsys.readouterr().err
