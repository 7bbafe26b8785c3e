"""hecore.seal.atrest: the compact at-rest format, and the planner's storage plan (hecore.planner.at_rest).

Exact round trips through compact -> expand -> ops -> decrypt for the packed layouts and the op chains
of the at-rest format (seeded secret-key and public-key ciphertexts), on USC-SIPI crops, with the measured error
held against the planner's bound; lossless compaction at every level, byte-for-byte; the pixel layout;
hostile compact bytes; fresh randomness; the audit on compact ciphertexts.  No timing here: speed and
bytes per pixel are the atrest benchmark's (bench/suites/atrest.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import COLOUR, GREY, usc_crop

from hecore.audit import Verdict, audit_group
from hecore.audit.sealbytes import plain_layout
from hecore.encrypt import PublicKeyEncryptor, symmetric
from hecore.encrypt.strategies import make_strategy
from hecore.errors import HepixError, InvalidParameters
from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_match, parse_ops, reference
from hecore.planner import at_rest, at_rest_problems, check_at_rest
from hecore.quality import round_to_uint8
from hecore.seal.atrest import MAGIC, AtRest, CompactEncryptor, Compactor, MalformedCiphertext, is_compact
from hecore.seal.context import HEContext, PlainCodec, chain_primes
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

pytestmark = [pytest.mark.seconds(45), pytest.mark.skipif(
    not symmetric.available(),
    reason="the native extension hepix_seal is not installed (make setup builds it with tools/build_native.sh)")]

HALO = 2
#: The add-only chains (the planner's depth 0): each stored at the last level, q0 alone.
CHAINS = {
    "brightness50": ["brightness:50"],
    "contrast1.5": ["contrast:1.5"],
    "watermark": ["watermark:29,15,5"],
    "mean3": ["meanfilter:3"],
    "mean5": ["meanfilter:5"],
    "chain": ["brightness:20", "watermark:29,15,5", "meanfilter:3", "contrast:0.5"],
}


@pytest.fixture(scope="module")
def keys(he_paper4096):
    ctx, secret = he_paper4096
    return ctx, symmetric.SymmetricEncryptor(ctx.public, secret)


@pytest.fixture(scope="module")
def images():
    return {"grey": usc_crop(GREY), "colour": usc_crop(COLOUR, 120, 100)}


def _layout(complex_packing: bool) -> str:
    return "packed-complex" if complex_packing else "packed"


def run_compact(ctx, inner, img, specs, complex_packing):
    """encrypt (compact, at the planner's storage) -> ops on the expanded bytes -> decrypt."""
    ops = parse_ops(specs)
    seeded = isinstance(inner, symmetric.SymmetricEncryptor)
    plan = at_rest(ctx.params, ops, _layout(complex_packing), seeded=seeded)
    th, tw = default_tile(ctx.params, HALO, complex_packing)
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, CompactEncryptor(inner, plan), th, tw, HALO, complex_packing)
    out, stored, ps = [], [], 1.0
    for t in tiles:
        stored.append(bytes(t.ct))
        geom = PackedGeometry(th, tw, HALO, t.y, t.x, grid.height, grid.width, complex_packing)
        c, ps = apply_ops(ev, ev.load(t.ct), ops, geom)
        out.append(t.with_ct(ev.dump(c)))
    raw = decrypt_tiles(ctx, grid, out)
    expected = reference(img, ops)
    return plan, stored, raw, ps, finish_for(ops).apply(raw), expected


