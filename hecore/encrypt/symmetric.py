"""Secret-key (symmetric) CKKS encryption with seeded ciphertexts: the key owner's fast secure path.

Pyfhel 3.5 encrypts with the public key only.  The native extension ``hepix_seal`` (built from
``native/`` by ``make setup``, see tools/build_native.sh) links the very SEAL 4.1 library the
Pyfhel wheel ships and calls SEAL's ``Encryptor(context, secret_key).encrypt_symmetric``.  A
symmetric ciphertext's second component is uniformly random, so SEAL stores only the seed it is
expanded from: the serialized ciphertext is about half the size, and secret-key encryption costs
about half a public-key one.  Each encryption draws a fresh seed and fresh error
(IND-CPA, like public-key encryption); nothing is cached.  SEAL expands the seed when the bytes
are loaded, so Pyfhel -- and every hepix job after encryption -- reads them like any ciphertext.

Only the holder of the secret key can encrypt this way: parties that must encrypt without it
keep using public-key encryption (:class:`hecore.encrypt.public.PublicKeyEncryptor`).

:class:`SymmetricEncryptor` is an :class:`~hecore.encrypt.base.Encryptor`: both packings of
:mod:`hecore.layouts.packed` (``packed``: a pixel per slot; ``packed-complex``: the tile's halves in
the real and imaginary parts, two pixels per slot) take it as they take the public key's, and
``hepix encrypt --encryption symmetric`` does it for the tables.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hecore.ciphertexts import SECURITY_IND_CPA, CiphertextBatch
from hecore.errors import HepixError, KeyMismatch
from hecore.seal.context import HEContext, PublicMaterial
from hecore.seal.native import NativeExtensionMissing, native_module, seal_context_bytes

from .base import Encryptor

#: The ``strategy`` label of rows encrypted this way (the ``security`` label stays ind-cpa).
STRATEGY = "symmetric"
ENCRYPTIONS = ("public", "symmetric")
COMPRESSIONS = ("none", "zstd", "zlib")
#: Serialization of the seeded ciphertexts.  zstd shrinks the stored component towards the primes' bit
#: widths (about a third fewer bytes at N=4096) at 1.2-1.8x the time of the encryption alone.
DEFAULT_COMPRESSION = "none"


def available() -> bool:
    try:
        native_module()
    except NativeExtensionMissing:
        return False
    return True


class SymmetricEncryptor(Encryptor):
    """Seeded secret-key CKKS encryption of batches of slot vectors (the GIL is released meanwhile).

    ``check_key`` (default) proves that ``secret_key`` belongs to ``public`` before anything is
    encrypted: a public-key encryption of known values must decrypt under it.
    """

    name = STRATEGY
    security = SECURITY_IND_CPA

    def __init__(self, public: PublicMaterial, secret_key: bytes, *, compression: str = DEFAULT_COMPRESSION,
                 check_key: bool = True):
        params = public.params
        params.ckks_only(f"symmetric encryption is implemented for CKKS; {params.name} is "
                         f"{params.scheme.upper()}: use --encryption public, or keys of a CKKS preset", HepixError)
        if compression not in COMPRESSIONS:
            raise HepixError(f"compression {compression!r} is not one of {', '.join(COMPRESSIONS)}")
        if not secret_key:
            raise KeyMismatch("symmetric encryption needs the secret key, but the secret key given is empty; "
                              "load the data owner's key directory (with secret.key)")
        native = native_module()
        sec, _scale, seal_bytes = seal_context_bytes(public.context)
        try:
            self._native = native.SymmetricEncryptor(seal_bytes, bytes(secret_key), 2.0 ** params.scale_bits,
                                                     compression, sec)
        except ValueError as e:
            raise KeyMismatch(f"cannot set up symmetric encryption for key {public.fingerprint()[:16]}: {e}") from None
        if self._native.n != params.n:
            raise HepixError(f"the context holds N={self._native.n}, the parameters say {params.describe()}")
        self.params = params
        self.public = public
        self.compression = compression
        if check_key:
            _check_secret_matches(public, secret_key)

    @classmethod
    def from_context(cls, ctx: HEContext, **kwargs) -> "SymmetricEncryptor":
        """From a context that holds the secret key (:func:`hecore.seal.keys.load_secret`)."""
        ctx._require_secret("symmetric encryption")
        return cls(ctx.public, ctx.secret_key_bytes(), **kwargs)

    @classmethod
    def from_key_directory(cls, keys, **kwargs) -> "SymmetricEncryptor":
        """From a key directory with its secret key (0600; refused otherwise, and when missing)."""
        from hecore.seal.keys import read_public, read_secret_key

        return cls(read_public(keys, eval_keys=False), read_secret_key(keys), **kwargs)

    @property
    def slots(self) -> int:
        return int(self._native.slots)

    def encrypt_real(self, values) -> list[bytes]:
        """One ciphertext per row of ``values`` ((rows, k <= slots) or one vector of k), real slots."""
        arr = _finite(np.ascontiguousarray(values, dtype=np.float64))
        return self._native.encrypt_real(arr)

    def encrypt_complex(self, values) -> list[bytes]:
        """As :meth:`encrypt_real` for complex128 rows: one complex value per slot."""
        arr = _finite(np.ascontiguousarray(values, dtype=np.complex128))
        return self._native.encrypt_complex(arr)

    def encrypt(self, rows) -> CiphertextBatch:
        """One seeded ciphertext per row, in one native call: complex slots for complex rows, real otherwise."""
        cts = self.encrypt_complex(rows) if np.iscomplexobj(rows) else self.encrypt_real(rows)
        return CiphertextBatch.from_list(cts, self.name, self.security)

    def encrypt_at(self, rows, level: int, scale_bits: int | None = None) -> list[bytes]:
        """Seeded SEAL ciphertexts of ``rows`` encrypted at ``level`` (primes dropped from the first data level:
        the plaintext is encoded at that level's parameters, so the encryption works on fewer primes)."""
        rows = np.asarray(rows)
        scale = None if scale_bits is None else 2.0 ** scale_bits
        if np.iscomplexobj(rows):
            return self._native.encrypt_complex(_finite(np.ascontiguousarray(rows, dtype=np.complex128)), level, scale)
        return self._native.encrypt_real(_finite(np.ascontiguousarray(rows, dtype=np.float64)), level, scale)

    def encrypt_compact(self, rows, at_rest) -> list[bytes]:
        """Compact ciphertexts (:mod:`hecore.seal.atrest`) of ``rows``, one per row, encrypted straight into the
        format at ``at_rest``'s level and scale: c1 as its seed, c0 in coefficient form, rounded by
        ``at_rest.drop0`` bits and bit-packed (one native call, the GIL released)."""
        rows = np.asarray(rows)
        scale = 2.0 ** at_rest.scale_bits
        try:
            if np.iscomplexobj(rows):
                return self._native.encrypt_compact_complex(
                    _finite(np.ascontiguousarray(rows, dtype=np.complex128)), at_rest.level, scale, at_rest.drop0)
            return self._native.encrypt_compact_real(
                _finite(np.ascontiguousarray(rows, dtype=np.float64)), at_rest.level, scale, at_rest.drop0)
        except ValueError as e:
            raise HepixError(f"cannot encrypt at {at_rest.describe()} with {self.params.describe()}: {e}") from None


def _finite(arr: np.ndarray) -> np.ndarray:
    if arr.ndim not in (1, 2):
        raise ValueError(f"values must be one slot vector or a 2-D batch of them, got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr.reshape(-1)))
    if bad.size:
        raise ValueError(f"value {arr.reshape(-1)[bad[0]]!r} at position {int(bad[0])} is not finite")
    return arr


def _check_secret_matches(public: PublicMaterial, secret_key: bytes) -> None:
    """Raise :class:`KeyMismatch` unless ``secret_key`` decrypts what ``public`` encrypts."""
    probe = np.arange(1.0, 9.0)
    ctx = HEContext.from_public(replace(public, relin_key=None, rotate_key=None))
    try:
        owner = HEContext.from_public(replace(public, relin_key=None, rotate_key=None), secret_key=secret_key)
        got = owner.decrypt_slots(ctx.encrypt_vector(probe), probe.size)
    except Exception as e:   # Pyfhel raises bare RuntimeErrors for key bytes of another context
        raise KeyMismatch(f"the secret key does not load with key {public.fingerprint()[:16]}'s context: {e}") from None
    if not np.allclose(got, probe, atol=1e-3):
        raise KeyMismatch(
            f"the secret key does not belong to key {public.fingerprint()[:16]}: it cannot decrypt that public "
            "key's ciphertexts; use the secret.key of the same key directory"
        )
