"""``hepix bench --suite lut``: exact 8-bit ops on packed BFV (hecore.ops.lut) against TFHE and CKKS's sign, in one run.

The same pixels for all three: a small RGB crop of scikit-image's astronaut (the tfhe suite's, 4x4: 48
values; 2x2 with ``--quick``) is measured with TFHE's default circuits, one value per ciphertext, one
thread (the table circuit on at most 4 values, as that suite does); the BFV ciphertext holds those values
first, then the rest of a larger crop of the same picture up to its 16,384 slots, so its per-value time
is the amortised one a packed image pays.  CKKS's polynomial sign (``hecore.ops.sign``) runs on the same
two samples.  Stage ``bfv-lut`` rows: the table's seconds on one full ciphertext over the values in it,
the bytes per value at rest (the ciphertext in, the table's output), exactness on every slot and the noise
budget left; stage ``bfv-image``: one 512x512 RGB image (48 ciphertexts) encrypted, thresholded and
decrypted, measured (not extrapolated; skipped with ``--quick``).  The summary prints, for every op, the
ratio of TFHE's time per value to BFV's.

Writes ``OUT/bench_lut/<run_id>.parquet`` (``bench.schemas.BENCH_LUT``).
"""
from __future__ import annotations

import logging
import time

import numpy as np

from bench.suites.tfhe import IMAGE_VALUES, bench_row, crop, load_average, measure, measure_ckks_sign, peak_rss_mb

log = logging.getLogger(__name__)

#: The ops measured in both schemes: (spec, TFHE circuit).  A chain is one table for BFV.
OPS = [("threshold:128", "nibble"), ("brightness:60", "nibble"), ("lut:gamma-0.5", "nibble")]
QUICK_OPS = [("threshold:128", "nibble"), ("brightness:60", "nibble")]
#: BFV-only tables (no TFHE row: the same polynomial cost as any full table).
BFV_ONLY = ["min:200|max:50", "random"]
PRESET = "lut-16384"
OPTIONS = frozenset()


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def _table(spec: str) -> np.ndarray:
    from hecore.ops.lut import chain_of

    if spec == "random":
        return np.random.default_rng(20261126).integers(0, 256, 256)
    return chain_of(spec.split("|"))


def bfv_keys():
    """(the owner's context, an evaluator on the public material alone) at lut-16384."""
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset

    t0 = time.perf_counter()
    owner, _secret = HEContext.generate(preset(PRESET), rotations=False)
    keygen = time.perf_counter() - t0
    return owner, Evaluator(HEContext.from_public(owner.public)), keygen


def measure_bfv(values: np.ndarray, specs, owner, ev) -> list[dict]:
    """Every table of ``specs`` on one ciphertext holding ``values`` (up to 16,384): one row each."""
    from hecore.ops.lut import evaluate_table

    values = np.asarray(values, dtype=np.uint8).reshape(-1)[:ev.slots]
    ct, enc_s = _timed(owner.encrypt_vector, values.astype(np.int64))
    rows = [bench_row("bfv-encrypt", "", PRESET, values.size, 1, enc_s, bytes_per_pixel=len(ct) / values.size)]
    for spec in specs:
        table = _table(spec)
        x = ev.load(ct)
        out, s = _timed(evaluate_table, ev, x, table)
        got = owner.decrypt_slots(out, values.size).astype(np.int64)
        rows.append(bench_row("bfv-lut", spec, PRESET, values.size, 1, s,
                              exact=bool(np.array_equal(got, table[values])),
                              bytes_per_pixel=len(ev.dump(out)) / values.size,
                              input_bytes_per_pixel=len(ct) / values.size,
                              noise_budget_bits=owner.noise_budget(out)))
    return rows


def measure_bfv_image(owner, ev, spec: str = "threshold:128") -> dict:
    """One 512x512 RGB image (astronaut) through encrypt -> ``spec`` -> decrypt, ciphertext by ciphertext,
    measured on the whole image."""
    from bench.datasets import sample
    from hecore.ops.lut import evaluate_table

    img = sample("astronaut")[:512, :512].reshape(-1)
    assert img.size == IMAGE_VALUES
    table = _table(spec)
    t_enc = t_op = t_dec = 0.0
    exact, stored = True, 0
    for start in range(0, img.size, ev.slots):
        part = img[start:start + ev.slots]
        ct, s = _timed(owner.encrypt_vector, part.astype(np.int64))
        t_enc += s
        out, s = _timed(evaluate_table, ev, ev.load(ct), table)
        t_op += s
        blob = ev.dump(out)
        stored += len(blob)
        got, s = _timed(owner.decrypt_slots, blob, part.size)
        t_dec += s
        exact &= bool(np.array_equal(got.astype(np.int64), table[part]))
    return {"stage": "bfv-image", "op": spec, "variant": PRESET, "pixels": img.size, "threads": 1,
            "seconds_per_pixel": t_op / img.size, "ms_per_pixel": t_op / img.size * 1e3,
            "extrapolated_512x512x3_seconds": t_op, "extrapolated": False, "encrypt_seconds": t_enc,
            "decrypt_seconds": t_dec, "bytes_per_pixel": stored / img.size, "exact": exact,
            "peak_rss_mb": peak_rss_mb(), "load_average_1min": load_average(), "image": "astronaut 512x512 RGB"}