@pytest.mark.parametrize("complex_packing", [True, False], ids=["complex", "real"])
@pytest.mark.parametrize("encryption", ["symmetric", "public"])
@pytest.mark.parametrize("chain", list(CHAINS))
def test_compact_storage_is_exact_for_the_add_only_chains(keys, images, chain, encryption, complex_packing):
    ctx, sym = keys
    inner = sym if encryption == "symmetric" else PublicKeyEncryptor(ctx)
    for name, img in images.items():
        plan, stored, raw, ps, finished, expected = run_compact(ctx, inner, img, CHAINS[chain], complex_packing)
        assert plan.level == 1 and plan.primes == 1 and plan.drop0 > 0, plan
        headers = [Compactor.for_public(ctx.public).header(c) for c in stored]
        assert all(is_compact(c) for c in stored)
        assert {(h.level, h.drop0, h.seeded) for h in headers} == {(1, plan.drop0, encryption == "symmetric")}
        raw_error = float(np.max(np.abs(raw - expected / ps)))
        exact = float(np.mean(round_to_uint8(finished) == round_to_uint8(expected)))
        report = f"{name} {chain}: {plan.describe()}, raw error {raw_error:.3g}, bound {plan.error_bound:.3g}"
        assert exact == 1.0, report
        # the rounding's bound holds with CKKS's own noise on top, and stays within the chain's tolerance
        assert raw_error <= plan.error_bound, report
        assert plan.error_bound <= plan.tolerance / 2, report


def test_a_seeded_compact_ciphertext_at_q0_is_under_four_bytes_per_pixel(keys):
    ctx, sym = keys
    plan = at_rest(ctx.params, parse_ops(["brightness:50"]), "packed-complex")
    img = usc_crop(GREY, 0, 0, 128)
    th, tw = default_tile(ctx.params, 0, True)                      # 64x64: a full ciphertext of pixels
    tiles = list(encrypt_tiles(img, CompactEncryptor(sym, plan), th, tw, 0, True)[1])
    nbytes = sum(len(t.ct) for t in tiles)
    assert nbytes / img.size < 4.0, (nbytes / img.size, plan)
    width = 40 - plan.drop0
    assert len(tiles[0].ct) == 24 + ctx.params.n * width // 8 + 64


@pytest.mark.parametrize("level", [0, 1])
def test_lossless_compaction_expands_to_the_same_seal_bytes(keys, level):
    """Seeded and public-key ciphertexts, each level: expand(compact(ct)) is SEAL's own uncompressed
    serialization of ct, byte for byte (the seed is kept, c1 is re-expanded from it)."""
    ctx, sym = keys
    comp = Compactor.for_public(ctx.public)
    ev = Evaluator(ctx)
    vals = np.arange(2048) % 256 + 1j * (np.arange(2048) * 7 % 256)
    seeded = sym.encrypt_at(vals[None, :], level)[0]
    public = ctx.encrypt_complex(vals)
    plan = AtRest(level=level, primes=2 - level, scale_bits=30)
    for ct, keeps_seed in ((seeded, True), (public, False)):
        c = ev.load(ct)
        if level > ev.level(c):
            c = ev.mod_switch(c, level - ev.level(c))
        want = ev.dump(c)
        small = comp.compact([ct], plan)[0]
        assert comp.header(small).seeded == (keeps_seed and ev.level(ev.load(ct)) == level)
        assert comp.expand_one(small) == want
        assert len(small) < len(want) / 1.5
        assert np.allclose(ctx.decrypt_complex(small, 2048), vals, atol=1e-4)


def test_processed_ciphertexts_are_stored_compact_losslessly_keeping_the_seed_when_c1_is_unchanged(keys):
    ctx, sym = keys
    ev = Evaluator(ctx)
    comp = Compactor.for_public(ctx.public)
    plan = at_rest(ctx.params, parse_ops(["meanfilter:3"]), "packed-complex")
    stored = sym.encrypt_compact(np.full((1, 2048), 100 + 50j), plan)[0]
    added = ev.dump_like(ev.add_values(ev.load(stored), 20 + 20j), stored)      # c1 untouched
    rotated = ev.dump_like(ev.rotate(ev.load(stored), 1), stored)               # c1 changed
    again = ev.dump_like(ev.add_values(ev.load(added), 1.0), added)
    for ct, seeded, value in ((added, True, 120 + 70j), (rotated, False, 100 + 50j), (again, True, 121 + 70j)):
        h = comp.header(ct)
        assert (h.level, h.drop0, h.drop1, h.seeded) == (1, 0, 0, seeded)
        assert np.allclose(ctx.decrypt_complex(ct, 4), value, atol=0.1)
    assert len(added) == 24 + 4096 * 40 // 8 + 64 and len(rotated) == 24 + 2 * 4096 * 40 // 8
    seal = ctx.encrypt_vector(np.ones(4))
    assert ev.dump_like(ev.load(seal), seal) == ev.dump(ev.load(seal))        # SEAL in, SEAL out


