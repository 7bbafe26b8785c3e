"""hecore.audit: the four keyless distinguishers on 64x64 USC-SIPI crops (the attacks of the security notes in docs/security.md).

Every strategy encrypts the same crop at the paper's parameters (paper-4096); the
audit sees only the ciphertext bytes, the parameters' primes and a codec built from
the parameters -- never a key.  Pool strategies must give up >= 95% of their
equal-value classes, Zinc its exact pixel differences, fresh encryption nothing.
"""
from __future__ import annotations

import numpy as np
import pytest
from he_pipeline import usc_crop

from hecore.audit import Geometry, Verdict, audit_group, class_recovery
from hecore.audit.modp import mulmod, rank_mod
from hecore.audit.sealbytes import parse_shape
from hecore.encrypt.strategies import make_strategy
from hecore.errors import LeakyStrategyRefused
from hecore.layouts.packed import encrypt_tiles
from hecore.seal.context import PlainCodec, chain_primes
from hecore.seal.params import preset

pytestmark = pytest.mark.seconds(100)

SIZE = 64
CROPS = {"clock": ("5.1.12.tiff", 96, 96), "house": ("4.1.05.tiff", 120, 100)}   # grey; RGB (channel 1)
POOL_STRATEGIES = ["full", "scan"]
LEAKY = ["full", "scan", "radix", "radix-rand", "zinc"]


def crop_plane(name: str) -> np.ndarray:
    file, y, x = CROPS[name]
    img = usc_crop(file, y, x, SIZE)
    return img if img.ndim == 2 else img[:, :, 1]


@pytest.fixture(scope="module")
def public_side():
    """What the auditor has: the primes and a codec from the parameters alone (no key)."""
    params = preset("paper-4096")
    return chain_primes(params), PlainCodec(params)


_cache: dict = {}


@pytest.fixture
def audit(he_paper4096, public_side):
    """audit(strategy, crop) -> {test: TestVerdict}, encrypting and auditing once per pair."""
    ctx, _ = he_paper4096
    primes, codec = public_side
    rows, cols = np.divmod(np.arange(SIZE * SIZE), SIZE)

    def run(strategy: str, crop: str = "clock"):
        key = (strategy, crop)
        if key not in _cache:
            values = crop_plane(crop).reshape(-1)
            s = make_strategy(strategy, ctx, allow_leaky=strategy != "fresh").prepare(values)
            batch = s.encrypt(values)
            verdicts = audit_group(batch.data, batch.offsets, primes, codec, Geometry(rows, cols), values,
                                   np.random.default_rng(7))
            _cache[key] = {v.test: v for v in verdicts}
        return _cache[key]
    return run


# --- the must-show: leaking strategies are flagged, fresh passes ------------------------------------

@pytest.mark.parametrize("crop", list(CROPS))
def test_fresh_pixel_encryption_passes_every_test(audit, crop):
    result = audit("fresh", crop)
    assert {t: v.verdict for t, v in result.items()} == {t: Verdict.PASS for t in result}, \
        {t: v.detail for t, v in result.items()}


@pytest.mark.parametrize("strategy", LEAKY)
def test_every_leaking_strategy_is_flagged(audit, strategy):
    result = audit(strategy)
    assert any(v.verdict == Verdict.LEAKS for v in result.values()), {t: v.detail for t, v in result.items()}


@pytest.mark.parametrize("crop", list(CROPS))
@pytest.mark.parametrize("strategy", POOL_STRATEGIES)
def test_pool_attack_recovers_at_least_95_percent_of_the_equal_value_classes(audit, strategy, crop):
    v = audit(strategy, crop)["recurring-differences"]
    assert v.verdict == Verdict.LEAKS
    assert v.classes_true > 50            # a real image: many grey levels occur more than once
    assert v.recovered_fraction >= 0.95, v.detail
    assert v.picture is not None and v.picture.shape == (SIZE, SIZE)


