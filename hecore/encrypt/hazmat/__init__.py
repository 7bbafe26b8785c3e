"""Research modes that LEAK: the iCHEETAH caching strategies (§3.2–3.3).

Like ``cryptography.hazmat``, nothing here is reached by accident: import it
only through :func:`hecore.encrypt.strategies.make_strategy` with ``allow_leaky=True``.
These strategies (and Zinc, from "At Least Factor-of-Two Optimization for RWLE-Based Homomorphic Encryption") reproduce what the papers measure -- cached ciphertexts plus
a randomness pool of encrypted zeros, or radix sums -- and they are fast, but
their outputs are not IND-CPA: see ``hecore.encrypt.strategies.WHAT_LEAKS`` for what each
one gives away.  Every ciphertext they make is labelled ``security="leaks"``.
"""
from .full import FullCaching
from .pool import RandomnessPool
from .radix import RadixCaching, RadixCachingRandomised
from .scan import ScanningCaching
from .zinc import ZincCaching

LEAKY_STRATEGIES = {
    cls.name: cls for cls in (RadixCaching, RadixCachingRandomised, ScanningCaching, FullCaching, ZincCaching)
}

__all__ = ["FullCaching", "RadixCaching", "RadixCachingRandomised", "RandomnessPool",
           "ScanningCaching", "ZincCaching", "LEAKY_STRATEGIES"]