def test_symmetric_encryption_at_the_last_level_decrypts(keys):
    ctx, sym = keys
    vals = np.random.default_rng(3).integers(0, 256, (3, 2048)).astype(np.float64)
    cts = sym.encrypt_at(vals, 1)
    ev = Evaluator(ctx)
    for row, ct in zip(vals, cts):
        assert ev.level(ev.load(ct)) == 1
        assert np.allclose(ctx.decrypt_slots(ct, 2048), row, atol=1e-4)
    assert len(cts[0]) < 0.55 * len(sym.encrypt_at(vals[:1], 0)[0])       # one prime instead of two


def test_pixel_layout_ciphertexts_compact_and_decrypt(he_paper4096):
    """The pixel layout's ciphertexts (public key, one per pixel value) store compact too."""
    ctx, _ = he_paper4096
    values = usc_crop(GREY, 96, 96, 8).reshape(-1)
    batch = make_strategy("fresh", ctx).prepare().encrypt(values)
    plan = at_rest(ctx.params, parse_ops(["brightness:10"]), "pixel", seeded=False)
    small = Compactor.for_public(ctx.public).compact(list(batch), plan)
    assert all(len(s) < len(batch[0]) / 4 for s in small)
    got = ctx.decrypt_pixels(small)
    assert np.array_equal(np.rint(got), values), np.max(np.abs(got - values))


# --- hostile bytes ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good(keys):
    """A valid lossless compact ciphertext at the last level (c0 and c1 bit-packed, 40-bit residues)."""
    ctx, _ = keys
    ct = ctx.encrypt_complex(np.full(2048, 100 + 50j))
    return Compactor.for_public(ctx.public).compact([ct], AtRest(level=1, primes=1, scale_bits=30))[0]


def _forged(good: bytes, at: int, value: bytes) -> bytes:
    b = bytearray(good)
    b[at:at + len(value)] = value
    return bytes(b)


@pytest.mark.parametrize("case, make, message", [
    ("truncated", lambda g: g[:-1], "truncated"),
    ("header only", lambda g: g[:20], "shorter than its 24-byte header"),
    ("trailing bytes", lambda g: g + b"\0" * 8, "trailing bytes"),
    ("huge length", lambda g: g + b"\0" * (1 << 20), "trailing bytes"),
    ("version", lambda g: _forged(g, 4, b"\x09"), "version 9"),
    ("flags", lambda g: _forged(g, 5, b"\x80"), "unknown flags"),
    ("level", lambda g: _forged(g, 6, b"\x07"), "level 7 does not exist"),
    ("primes", lambda g: _forged(g, 7, b"\x02"), "2 primes"),
    ("drop without coefficient form", lambda g: _forged(g, 8, b"\x05"), "coefficient form"),
    ("drop too many bits", lambda g: _forged(g, 5, b"\x02") [:8] + b"\x2a" + _forged(g, 5, b"\x02")[9:], "drops 42 bits"),
    ("ring degree", lambda g: _forged(g, 10, b"\x0b"), r"N = 2\^11"),
    ("parameters", lambda g: _forged(g, 12, b"\xde\xad\xbe\xef"), "other encryption parameters"),
    ("scale", lambda g: _forged(g, 16, np.float64(np.nan).tobytes()), "scale"),
    ("seed without PRNG", lambda g: _forged(g, 5, b"\x01"), "PRNG type"),
    ("coefficient >= q", lambda g: _forged(g, 24, b"\xff" * 5), "beyond the prime"),
    ("c1 coefficient >= q", lambda g: _forged(g, len(g) - 5, b"\xff" * 5), "beyond the prime"),
])
def test_hostile_compact_bytes_raise_a_clear_value_error(keys, good, case, make, message):
    ctx, _ = keys
    bad = make(good)
    with pytest.raises(MalformedCiphertext, match=message) as err:
        Compactor.for_public(ctx.public).expand([good, bad])
    assert isinstance(err.value, ValueError)
    assert "compact ciphertext 1" in str(err.value)
    with pytest.raises(ValueError):
        ctx.decrypt_complex(bad, 4)                     # every reader checks before SEAL sees the bytes