@pytest.mark.parametrize("strategy", POOL_STRATEGIES + ["radix", "radix-rand"])
def test_cached_outputs_are_linearly_dependent_mod_the_first_prime(audit, strategy):
    v = audit(strategy)["linear-dependence"]
    assert v.verdict == Verdict.LEAKS and v.statistic < 0.5, v.detail


def test_radix_caching_is_deterministic_so_identical_classes_are_the_value_classes(audit):
    v = audit("radix")["identical"]
    assert v.verdict == Verdict.LEAKS
    assert v.recovered_fraction == 1.0


@pytest.mark.parametrize("crop", list(CROPS))
def test_zinc_outputs_give_exact_pixel_differences_by_decoding(audit, crop):
    result = audit("zinc", crop)
    v = result["small-difference"]
    assert v.verdict == Verdict.LEAKS
    assert v.exact_difference_fraction == 1.0, v.detail
    # The picture is the crop up to one offset: differences reproduce it exactly.
    plane = crop_plane(crop).astype(np.int64)
    assert np.array_equal(v.picture.astype(np.int64) - v.picture[0, 0], plane - plane[0, 0])


def test_zinc_passes_the_other_three_tests(audit):
    """Fresh errors make Zinc outputs distinct and linearly independent: only decoding catches it."""
    result = audit("zinc")
    assert [result[t].verdict for t in ("identical", "recurring-differences", "linear-dependence")] == [Verdict.PASS] * 3


# --- Zinc as a strategy ------------------------------------------------------------------------------

def test_zinc_decrypts_to_the_pixel_values(he_paper4096):
    ctx, _ = he_paper4096
    values = np.array([0, 1, 17, 128, 254, 255], dtype=np.uint8)
    batch = make_strategy("zinc", ctx, allow_leaky=True).prepare().encrypt(values)
    got = np.array([ctx.decrypt_slots(ct)[0] for ct in batch])
    assert np.max(np.abs(got - values)) < 1e-3
    assert batch.security == "leaks" and batch.strategy == "zinc"


def test_zinc_is_refused_without_allow_leaky(he_paper4096):
    with pytest.raises(LeakyStrategyRefused, match="zinc"):
        make_strategy("zinc", he_paper4096[0])


def test_zinc_outputs_of_one_value_differ(he_paper4096):
    batch = make_strategy("zinc", he_paper4096[0], allow_leaky=True).prepare().encrypt(np.array([9, 9], np.uint8))
    assert bytes(batch[0]) != bytes(batch[1])


# --- the packed layout and the building blocks -------------------------------------------------------

def test_fresh_packed_tiles_pass_every_test(he_paper4096, public_side):
    ctx, _ = he_paper4096
    primes, codec = public_side
    tiles = list(encrypt_tiles(crop_plane("clock"), ctx, 8, 8)[1])
    cts = [t.ct for t in tiles]
    data = np.frombuffer(b"".join(cts), dtype=np.uint8)
    offsets = np.r_[0, np.cumsum([len(c) for c in cts])].astype(np.int64)
    result = audit_group(data, offsets, primes, codec, rng=np.random.default_rng(1))
    assert len(cts) == 64 and all(v.verdict == Verdict.PASS for v in result), [v.detail for v in result]


def test_parse_shape_reads_a_fresh_ciphertext(he_paper4096):
    ctx, _ = he_paper4096
    shape = parse_shape(ctx.encrypt_value(3.0))
    assert (shape.size, shape.n, shape.primes, shape.scale) == (2, 4096, 2, 2.0 ** 30)
    assert shape.stride == ctx.ct_format.stride


@pytest.mark.parametrize("p", [1099511480321, 2 ** 61 - 1], ids=["double", "long-double"])
def test_mulmod_matches_python_integers(p):
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, p, 500, dtype=np.uint64), rng.integers(0, p, 500, dtype=np.uint64)
    assert [int(x) for x in mulmod(a, b, p)] == [int(x) * int(y) % p for x, y in zip(a, b)]


