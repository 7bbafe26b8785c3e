"""``hepix bench --suite tfhe``: TFHE (hecore.tfhe over tfhe-rs) per pixel value, on a measured crop.

``measure(pixels, threads, values=...)`` returns one dict per (stage, op, variant): seconds per
pixel value, bytes per pixel value where there are bytes, whether the decrypted result equals the
plaintext reference, the peak RSS of this process so far, and the figure extrapolated to one
512x512 RGB image (786,432 pixel values; marked ``extrapolated``: nothing that size is run).
:func:`run` (the suite) measures a crop of scikit-image's astronaut (8x8 RGB, 192 values; 2x2 RGB
with ``--quick``) -- encrypt in every encoding, brightness +60 (saturating) and the other ops with
the default circuit, decrypt -- on one thread, and writes ``OUT/bench_tfhe/<run_id>.parquet``
(``bench.schemas.BENCH_TFHE``); `hepix report` sets its encrypt / +60 / decrypt next to the
TenSEAL study's TFHE figures.  Slow circuits (the 256-entry table ones) are measured on at most
``table_pixels`` values; each row says how many it measured.

Next to TFHE's exact ``threshold:128``, :func:`measure_ckks_sign` measures CKKS's arithmetic stand-in
(``hecore.ops.sign``: a composite polynomial of the sign, ``f3`` on ``dft-8192``, ``f3.f1`` on
``dft-16384``; only ``f3`` on ``dft-8192`` with ``--quick``) on the same crop and on a sample that fills
one ciphertext's slots (a 64x64 RGB crop of astronaut cut to 4,096 / 8,192 values), so that its per-value
cost is the amortised one a packed image pays: stage ``ckks-sign``, variant ``steps@preset``, the time of
the polynomial on the ciphertext over the values in it, and its error against the exact mask.

With ``--pixels N`` the suite measures ``N`` seeded random values instead (every nibble and carry
path) with every circuit (:data:`VARIANTS`), the table circuits on at most ``--table-pixels`` of
them (default 8), on ``--threads`` threads (default 1), and no ``ckks-sign`` rows.
"""
from __future__ import annotations

import logging
import os
import resource
import time

import numpy as np

from hecore.tfhe.decryptor import TfheDecryptor
from hecore.tfhe.encryptor import TfheEncryptor
from hecore.tfhe.evaluator import TfheEvaluator
from hecore.tfhe.native import native_module
from hecore.tfhe.ops import parse_op

log = logging.getLogger(__name__)

#: Pixel values of one 512x512 RGB image.
IMAGE_VALUES = 512 * 512 * 3

#: (op spec, circuit) pairs measured; the first circuit of each op is the default (nibble).
VARIANTS = [
    ("brightness:60", "nibble"), ("brightness:60", "tfhe-rs"), ("brightness:60", "tfhe-rs-min-add"),
    ("brightness:60", "table"), ("brightness:60", "tfhe-rs-table"),
    ("brightness:-60", "nibble"), ("brightness:-60", "tfhe-rs"),
    ("brightness-wrap:60", "nibble"), ("brightness-wrap:60", "tfhe-rs"), ("brightness-wrap:60", "table"),
    ("threshold:128", "nibble"), ("threshold:128", "tfhe-rs"), ("threshold:128", "table"),
    ("min:200", "nibble"), ("min:200", "tfhe-rs"),
    ("max:50", "nibble"), ("max:50", "tfhe-rs"),
    ("lut:gamma-0.5", "nibble"), ("lut:gamma-0.5", "tfhe-rs-table"),
    ("lut:stretch-64-191", "nibble"), ("lut:invert", "nibble"),
]
_TABLE_CIRCUITS = ("table", "tfhe-rs-table")