def test_compact_bytes_of_another_preset_are_refused(keys, he_addonly2048):
    ctx, _ = keys
    other, _ = he_addonly2048
    ct = other.encrypt_vector(np.arange(8.0))
    small = Compactor.for_public(other.public).compact([ct], AtRest(level=0, primes=1, scale_bits=30))[0]
    with pytest.raises(MalformedCiphertext, match="N = 2\\^11"):
        ctx.load_ciphertext(small)


def test_seal_bytes_never_start_with_the_magic(keys):
    ctx, sym = keys
    for ct in (ctx.encrypt_value(1.0), sym.encrypt_real(np.ones((1, 4)))[0]):
        assert ct[:2] == b"\x5e\xa1" and not is_compact(ct)
    assert MAGIC[:2] != b"\x5e\xa1"


# --- IND-CPA sanity, the audit ------------------------------------------------------------------

def test_equal_images_never_give_equal_compact_ciphertexts(keys):
    ctx, sym = keys
    plan = at_rest(ctx.params, parse_ops(["brightness:50"]), "packed-complex")
    enc = CompactEncryptor(sym, plan)
    flat = np.full((8, 2048), 77 + 77j)                 # eight identical tiles, encrypted twice
    cts = list(enc.encrypt(flat)) + list(enc.encrypt(flat))
    c0s = {bytes(c[24:-64]) for c in cts}
    seeds = {bytes(c[-64:]) for c in cts}
    assert len(c0s) == len(seeds) == 16
    assert np.allclose(ctx.decrypt_complex(bytes(cts[3]), 2048), 77 + 77j, atol=0.2)


@pytest.mark.parametrize("encryption", ["symmetric", "public"])
def test_compact_ciphertexts_pass_the_audit_after_expansion(keys, encryption):
    ctx, sym = keys
    inner = sym if encryption == "symmetric" else PublicKeyEncryptor(ctx)
    plan = at_rest(ctx.params, parse_ops(["brightness:50"]), "packed", seeded=encryption == "symmetric")
    img = usc_crop(GREY)
    cts = [t.ct for t in encrypt_tiles(img, CompactEncryptor(inner, plan), 8, 8)[1]]
    data = np.frombuffer(b"".join(bytes(c) for c in cts), dtype=np.uint8)
    offsets = np.r_[0, np.cumsum([len(c) for c in cts])].astype(np.int64)
    params = preset("paper-4096")
    data, offsets = plain_layout(data, offsets, params)                   # keyless: from the parameters
    assert not is_compact(data[:4])
    result = audit_group(data, offsets, chain_primes(params), PlainCodec(params), rng=np.random.default_rng(5))
    verdicts = {v.test: v.verdict for v in result}
    assert len(cts) == 64 and verdicts["identical"] == verdicts["linear-dependence"] == Verdict.PASS
    assert all(v != Verdict.LEAKS for v in verdicts.values()), [(v.test, v.detail) for v in result]


# --- the planner's storage plan -----------------------------------------------------------------

def test_the_planner_stores_add_only_chains_at_the_last_level_and_deeper_chains_higher():
    params = preset("paper-4096")
    for specs in CHAINS.values():
        plan = at_rest(params, parse_ops(specs), "packed")
        assert (plan.level, plan.primes) == (1, 1) and 0 < plan.drop0 < 40
    deep = preset("tenseal-8192")                       # a match spends one of its two rescales
    match = at_rest(deep, [], "packed", parse_match("match:q.png,l2"))
    assert (match.level, match.primes, match.drop0, match.scale_bits) == (1, 2, 0, 40)
    undeclared = at_rest(params, [], "packed", declared=False)
    assert (undeclared.level, undeclared.drop0) == (0, 0)
    # wider sums need a smaller scale and finer rounding: fewer bits dropped
    assert at_rest(params, parse_ops(["meanfilter:5"]), "packed").drop0 < at_rest(
        params, parse_ops(["brightness:50"]), "packed").drop0


