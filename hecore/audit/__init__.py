"""Distinguishers over ciphertext tables, run without any key (``hepix audit``).

Four tests, each a small module: byte-identical ciphertexts (:mod:`.identical`),
recurring differences, the randomness-pool attack (:mod:`.recurring`), linear
dependence modulo the first prime (:mod:`.linear`), and small-difference decoding,
the attack on Zinc (:mod:`.smalldiff`).  :func:`audit_group` runs them on one image
channel's ciphertexts and scores them against the originals when given.
"""
from .verdicts import TESTS, Geometry, TestVerdict, Verdict, audit_group, class_recovery

__all__ = ["TESTS", "Verdict", "Geometry", "TestVerdict", "audit_group", "class_recovery"]
