"""Windows of a secret key's random material, for the tests that look for the key in what a job wrote
(not a test module).

A fixed slice of a key file proves nothing when it is not random: a 48-byte slice of zeros is found in any
Parquet file.  :func:`random_windows` keeps only windows that carry the key's randomness, so that finding
one elsewhere means the key is there, and not finding any means it is not:

* dense windows -- at least 192 distinct byte values in 512 bytes (compressed key material: SEAL's
  ``secret.key`` is zstd; 512 uniform bytes show about 221 distinct values, a serialization's structure
  far fewer);
* coefficient windows -- 64 little-endian 64-bit words, each 0, 1 or -1 (the binary and ternary secret
  coefficients of TFHE's client key and of an uncompressed SEAL key), with between 16 and 48 of them
  nonzero: 64 random coefficients, a pattern no unrelated file holds by chance.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

WIDTH = 512


def _random(window: bytes) -> bool:
    if len(set(window)) >= 192:
        return True
    words = np.frombuffer(window, dtype="<u8")
    small = (words == 0) | (words == 1) | (words == np.uint64(2**64 - 1))
    return bool(small.all()) and 16 <= int((words != 0).sum()) <= 48


def random_windows(secret: bytes, *, count: int = 8, least: int = 4) -> list[bytes]:
    """Up to ``count`` windows of :data:`WIDTH` bytes of ``secret``'s random material, spread over the key
    (a serialization's arrays start at any byte); an AssertionError when fewer than ``least`` exist (the key is not of
    a kind these tests understand: a test that looked for nothing would pass whatever the job wrote)."""
    found = []
    offset = 0
    while offset + WIDTH <= len(secret):
        window = secret[offset:offset + WIDTH]
        if _random(window):
            found.append(window)
            offset += WIDTH
        else:
            offset += 1
    assert len(found) >= least, f"only {len(found)} windows of random material in a key of {len(secret)} bytes"
    step = max(1, len(found) // count)
    return found[::step][:count]


def files_holding(secret: bytes, root: Path) -> list[Path]:
    """The files under ``root`` that hold any window of ``secret``'s random material."""
    windows = random_windows(secret)
    hits = []
    for path in sorted(Path(root).rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if any(w in data for w in windows):
                hits.append(path)
    return hits