def test_a_chain_beyond_what_was_stored_is_refused():
    params = preset("paper-4096")
    stored = at_rest(params, parse_ops(["brightness:50"]), "packed-complex")
    assert not at_rest_problems(params, stored, parse_ops(["brightness:50"]), "packed-complex")
    assert not at_rest_problems(params, stored, parse_ops(["watermark:1,2,5"]), "packed-complex")
    with pytest.raises(InvalidParameters, match="stored compact for brightness:50.*--store compact --for-op"):
        check_at_rest(params, stored, parse_ops(["meanfilter:5"]), "packed-complex")
    with pytest.raises(InvalidParameters, match="spends 1 level"):
        check_at_rest(params, stored, [], "packed", parse_match("match:q.png,l2"))
    top = at_rest(params, [], "packed", declared=False)
    check_at_rest(params, top, parse_ops(["meanfilter:5"]), "packed")


def test_integer_schemes_are_refused():
    with pytest.raises(InvalidParameters, match="CKKS"):
        at_rest(preset("bfv-4096"), parse_ops(["brightness:5"]), "packed")
    ctx, _ = HEContext.generate(preset("bfv-4096"), rotations=False)
    with pytest.raises(HepixError, match="CKKS"):
        CompactEncryptor(PublicKeyEncryptor(ctx), AtRest(level=0, primes=2, scale_bits=0))



# --- tiles at rest, and the benchmark's rows ------------------------------------------------------

@pytest.mark.parametrize("halo", [0, 1, 2])
@pytest.mark.parametrize("shape", [(256, 256), (1024, 2048), (1344, 2040), (33, 20)])
def test_tile_for_fits_the_slots_and_never_needs_more_ciphertexts_than_the_default(halo, shape):
    from hecore.layouts.packed import check_tile_fits
    from hecore.seal.atrest import tile_for

    params = preset("paper-4096")
    th, tw = tile_for(params, halo, True, *shape)
    check_tile_fits(params, th, tw, halo, True)
    dh, dw = default_tile(params, halo, True)
    count = -(-shape[0] // th) * -(-shape[1] // tw)
    assert count <= -(-shape[0] // dh) * -(-shape[1] // dw)


def test_the_atrest_bench_measures_every_path_in_one_run():
    from bench.suites.atrest import CHAINS, PIXEL_FULL, measure

    rows = measure({"clock": usc_crop(GREY, 96, 96, 32)}, repeats=1)
    by = {r["implementation"]: r for r in rows}
    assert set(by) == {PIXEL_FULL, "symmetric-complex", "symmetric-complex-q0", "compact-lossless",
                       "public-compact-brightness"} | {f"compact-{name}" for name, _, _ in CHAINS}
    assert by[PIXEL_FULL]["vs_pixel_full"] == 1.0 and by[PIXEL_FULL]["security"] == "leaks"
    for name, r in by.items():
        assert r["vs_pixel_full"] == pytest.approx(r["pixels_per_second"] / by[PIXEL_FULL]["pixels_per_second"])
        if name != PIXEL_FULL:
            assert r["security"] == "ind-cpa" and r["exact_fraction"] == 1.0, r
            assert r["expand_seconds"] is not None and r["decrypt_seconds"] is not None
    assert by["compact-brightness"]["bytes"] < by["symmetric-complex"]["bytes"] / 4
    assert (by["compact-brightness"]["level"], by["symmetric-complex-q0"]["primes"]) == (1, 1)

# --- the jobs: hepix encrypt --store compact -> process (public keys) -> decrypt ----------------------

SPARK = ["--master", "local[2]", "--quiet"]


@pytest.fixture(scope="module")
def compact_run(tmp_path_factory):
    import json

    from PIL import Image

    from jobs.cli import main

    root = tmp_path_factory.mktemp("atrest")
    src = root / "in"
    src.mkdir()
    Image.fromarray(usc_crop(COLOUR, 100, 60, 70)[:40]).save(src / "rgb.png")
    Image.fromarray(usc_crop(GREY, 20, 30, 33)[:, :20]).save(src / "grey.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt", "--keys", str(root / "keys"), "--input", str(src), "--out", str(root / "enc"),
                 "--encryption", "symmetric", "--layout", "packed-complex", "--store", "compact",
                 "--for-op", "brightness:20", "--for-op", "meanfilter:3"] + SPARK) == 0
    return root, src, main, json.loads((root / "enc" / "_manifest.json").read_text())


def _process_decrypt(root, src, main, enc, ops):
    import pyarrow.dataset as ds

    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / enc), "--out", str(root / f"{enc}-proc")]
    for op in ops:
        argv += ["--op", op]
    assert main(argv + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / f"{enc}-proc"),
                 "--out", str(root / f"{enc}-dec"), "--images", str(src), "--owner", str(root / f"{enc}.owner")]
                + SPARK) == 0
    return ds.dataset(root / f"{enc}-dec" / "metrics").to_table().to_pylist()


