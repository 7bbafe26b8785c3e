"""Zinc ("At Least Factor-of-Two Optimization for RWLE-Based Homomorphic Encryption": Precomputation,
Construction, Randomization; Algorithm 1)."""
from __future__ import annotations

import numpy as np

from .cache import CachedStrategy, encrypt_rows

#: Standard deviation of the fresh error coefficients (SEAL's default for the encryption error).
DEFAULT_SIGMA = 3.2


class ZincCaching(CachedStrategy):
    """Zinc: one cached Enc(0) = (b, a); Enc(m) = (b + Delta m + e1, a + e2).

    Precomputation caches a single encryption of zero; construction adds the
    encoded plaintext to its first component; randomization adds fresh small
    error polynomials e1, e2 (coefficients ~ N(0, sigma^2), rounded) to both
    components.  Pyfhel cannot add a polynomial to a ciphertext component, so
    the errors go through the encoder: encoding rounds Delta x (inverse
    canonical embedding of the slots), and the inverse embedding of i.i.d.
    complex Gaussian slots of standard deviation sigma sqrt(N/2) per real and
    imaginary part, divided by Delta, is an i.i.d. Gaussian polynomial of
    standard deviation sigma / Delta -- whatever SEAL's slot order, because the
    embedding is sqrt(N) times a unitary map.  So ``encode(m + E1/Delta)`` is
    ``Delta m + e1`` and ``encode(E2/Delta)`` is ``e2``, in NTT form; their
    coefficients are added to the cached zero's modulo each prime.

    It decrypts correctly but is not IND-CPA: every output shares the cached
    ``a``, so two outputs' second components differ by the small e2 - e2', and
    decoding the difference of their first components gives m1 - m2 exactly
    (``hecore.encrypt.strategies.WHAT_LEAKS["zinc"]``; ``hepix audit`` runs that attack).
    The paper's security proof overlooks that the adversary sees many outputs
    built on the same cached zero.
    """

    name = "zinc"

    def __init__(self, ctx, sigma: float = DEFAULT_SIGMA):
        super().__init__(ctx)
        ctx.params.ckks_only(f"zinc is implemented for CKKS; {ctx.params.name} is {ctx.params.scheme.upper()}",
                             ValueError)
        if not sigma > 0:
            raise ValueError(f"sigma must be positive, got {sigma}")
        self.sigma = float(sigma)
        self.zero: np.ndarray | None = None
        self.rng = np.random.default_rng()

    def options(self):
        return {"sigma": self.sigma}

    def _build(self, counts):
        self.zero = encrypt_rows(self.ctx, [0.0])[0]

    def _state_arrays(self):
        return {"zero": self.zero}

    def _load_state_arrays(self, arrays):
        self.zero = arrays["zero"]

    def _error_slots(self, count: int) -> np.ndarray:
        """Slot vectors whose encodings are fresh Gaussian error polynomials (already / Delta)."""
        n = self.ctx.params.n
        std = self.sigma * np.sqrt(n / 2) / 2.0 ** self.ctx.params.scale_bits
        shape = (count, n // 2)
        return self.rng.normal(0.0, std, shape) + 1j * self.rng.normal(0.0, std, shape)

    def _encrypt_into(self, values, out):
        if self.zero is None:
            raise RuntimeError("ZincCaching.prepare() was not called")
        fmt, codec = self.ct_format, self.ctx.codec
        primes, n = len(fmt.primes), fmt.n
        q = self._q[:, None]
        zero = self.zero.reshape(2, primes, n)
        stride, hdr = fmt.stride, fmt.header_len
        e1, e2 = self._error_slots(len(values)), self._error_slots(len(values))
        c = np.empty((2, primes, n), dtype=np.uint64)
        for i, v in enumerate(values.tolist()):
            e1[i, 0] += v
            # coefficients < q < 2^62: the sum never overflows, one conditional subtraction reduces it
            np.add(zero[0], codec.encode_coefficients(e1[i]), out=c[0])
            np.add(zero[1], codec.encode_coefficients(e2[i]), out=c[1])
            np.minimum(c, c - q, out=c)
            base = i * stride
            out[base:base + hdr] = self._header
            out[base + hdr:base + stride] = c.reshape(-1).view(np.uint8)