def load_average() -> float:
    """The 1-minute load average: on a shared machine, the context a figure was measured in."""
    return os.getloadavg()[0]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_row(stage: str, op: str, variant: str, n: int, threads: int, seconds: float, **extra) -> dict:
    per = seconds / n
    row = {"stage": stage, "op": op, "variant": variant, "pixels": n, "threads": threads,
           "seconds_per_pixel": per, "ms_per_pixel": per * 1e3,
           "extrapolated_512x512x3_seconds": per * IMAGE_VALUES, "extrapolated": True,
           "peak_rss_mb": peak_rss_mb(), "load_average_1min": load_average()}
    row.update(extra)
    log.info("%s %s %s: %.2f ms/px", stage, op, variant, per * 1e3)
    return row


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def measure(pixels: int = 64, threads: int = 1, table_pixels: int = 8, variants=None, values=None) -> list[dict]:
    """Measure TFHE on ``values`` (uint8, any shape; default: ``pixels`` seeded random values) with
    ``threads`` threads (see the module doc)."""
    native = native_module()
    rows: list[dict] = []
    (client, server, server_compressed, _public), keygen_s = _timed(native.keygen, threads=threads)
    _, load_s = _timed(native.ServerKey, server)
    _, load_compressed_s = _timed(native.ServerKey, server_compressed)
    rows.append({"stage": "keygen", "op": "", "variant": "default", "threads": threads,
                 "keygen_seconds": keygen_s, "client_key_bytes": len(client), "server_key_bytes": len(server),
                 "compressed_server_key_bytes": len(server_compressed), "server_key_load_seconds": load_s,
                 "compressed_server_key_load_seconds": load_compressed_s, "peak_rss_mb": peak_rss_mb(),
                 "load_average_1min": load_average()})

    enc = TfheEncryptor(client, encoding="full", threads=threads)
    enc_seeded = TfheEncryptor(client, encoding="seeded", threads=threads)
    dec = TfheDecryptor(client, threads=threads)
    ev = TfheEvaluator(server, threads=threads)
    if values is None:
        values = np.random.default_rng(20261123).integers(0, 256, pixels, dtype=np.uint8)
    values = np.ascontiguousarray(values, dtype=np.uint8).reshape(-1)
    pixels = values.size

    cts, s = _timed(enc.encrypt_bytes, values)
    rows.append(bench_row("encrypt", "", "full", pixels, threads, s, bytes_per_pixel=sum(map(len, cts)) / pixels))
    seeded, s = _timed(enc_seeded.encrypt_bytes, values)
    rows.append(bench_row("encrypt", "", "seeded", pixels, threads, s, bytes_per_pixel=sum(map(len, seeded)) / pixels))
    blob, s = _timed(enc.encrypt_list, values, ev)
    rows.append(bench_row("encrypt", "", "list", pixels, threads, s, bytes_per_pixel=len(blob) / pixels))

    got, s = _timed(dec.decrypt, cts)
    rows.append(bench_row("decrypt", "", "full", pixels, threads, s, exact=bool(np.array_equal(got, values))))
    got, s = _timed(dec.decrypt, seeded)
    rows.append(bench_row("decrypt", "", "seeded", pixels, threads, s, exact=bool(np.array_equal(got, values))))
    got, s = _timed(dec.decrypt_list, blob, ev)
    rows.append(bench_row("decrypt", "", "list", pixels, threads, s, exact=bool(np.array_equal(got, values))))
    _, s = _timed(ev.expand, blob)
    rows.append(bench_row("expand", "", "list", pixels, threads, s))
    _, s = _timed(ev.apply, "brightness-wrap:0", seeded)  # identity: the cost of loading seeded input
    rows.append(bench_row("expand", "", "seeded", pixels, threads, s))

    for spec, circuit in variants or VARIANTS:
        op = parse_op(spec)
        n = min(pixels, table_pixels) if (circuit in _TABLE_CIRCUITS or op.native_op == "table") else pixels
        out, s = _timed(ev.apply, op, cts[:n], circuit=circuit)
        exact = bool(np.array_equal(dec.decrypt(out), op.reference(values[:n])))
        rows.append(bench_row("op", spec, circuit, n, threads, s, exact=exact))
        if spec == "brightness:60" and circuit == "nibble":
            packed, s = _timed(ev.compress, out)
            rows.append(bench_row("compress", spec, "list", n, threads, s, bytes_per_pixel=len(packed) / n))
    return rows


#: CKKS's polynomial stand-in for threshold:T (hecore.ops.sign): (sign steps, preset), each the deepest
#: composite the preset's levels afford (dft-8192: 4 levels, f3 plus the normalisation; dft-16384: 6, f3.f1).
SIGN_VARIANTS = [("f3", "dft-8192"), ("f3.f1", "dft-16384")]
QUICK_SIGN_VARIANTS = [("f3", "dft-8192")]
SIGN_THRESHOLD = 128


def measure_ckks_sign(samples, threshold: int = SIGN_THRESHOLD, variants=None) -> list[dict]:
    """CKKS's approximate ``threshold:T`` on each ``(name, uint8 values)`` of ``samples``, with each
    (steps, preset) of ``variants``: one row per (sample, variant) with the seconds per pixel value of
    the polynomial on the packed ciphertext (encryption and decryption not counted; a sample larger than
    the slots is cut to one ciphertext's worth, the name says so) and its error against the exact mask
    (``hecore.ops.sign.mask_errors``) and against the same polynomial in float64."""
    from bench.contexts import Keys
    from hecore.ops.sign import approx_sign_mask, mask_errors, plain_sign_mask, steps_name

    keys = Keys(rotations=False)
    rows = []
    for steps, preset_name in variants or SIGN_VARIANTS:
        ctx, ev = keys.get(preset_name)
        for name, values in samples:
            values = np.asarray(values, dtype=np.uint8).reshape(-1)
            if values.size > ev.slots:
                name, values = f"{name}, first {ev.slots} values", values[:ev.slots]
            ct = ev.load(ctx.encrypt_vector(values.astype(np.float64)))
            out, s = _timed(approx_sign_mask, ev, ct, threshold, steps)
            mask = ctx.decrypt_slots(out, values.size)
            errs = mask_errors(mask, values, threshold)
            poly = float(np.abs(mask - plain_sign_mask(values, threshold, steps)).max())
            rows.append(bench_row("ckks-sign", f"threshold:{threshold}", f"{steps_name(steps)}@{preset_name}",
                             values.size, 1, s, image=name, preset=preset_name, exact=None,
                             max_err_vs_polynomial=poly, **errs.__dict__))
        keys.drop(preset_name)
    return rows


