"""The rotation steps a packed op chain takes: what a least-capability key copy holds Galois keys for.

SEAL's default Galois keys are one per power-of-two step, both ways (and conjugation): about 6 MB at
N=4096, from which SEAL composes any rotation (a key switch per non-zero digit of the step's signed binary
form: one for a power of two, more for others).  A chain rotates
by a handful of steps fixed by the tiles (a 3x3 window: 1, 2, -1 and the same times the block's width), so
``export-public --for-op`` gives the cluster the Galois keys of exactly those steps: fewer bytes, and each
rotation one key switch (when they are fewer keys than the whole set: :func:`whole_set_keys`).

The steps are found by running the chain once, on one encryption of zeros laid out as the tiles are, with
every rotation recorded instead of done (:func:`chain_steps`): the same code the process job runs, so the
record is what that code asks for, with nothing to keep in step by hand.  Which chain on which tiles is the
caller's (hecore/schemes/seal.py: the ops stand above SEAL's floor).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .context import HEContext, PublicMaterial
from .evaluator import Evaluator

#: The most steps a subset may hold (the whole set of N=32768 has 2 x 14 + 1 keys; a DFT's diagonals take
#: a few dozen): a manifest that lists more was not written by hepix.
MAX_STEPS = 4096


def chain_steps(public: PublicMaterial, apply, complex_packing: bool = False) -> frozenset[int]:
    """The rotation steps ``apply(evaluator, ciphertext)`` (a chain run on one packed ciphertext:
    :meth:`hecore.schemes.seal.SealScheme.rotation_steps` gives it) takes, each as :meth:`Evaluator.rotate`
    hands it to SEAL (the shorter way round), on one encryption of zeros (complex slots with
    ``complex_packing``).  ``public`` needs its public key and, for a chain with a product, its
    relinearisation key; its rotation keys are not used."""
    ctx = HEContext.from_public(dataclasses.replace(public, rotate_key=None, rotation_steps=None))
    ev = Evaluator(ctx)
    taken: set[int] = set()

    def record(c, steps: int):
        taken.add(int(steps))
        return ev._copy(c)

    ev._rotate_by = record              # this evaluator's rotations are recorded, never done
    values = np.zeros(ev.slots, dtype=np.complex128 if complex_packing else np.float64)
    apply(ev, ev.load(ctx.encrypt_complex(values) if complex_packing else ctx.encrypt_vector(values)))
    return frozenset(taken)


def whole_set_keys(slots: int) -> int:
    """Galois keys in SEAL's default set for ``slots`` slots: every power-of-two step both ways (the half-way
    step is one key); a chain's subset is given instead only when it holds fewer (a DFT's diagonals take
    more steps than that: its chain keeps the whole set, and SEAL composes them)."""
    return 2 * (slots.bit_length() - 1) - 1


def check_steps(steps, slots: int) -> tuple[int, ...]:
    """A manifest's ``rotation_steps`` read back: distinct non-zero integers within half the slots, sorted, at
    most :data:`MAX_STEPS` of them; anything else raises ValueError naming it."""
    if not isinstance(steps, list) or not 0 < len(steps) <= MAX_STEPS:
        raise ValueError(f"rotation_steps must be a list of 1 to {MAX_STEPS} steps, not {str(steps)[:80]}")
    for s in steps:
        if type(s) is not int or s == 0 or abs(s) > slots // 2:
            raise ValueError(f"rotation step {str(s)[:40]} is not a non-zero integer within {slots // 2}")
    if steps != sorted(set(steps)):
        raise ValueError("rotation_steps must be sorted and distinct")
    return tuple(steps)
