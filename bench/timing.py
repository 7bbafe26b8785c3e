"""Timing helpers shared by the suites: medians, the split of one packed encryption, one core.

Timing lives here, never in :mod:`hecore`: the core offers plain methods
(:meth:`~hecore.seal.context.HEContext.encode_vector`, :meth:`~hecore.seal.context.HEContext.encrypt_encoded`,
:meth:`~hecore.seal.evaluator.Evaluator.dump`) and the benchmarks time them.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from jobs.runtime import runinfo


def median(values) -> float | None:
    """The median of the values that are not None; None when there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load_1m() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def pin_one_core() -> int:
    """Pin this process to one core (the first it may use), as the papers' one-core figures were
    measured; returns the cores it now has."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return runinfo.cores()


@dataclass(frozen=True)
class EncryptionSplit:
    """Where the time of one packed public-key encryption goes, in seconds."""

    encode: float            # values -> plaintext (HEContext.encode_vector)
    encrypt: float           # plaintext -> ciphertext: encrypt_encoded minus its serialisation
    serialize: float         # ciphertext -> uncompressed bytes (Evaluator.dump of the same ciphertext)
    nbytes: int

    @property
    def total(self) -> float:
        return self.encode + self.encrypt + self.serialize


def split_encryption(ctx: HEContext, ev: Evaluator, values: np.ndarray) -> EncryptionSplit:
    """Encode ``values``, encrypt the plaintext, and serialise a ciphertext of the same shape, each
    timed apart.  :meth:`~hecore.seal.context.HEContext.encrypt_encoded` returns bytes, so its
    serialisation is timed again on its own (the ciphertext loaded back and dumped: same size,
    same level; the quickest of three) and taken off its time."""
    t0 = time.perf_counter()
    plain = ctx.encode_vector(values)
    t1 = time.perf_counter()
    data = ctx.encrypt_encoded(plain)
    t2 = time.perf_counter()
    loaded = ev.load(data)
    # the quickest of three dumps: a dump the scheduler interrupted once would otherwise outweigh the
    # serialisation inside encrypt_encoded, and leave nothing of the encryption's time
    serialize = float("inf")
    for _ in range(3):
        t3 = time.perf_counter()
        ev.dump(loaded)
        serialize = min(serialize, time.perf_counter() - t3)
    return EncryptionSplit(encode=t1 - t0, encrypt=max(t2 - t1 - serialize, 0.0), serialize=serialize,
                           nbytes=len(data))
