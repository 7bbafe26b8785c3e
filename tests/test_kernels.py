"""Tests of hecore.seal.kernels against a plain NumPy/Python reference on synthetic data.

Row layout of a table (one ciphertext per row), for primes q0, q1 and ring degree n::

    [component 0: q0 (n coeffs), q1 (n coeffs) | component 1: q0 (n coeffs), q1 (n coeffs)]

so block ``blk`` (0 .. 2P-1) is reduced modulo ``q[blk % P]``.  Every output
ciphertext is the header followed by the row's little-endian uint64 words, at
``dst[m] * stride`` with ``stride = len(header) + 8 * words``.
"""
from __future__ import annotations

import numpy as np
import pytest

from hecore.seal.kernels import copy_rows, gather_add, linear_combination


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime_below(bound: int) -> int:
    p = bound - 1
    while not _is_prime(p):
        p -= 1
    return p


N = 8
PRIMES = (_prime_below(2**40), _prime_below(2**30))        # storage order, like SEAL's
BIG_PRIMES = (_prime_below(2**60), _prime_below(2**59))     # the largest sizes SEAL allows
HEADER_LEN = 13   # odd on purpose: the coefficients after it are not 8-byte aligned


def _q(primes) -> np.ndarray:
    return np.array(primes, dtype=np.uint64)


def _words(primes) -> int:
    return 2 * len(primes) * N


def _stride(primes) -> int:
    return HEADER_LEN + 8 * _words(primes)


def _moduli(primes) -> np.ndarray:
    """The modulus of every word of a row, as Python ints (object array)."""
    blocks = [primes[b % len(primes)] for b in range(2 * len(primes))]
    return np.array([q for q in blocks for _ in range(N)], dtype=object)


def _random_rows(rng, count, primes) -> np.ndarray:
    """``count`` rows whose coefficients are uniform below the prime of their block."""
    mod = _moduli(primes)
    rows = np.empty((count, len(mod)), dtype=np.uint64)
    for i in range(count):
        rows[i] = [int(rng.integers(0, q, dtype=np.uint64)) for q in mod]
    return rows


def _header(rng) -> np.ndarray:
    return rng.integers(0, 256, size=HEADER_LEN, dtype=np.uint8)


def _sentinel_out(slots, primes) -> np.ndarray:
    return np.full(slots * _stride(primes), 0xA5, dtype=np.uint8)


def _slot(out, slot, primes) -> tuple[bytes, np.ndarray]:
    """(header bytes, coefficient words) of output slot ``slot``."""
    stride = _stride(primes)
    raw = out[slot * stride:(slot + 1) * stride].tobytes()
    return raw[:HEADER_LEN], np.frombuffer(raw[HEADER_LEN:], dtype="<u8")


def _as_ints(row) -> np.ndarray:
    return np.array([int(x) for x in row], dtype=object)


# --- fixtures of test data --------------------------------------------------------------

@pytest.fixture(params=[PRIMES, BIG_PRIMES], ids=["q40-q30", "q60-q59"])
def primes(request):
    return request.param


def test_synthetic_primes_are_primes_of_the_intended_sizes():
    assert [q.bit_length() for q in PRIMES] == [40, 30]
    assert [q.bit_length() for q in BIG_PRIMES] == [60, 59]
    assert all(_is_prime(q) for q in PRIMES + BIG_PRIMES)


# --- gather_add ---------------------------------------------------------------------------

def test_gather_add_matches_the_reference(primes):
    rng = np.random.default_rng(1)
    table = _random_rows(rng, 5, primes)
    pool = _random_rows(rng, 3, primes)
    header = _header(rng)
    rows = np.array([4, 0, 2, 2, 1, 3], dtype=np.int64)
    pool_rows = np.array([1, 2, 0, 0, 2, 1], dtype=np.int64)
    dst = np.array([3, 0, 5, 1, 4, 2], dtype=np.int64)       # slots not in order
    out = _sentinel_out(6, primes)
    scratch = np.empty(_words(primes), dtype=np.uint64)

    gather_add(out, dst, header, table, rows, pool, pool_rows, _q(primes), N, scratch)

    mod = _moduli(primes)
    for m in range(len(rows)):
        hdr, words = _slot(out, dst[m], primes)
        expected = (_as_ints(table[rows[m]]) + _as_ints(pool[pool_rows[m]])) % mod
        assert hdr == header.tobytes(), f"header of output {m} (slot {dst[m]})"
        assert list(_as_ints(words)) == list(expected), f"output {m} (slot {dst[m]})"


