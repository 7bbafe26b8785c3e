"""`hepix bench --suite lut`: the ratio to TFHE, the BFV rows on a real ciphertext, and the report's section."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.lutreport import lut_section
from bench.suites.lut import bfv_keys, measure_bfv, ratios


def test_ratios_divide_tfhe_by_bfv_for_the_ops_both_measured():
    rows = [{"stage": "op", "op": "threshold:128", "seconds_per_pixel": 0.09},
            {"stage": "op", "op": "min:200", "seconds_per_pixel": 0.2},
            {"stage": "bfv-lut", "op": "threshold:128", "seconds_per_pixel": 1e-4},
            {"stage": "bfv-lut", "op": "random", "seconds_per_pixel": 1e-4}]
    assert ratios(rows) == {"threshold:128": pytest.approx(900.0)}


@pytest.fixture(scope="module")
def keys():
    owner, ev, keygen_s = bfv_keys()
    assert keygen_s > 0 and ev.ctx.has_secret is False
    return owner, ev


def test_bfv_rows_are_exact_and_count_bytes_per_value(keys):
    owner, ev = keys
    values = np.random.default_rng(1).integers(0, 256, 16384).astype(np.uint8)
    rows = measure_bfv(values, ["threshold:128", "random"], owner, ev)
    assert [r["stage"] for r in rows] == ["bfv-encrypt", "bfv-lut", "bfv-lut"]
    assert rows[0]["bytes_per_pixel"] == pytest.approx(2_097_265 / 16384)          # 8 data primes, fresh
    for r in rows[1:]:
        assert r["exact"] is True and r["pixels"] == 16384 and r["noise_budget_bits"] > 0
        assert r["bytes_per_pixel"] < rows[0]["bytes_per_pixel"] / 2                 # switched down to few primes


def test_the_report_section_names_each_scheme_and_the_ratio():
    df = pd.DataFrame([
        {"stage": "op", "op": "threshold:128", "variant": "nibble", "pixels": 48, "ms_per_pixel": 90.0,
         "seconds_per_pixel": 0.09, "bytes_per_pixel": None, "exact": True, "machine": "m"},
        {"stage": "bfv-lut", "op": "threshold:128", "variant": "lut-16384", "pixels": 16384, "ms_per_pixel": 0.1,
         "seconds_per_pixel": 1e-4, "bytes_per_pixel": 32.0, "exact": True, "machine": "m"}])
    text = "\n".join(lut_section(df))
    assert "| TFHE | threshold:128 | 48 | 90.0000" in text and "| BFV lut-16384 | threshold:128 | 16384 |" in text
    assert "BFV is **900x** TFHE's time per value" in text
    assert "not measured" in "\n".join(lut_section(None))
