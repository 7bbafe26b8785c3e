"""What `hepix encrypt` stores by default: SEAL's own serialization, compressed with SEAL's zstd mode, at the
level the declared chain (``--for-op``) needs, complex-packed where the chain allows it
(hecore.seal.atrest.SealStoreEncryptor, hecore.planner.at_rest with ``store="seal"``, storage_layout).

Exact round trips through encrypt -> ops -> write as the input was stored -> decrypt for the add-only chains
in both packed layouts, public-key and seeded, on USC-SIPI crops; a plain Pyfhel program (Pyfhel and the key
files, no hepix) decrypting the ``ct`` column of an encrypted and of a processed table; the jobs' defaults
and refusals.  Bytes per pixel and the cost are measured by the demo and docs/benchmarks.md, not here.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from he_pipeline import COLOUR, GREY, usc_crop
from Pyfhel import PyCtxt, Pyfhel

from hecore.encrypt import PublicKeyEncryptor, symmetric
from hecore.errors import InvalidParameters
from hecore.layouts import Layout
from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_match, parse_ops, reference
from hecore.planner import at_rest, at_rest_problems, check_at_rest, storage_layout
from hecore.quality import round_to_uint8
from hecore.seal.atrest import (
    AtRest,
    Compactor,
    MalformedCiphertext,
    SealStoreEncryptor,
    seal_compressed,
    seal_compression,
    stored_like,
)
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

pytestmark = [pytest.mark.seconds(40), pytest.mark.skipif(
    not symmetric.available(),
    reason="the native extension hepix_seal is not installed (make setup builds it with tools/build_native.sh)")]

PAPER = preset("paper-4096")
#: The add-only chains (depth 0), each with the halo it needs: stored at q0 alone, at the chain's scale.
CHAINS = {
    "brightness50": (["brightness:50"], 0),
    "contrast1.5": (["contrast:1.5"], 0),
    "watermark": (["watermark:29,15,255"], 1),
    "mean3": (["meanfilter:3"], 1),
    "mean5": (["meanfilter:5"], 2),
    "chain": (["brightness:20", "watermark:29,15,5", "meanfilter:3", "contrast:0.5"], 1),
}


@pytest.fixture(scope="module")
def keys(he_paper4096):
    ctx, secret = he_paper4096
    return ctx, secret, symmetric.SymmetricEncryptor(ctx.public, secret, compression="zstd")


def plain_pyfhel(ctx, secret) -> Pyfhel:
    """What a program without hepix holds: Pyfhel loaded with the key files' bytes (Pyfhel 3.5 decrypts only
    once a public key is loaded too)."""
    he = Pyfhel()
    he.from_bytes_context(ctx.public.context)
    he.from_bytes_public_key(ctx.public.public_key)
    he.from_bytes_secret_key(secret)
    return he


# --- SEAL's compressed serialization ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["zstd", "zlib"])
def test_a_compressed_serialization_is_one_seal_and_pyfhel_load_as_their_own(keys, mode):
    ctx, secret, _ = keys
    values = np.arange(2048.0) % 256
    raw = ctx.encrypt_vector(values)
    packed = seal_compressed(raw, mode)
    assert seal_compression(raw) == "none" and seal_compression(packed) == mode
    assert len(packed) < 0.72 * len(raw)                      # residues of 40 and 30 bits in 64-bit words
    assert seal_compressed(packed, mode) == packed            # already so: unchanged
    loaded = PyCtxt(pyfhel=ctx._he, bytestring=packed)
    assert loaded.to_bytes(compr_mode="none") == raw          # the very ciphertext, byte for byte
    he = plain_pyfhel(ctx, secret)
    assert np.abs(he.decryptFrac(PyCtxt(pyfhel=he, bytestring=packed))[:2048] - values).max() < 1e-3


def test_only_uncompressed_seal_bytes_are_compressed(keys):
    ctx, _, _ = keys
    raw = ctx.encrypt_vector(np.zeros(4))
    with pytest.raises(MalformedCiphertext):
        seal_compressed(seal_compressed(raw, "zlib"), "zstd")
    with pytest.raises(MalformedCiphertext):
        seal_compressed(b"HPXC" + raw[4:], "zstd")
    with pytest.raises(MalformedCiphertext):
        seal_compressed(raw[:-8], "zstd")                     # the header's size no longer matches
    assert seal_compression(b"HPXC" + raw[4:]) is None and seal_compression(b"") is None


def test_what_process_writes_is_stored_as_its_input_was(keys):
    ctx, _, sym = keys
    raw = ctx.encrypt_vector(np.arange(8.0))
    zstd = seal_compressed(raw, "zstd")
    assert stored_like(raw, raw, ctx.public) == raw
    assert stored_like(raw, zstd, ctx.public) == zstd
    compact = Compactor.for_public(ctx.public).compact([raw], AtRest(level=0, primes=2, scale_bits=30))[0]
    assert stored_like(raw, compact, ctx.public)[:4] == b"HPXC"
    ev = Evaluator(ctx)
    out = ev.dump_like(ev.add_values(ev.load(zstd), 1.0), zstd)
    assert seal_compression(out) == "zstd"


# --- the planner's storage for SEAL bytes ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("layout", ["packed", "packed-complex"])
def test_seal_storage_is_the_compact_level_and_scale_without_dropping_anything(name, layout):
    ops = parse_ops(CHAINS[name][0])
    seal = at_rest(PAPER, ops, layout, store="seal", seeded=False)
    compact = at_rest(PAPER, ops, layout, seeded=False)
    assert (seal.level, seal.primes, seal.scale_bits) == (compact.level, compact.primes, compact.scale_bits) == \
        (1, 1, compact.scale_bits)
    assert (seal.drop0, seal.drop1, seal.error_bound, seal.format) == (0, 0, 0.0, "seal")
    assert AtRest.from_json(json.loads(json.dumps(seal.to_json()))) == seal
    assert at_rest_problems(PAPER, seal, ops, layout) == []


def test_a_record_without_a_format_is_the_compact_one():
    plan = at_rest(PAPER, parse_ops(["brightness:5"]), "packed-complex")
    doc = plan.to_json()
    assert "format" not in doc and AtRest.from_json(doc).format == "compact"
    with pytest.raises(MalformedCiphertext):
        AtRest.from_json({**doc, "format": "parquet"})


def test_a_chain_the_seal_storage_cannot_run_is_refused_naming_what_it_was_stored_for():
    stored = at_rest(PAPER, parse_ops(["brightness:20"]), "packed-complex", store="seal")
    with pytest.raises(InvalidParameters, match=r"stored for brightness:20 .*SEAL bytes.*--for-op"):
        check_at_rest(PAPER, stored, parse_ops(["meanfilter:5"]), "packed-complex")
    check_at_rest(PAPER, stored, parse_ops(["brightness:60"]), "packed-complex")     # fits the stored scale
    tenseal = preset("tenseal-8192")
    deep = at_rest(tenseal, [], "packed", parse_match("match:q.png,l2"), store="seal")
    assert (deep.primes, deep.scale_bits) == (2, tenseal.scale_bits)                   # the level the match spends
    with pytest.raises(InvalidParameters, match="levels and scales are planned for CKKS"):
        at_rest(preset("bfv-4096"), parse_ops(["brightness:5"]), "packed", store="seal")


@pytest.mark.parametrize("specs, params, want", [
    (["brightness:40", "watermark:1,1,255", "meanfilter:3"], "paper-4096", ("packed-complex", 1)),
    (["brightness:40"], "paper-4096", ("packed-complex", 0)),
    (["meanfilter:5"], "paper-4096", ("packed-complex", 2)),
    (["brightness:40"], "bfv-4096", ("packed", 0)),
    (["meanfilter:3"], "bfv-4096", ("packed", 1)),
])
def test_the_declared_chain_picks_complex_packing_and_the_halo_it_needs(specs, params, want):
    layout, halo = storage_layout(preset(params), parse_ops(specs))
    assert (layout.value, halo) == want


def test_a_match_or_a_frequency_filter_keeps_one_pixel_per_slot():
    assert storage_layout(preset("tenseal-8192"), parse_ops(["brightness:5"]), parse_match("match:q,l2")) == \
        (Layout.PACKED, 0)
    assert storage_layout(preset("dft-8192"), parse_ops(["dftfilter:lowpass=0.5"]))[0] is Layout.PACKED


# --- exactness: encrypt at the planned level, process, write as stored, decrypt ------------------------

def run_seal_store(ctx, inner, img, specs, halo, complex_packing):
    """encrypt (SEAL bytes at the planner's storage, zstd) -> ops on the loaded bytes -> stored like the input
    -> decrypt; the plan, the stored and the processed bytes, raw values, post_scale, finished and expected."""
    ops = parse_ops(specs)
    layout = "packed-complex" if complex_packing else "packed"
    plan = at_rest(ctx.params, ops, layout, store="seal")
    th, tw = default_tile(ctx.params, halo, complex_packing)
    ev = Evaluator(ctx)
    grid, tiles = encrypt_tiles(img, SealStoreEncryptor(inner, plan, "zstd"), th, tw, halo, complex_packing)
    out, stored, processed, ps = [], [], [], 1.0
    for t in tiles:
        stored.append(bytes(t.ct))
        geom = PackedGeometry(th, tw, halo, t.y, t.x, grid.height, grid.width, complex_packing)
        c, ps = apply_ops(ev, ev.load(t.ct), ops, geom)
        processed.append(ev.dump_like(c, t.ct))
        out.append(t.with_ct(processed[-1]))
    raw = decrypt_tiles(ctx, grid, out)
    return plan, stored, processed, raw, ps, finish_for(ops).apply(raw), reference(img, ops)


def _primes(ctx, ct) -> int:
    c = PyCtxt(pyfhel=ctx._he, bytestring=bytes(ct))
    return (len(c.to_bytes(compr_mode="none")) - 113) // (2 * ctx.params.n * 8)


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("complex_packing", [True, False], ids=["complex", "real"])
def test_public_key_ciphertexts_stored_at_q0_run_every_add_only_chain_exactly(keys, name, complex_packing):
    ctx, _, _ = keys
    specs, halo = CHAINS[name]
    img = usc_crop(GREY)
    plan, stored, processed, raw, ps, finished, expected = run_seal_store(
        ctx, PublicKeyEncryptor(ctx), img, specs, halo, complex_packing)
    assert plan.primes == 1
    for ct in stored[:2] + processed[:2]:
        assert seal_compression(ct) == "zstd" and _primes(ctx, ct) == 1
    assert np.array_equal(round_to_uint8(finished), round_to_uint8(expected)), name
    step = float(finish_for(parse_ops(specs)).step)
    assert np.abs(raw - expected / ps).max() < step / 4, name      # CKKS's own error, far below the grid


@pytest.mark.parametrize("name", ["brightness50", "mean3", "mean5", "chain"])
def test_seeded_ciphertexts_stored_at_q0_run_the_chains_exactly(keys, name):
    ctx, _, sym = keys
    specs, halo = CHAINS[name]
    img = usc_crop(COLOUR, 120, 100)
    plan, stored, processed, raw, ps, finished, expected = run_seal_store(ctx, sym, img, specs, halo, True)
    assert all(seal_compression(ct) == "zstd" for ct in stored + processed)
    assert max(map(len, stored)) < 26_000                     # c1 as its seed, one 40-bit prime, zstd
    assert np.array_equal(round_to_uint8(finished), round_to_uint8(expected)), name


def test_a_plain_pyfhel_program_decrypts_what_the_default_store_writes(keys):
    """Pyfhel and the key files only: the complex-packed tile of a q0, zstd ciphertext comes back."""
    ctx, secret, _ = keys
    img = usc_crop(GREY)
    plan = at_rest(PAPER, parse_ops(["brightness:20", "meanfilter:3"]), "packed-complex", store="seal")
    th, tw = default_tile(PAPER, 1, True)
    _, tiles = encrypt_tiles(img, SealStoreEncryptor(PublicKeyEncryptor(ctx), plan, "zstd"), th, tw, 1, True)
    tile = next(iter(tiles))
    he = plain_pyfhel(ctx, secret)
    z = np.asarray(he.decryptComplex(PyCtxt(pyfhel=he, bytestring=bytes(tile.ct))))
    hh, bw = th // 2, tw + 2
    block = z[: (hh + 2) * bw].reshape(hh + 2, bw)
    got = np.concatenate([block.real[1:1 + hh, 1:1 + tw], block.imag[1:1 + hh, 1:1 + tw]])
    h, w = min(th, img.shape[0]), min(tw, img.shape[1])
    assert np.array_equal(np.rint(got[:h, :w]), img[:h, :w])


# --- the jobs: hepix encrypt (defaults, --for-op) -> process -> decrypt, and a plain Pyfhel reader ------

SPARK = ["--master", "local[2]", "--quiet"]
DEMO_CHAIN = ["brightness:40", "watermark:10,12,255", "meanfilter:3"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from PIL import Image

    from jobs.cli import main

    root = tmp_path_factory.mktemp("sealstore")
    src = root / "in"
    src.mkdir()
    Image.fromarray(usc_crop(COLOUR, 100, 60, 70)[:40]).save(src / "rgb.png")
    Image.fromarray(usc_crop(GREY, 20, 30, 33)[:, :20]).save(src / "grey.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    pub = str(root / "pub")
    assert main(["encrypt", "--keys", pub, "--input", str(src), "--out", str(root / "enc")] + SPARK) == 0
    for_ops = [a for op in DEMO_CHAIN for a in ("--for-op", op)]
    assert main(["encrypt", "--keys", pub, "--input", str(src), "--out", str(root / "plan")] + for_ops + SPARK) == 0
    ops = [a for op in DEMO_CHAIN for a in ("--op", op)]
    assert main(["process", "--keys", pub, "--input", str(root / "plan"), "--out", str(root / "proc")] + ops
                + SPARK) == 0
    assert main(["decrypt", "--keys", str(root / "keys"), "--input", str(root / "proc"), "--out", str(root / "dec"),
                 "--owner", str(root / "plan.owner"), "--images", str(src)] + SPARK) == 0
    return root, src, main


def _table(path):
    import pyarrow.dataset as ds

    return ds.dataset(path).to_table()


def _plain_reader(root) -> Pyfhel:
    he = Pyfhel()
    he.from_bytes_context((root / "keys" / "context.bin").read_bytes())
    he.from_bytes_public_key((root / "keys" / "public.key").read_bytes())
    he.from_bytes_secret_key((root / "keys" / "secret.key").read_bytes())
    return he


@pytest.mark.spark
@pytest.mark.slow
def test_the_default_store_is_the_packed_layout_at_the_first_level_in_zstd(runs):
    root, _, _ = runs
    m = json.loads((root / "enc" / "_manifest.json").read_text())
    assert (m["layout"], m["options"]["tile"], m["options"]["settings"]["compression"]) == ("packed", [30, 62], "zstd")
    assert "store" not in m["options"]
    cts = _table(root / "enc" / "ciphertexts").column("ct").to_pylist()
    assert all(seal_compression(c) == "zstd" for c in cts) and max(map(len, cts)) < 90_000    # 131,185 uncompressed
    assert m["counts"]["ciphertext_bytes"] == sum(map(len, cts))


@pytest.mark.spark
@pytest.mark.slow
def test_a_declared_chain_is_stored_complex_packed_at_one_prime(runs):
    root, _, _ = runs
    m = json.loads((root / "plan" / "_manifest.json").read_text())
    store = AtRest.from_json(m["options"]["store"])
    assert (m["layout"], m["options"]["halo"], m["options"]["tile"]) == ("packed-complex", 1, [60, 62])
    assert (store.format, store.level, store.primes, store.chain, store.drop0) == ("seal", 1, 1, tuple(DEMO_CHAIN), 0)
    t = _table(root / "plan" / "ciphertexts")
    assert set(t.column("level").to_pylist()) == {1} and set(t.column("scale_bits").to_pylist()) == {store.scale_bits}
    assert max(len(c) for c in t.column("ct").to_pylist()) < 52_000


@pytest.mark.spark
@pytest.mark.slow
def test_the_processed_table_stays_at_one_prime_in_zstd_and_decrypts_exactly(runs):
    root, _, _ = runs
    metrics = _table(root / "dec" / "metrics").to_pylist()
    assert len(metrics) == 2
    for r in metrics:
        assert r["layout"] == "packed-complex" and r["exact_fraction"] == 1.0 and r["mse"] == 0.0, r
    cts = _table(root / "proc" / "ciphertexts").column("ct").to_pylist()
    assert all(seal_compression(c) == "zstd" for c in cts) and max(map(len, cts)) < 52_000


@pytest.mark.spark
@pytest.mark.slow
def test_the_owner_keeps_the_declared_chain_s_results_and_decrypt_checks_them(runs):
    """With the chain declared, each spot sample holds the chain's finished results at its places (a few
    bytes a place), not the pixels around them; decrypt compares every one of them."""
    from hecore import integrity

    root, _, _ = runs
    kept = _table(root / "plan.owner" / "spots").to_pylist()
    assert len(kept) == 2
    samples = [integrity.read_sample(r["spots"]) for r in kept]
    assert all(isinstance(s, integrity.ResultSample) and s.chain == "|".join(DEMO_CHAIN) for s in samples)
    assert all(len(r["spots"]) <= 21 + len("|".join(DEMO_CHAIN)) + 7 * len(s.centers)
               for r, s in zip(kept, samples))
    metrics = {r["image_id"]: r for r in _table(root / "dec" / "metrics").to_pylist()}
    for r, s in zip(kept, samples):
        assert metrics[r["image_id"]]["spot_positions"] == len(s.centers) > 0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("table", ["plan", "proc"])
def test_a_plain_pyfhel_program_decrypts_the_ct_column(runs, table):
    """Pyfhel() + the key files + PyCtxt(bytestring=...): every ciphertext of the table decrypts, to the
    image's pixels (encrypted table) or to what hepix's own decryption gives (processed table)."""
    from PIL import Image

    from hecore.seal.keys import load_secret

    root, src, _ = runs
    he = _plain_reader(root)
    ctx = load_secret(root / "keys")
    owner = {r["image_id"]: r["source"] for r in _table(root / "plan.owner" / "images").to_pylist()}
    rows = _table(root / table / "ciphertexts").to_pylist()
    assert rows
    for r in rows:
        z = np.asarray(he.decryptComplex(PyCtxt(pyfhel=he, bytestring=r["ct"])))
        if table == "proc":
            assert np.abs(z[:2048] - ctx.decrypt_complex(r["ct"], 2048)).max() < 1e-6
            continue
        halo, th, tw = r["halo"], r["tile_h"], r["tile_w"]
        hh, bw = th // 2, tw + 2 * halo
        block = z[: (hh + 2 * halo) * bw].reshape(hh + 2 * halo, bw)
        core = (slice(halo, halo + hh), slice(halo, halo + tw))
        got = np.concatenate([block.real[core], block.imag[core]])[: r["h"], : r["w"]]
        img = np.asarray(Image.open(owner[r["image_id"]].removeprefix("file:")))
        img = img[..., r["channel"]] if img.ndim == 3 else img
        assert np.array_equal(np.rint(got), img[r["y"]:r["y"] + r["h"], r["x"]:r["x"] + r["w"]])


@pytest.mark.spark
@pytest.mark.slow
def test_process_refuses_a_chain_the_planned_storage_cannot_run(runs, capsys):
    root, _, main = runs
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "plan"), "--out", str(root / "no"),
                 "--op", "meanfilter:3", "--op", "brightness:5000"] + SPARK) == 2
    assert "SEAL bytes" in capsys.readouterr().err


def test_store_flags_are_checked_before_spark_starts(tmp_path, capsys):
    from jobs.cli import main

    keys = tmp_path / "keys"
    assert main(["keygen", "--out", str(keys), "--preset", "paper-4096", "--no-rotations"]) == 0
    base = ["encrypt", "--keys", str(keys), "--input", str(tmp_path / "in"), "--out", str(tmp_path / "o")]
    cases = [(["--layout", "pixel", "--compression", "zstd"], "uncompressed"),
             (["--layout", "pixel", "--for-op", "brightness:5"], "packed layouts"),
             (["--for-op", "meanfilter:3", "--halo", "0"], "--halo 1"),
             (["--store", "compact", "--compression", "zstd"], "drop --compression"),
             (["--for-op", "brightness:5", "--for-op", "match:q.png,l2"], "--for-op")]
    for extra, said in cases:
        capsys.readouterr()
        assert main(base + extra) == 2, extra
        assert said in capsys.readouterr().err, extra
    assert not (tmp_path / "o").exists()


def test_the_settings_a_run_records(tmp_path):
    from hecore.schemes import open_keys
    from jobs.cli import build_parser, main
    from jobs.encrypt import EncryptSettings, settings_from

    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "paper-4096", "--no-rotations"]) == 0
    keys = open_keys(tmp_path / "keys", secret=True, eval_keys=False)
    parse = build_parser().parse_args
    base = ["encrypt", "--keys", "k", "--input", "i", "--out", "o"]

    def settings(*extra) -> EncryptSettings:
        return settings_from(parse(base + list(extra)), keys.public())

    plain = settings()
    assert (plain.layout, plain.halo, plain.compression, plain.store) == (Layout.PACKED, 1, "zstd", None)
    assert settings("--compression", "none").compression == "none"                  # today's bytes, uncompressed
    assert settings("--layout", "pixel").compression == "none"
    brightness = settings("--for-op", "brightness:40")
    assert (brightness.layout, brightness.halo, brightness.tile) == (Layout.PACKED_COMPLEX, 0, (64, 64))
    assert (brightness.store.format, brightness.store.primes) == ("seal", 1)
    assert settings("--for-op", "meanfilter:3", "--layout", "packed").layout is Layout.PACKED
    compact = settings("--store", "compact", "--for-op", "brightness:40")
    assert (compact.store.format, compact.compression) == ("compact", "none") and compact.store.drop0 > 0
