"""Exact 8-bit tables on packed BFV (hecore.ops.lut): the interpolation polynomial over F_65537 and its
evaluation on lut-16384 ciphertexts, checked on every one of the 256 inputs.

The keys (N = 16384) are made once for the module; the tables run with the public material and the
relinearisation key only, and the owner's context decrypts and measures the noise budget left.
"""
from __future__ import annotations

import numpy as np
import pytest

from hecore.ops.lut import (
    LUT_MODULUS,
    check_table,
    evaluate_polynomial_plain,
    evaluate_table,
    schedule,
    table_polynomial,
)
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset
from hecore.tfhe.ops import Lut, chain_table, parse_op

NAMED = ["threshold:128", "brightness:60", "brightness:-60", "min:100", "max:100", "lut:gamma-0.5",
         "lut:stretch-30-200", "lut:invert", "brightness-wrap:100", "threshold:0"]
CHAINS = ["brightness:60|threshold:200", "lut:gamma-2.2|min:200|max:20"]


def _table(spec: str) -> np.ndarray:
    return chain_table([parse_op(s) for s in spec.split("|")])


def _random_tables(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, 256) for _ in range(n)]


@pytest.fixture(scope="module")
def lut_keys():
    """(the owner's context, an evaluator on the public material alone) at lut-16384."""
    owner, _secret = HEContext.generate(preset("lut-16384"), rotations=False)
    public = HEContext.from_public(owner.public)
    assert not public.has_secret and public.public.relin_key is not None and public.public.rotate_key is None
    return owner, Evaluator(public)


@pytest.fixture(scope="module")
def all_inputs(lut_keys):
    """Every 8-bit value, repeated over the 16384 slots in a shuffled order, encrypted once."""
    owner, _ev = lut_keys
    rng = np.random.default_rng(7)
    x = rng.permutation(np.tile(np.arange(256), 16384 // 256))
    return x, owner.encrypt_vector(x)


# --- the polynomial (plaintext, every table) -------------------------------------------------------

@pytest.mark.parametrize("spec", NAMED + CHAINS)
def test_polynomial_maps_every_input_of_a_named_table(spec):
    table = _table(spec)
    coeffs = table_polynomial(table)
    assert len(coeffs) == 256 and all(0 <= a < LUT_MODULUS for a in coeffs)
    assert np.array_equal(evaluate_polynomial_plain(coeffs, np.arange(256)), table)


def test_polynomial_maps_every_input_of_random_tables():
    for table in _random_tables(5, seed=11):
        assert np.array_equal(evaluate_polynomial_plain(table_polynomial(table), np.arange(256)), table)


def test_polynomial_of_simple_tables_has_their_degree():
    assert table_polynomial(np.arange(256))[:2] == (0, 1) and not any(table_polynomial(np.arange(256))[2:])
    invert = table_polynomial(255 - np.arange(256))
    assert invert[0] == 255 and invert[1] == LUT_MODULUS - 1 and not any(invert[2:])
    assert table_polynomial(np.full(256, 9)) == (9,) + (0,) * 255


def test_bad_tables_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="256 integers"):
        check_table(np.arange(255))
    with pytest.raises(ValueError, match="0..255; got 0..256"):
        check_table(np.arange(257)[1:] * (np.arange(256) > 0))
    with pytest.raises(ValueError, match="above 255"):
        table_polynomial(np.arange(256), t=251)


def test_schedule_of_a_full_table():
    s = schedule(255)
    assert (s.k, s.blocks, s.depth, s.multiplications) == (16, 16, 8, 33)
    assert schedule(1).depth == 0 and schedule(3).multiplications == 2


# --- on ciphertexts ----------------------------------------------------------------------------

def _run(lut_keys, all_inputs, table):
    owner, ev = lut_keys
    x, ct = all_inputs
    out = evaluate_table(ev, ev.load(ct), table)
    got = owner.decrypt_slots(out, 16384).astype(np.int64) % LUT_MODULUS
    return got, x, owner.noise_budget(out)


@pytest.mark.parametrize("spec", ["threshold:128", "brightness:60", "lut:gamma-0.5", "min:100",
                                  "lut:invert", "threshold:0", CHAINS[1]])
def test_encrypted_table_is_exact_on_every_input(lut_keys, all_inputs, spec):
    table = _table(spec)
    got, x, budget = _run(lut_keys, all_inputs, table)
    assert np.array_equal(got, table[x]), f"{spec}: {np.count_nonzero(got != table[x])} slots wrong"
    assert budget > 0


def test_encrypted_random_tables_are_exact_with_budget_left(lut_keys, all_inputs):
    for table in _random_tables(2, seed=5):
        got, x, budget = _run(lut_keys, all_inputs, table)
        assert np.array_equal(got, table[x])
        assert budget >= 8, f"only {budget} bits of noise budget left after a full table"


def test_a_hex_lut_runs_as_its_table(lut_keys, all_inputs):
    table = _random_tables(1, seed=3)[0]
    op = Lut.from_table(table)
    got, x, _ = _run(lut_keys, all_inputs, op.table())
    assert np.array_equal(got, table[x])


def test_tables_need_bfv_keys(he_addonly2048):
    ctx, _ = he_addonly2048
    ev = Evaluator(ctx)
    with pytest.raises(ValueError, match="BFV keys"):
        evaluate_table(ev, None, np.arange(256))