#: The suite's ops (default circuit); brightness:60 is the TenSEAL study's +60, with saturation.
SUITE_VARIANTS = [("brightness:60", "nibble"), ("brightness-wrap:60", "nibble"), ("threshold:128", "nibble"),
                  ("min:200", "nibble"), ("max:50", "nibble"), ("lut:gamma-0.5", "nibble")]
QUICK_VARIANTS = [("brightness:60", "nibble"), ("threshold:128", "nibble")]
#: The options of ``hepix bench`` this suite reads besides --out and --quick.
OPTIONS = frozenset({"pixels", "table_pixels", "threads"})
#: ``--table-pixels`` unless given: on the crop, and with ``--pixels``.
TABLE_PIXELS, RANDOM_TABLE_PIXELS = 4, 8


def crop(side: int) -> tuple[str, np.ndarray]:
    """A ``side`` x ``side`` RGB crop of scikit-image's astronaut (bright and dark parts: +60 saturates some)."""
    from bench.datasets import sample

    y, x = 32, 400
    pixels = np.ascontiguousarray(sample("astronaut")[y:y + side, x:x + side])
    return f"astronaut[{y}:{y + side},{x}:{x + side}]", pixels


def run(args) -> int:
    """``hepix bench --suite tfhe``: measure, write ``OUT/bench_tfhe/<run_id>.parquet``, print."""
    from pathlib import Path

    from bench.rows import run_columns, write_rows
    from bench.schemas import BENCH_TFHE
    from jobs.runtime import runinfo
    from jobs.runtime.console import table

    run_id, started = runinfo.new_run_id(), runinfo.now()
    threads = args.threads or 1
    if args.pixels:
        name, values, variants = "seeded random values", None, VARIANTS
        table_pixels = args.table_pixels or RANDOM_TABLE_PIXELS
    else:
        (name, values), variants = crop(2 if args.quick else 8), QUICK_VARIANTS if args.quick else SUITE_VARIANTS
        table_pixels = args.table_pixels or (2 if args.quick else TABLE_PIXELS)
    count = args.pixels or values.size
    print(f"hepix bench {run_id}: TFHE ({native_module().TFHE_RS_VERSION}) on {name} ({count} pixel values), "
          f"{'one thread' if threads == 1 else f'{threads} threads'}{' (quick)' if args.quick else ''}; "
          "per pixel value, extrapolated to 512x512 RGB")
    rows = measure(args.pixels or 0, threads=threads, table_pixels=table_pixels, variants=variants, values=values)
    for r in rows:
        r["image"] = name
        if r["stage"] == "keygen":
            r["extrapolated"] = False
    if not args.pixels:
        # the same crop in one ciphertext (its slots mostly empty: the cost is not amortised), then a sample
        # that fills a ciphertext's slots (the per-value cost a packed image pays)
        big_name, big = crop(64)
        rows += measure_ckks_sign([(name, values), (big_name, big)],
                                  variants=QUICK_SIGN_VARIANTS if args.quick else SIGN_VARIANTS)
    path = write_rows(rows, BENCH_TFHE, Path(args.out) / "bench_tfhe", run_id, run_columns(run_id, started))
    shown = [r for r in rows if r["stage"] != "keygen"]
    print(table(shown, [("stage", "stage", ""), ("op", "op", ""), ("variant", "variant", ""), ("pixels", "values", "d"),
                        ("ms_per_pixel", "ms/value", ".2f"), ("extrapolated_512x512x3_seconds", "512x512x3 s (extrap.)",
                                                                  ",.0f"),
                        ("bytes_per_pixel", "bytes/value", ",.0f"), ("exact", "exact", ""),
                        ("peak_rss_mb", "peak MiB", ",.0f")]))
    key = rows[0]
    print(f"keygen {key['keygen_seconds']:.1f} s; server key {key['server_key_bytes']:,} bytes "
          f"({key['compressed_server_key_bytes']:,} compressed), client key {key['client_key_bytes']:,} bytes")
    for r in (r for r in rows if r["stage"] == "ckks-sign"):
        print(f"ckks-sign {r['variant']} on {r['image']} ({r['pixels']} values): {r['ms_per_pixel']:.4f} ms/value; "
              f"max |err| {r['max_abs_err']:.1f}, wrong side {r['wrong_side_fraction']:.2%}, off by > 0.5 "
              f"{r['off_fraction']:.2%} ({r['near_off_fraction']:.2%} within {r['near_band']} of T; right beyond "
              f"|p - T + 1/2| > {r['off_band']:.1f})")
    print(f"\nwrote {path}")
    return 0 if all(r.get("exact", True) is not False for r in rows) else 1