def test_rank_mod_sees_a_small_span():
    p = 1073692673
    rng = np.random.default_rng(0)
    basis = rng.integers(0, p, (5, 40), dtype=np.uint64)
    combos = rng.integers(0, 7, (30, 5))
    rows = np.array([[sum(int(c) * int(v) for c, v in zip(cc, col)) % p for col in basis.T] for cc in combos],
                    dtype=np.uint64)
    assert rank_mod(rows, p) == 5
    assert rank_mod(rng.integers(0, p, (30, 40), dtype=np.uint64), p) == 30


def test_identical_classes_compare_whole_rows():
    """Rows equal in the first-compared coefficients but not elsewhere are distinct; repeats share the id of
    their first occurrence; ids count classes in order of first occurrence."""
    from hecore.audit.identical import identical_classes

    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**40, (3, 64), dtype=np.uint64)
    twin = base[0].copy()
    twin[17] += np.uint64(1)                    # equal to row 0 but in one coefficient
    rows = np.stack([base[0], base[1], twin, base[0], base[2], base[1], twin])
    assert identical_classes(rows).tolist() == [0, 1, 2, 0, 3, 1, 2]
    assert identical_classes(rows[:0]).tolist() == []


def test_class_recovery_counts_only_exact_classes():
    truth = np.array([1, 1, 2, 2, 3, 3, 4])
    assert class_recovery(np.array([0, 0, 1, 1, 2, 2, 3]), truth) == (3, 1.0)
    assert class_recovery(np.array([0, 0, 1, 1, 1, 1, 3]), truth) == (3, 1 / 3)


def test_compressed_ciphertexts_are_expanded_before_the_tests(he_paper4096, public_side):
    """Layout-agnostic: zstd-compressed (or seeded) serializations are re-serialized by SEAL first."""
    from hecore.audit.sealbytes import plain_layout

    ctx, _ = he_paper4096
    primes, codec = public_side
    cts = [ctx._encrypt(np.array([float(v)])).to_bytes(compr_mode="zstd") for v in (1, 2, 3, 4)]
    cts.append(cts[0])                                  # one byte-identical repeat
    data = np.frombuffer(b"".join(cts), dtype=np.uint8)
    offsets = np.r_[0, np.cumsum([len(c) for c in cts])].astype(np.int64)
    data, offsets = plain_layout(data, offsets, preset("paper-4096"))
    assert (np.diff(offsets) == ctx.ct_format.stride).all()
    result = {v.test: v for v in audit_group(data, offsets, primes, codec, rng=np.random.default_rng(0))}
    assert result["identical"].verdict == Verdict.LEAKS and result["identical"].classes_found == 4
    assert result["linear-dependence"].verdict == Verdict.PASS


@pytest.mark.parametrize("complex_packing", [False, True], ids=["real", "complex"])
def test_fresh_symmetric_seeded_tiles_pass_every_test(he_paper4096, public_side, complex_packing):
    """The secure fast path (seeded secret-key encryption, hecore.encrypt.symmetric) passes the audit too;
    its seeded serializations are expanded by SEAL before the tests."""
    from hecore.audit.sealbytes import plain_layout
    from hecore.encrypt.symmetric import SymmetricEncryptor, available

    if not available():
        pytest.fail("the native extension hepix_seal is not installed; run `make setup`")
    ctx, _ = he_paper4096
    primes, codec = public_side
    enc = SymmetricEncryptor.from_context(ctx)
    th = 16 if complex_packing else 8                               # two 8x8 halves per ciphertext
    tiles = list(encrypt_tiles(crop_plane("clock"), enc, th, 8, complex_packing=complex_packing)[1])
    cts = [t.ct for t in tiles]
    data = np.frombuffer(b"".join(cts), dtype=np.uint8)
    offsets = np.r_[0, np.cumsum([len(c) for c in cts])].astype(np.int64)
    data, offsets = plain_layout(data, offsets, preset("paper-4096"))
    assert (np.diff(offsets) == ctx.ct_format.stride).all()            # expanded to two full components
    result = audit_group(data, offsets, primes, codec, rng=np.random.default_rng(2))
    assert len(cts) == (32 if complex_packing else 64)
    assert all(v.verdict == Verdict.PASS for v in result), [(v.test, v.detail) for v in result]