def ratios(rows) -> dict[str, float]:
    """TFHE's time per value over BFV's, for every op both measured."""
    tfhe = {r["op"]: r["seconds_per_pixel"] for r in rows if r["stage"] == "op"}
    bfv = {r["op"]: r["seconds_per_pixel"] for r in rows if r["stage"] == "bfv-lut"}
    return {op: tfhe[op] / bfv[op] for op in tfhe if op in bfv and bfv[op] > 0}


def run(args) -> int:
    """``hepix bench --suite lut``: measure, write ``OUT/bench_lut/<run_id>.parquet``, print."""
    from pathlib import Path

    from bench.rows import run_columns, write_rows
    from bench.schemas import BENCH_LUT
    from jobs.runtime import runinfo
    from jobs.runtime.console import table

    run_id, started = runinfo.new_run_id(), runinfo.now()
    ops = QUICK_OPS if args.quick else OPS
    name, values = crop(2 if args.quick else 4)
    big_name, big = crop(74)                            # 16,428 values, the first 16,384 fill a ciphertext
    shared = np.concatenate([values.reshape(-1), big.reshape(-1)])
    print(f"hepix bench {run_id}: 8-bit ops, BFV {PRESET} (16,384 values per ciphertext, one core) against TFHE "
          f"(one value per ciphertext, one thread) and CKKS's sign, on {name} ({values.size} values; BFV: those "
          f"first, then {big_name}){' (quick)' if args.quick else ''}")
    rows = measure(0, threads=1, table_pixels=2 if args.quick else 4, variants=ops, values=values)
    for r in rows:
        r["image"] = name
        r["extrapolated"] = r["stage"] != "keygen"
    owner, ev, keygen_s = bfv_keys()
    rows.append({"stage": "bfv-keygen", "op": "", "variant": PRESET, "threads": 1, "keygen_seconds": keygen_s,
                 "server_key_bytes": len(owner.public.relin_key), "peak_rss_mb": peak_rss_mb(),
                 "load_average_1min": load_average()})
    bfv = measure_bfv(shared, [spec for spec, _ in ops] + ([] if args.quick else BFV_ONLY), owner, ev)
    for r in bfv:
        r["image"], r["extrapolated"] = f"{name} + {big_name}", False
    rows += bfv
    rows += measure_ckks_sign([(name, values), (big_name, big)],
                              variants=[("f3", "dft-8192")] if args.quick else None)
    if not args.quick:
        rows.append(measure_bfv_image(owner, ev))
    path = write_rows(rows, BENCH_LUT, Path(args.out) / "bench_lut", run_id, run_columns(run_id, started))
    shown = [r for r in rows if r["stage"] in ("op", "bfv-lut", "bfv-image", "ckks-sign", "bfv-encrypt", "encrypt")]
    print(table(shown, [("stage", "stage", ""), ("op", "op", ""), ("variant", "variant", ""),
                        ("pixels", "values", "d"), ("ms_per_pixel", "ms/value", ".4f"),
                        ("bytes_per_pixel", "bytes/value", ",.1f"), ("exact", "exact", ""),
                        ("off_fraction", "off by >0.5", ".2%"), ("noise_budget_bits", "budget left", "")]))
    for op, ratio in ratios(rows).items():
        print(f"{op}: BFV {PRESET} is {ratio:,.0f}x TFHE's time per value")
    for r in (r for r in rows if r["stage"] == "bfv-image"):
        print(f"one 512x512 RGB image, {r['op']} on BFV: {r['extrapolated_512x512x3_seconds']:.0f} s "
              f"(+ encrypt {r['encrypt_seconds']:.1f} s, decrypt {r['decrypt_seconds']:.1f} s), measured; "
              f"{r['bytes_per_pixel']:.1f} bytes per value stored; exact: {r['exact']}")
    print(f"load average {load_average():.1f}\n\nwrote {path}")
    return 0 if all(r.get("exact", True) is not False for r in rows if r["stage"] != "ckks-sign") else 1
