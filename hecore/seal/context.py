"""The HE context a party holds: parameters, keys, and the Pyfhel object behind them.

This module and :mod:`hecore.seal.evaluator` (homomorphic arithmetic on loaded
ciphertexts) are the only ones of hepix that touch Pyfhel (``keys`` and the
strategies call through them).  Pyfhel objects do not pickle with their keys,
so what travels between processes is bytes (:meth:`HEContext.public_bytes`),
rebuilt into an :class:`HEContext` on the other side.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from Pyfhel import PyCtxt, Pyfhel, PyPtxt

from ..ciphertexts import CiphertextFormat
from ..errors import HepixError, KeyDirectoryError, SecretKeyMissing
from .native import pyfhel_for
from .params import Params

log = logging.getLogger(__name__)

COMPRESSION = "zstd"   # for keys and context; ciphertexts: see hecore.seal.atrest (SEAL's zstd mode by default)
_COMPACT_MAGIC = b"HPXC"   # hecore.seal.atrest's format (SEAL bytes start with 5E A1)


def _galois_keys(context: bytes, secret_key: bytes, steps) -> bytes:
    """The Galois keys of exactly ``steps`` for this secret key (Pyfhel's context and secret-key bytes), made by
    SEAL's key generator in hepix's native extension, serialized."""
    from .native import native_module, seal_context_bytes

    security, _, seal_bytes = seal_context_bytes(context)
    return native_module().galois_keys(seal_bytes, secret_key, [int(s) for s in steps], COMPRESSION, security)


def _whole_rotation_set(he: Pyfhel, params: Params) -> bytes:
    """The Galois keys of every power-of-two rotation both ways for ``he``'s fresh secret, serialized, and loaded
    into ``he``.  Under CKKS they are made by hepix's native extension for exactly those steps
    (:func:`hecore.seal.galois.whole_set_steps`), leaving out the conjugation key of SEAL's default set: no op
    conjugates, and a cluster holding it could graft one ciphertext's imaginary parts -- the check values that
    bind it to its place (:mod:`hecore.binding`) -- onto another's real parts.  Without the native extension (or
    under BFV/BGV, whose slots hold no imaginary parts) SEAL's default set."""
    from .native import NativeExtensionMissing

    if params.complex_slots:
        from .galois import whole_set_steps

        try:
            rotate = _galois_keys(he.to_bytes_context(compr_mode=COMPRESSION),
                                  he.to_bytes_secret_key(compr_mode=COMPRESSION), whole_set_steps(params.slots))
        except NativeExtensionMissing as e:
            log.warning("the Galois keys include SEAL's conjugation key, with which a cluster can move check "
                        "values from one ciphertext to another: %s", e)
        else:
            he.from_bytes_rotate_key(rotate)
            return rotate
    he.rotateKeyGen()
    return he.to_bytes_rotate_key(compr_mode=COMPRESSION)


@dataclass(frozen=True)
class PublicMaterial:
    """Everything a party without the secret key needs, as bytes (picklable, broadcastable)."""

    params: Params
    context: bytes
    public_key: bytes
    relin_key: bytes | None = None
    rotate_key: bytes | None = None
    #: The sha256 of every public file the key set was made with, ``((file name, hex), ...)`` sorted by
    #: name: what the fingerprint covers, including the evaluation keys a copy may leave out.  None for key
    #: directories made before the fingerprint covered more than the public key (their format 1).
    digests: tuple[tuple[str, str], ...] | None = None
    #: The rotation steps ``rotate_key`` holds a Galois key for when it is a chain's subset
    #: (``export-public --for-op``: :mod:`hecore.seal.steps`), sorted; None for the whole set (every power of
    #: two, both ways, which SEAL composes any step from).
    rotation_steps: tuple[int, ...] | None = None

    #: The file name of each component, as a key directory stores it (hecore.seal.keys).
    FILES = (("context", "context.bin"), ("public_key", "public.key"), ("relin_key", "relin.key"),
             ("rotate_key", "rotate.key"))

    def fingerprint(self) -> str:
        """The key set's identity, hex; 16 characters identify a key.  sha256 over the parameters and the
        digest of every public component (context, public key, relinearisation and rotation keys), so that
        no component of another key set passes under this one's name; for key sets of format 1, over the
        parameters and the public key only."""
        if self.digests is None:
            h = hashlib.sha256(b"hepix-key-fingerprint-v1\0")
            h.update(self.params.canonical_bytes())
            h.update(hashlib.sha256(self.public_key).digest())
            return h.hexdigest()
        h = hashlib.sha256(b"hepix-key-fingerprint-v2\0")
        h.update(self.params.canonical_bytes())
        for name, digest in self.digests:
            h.update(b"\0" + name.encode() + b"\0" + bytes.fromhex(digest))
        return h.hexdigest()

    def with_digests(self) -> "PublicMaterial":
        """The same material with the digests of the components it holds (what a new key set records)."""
        digests = tuple(sorted((name, hashlib.sha256(data).hexdigest()) for attr, name in self.FILES
                               if (data := getattr(self, attr)) is not None))
        return replace(self, digests=digests)


