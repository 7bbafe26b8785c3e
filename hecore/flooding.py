"""Noise flooding of decrypted CKKS values before they leave the key owner (Li & Micciancio, 2021).

CKKS decryption returns the message plus the ciphertext's error, and that error is
a function of the secret key: whoever sees exact decrypted values and the
ciphertexts can set up linear equations in the key (Li--Micciancio, "On the
Security of Homomorphic Encryption on Approximate Numbers", EUROCRYPT 2021).  The
remedy is to add fresh noise much larger than the error before releasing a value.

The noise here is Gaussian, drawn from the operating system's CSPRNG (``os.urandom``,
Box--Muller), never from a seedable generator, so a released value cannot be
un-flooded by replaying a seed.  What standard deviation suffices is the caller's
choice: it should exceed the decryption error (~1e-6 of a pixel level at the
paper's parameters) by a statistical-security margin, e.g. 2^20 x error ~ 1 pixel
level; values rounded to integers afterwards lose sub-0.5 noise again (and, when
the decryption was exact, the error with it).
"""
from __future__ import annotations

import os

import numpy as np


def flooding_noise(count: int, std: float) -> np.ndarray:
    """``count`` samples of N(0, std^2) from the OS CSPRNG (float64)."""
    if std < 0 or not np.isfinite(std):
        raise ValueError(f"the flooding standard deviation must be a finite number >= 0, got {std}")
    if count == 0 or std == 0:
        return np.zeros(count)
    raw = np.frombuffer(os.urandom(16 * count), dtype=np.uint64).reshape(2, count)
    u1 = ((raw[0] >> np.uint64(11)).astype(np.float64) + 1.0) / 2.0 ** 53   # (0, 1]
    u2 = (raw[1] >> np.uint64(11)).astype(np.float64) / 2.0 ** 53           # [0, 1)
    return std * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def flood(values: np.ndarray, std: float) -> np.ndarray:
    """``values`` plus fresh Gaussian noise of standard deviation ``std`` (a new array)."""
    values = np.asarray(values, dtype=np.float64)
    return values + flooding_noise(values.size, std).reshape(values.shape)