def test_gather_add_reduces_sums_at_the_top_of_the_range(primes):
    # q-1 + q-1 = 2q-2: the largest sum, must come out as q-2
    mod = _moduli(primes)
    top = np.array([[q - 1 for q in mod]], dtype=np.uint64)
    out = _sentinel_out(1, primes)
    header = np.zeros(HEADER_LEN, dtype=np.uint8)
    idx = np.zeros(1, dtype=np.int64)
    gather_add(out, idx, header, top, idx, top, idx, _q(primes), N,
               np.empty(_words(primes), dtype=np.uint64))
    _, words = _slot(out, 0, primes)
    assert list(_as_ints(words)) == [q - 2 for q in mod]


def test_gather_add_writes_only_the_listed_slots():
    rng = np.random.default_rng(2)
    table = _random_rows(rng, 2, PRIMES)
    header = _header(rng)
    out = _sentinel_out(5, PRIMES)
    dst = np.array([3, 1], dtype=np.int64)
    idx = np.array([0, 1], dtype=np.int64)
    gather_add(out, dst, header, table, idx, table, idx, _q(PRIMES), N,
               np.empty(_words(PRIMES), dtype=np.uint64))
    stride = _stride(PRIMES)
    for untouched in (0, 2, 4):
        assert np.all(out[untouched * stride:(untouched + 1) * stride] == 0xA5)


# --- linear_combination ---------------------------------------------------------------------

def test_linear_combination_matches_the_reference_with_negative_coefficients(primes):
    rng = np.random.default_rng(3)
    table = _random_rows(rng, 4, primes)
    header = _header(rng)
    coefs = np.array([
        [1, 0, 0, 0],
        [0, 2, -1, 0],
        [3, -2, 1, -4],
        [0, 0, 0, 0],          # all zero: the zero ciphertext body
        [-1, -1, -1, -1],
        [0, 15, 0, -16],       # radix-16-sized digits
    ], dtype=np.int16)
    dst = np.array([2, 5, 0, 4, 1, 3], dtype=np.int64)
    out = _sentinel_out(len(coefs), primes)
    scratch = np.empty(_words(primes), dtype=np.uint64)

    linear_combination(out, dst, header, table, coefs, _q(primes), N, scratch)

    mod = _moduli(primes)
    for m in range(len(coefs)):
        expected = np.zeros(len(mod), dtype=object)
        for k in range(table.shape[0]):
            expected = expected + int(coefs[m, k]) * _as_ints(table[k])
        expected = expected % mod           # Python's % is the non-negative residue
        hdr, words = _slot(out, dst[m], primes)
        assert hdr == header.tobytes(), f"header of output {m} (slot {dst[m]})"
        assert list(_as_ints(words)) == list(expected), f"coefficients {coefs[m].tolist()}"


def test_linear_combination_of_minus_a_zero_row_is_zero():
    # subtracting a zero coefficient adds q - 0 = q, which must reduce to 0, not stay q
    table = np.zeros((1, _words(PRIMES)), dtype=np.uint64)
    out = _sentinel_out(1, PRIMES)
    linear_combination(out, np.zeros(1, dtype=np.int64), np.zeros(HEADER_LEN, dtype=np.uint8),
                       table, np.array([[-3]], dtype=np.int16), _q(PRIMES), N,
                       np.empty(_words(PRIMES), dtype=np.uint64))
    _, words = _slot(out, 0, PRIMES)
    assert not words.any()


def test_linear_combination_cancels_a_row_and_its_negation():
    rng = np.random.default_rng(4)
    row = _random_rows(rng, 1, PRIMES)
    table = np.concatenate([row, row])          # the same ciphertext twice
    out = _sentinel_out(1, PRIMES)
    linear_combination(out, np.zeros(1, dtype=np.int64), np.zeros(HEADER_LEN, dtype=np.uint8),
                       table, np.array([[5, -5]], dtype=np.int16), _q(PRIMES), N,
                       np.empty(_words(PRIMES), dtype=np.uint64))
    _, words = _slot(out, 0, PRIMES)
    assert not words.any()


# --- copy_rows -------------------------------------------------------------------------

def test_copy_rows_matches_the_reference():
    rng = np.random.default_rng(5)
    table = _random_rows(rng, 4, PRIMES)
    header = _header(rng)
    rows = np.array([3, 3, 0, 1], dtype=np.int64)
    dst = np.array([1, 3, 0, 2], dtype=np.int64)
    out = _sentinel_out(4, PRIMES)

    copy_rows(out, dst, header, table, rows)

    for m in range(len(rows)):
        hdr, words = _slot(out, dst[m], PRIMES)
        assert hdr == header.tobytes()
        assert np.array_equal(words, table[rows[m]])


def test_copy_rows_output_is_header_then_little_endian_words_at_every_stride():
    rng = np.random.default_rng(6)
    table = _random_rows(rng, 3, PRIMES)
    header = _header(rng)
    out = _sentinel_out(3, PRIMES)
    copy_rows(out, np.arange(3, dtype=np.int64), header, table, np.arange(3, dtype=np.int64))
    expected = b"".join(header.tobytes() + table[i].astype("<u8").tobytes() for i in range(3))
    assert out.tobytes() == expected
