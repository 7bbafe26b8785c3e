"""Tests of hecore.seal.params: the presets, their 128-bit bound, and (de)serialisation."""
from __future__ import annotations

import json

import pytest

from hecore.errors import InvalidParameters, WeakParameters
from hecore.seal.params import HE_STANDARD_128, PRESETS, Params, preset

PRESET_NAMES = ["paper-4096", "tenseal-8192", "addonly-2048"]


# --- the presets ------------------------------------------------------------------------

def test_the_three_presets_exist():
    assert set(PRESET_NAMES) <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_validates(name):
    p = PRESETS[name]
    assert p.validate() is p


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_stays_within_the_he_standard_128_bound(name):
    p = PRESETS[name]
    assert p.security_bits == 128
    assert p.n in HE_STANDARD_128
    assert p.total_bits <= HE_STANDARD_128[p.n]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_lookup_returns_the_preset_with_its_name(name):
    assert preset(name) is PRESETS[name]
    assert preset(name).name == name


def test_paper_4096_is_n_4096_with_the_papers_q_of_2_to_the_109():
    p = preset("paper-4096")
    assert p.n == 4096
    assert p.total_bits == 109          # iCHEETAH §4.2: Q = 2^109
    assert p.total_bits == HE_STANDARD_128[4096]


def test_tenseal_8192_is_60_40_40_60_with_scale_2_to_the_40():
    p = preset("tenseal-8192")
    assert p.n == 8192
    assert p.qi_sizes == (60, 40, 40, 60)
    assert p.scale_bits == 40


def test_addonly_2048_is_a_single_54_bit_prime():
    p = preset("addonly-2048")
    assert p.n == 2048
    assert p.qi_sizes == (54,)
    assert not p.supports_keyswitching


def test_generated_context_has_the_preset_prime_sizes(he_paper4096):
    ctx, _ = he_paper4096
    data = ctx.params.qi_sizes[: ctx.params.data_primes]
    assert [q.bit_length() for q in ctx.ct_format.primes] == list(data)
    assert ctx.ct_format.n == 4096


# --- validation ----------------------------------------------------------------------

def test_parameters_weaker_than_128_bit_raise_weak_parameters_quoting_bound_and_bits():
    weak = Params("ckks", 4096, (60, 40, 40), 40)   # 140 bits > 109
    with pytest.raises(WeakParameters) as e:
        weak.validate()
    msg = str(e.value)
    assert "109" in msg
    assert "140" in msg


def test_parameters_exactly_at_the_bound_validate():
    Params("ckks", 4096, (60, 49), 40).validate()   # 109 bits


@pytest.mark.parametrize(
    "params",
    [
        Params("bfv", 4096, (40, 30, 39), 30),        # unsupported scheme
        Params("ckks", 3000, (40, 30), 30),           # not a power of two from the table
        Params("ckks", 4096, (), 30),                 # no primes
        Params("ckks", 4096, (61, 40), 30),           # prime too large
        Params("ckks", 4096, (40, 30, 39), 40),       # scale does not fit the first data prime
        Params("ckks", 4096, (40, 30, 39), 30, security_bits=192),
    ],
    ids=["scheme", "n", "no-primes", "prime-61", "scale", "security"],
)
def test_malformed_parameters_raise_invalid_parameters(params):
    with pytest.raises(InvalidParameters):
        params.validate()


def test_unknown_preset_raises_invalid_parameters_listing_the_presets():
    with pytest.raises(InvalidParameters) as e:
        preset("paper-1024")
    msg = str(e.value)
    assert "paper-1024" in msg
    for name in PRESETS:
        assert name in msg


# --- serialisation ---------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_to_json_from_json_round_trip(name):
    p = PRESETS[name]
    doc = json.loads(json.dumps(p.to_json()))   # through real JSON text
    q = Params.from_json(doc)
    assert q == p
    assert q.name == p.name                      # name is not part of ==, check it too
    assert q.canonical_bytes() == p.canonical_bytes()


def test_from_json_of_a_malformed_record_raises_invalid_parameters():
    with pytest.raises(InvalidParameters):
        Params.from_json({"scheme": "ckks", "n": 4096})


def test_canonical_bytes_ignore_the_name():
    a = Params("ckks", 4096, (40, 30, 39), 30, name="one")
    b = Params("ckks", 4096, (40, 30, 39), 30, name="two")
    assert a.canonical_bytes() == b.canonical_bytes()
    assert a.digest() == b.digest()
    assert b"one" not in a.canonical_bytes()


def test_canonical_bytes_differ_when_the_parameters_differ():
    a = Params("ckks", 4096, (40, 30, 39), 30)
    assert a.canonical_bytes() != Params("ckks", 4096, (40, 30, 39), 29).canonical_bytes()
    assert a.canonical_bytes() != Params("ckks", 4096, (40, 39, 30), 30).canonical_bytes()
    assert a.digest() != Params("ckks", 8192, (40, 30, 39), 30).digest()