def integer_slots(values, params: Params) -> np.ndarray:
    """``values`` as int64 slots for BFV/BGV: whole numbers within ``±(t-1)/2``, or a ValueError naming the first bad one."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.rint(arr)))
        if bad.size:
            raise ValueError(
                f"{params.scheme.upper()} slots hold integers; value {float(arr.flat[bad[0]])!r} at slot {int(bad[0])} is not "
                "one (use a CKKS preset for fractional values)"
            )
    ints = np.ascontiguousarray(arr, dtype=np.int64)
    t = params.plain_modulus
    half = (t - 1) // 2                 # the centred representatives: -half .. half
    bad = np.flatnonzero(np.abs(ints) > half)
    if bad.size:
        raise ValueError(
            f"value {int(ints.flat[bad[0]])} at slot {int(bad[0])} does not fit the plaintext modulus of "
            f"{params.name} (t = {t}, {params.plain_modulus_bits} bits: |value| <= {half})"
        )
    return ints


class HEContext:
    """Parameters + keys + a Pyfhel object.  ``has_secret`` says whether it can decrypt.

    A context is of its scheme's kind: :class:`CkksContext` (real or complex values at a scale, stored at
    any level) or :class:`IntegerContext` (BFV, BGV: integers mod ``t``).  What they share is here."""

    def __new__(cls, he: Pyfhel, params: Params, *args, **kwargs):
        if cls is HEContext:
            cls = IntegerContext if params.is_integer else CkksContext
        return super().__new__(cls)

    def __init__(self, he: Pyfhel, params: Params, public: PublicMaterial, has_secret: bool):
        self._he = he
        self.params = params
        self.public = public
        self.has_secret = has_secret

    # --- construction -----------------------------------------------------------------
    @classmethod
    def generate(cls, params: Params, *, rotations: bool = True) -> tuple["HEContext", bytes]:
        """Fresh keys for ``params``: returns the context and the secret key bytes.

        When the parameters allow key switching, a relinearisation key is made,
        and with ``rotations`` the Galois keys of every power-of-two rotation
        (SEAL composes any other step from them) for the packed layout's filters
        and sums: about 6 MB at N=4096, 34 MB at N=8192 (compressed) -- under
        CKKS without the conjugation key (:func:`_whole_rotation_set`).
        """
        he = pyfhel_for(params)
        he.keyGen()
        relin = rotate = None
        if params.supports_keyswitching:
            he.relinKeyGen()
            relin = he.to_bytes_relin_key(compr_mode=COMPRESSION)
            if rotations:
                rotate = _whole_rotation_set(he, params)
        public = PublicMaterial(
            params=params,
            context=he.to_bytes_context(compr_mode=COMPRESSION),
            public_key=he.to_bytes_public_key(compr_mode=COMPRESSION),
            relin_key=relin,
            rotate_key=rotate,
        ).with_digests()
        secret = he.to_bytes_secret_key(compr_mode=COMPRESSION)
        return cls(he, params, public, has_secret=True), secret

    @classmethod
    def from_public(cls, public: PublicMaterial, secret_key: bytes | None = None) -> "HEContext":
        he = Pyfhel()
        loads = [("context.bin", he.from_bytes_context, public.context),
                 ("public.key", he.from_bytes_public_key, public.public_key),
                 ("relin.key", he.from_bytes_relin_key, public.relin_key),
                 ("rotate.key", he.from_bytes_rotate_key, public.rotate_key),
                 ("secret.key", he.from_bytes_secret_key, secret_key)]
        for name, load, data in loads:
            if data is None:
                continue
            try:
                load(data)
            except Exception as e:  # noqa: BLE001 -- Pyfhel raises bare RuntimeErrors (and others) on bad bytes
                what = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
                raise KeyDirectoryError(
                    f"{name} does not load in SEAL with the parameters {public.params.name} ({what}): the file is "
                    "damaged or of another key set; restore the key directory from the owner's copy") from None
        ctx = cls(he, public.params, public, has_secret=secret_key is not None)
        ctx._check_params()
        return ctx

    def _check_params(self) -> None:
        n = self._he.get_poly_modulus_degree()
        sizes = [int(b) for b in self._he.qi_sizes]
        if not sizes and n == self.params.n:
            # Pyfhel 3.5 restores no prime sizes for BFV/BGV contexts: compare the whole context
            # with the one the parameters generate instead (raises HepixError if they differ).
            _ = self.primes
            return
        if n != self.params.n or sizes != list(self.params.qi_sizes):
            raise HepixError(
                f"the stored context (N={n}, primes of {sizes} bits) does not match the recorded "
                f"parameters {self.params.describe()}; the key directory is inconsistent"
            )

    @cached_property
    def primes(self) -> tuple[int, ...]:
        """All primes of the coefficient modulus, the special prime last.

        A context restored from bytes does not expose them in Pyfhel 3.5
        (``qi`` comes back empty), but SEAL chooses them deterministically from
        (N, bit sizes): regenerate them, and check that the regenerated
        context serializes to exactly the stored one.
        """
        if len(self._he.qi):
            return tuple(int(q) for q in self._he.qi)
        ref = pyfhel_for(self.params)
        if ref.to_bytes_context(compr_mode="none") != self._he.to_bytes_context(compr_mode="none"):
            raise HepixError(
                f"the stored context is not the one {self.params.describe()} generates; "
                "the key directory is inconsistent"
            )
        return tuple(int(q) for q in ref.qi)

    @property
    def fingerprint(self) -> str:
        return self.public.fingerprint()

    # --- encryption (fresh, IND-CPA) -----------------------------------------------
    def encrypt_value(self, value: float) -> bytes:
        """Public-key encryption of one value in slot 0, serialized uncompressed."""
        return self.encrypt_vector(np.array([value], dtype=np.float64))

    def encrypt_vector(self, values: np.ndarray, *, scale_bits: int | None = None, level: int = 0) -> bytes:
        """Public-key encryption of up to ``params.slots`` values (one per slot), serialized uncompressed.

        BFV/BGV take integers (floats that are whole numbers are accepted); CKKS encodes at
        ``2^scale_bits`` (default the preset's scale) and, with ``level`` > 0, moves the ciphertext down
        that many primes (mod-switching: the scale stays; fewer bytes for chains that spend fewer levels).
        """
        return self._at_level(self._encrypt(values, scale_bits), level).to_bytes(compr_mode="none")

    def _at_level(self, c: PyCtxt, level: int) -> PyCtxt:
        """``c`` moved down ``level`` primes from the first data level (CKKS)."""
        if not level:
            return c
        if not self._stores_levels or not 0 < level < self.params.data_primes:
            raise HepixError(f"cannot store a ciphertext of {self.params.describe()} at level {level}: "
                             f"CKKS levels 0 to {self.params.data_primes - 1}")
        for _ in range(level):
            self._he.mod_switch_to_next(c)
        return c

    def encrypt_complex(self, values: np.ndarray, *, scale_bits: int | None = None, level: int = 0) -> bytes:
        """CKKS: public-key encryption of up to N/2 complex values (two reals per slot), serialized
        uncompressed (at ``2^scale_bits``, default the preset's scale; ``level`` as :meth:`encrypt_vector`)."""
        return self._at_level(self._encrypt_complex(values, scale_bits), level).to_bytes(compr_mode="none")

    def _encrypt_complex(self, values: np.ndarray, scale_bits: int | None = None) -> PyCtxt:
        raise HepixError(f"complex slots need CKKS; {self.params.name} is {self.params.scheme.upper()}")

    # --- encoding apart from encryption (Lattigo keeps its Encoder apart from its Encryptor) ---
    def encode_vector(self, values: np.ndarray) -> PyPtxt:
        """The plaintext of up to N/2 values, one per slot, at the top level and the default scale:
        real or complex values for CKKS (complex: two reals per slot), integers for BFV/BGV (floats
        that are whole numbers are accepted).  Encoding needs no key; :meth:`encrypt_encoded`
        encrypts the result."""
        return self._encode_slots(values)

    def encrypt_encoded(self, plaintext: PyPtxt) -> bytes:
        """Public-key encryption of a plaintext of :meth:`encode_vector`, serialized uncompressed:
        ``encrypt_encoded(encode_vector(v))`` is what :meth:`encrypt_vector` (or
        :meth:`encrypt_complex`) does, in two steps."""
        return self._he.encryptPtxt(plaintext).to_bytes(compr_mode="none")

    # --- coefficient encoding (a vector as the coefficients of one plaintext polynomial) --------
    def encode_coefficients(self, coeffs, *, level: int = 0, scale: float | None = None) -> PyPtxt:
        """The plaintext polynomial ``sum_k coeffs[k] X^k`` (``len(coeffs) <= N``): BFV/BGV take
        integers within ``±(t-1)/2``, stored mod t; CKKS times ``scale`` (default the context's),
        at ``level``.  No key is involved (:mod:`hecore.seal.embedding` for CKKS)."""
        c = np.asarray(coeffs)
        if c.ndim != 1 or not 1 <= c.size <= self.params.n:
            raise ValueError(f"1 to {self.params.n} coefficients fit a plaintext of {self.params.name}, got shape {c.shape}")
        return self._encode_polynomial(c, level, scale)

    def encrypt_coefficients(self, coeffs) -> bytes:
        """Public-key encryption of :meth:`encode_coefficients` (top level, default scale), serialized uncompressed."""
        return self._he.encryptPtxt(self.encode_coefficients(coeffs)).to_bytes(compr_mode="none")

    def decrypt_coefficients(self, ct: bytes | memoryview | PyCtxt, positions) -> np.ndarray:
        """The coefficients at ``positions`` of the decrypted plaintext polynomial (float64): BFV/BGV
        the centred representatives mod t, CKKS divided by the ciphertext's scale."""
        self._require_secret("decryption")
        c = ct if isinstance(ct, PyCtxt) else self.load_ciphertext(ct)
        return self._decrypted_coefficients(c, np.asarray(positions, dtype=np.int64))

    @cached_property
    def _integer_plain_prefix(self) -> bytes:
        raw = self._he.encodeInt(np.zeros(1, dtype=np.int64)).to_bytes(compr_mode="none")
        return raw[:_INTEGER_PLAIN_PREFIX]

    @cached_property
    def ct_format(self) -> CiphertextFormat:
        """The byte format of this context's fresh ciphertexts (measured on an encryption of 0)."""
        sample = self.encrypt_value(0.0)
        primes = self.primes[: self.params.data_primes]
        body = 2 * len(primes) * self.params.n * 8
        header_len = len(sample) - body
        if header_len <= 0:
            raise HepixError(f"unexpected ciphertext serialization: {len(sample)} bytes for {self.params.describe()}")
        return CiphertextFormat(header=sample[:header_len], primes=primes, n=self.params.n)

    @cached_property
    def codec(self) -> "PlainCodec":
        """Plaintext polynomials of this context (CKKS): see :class:`PlainCodec`."""
        return PlainCodec(self.params, he=self._he)

    def secret_key_bytes(self) -> bytes:
        """The secret key, serialized: only for shipping to the data owner's own decrypt workers."""
        self._require_secret("exporting the secret key")
        return self._he.to_bytes_secret_key(compr_mode=COMPRESSION)

    def rotation_keys(self, steps) -> bytes:
        """The Galois keys of exactly these rotation steps (each a single key switch), serialized: the owner's
        least-capability copy for a chain (:mod:`hecore.seal.steps`).  Needs the secret key."""
        self._require_secret("making rotation keys")
        if not self.params.supports_keyswitching:
            raise ValueError(f"{self.params.name} allows no key switching: it has no rotation keys")
        # SEAL's key generator made from this secret (Pyfhel's rotateKeyGen would use a generator of another)
        return _galois_keys(self.public.context, self.secret_key_bytes(), steps)

    # --- decryption -------------------------------------------------------------------
    def _require_secret(self, what: str) -> None:
        if not self.has_secret:
            raise SecretKeyMissing(
                f"{what} needs the secret key, but this context was loaded from public material only "
                f"(key {self.fingerprint[:16]}); load the key directory with its secret key"
            )

    def load_ciphertext(self, ct: bytes | memoryview) -> PyCtxt:
        """A Pyfhel ciphertext from SEAL bytes, or from hepix's compact at-rest format (expanded and checked
        first, see :mod:`hecore.seal.atrest`)."""
        raw = bytes(ct)
        if raw[:4] == _COMPACT_MAGIC:
            from .atrest import Compactor

            raw = Compactor.for_public(self.public).expand_one(raw)
        return self._loaded(PyCtxt(pyfhel=self._he, bytestring=raw), raw)

    def decrypt_slots(self, ct: bytes | memoryview | PyCtxt, count: int = 1) -> np.ndarray:
        """Decrypt one ciphertext (serialized or loaded) and return its first ``count`` slots (float64).

        BFV/BGV slots come back as the centred representatives of their values mod t.
        """
        self._require_secret("decryption")
        c = ct if isinstance(ct, PyCtxt) else self.load_ciphertext(ct)
        return np.asarray(self._decrypt_values(c)[:count], dtype=np.float64)

    def decrypt_complex(self, ct: bytes | memoryview | PyCtxt, count: int = 1) -> np.ndarray:
        """CKKS: the first ``count`` slots of one ciphertext as complex128 (complex packing, the frequency domain of hecore.ops.dft)."""
        self._require_secret("decryption")
        raise HepixError(f"complex slots need CKKS; {self.params.name} is {self.params.scheme.upper()}")

    def noise_budget(self, ct: bytes | memoryview | PyCtxt) -> int:
        """BFV: the bits of noise budget left (0 means decryption fails).  Needs the secret key.

        BGV has one too, but Pyfhel 3.5 does not expose it: a :class:`HepixError` says so.
        """
        self._require_secret("measuring the noise budget")
        if not self.params.is_bfv:
            raise HepixError(f"Pyfhel 3.5 measures the noise budget of BFV ciphertexts only, not "
                             f"{self.params.scheme.upper()} ({self.params.name})")
        c = ct if isinstance(ct, PyCtxt) else self.load_ciphertext(ct)
        return int(self._he.noise_level(c))

    def decrypt_pixels(self, batch) -> np.ndarray:
        """Slot 0 of every ciphertext of a pixel-layout (CKKS) batch, as float64."""
        self._require_secret("decryption")
        out = np.empty(len(batch), dtype=np.float64)
        he = self._he
        for i, ct in enumerate(batch):
            out[i] = he.decryptFrac(self.load_ciphertext(ct))[0]
        return out


class CkksContext(HEContext):
    """CKKS: real (or complex) values at a scale; a ciphertext may be stored at any level of its chain."""

    _stores_levels = True

    def _encrypt(self, values: np.ndarray, scale_bits: int | None = None) -> PyCtxt:
        kw = {} if scale_bits is None else {"scale": 2.0 ** scale_bits}
        return self._he.encryptFrac(np.ascontiguousarray(values, dtype=np.float64), **kw)

    def _encrypt_complex(self, values: np.ndarray, scale_bits: int | None = None) -> PyCtxt:
        kw = {} if scale_bits is None else {"scale": 2.0 ** scale_bits}
        return self._he.encryptComplex(np.ascontiguousarray(values, dtype=np.complex128), **kw)

    def _encode_slots(self, values: np.ndarray) -> PyPtxt:
        if np.iscomplexobj(values):
            return self._he.encodeComplex(np.ascontiguousarray(values, dtype=np.complex128))
        return self._he.encodeFrac(np.ascontiguousarray(values, dtype=np.float64))

    def _encode_polynomial(self, coeffs: np.ndarray, level: int, scale: float | None) -> PyPtxt:
        from .embedding import evaluations

        kw = {} if scale is None else {"scale": float(scale)}
        ptxt = self._he.encodeComplex(evaluations(coeffs, self.params.n), **kw)
        for _ in range(level):
            self._he.mod_switch_to_next(ptxt)
        return ptxt

    def _decrypted_coefficients(self, c: PyCtxt, positions: np.ndarray) -> np.ndarray:
        from .embedding import coefficients

        return coefficients(np.asarray(self._he.decryptComplex(c)), self.params.n, positions)

    def _loaded(self, c: PyCtxt, raw: bytes) -> PyCtxt:
        # Pyfhel counts levels in Python (0 on load); ciphertexts stored below the first level must say so
        c.mod_level = self.params.data_primes - _stored_primes(c, raw)
        return c

    def _decrypt_values(self, c: PyCtxt):
        return self._he.decryptFrac(c)

    def decrypt_complex(self, ct: bytes | memoryview | PyCtxt, count: int = 1) -> np.ndarray:
        """The first ``count`` slots of one ciphertext as complex128 (complex packing, the frequency domain of
        hecore.ops.dft)."""
        self._require_secret("decryption")
        c = ct if isinstance(ct, PyCtxt) else self.load_ciphertext(ct)
        return np.asarray(self._he.decryptComplex(c)[:count], dtype=np.complex128)

    def noise_budget(self, ct: bytes | memoryview | PyCtxt) -> int:
        self._require_secret("measuring the noise budget")
        raise HepixError("CKKS has no noise budget; its error shows as the difference to the exact value")


class IntegerContext(HEContext):
    """BFV and BGV: integers mod ``t`` in the slots (or the coefficients), stored at the first level."""

    _stores_levels = False

    def _encrypt(self, values: np.ndarray, scale_bits: int | None = None) -> PyCtxt:
        ints = integer_slots(values, self.params)
        return self._he.encryptBGV(ints) if self.params.is_bgv else self._he.encryptInt(ints)

    def _encode_slots(self, values: np.ndarray) -> PyPtxt:
        if np.iscomplexobj(values):
            raise HepixError(f"complex slots need CKKS; {self.params.name} is {self.params.scheme.upper()}")
        ints = integer_slots(values, self.params)
        return self._he.encodeBGV(ints) if self.params.is_bgv else self._he.encodeInt(ints)

    def _encode_polynomial(self, coeffs: np.ndarray, level: int, scale: float | None) -> PyPtxt:
        ints = integer_slots(coeffs, self.params) % self.params.plain_modulus
        return PyPtxt(pyfhel=self._he, bytestring=_integer_plaintext_bytes(self._integer_plain_prefix, ints))

    def _decrypted_coefficients(self, c: PyCtxt, positions: np.ndarray) -> np.ndarray:
        raw = self._he.decryptPtxt(c).to_bytes(compr_mode="none")
        have = np.frombuffer(raw, dtype=np.uint64, offset=_INTEGER_PLAIN_PREFIX).astype(np.int64)
        vals = np.zeros(positions.shape, dtype=np.int64)    # SEAL trims the polynomial's zero top coefficients
        inside = positions < have.size
        vals[inside] = have[positions[inside]]
        t = self.params.plain_modulus
        return np.where(vals > (t - 1) // 2, vals - t, vals).astype(np.float64)

    def _loaded(self, c: PyCtxt, raw: bytes) -> PyCtxt:
        return c

    def _decrypt_values(self, c: PyCtxt):
        return self._he.decryptBGV(c) if self.params.is_bgv else self._he.decryptInt(c)


def _stored_primes(c: PyCtxt, raw: bytes) -> int:
    """Primes a SEAL ciphertext holds (``coeff_modulus_size`` in its prefix; compressed bytes are
    re-serialized uncompressed to read it)."""
    if len(raw) < 73 or raw[5] != 0:
        raw = c.to_bytes(compr_mode="none")
    return int.from_bytes(raw[65:73], "little")


# --- plaintext polynomials (public: no key involved) -------------------------------------------
# An uncompressed SEAL 4.1 CKKS plaintext is an 88-byte prefix (SEAL header, parms_id, coefficient
# count, scale, the data array's own header and size) followed by primes x N uint64 coefficients
# in NTT form, one block per prime.  The audit and the Zinc research strategy work on these
# coefficients directly; only this module turns them into Pyfhel objects.
PLAINTEXT_SCALE_OFFSET = 56        # the double ``scale`` in the prefix
PARMS_ID = slice(16, 48)           # parms_id (4 x uint64), same place in ciphertexts and plaintexts


# An uncompressed SEAL 4.1 BFV/BGV plaintext: the SEAL header (16 bytes: magic, version, compression,
# total size), parms_id (32, zero: not NTT form), coefficient count (8), scale (8), then the data
# array's own SEAL header (16) and size (8) before its uint64 coefficients.
_INTEGER_PLAIN_PREFIX = 88


def _integer_plaintext_bytes(prefix: bytes, coeffs: np.ndarray) -> bytes:
    """SEAL bytes of the BFV/BGV plaintext with ``coeffs`` (uint64 < t), from a plaintext's ``prefix``."""
    k = int(coeffs.size)
    raw = bytearray(prefix)
    raw[8:16] = (_INTEGER_PLAIN_PREFIX + 8 * k).to_bytes(8, "little")
    raw[48:56] = k.to_bytes(8, "little")
    raw[72:80] = (24 + 8 * k).to_bytes(8, "little")
    raw[80:88] = k.to_bytes(8, "little")
    return bytes(raw) + np.ascontiguousarray(coeffs, dtype=np.uint64).tobytes()


class PlainCodec:
    """CKKS encoding and decoding of plaintext polynomials, from the parameters alone.

    Encoding and decoding need no key: this codec is built from :class:`Params`
    (SEAL regenerates the same primes from them), so an auditor without any key
    can decode a difference of ciphertext components (see :mod:`hecore.audit`).
    """

    def __init__(self, params: Params, he: Pyfhel | None = None):
        params.ckks_only(f"PlainCodec is for CKKS; {params.name} is {params.scheme.upper()}", HepixError)
        self.params = params
        self._he = he if he is not None else pyfhel_for(params)
        self._templates: dict[bytes, bytes] = {}
        template = self._he.encodeFrac(np.zeros(1)).to_bytes(compr_mode="none")
        self.top_parms_id = template[PARMS_ID]
        self._prefix_len = len(template) - 8 * params.data_primes * params.n
        self._templates[self.top_parms_id] = template[: self._prefix_len]

    def encode_coefficients(self, slots: np.ndarray) -> np.ndarray:
        """The plaintext polynomial of complex ``slots`` at the top level and the default scale:
        uint64 NTT coefficients of shape (data primes, N).  Encoding rounds Delta x (the slots'
        inverse canonical embedding) to integers."""
        p = self._he.encodeComplex(np.ascontiguousarray(slots, dtype=np.complex128))
        raw = p.to_bytes(compr_mode="none")
        return np.frombuffer(raw, dtype=np.uint64, offset=self._prefix_len).reshape(
            self.params.data_primes, self.params.n)

    def decode(self, coefficients: np.ndarray, parms_id: bytes, scale: float) -> np.ndarray:
        """Decode NTT-form plaintext ``coefficients`` (primes x N uint64) at level ``parms_id``
        and ``scale``: the complex slot values (SEAL's ``CKKSEncoder::decode``, no key).

        Only the top level is supported (what ``encrypt`` writes); a :class:`HepixError` says so
        for other levels."""
        prefix = self._templates.get(bytes(parms_id))
        if prefix is None:
            raise HepixError("decoding is implemented for top-level (freshly encrypted) ciphertexts only; "
                             "these were made at a lower level (after rescaling)")
        coefficients = np.ascontiguousarray(coefficients, dtype=np.uint64)
        raw = bytearray(prefix)
        raw[PLAINTEXT_SCALE_OFFSET:PLAINTEXT_SCALE_OFFSET + 8] = np.float64(scale).tobytes()
        from Pyfhel import PyPtxt

        ptxt = PyPtxt(pyfhel=self._he, bytestring=bytes(raw) + coefficients.tobytes())
        return np.asarray(self._he.decodeComplex(ptxt), dtype=np.complex128)


def chain_primes(params: Params) -> tuple[int, ...]:
    """Every prime of the coefficient modulus ``params`` gives (special prime last): SEAL chooses
    them deterministically from (N, bit sizes), so no key is needed."""
    return tuple(int(q) for q in pyfhel_for(params).qi)


def uncompressed_ciphertexts(params: Params, cts) -> list[bytes]:
    """``cts`` (serialized ciphertexts of ``params``, compressed or seeded) re-serialized
    uncompressed with every component expanded -- SEAL does that when it loads them; no key."""
    he = pyfhel_for(params)
    cts = [bytes(c) for c in cts]
    if any(c[:4] == _COMPACT_MAGIC for c in cts):          # hepix's compact format: expanded natively
        from .atrest import Compactor

        cts = Compactor.for_params(params).expand(cts)
    return [PyCtxt(pyfhel=he, bytestring=c).to_bytes(compr_mode="none") for c in cts]
