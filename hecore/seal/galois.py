"""The Galois elements of hepix's whole rotation set, apart from any SEAL object (:mod:`hecore.seal.context` makes
the keys, :mod:`hecore.seal.steps` the subsets a chain takes)."""
from __future__ import annotations


def whole_set_steps(slots: int) -> tuple[int, ...]:
    """The steps of the whole set hepix makes (:meth:`hecore.seal.context.HEContext.generate`): every power of two
    below ``slots``, both ways, the half-way step once -- :func:`hecore.seal.steps.whole_set_keys` of them.  SEAL's
    own default set adds the conjugation key (:func:`conjugation_element`), which no hepix op takes and which would
    let a cluster split the real parts of a slot from its imaginary parts (:mod:`hecore.binding`'s check
    values)."""
    powers = [1 << k for k in range(slots.bit_length() - 1)]
    return tuple(sorted({*powers, *(-p for p in powers if 2 * p < slots)}))


def conjugation_element(n: int) -> int:
    """The Galois element of CKKS's complex conjugation at ring degree ``n`` (SEAL's key for it: ``2n - 1``)."""
    return 2 * n - 1
