"""TFHE measurements: keys, encryption encodings, every op circuit, decryption, per pixel.

``measure(pixels, threads)`` returns one dict per (stage, op, variant): seconds per pixel,
bytes per pixel where there are bytes, whether the decrypted result equals the plaintext
reference, and the figure extrapolated to one 512x512 RGB image (786,432 pixel values; marked
``extrapolated``: nothing that size is run).  The pixels are a seeded random crop, so that
every nibble and carry path is taken.  Slow circuits (the 256-entry table ones) are measured on
at most ``table_pixels`` pixels; each row says how many it measured.

Run it as a script: ``python jobs/bench/suites/tfhe.py [--pixels N] [--threads T]`` prints one
JSON object per row.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
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


def _load() -> float:
    """The 1-minute load average: on a shared machine, the context a figure was measured in."""
    return os.getloadavg()[0]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _row(stage: str, op: str, variant: str, n: int, threads: int, seconds: float, **extra) -> dict:
    per = seconds / n
    row = {"stage": stage, "op": op, "variant": variant, "pixels": n, "threads": threads,
           "seconds_per_pixel": per, "ms_per_pixel": per * 1e3,
           "extrapolated_512x512x3_seconds": per * IMAGE_VALUES, "extrapolated": True,
           "peak_rss_mb": _peak_rss_mb(), "load_average_1min": _load()}
    row.update(extra)
    log.info("%s %s %s: %.2f ms/px", stage, op, variant, per * 1e3)
    return row


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def measure(pixels: int = 64, threads: int = 1, table_pixels: int = 8, variants=None) -> list[dict]:
    """Measure TFHE on ``pixels`` random pixel values with ``threads`` threads (see the module doc)."""
    native = native_module()
    rows: list[dict] = []
    (client, server, server_compressed), keygen_s = _timed(native.keygen, threads=threads)
    _, load_s = _timed(native.ServerKey, server)
    _, load_compressed_s = _timed(native.ServerKey, server_compressed)
    rows.append({"stage": "keygen", "op": "", "variant": "default", "threads": threads,
                 "keygen_seconds": keygen_s, "client_key_bytes": len(client), "server_key_bytes": len(server),
                 "compressed_server_key_bytes": len(server_compressed), "server_key_load_seconds": load_s,
                 "compressed_server_key_load_seconds": load_compressed_s, "peak_rss_mb": _peak_rss_mb(),
                 "load_average_1min": _load()})

    enc = TfheEncryptor(client, encoding="full", threads=threads)
    enc_seeded = TfheEncryptor(client, encoding="seeded", threads=threads)
    dec = TfheDecryptor(client, threads=threads)
    ev = TfheEvaluator(server, threads=threads)
    values = np.random.default_rng(20261123).integers(0, 256, pixels, dtype=np.uint8)

    cts, s = _timed(enc.encrypt_bytes, values)
    rows.append(_row("encrypt", "", "full", pixels, threads, s, bytes_per_pixel=sum(map(len, cts)) / pixels))
    seeded, s = _timed(enc_seeded.encrypt_bytes, values)
    rows.append(_row("encrypt", "", "seeded", pixels, threads, s, bytes_per_pixel=sum(map(len, seeded)) / pixels))
    blob, s = _timed(enc.encrypt_list, values, ev)
    rows.append(_row("encrypt", "", "list", pixels, threads, s, bytes_per_pixel=len(blob) / pixels))

    got, s = _timed(dec.decrypt, cts)
    rows.append(_row("decrypt", "", "full", pixels, threads, s, exact=bool(np.array_equal(got, values))))
    got, s = _timed(dec.decrypt, seeded)
    rows.append(_row("decrypt", "", "seeded", pixels, threads, s, exact=bool(np.array_equal(got, values))))
    got, s = _timed(dec.decrypt_list, blob, ev)
    rows.append(_row("decrypt", "", "list", pixels, threads, s, exact=bool(np.array_equal(got, values))))
    _, s = _timed(ev.expand, blob)
    rows.append(_row("expand", "", "list", pixels, threads, s))
    _, s = _timed(ev.apply, "brightness-wrap:0", seeded)  # identity: the cost of loading seeded input
    rows.append(_row("expand", "", "seeded", pixels, threads, s))

    for spec, circuit in variants or VARIANTS:
        op = parse_op(spec)
        n = min(pixels, table_pixels) if (circuit in _TABLE_CIRCUITS or spec.startswith("lut:")) else pixels
        out, s = _timed(ev.apply, op, cts[:n], circuit=circuit)
        exact = bool(np.array_equal(dec.decrypt(out), op.reference(values[:n])))
        rows.append(_row("op", spec, circuit, n, threads, s, exact=exact))
        if spec == "brightness:60" and circuit == "nibble":
            packed, s = _timed(ev.compress, out)
            rows.append(_row("compress", spec, "list", n, threads, s, bytes_per_pixel=len(packed) / n))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pixels", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--table-pixels", type=int, default=8)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    for row in measure(args.pixels, args.threads, args.table_pixels):
        sys.stdout.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
