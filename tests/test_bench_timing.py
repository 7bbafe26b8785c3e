"""The encryption split the benchmarks time, on the core's plain encode / encrypt methods."""
from __future__ import annotations

import numpy as np
import pytest

from bench.timing import median, split_encryption
from hecore.errors import HepixError
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset


@pytest.fixture(scope="module", params=["paper-4096", "bfv-4096"])
def keys(request):
    ctx, _secret = HEContext.generate(preset(request.param), rotations=False)
    return ctx, Evaluator(ctx)


def test_encode_then_encrypt_is_an_encryption_of_the_values(keys):
    ctx, _ev = keys
    values = np.arange(16, dtype=np.float64)
    data = ctx.encrypt_encoded(ctx.encode_vector(values))
    assert len(data) == len(ctx.encrypt_vector(values))
    np.testing.assert_allclose(ctx.decrypt_slots(data, 16), values, atol=1e-4)


def test_complex_values_encode_in_ckks_only(keys):
    ctx, _ev = keys
    z = np.array([1 + 2j, 3 - 4j])
    if ctx.params.is_integer:
        with pytest.raises(HepixError, match="complex slots need CKKS"):
            ctx.encode_vector(z)
        return
    np.testing.assert_allclose(ctx.decrypt_complex(ctx.encrypt_encoded(ctx.encode_vector(z)), 2), z, atol=1e-4)


def test_the_split_accounts_for_one_ciphertext(keys):
    ctx, ev = keys
    values = np.full(ctx.params.slots, 7.0)
    split = split_encryption(ctx, ev, values)
    assert split.nbytes == len(ctx.encrypt_vector(values))
    assert min(split.encode, split.encrypt, split.serialize) >= 0 and split.encode > 0 and split.serialize > 0
    assert split.total == pytest.approx(split.encode + split.encrypt + split.serialize)


def test_the_core_has_no_timing_methods():
    assert not hasattr(HEContext, "encrypt_vector_timed") and not hasattr(HEContext, "encode_seconds")


def test_median_skips_missing_values():
    assert median([3.0, None, 1.0, 2.0]) == 2.0 and median([None]) is None