@pytest.mark.spark
@pytest.mark.slow
def test_encrypt_store_compact_writes_compact_rows_at_the_planned_level(compact_run):
    import pyarrow.dataset as ds

    root, _src, _main, manifest = compact_run
    store = AtRest.from_json(manifest["options"]["store"])
    assert (store.level, store.primes, store.chain) == (1, 1, ("brightness:20", "meanfilter:3")) and store.drop0 > 0
    t = ds.dataset(root / "enc" / "ciphertexts").to_table()
    cts = t.column("ct").to_pylist()
    assert all(is_compact(c) for c in cts) and len(set(cts)) == len(cts)
    assert set(t.column("level").to_pylist()) == {1} and set(t.column("scale_bits").to_pylist()) == {store.scale_bits}
    assert manifest["counts"]["ciphertext_bytes"] == sum(len(c) for c in cts)
    assert max(len(c) for c in cts) < 16_000                  # against 65,730 seeded SEAL bytes


@pytest.mark.spark
@pytest.mark.slow
def test_compact_rows_go_through_process_and_decrypt_exactly(compact_run):
    root, src, main, _ = compact_run
    ops = ["brightness:20", "meanfilter:3"]
    metrics = _process_decrypt(root, src, main, "enc", ops)
    assert len(metrics) == 2
    for r in metrics:
        assert r["exact_fraction"] == 1.0, (r["source"], r["exact_fraction"], r["max_abs_err"])
    import pyarrow.dataset as ds

    processed = ds.dataset(root / "enc-proc" / "ciphertexts").to_table().column("ct").to_pylist()
    assert all(is_compact(c) for c in processed)              # compact in, compact out (lossless, no seed:
    assert max(len(c) for c in processed) == 24 + 2 * 4096 * 40 // 8   # the filter's rotations changed c1)


@pytest.mark.spark
@pytest.mark.slow
def test_process_refuses_a_chain_the_compact_storage_cannot_run(compact_run, capsys):
    root, _src, main, _ = compact_run
    argv = ["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "nope"),
            "--op", "meanfilter:5"] + SPARK
    assert main(argv) == 2
    assert "stored compact for brightness:20 | meanfilter:3" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_public_key_compact_storage_without_a_chain_is_lossless_and_runs_any_chain(compact_run):
    import json

    root, src, main, _ = compact_run
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(root / "encp"),
                 "--store", "compact", "--halo", "2"] + SPARK) == 0
    store = json.loads((root / "encp" / "_manifest.json").read_text())["options"]["store"]
    assert (store["level"], store["drop0"], store["drop1"]) == (0, 0, 0)
    metrics = _process_decrypt(root, src, main, "encp", ["watermark:3,4,5", "meanfilter:5"])
    assert len(metrics) == 2 and all(r["exact_fraction"] == 1.0 for r in metrics), metrics


def test_store_options_are_checked_before_spark_starts(tmp_path):
    from jobs.cli import main

    keys = tmp_path / "keys"
    assert main(["keygen", "--out", str(keys), "--preset", "paper-4096", "--no-rotations"]) == 0
    base = ["encrypt", "--keys", str(keys), "--input", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main(base + ["--for-op", "brightness:x"]) == 2           # a chain that does not parse
    assert main(base + ["--store", "compact", "--layout", "pixel"]) == 2
    assert main(base + ["--store", "compact", "--for-op", "match:q.png,l2"]) == 2   # paper-4096 cannot match
