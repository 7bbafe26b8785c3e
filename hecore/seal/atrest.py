"""Ciphertexts at rest: hepix's compact format, and reading it wherever SEAL bytes are read.

At corpus scale the stored bytes are the bill.  A fresh CKKS ciphertext serialized by SEAL holds
a constant 113-byte prefix and every residue of both components as a 64-bit word, at every level
of the modulus chain.  Decryption needs less, and the compact format stores only that:

* **the level the op chain needs** -- a chain that spends no level (brightness, contrast,
  watermark, the mean filter's sums) is stored at the last level, the first prime ``q0`` alone
  (:func:`hecore.planner.at_rest` chooses the level, the scale and the bits to drop);
* **c1 as its 64-byte seed** for secret-key encryptions (c1 is uniformly random, expanded from the
  seed by SEAL's own sampler), or bit-packed for public-key ones;
* **each residue at its prime's width** (40 bits for a 40-bit prime), in coefficient form;
* **not the low bits of c0 below the noise**: a coefficient ``c`` is stored as
  ``floor(c / 2^d)`` and read back as ``floor(c / 2^d) 2^d + 2^(d-1)``, an error uniform in
  ``(-2^(d-1), 2^(d-1)]`` per coefficient.  Rounding is a public function of an IND-CPA
  ciphertext, so the result is IND-CPA too; :func:`hecore.planner.at_rest` bounds the error it
  adds to every slot after the chain (Hoeffding) and keeps it below a quarter of what the chain's
  exact rounding tolerates.

The byte layout (native/src/atrest.cpp), little-endian: ``HPXC``, version, flags (1 seeded, 2
coefficient form), level, primes, ``d0``, ``d1``, log2 N, the seed's PRNG, 4 bytes of the level's
parms_id, the scale (float64) -- 24 bytes -- then c0 bit-packed, then the 64-byte seed or c1
bit-packed.  SEAL serializations start with SEAL's magic (bytes ``5E A1``), so the four magic
bytes tell the two formats apart: every reader here (:meth:`hecore.seal.context.HEContext.load_ciphertext`,
hence :class:`hecore.seal.evaluator.Evaluator`, the decrypt paths, and the audit's
:func:`hecore.audit.sealbytes.plain_layout`) expands compact bytes transparently.  Expansion checks
the header against the context, the exact size and every stored value against its prime: malformed
or forged bytes raise :class:`MalformedCiphertext` (a ValueError), never reach SEAL unchecked.

The conversions are native (``hepix_seal``, GIL released, batched); without the extension,
:class:`hecore.seal.NativeExtensionMissing` says how to build it.

What ``hepix encrypt`` stores by default is not this format but SEAL's own serialization, which a plain
Pyfhel program reads (:class:`SealStoreEncryptor`): at the level and scale the planner gives for the
declared chain (the same :func:`hecore.planner.at_rest`, nothing dropped), compressed with SEAL's zstd
mode (:func:`seal_compressed`); what ``hepix process`` computes from such bytes is written the same way
(:func:`stored_like`).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np

from ..ciphertexts import CiphertextBatch
from ..errors import HepixError
from .native import native_module, pyfhel_for, seal_context_bytes

MAGIC = b"HPXC"
HEADER_SIZE = 24
FLAG_SEEDED = 1
FLAG_COEFF = 2
#: SEAL serializations start with SEAL_MAGIC 0xA15E, little-endian.
SEAL_MAGIC = b"\x5e\xa1"

#: The two ways a table stores its ciphertexts (``hepix encrypt --store``).
STORES = ("seal", "compact")

#: SEAL's compression modes, by the byte its serialization header holds at offset 5.
SEAL_COMPRESSIONS = {0: "none", 1: "zlib", 2: "zstd"}
_SEAL_HEADER = 16
#: The zstd level of the frames :func:`seal_compressed` writes.  SEAL's own writer (Pyfhel's ``to_bytes``
#: with ``compr_mode="zstd"``) uses zstd's default level 3; on ciphertext residues level 1 stores the same
#: bytes (within 0.5%) at a quarter to a half of the CPU, and higher levels save at most 5% for 20x the time.
ZSTD_LEVEL = 1


class MalformedCiphertext(HepixError, ValueError):
    """Ciphertext bytes that are neither a SEAL serialization nor a valid compact ciphertext of the context."""


@dataclass(frozen=True)
class AtRest:
    """How ciphertexts are stored: the level, the scale and the low bits dropped (see :func:`hecore.planner.at_rest`).

    ``level`` counts the primes dropped from the first data level (0: a fresh ciphertext's level);
    ``drop0`` / ``drop1`` the low bits dropped from c0 / c1 (c1 is kept as its seed when the
    encryption is secret-key, and ``drop1`` then does not apply).  ``error_bound`` is the bound on
    the error the rounding adds to a raw value after the planned chain (probability 2^-40 per value
    of exceeding it) and ``tolerance`` what the chain's exact result tolerates (half its grid step),
    both in raw units.  ``chain`` records the ops the storage was planned for.
    """

    level: int
    primes: int
    scale_bits: int
    drop0: int = 0
    drop1: int = 0
    error_bound: float = 0.0
    tolerance: float = 0.0
    chain: tuple[str, ...] = ()
    #: ``compact`` (this module's format) or ``seal`` (SEAL's own serialization at this level and scale,
    #: nothing dropped: :class:`SealStoreEncryptor`)
    format: str = "compact"

    def to_json(self) -> dict:
        d = asdict(self)
        d["chain"] = list(self.chain)
        if self.format == "compact":        # what compact runs recorded before SEAL bytes had a plan too
            del d["format"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "AtRest":
        try:
            fmt = str(d.get("format", "compact"))
            if fmt not in STORES:
                raise ValueError(f"format {fmt!r} is not one of {', '.join(STORES)}")
            return cls(level=int(d["level"]), primes=int(d["primes"]), scale_bits=int(d["scale_bits"]),
                       drop0=int(d.get("drop0", 0)), drop1=int(d.get("drop1", 0)),
                       error_bound=float(d.get("error_bound", 0.0)), tolerance=float(d.get("tolerance", 0.0)),
                       chain=tuple(d.get("chain", ())), format=fmt)
        except (KeyError, TypeError, ValueError) as e:
            raise MalformedCiphertext(f"malformed at-rest record {d!r}: {e}") from None

    @property
    def scale(self) -> float:
        return 2.0 ** self.scale_bits

    def describe(self) -> str:
        dropped = f", {self.drop0} low bits of c0 dropped" if self.drop0 else ", no bits dropped"
        return f"level {self.level} ({self.primes} prime{'s' if self.primes > 1 else ''}), scale 2^{self.scale_bits}{dropped}"


@dataclass(frozen=True)
class CompactHeader:
    """What the 24-byte header of a compact ciphertext says (checked against the context)."""

    flags: int
    level: int
    primes: int
    drop0: int
    drop1: int
    scale: float

    @property
    def seeded(self) -> bool:
        return bool(self.flags & FLAG_SEEDED)


def is_compact(ct) -> bool:
    """True when ``ct`` (bytes, memoryview or uint8 array) starts with the compact format's magic."""
    return bytes(memoryview(ct)[:4]) == MAGIC


def _native():
    return native_module()


# --- SEAL's own serialization, compressed ---------------------------------------------------------

def seal_compression(ct) -> str | None:
    """SEAL's compression mode of a serialization (``none``, ``zlib``, ``zstd``); None for anything else
    (compact bytes, or bytes that are not SEAL's)."""
    head = bytes(memoryview(ct)[:6])
    if len(head) < 6 or head[:2] != SEAL_MAGIC:
        return None
    return SEAL_COMPRESSIONS.get(head[5])


def seal_compressed(raw, compression: str) -> bytes:
    """An uncompressed SEAL serialization (``to_bytes(compr_mode="none")``) in SEAL's ``compression`` mode:
    the same header with the mode and the total size set, then SEAL's payload as one zstd frame (level
    :data:`ZSTD_LEVEL`) or zlib stream -- the bytes SEAL's own writer makes, which SEAL and Pyfhel load
    (``PyCtxt(bytestring=...)``) like any serialization.  Bytes already in ``compression`` pass unchanged."""
    raw = bytes(raw)
    mode = seal_compression(raw)
    if mode == compression:
        return raw
    if compression not in SEAL_COMPRESSIONS.values():
        raise HepixError(f"unknown SEAL compression {compression!r}; choose one of "
                         f"{', '.join(SEAL_COMPRESSIONS.values())}")
    if mode != "none" or len(raw) < _SEAL_HEADER or int.from_bytes(raw[8:16], "little") != len(raw):
        raise MalformedCiphertext(f"expected an uncompressed SEAL serialization to compress, got {len(raw)} bytes "
                                  f"({mode or 'not SEAL'})")
    payload = memoryview(raw)[_SEAL_HEADER:]
    if compression == "zstd":
        import pyarrow as pa

        body = pa.Codec("zstd", compression_level=ZSTD_LEVEL).compress(payload, asbytes=True)
    else:
        import zlib

        body = zlib.compress(payload)
    code = next(k for k, v in SEAL_COMPRESSIONS.items() if v == compression)
    header = bytearray(raw[:_SEAL_HEADER])
    header[5] = code
    header[8:16] = (_SEAL_HEADER + len(body)).to_bytes(8, "little")
    return bytes(header) + body


def stored_like(raw, original, public) -> bytes:
    """``raw`` -- the uncompressed SEAL bytes of a ciphertext computed from the stored ``original`` (what
    ``hepix process`` writes) -- stored the way ``original`` is: lossless compact bytes for a compact
    original (:meth:`Compactor.compact_like`), else SEAL bytes in the original's compression mode.  The
    level is the one the ops left: a table stored at the level its declared chain needs stays there."""
    head = bytes(memoryview(original)[:6])
    if head[:4] == MAGIC:
        return Compactor.for_public(public).compact_like([raw], [original])[0]
    mode = seal_compression(head)
    return bytes(raw) if mode in (None, "none") else seal_compressed(raw, mode)


class Compactor:
    """Conversions between SEAL bytes and compact bytes for one context; needs no key.

    Built from the SEAL parameters of a Pyfhel context (:meth:`for_public`, :meth:`for_params`).
    """

    def __init__(self, seal_context: bytes, security_bits: int = 128):
        try:
            self._native = _native().Compactor(seal_context, security_bits)
        except ValueError as e:
            raise HepixError(f"cannot read the context for the compact format: {e}") from None

    @classmethod
    def for_public(cls, public) -> "Compactor":
        """For a :class:`hecore.seal.context.PublicMaterial` (cached per context)."""
        return _compactor_for_context(public.context)

    @classmethod
    def for_params(cls, params) -> "Compactor":
        """For parameters alone (SEAL regenerates the same primes): what a keyless reader such as the audit needs."""
        return _compactor_for_params(params)

    @property
    def levels(self) -> int:
        return int(self._native.levels)

    def primes(self, level: int) -> list[int]:
        return [int(q) for q in self._native.primes(level)]

    def parms_id(self, level: int) -> bytes:
        return bytes(self._native.parms_id(level))

    def compact(self, cts, at_rest: AtRest, *, keep_seed: bool = True) -> list[bytes]:
        """SEAL ciphertext bytes -> compact bytes at ``at_rest``'s level (mod-switched down when they are
        higher), c0 (and c1 unless kept as its seed) rounded as it says."""
        items = [bytes(c) for c in cts]
        try:
            return self._native.compact(items, at_rest.level, at_rest.drop0, at_rest.drop1, keep_seed)
        except ValueError as e:
            raise MalformedCiphertext(f"cannot store these ciphertexts compact: {e}") from None

    def compact_like(self, cts, originals) -> list[bytes]:
        """SEAL bytes of ciphertexts computed from compact ``originals`` (one each: what ``hepix process``
        writes) -> lossless compact bytes at their own level, c1 kept as the original's seed where the ops
        left it unchanged (plaintext additions do; rotations do not).  Nothing is rounded again, so
        processing a table any number of times adds no error of the format's."""
        items, origs = [bytes(c) for c in cts], [bytes(o) for o in originals]
        try:
            return self._native.compact_like(items, origs)
        except ValueError as e:
            raise MalformedCiphertext(f"cannot store these processed ciphertexts compact: {e}") from None

    def expand(self, blobs) -> list[bytes]:
        """Compact bytes -> uncompressed SEAL bytes, each checked; SEAL bytes pass through unchanged."""
        items = [bytes(b) for b in blobs]
        idx = [i for i, b in enumerate(items) if b[:4] == MAGIC]
        if not idx:
            return items
        try:
            expanded = self._native.expand([items[i] for i in idx])
        except ValueError as e:
            raise MalformedCiphertext(
                f"{e}; the bytes are not a compact ciphertext of this key's parameters (re-encrypt, or check "
                "that the table and the key belong together)") from None
        for i, b in zip(idx, expanded):
            items[i] = b
        return items

    def expand_one(self, blob) -> bytes:
        return self.expand([blob])[0]

    def header(self, blob) -> CompactHeader:
        """The checked header of one compact ciphertext."""
        try:
            flags, level, primes, d0, d1, scale = self._native.header(bytes(blob))
        except ValueError as e:
            raise MalformedCiphertext(str(e)) from None
        return CompactHeader(int(flags), int(level), int(primes), int(d0), int(d1), float(scale))


@functools.lru_cache(maxsize=8)
def _compactor_for_context(context: bytes) -> Compactor:
    sec, _scale, seal_bytes = seal_context_bytes(context)
    return Compactor(seal_bytes, sec)


@functools.lru_cache(maxsize=8)
def _compactor_for_params(params) -> Compactor:
    sec, _scale, seal_bytes = seal_context_bytes(pyfhel_for(params).to_bytes_context(compr_mode="none"))
    return Compactor(seal_bytes, sec)


class CompactEncryptor:
    """An encryptor whose ciphertexts are stored compact (:class:`AtRest`): wraps any packed-layout encryptor.

    With the secret key (:class:`~hecore.encrypt.symmetric.SymmetricEncryptor`) it encrypts straight into
    the compact format at the planned level (fewer primes: less work); with the public key it encrypts as
    usual and compacts after (mod-switched to the level, c1 bit-packed).  ``name`` and ``security`` are the
    wrapped encryptor's: storage changes neither.
    """

    def __init__(self, inner, at_rest: AtRest):
        self.inner = inner
        self.at_rest = at_rest
        self.params = inner.params
        self.name = inner.name
        self.security = inner.security
        self.params.ckks_only(f"the compact at-rest format is for CKKS; {self.params.name} is "
                              f"{self.params.scheme.upper()}: store with --store seal", HepixError)
        self._symmetric = callable(getattr(inner, "encrypt_compact", None))
        self._compactor = None if self._symmetric else Compactor.for_public(inner.ctx.public)

    @property
    def max_row(self) -> int:
        return self.params.slots

    def encrypt(self, rows) -> CiphertextBatch:
        if self._symmetric:
            cts = self.inner.encrypt_compact(rows, self.at_rest)
        else:       # public key: encrypted at the planned scale, then moved down and compacted
            rows = np.asarray(rows)
            rows = rows[None, :] if rows.ndim == 1 else rows
            ctx = self.inner.ctx
            one = ctx.encrypt_complex if np.iscomplexobj(rows) else ctx.encrypt_vector
            cts = self._compactor.compact([one(row, scale_bits=self.at_rest.scale_bits) for row in rows],
                                          self.at_rest)
        return CiphertextBatch.from_list(cts, self.name, self.security)


class SealStoreEncryptor:
    """An encryptor whose ciphertexts are stored in SEAL's own serialization (what ``hepix encrypt --store seal``,
    the default, writes for the packed layouts): at ``at_rest``'s level and scale (None: the first level at the
    preset's scale), compressed in SEAL's ``compression`` mode (:func:`seal_compressed`).  Wraps any
    packed-layout encryptor: the owner's secret key (:class:`~hecore.encrypt.symmetric.SymmetricEncryptor`,
    seeded, encrypting at the level directly) or the public key's (encrypted at the planned scale, then
    moved down to the level).  Nothing is dropped: a plain Pyfhel program decrypts every ciphertext.
    ``name`` and ``security`` are the wrapped encryptor's."""

    def __init__(self, inner, at_rest: AtRest | None, compression: str = "zstd"):
        if compression not in SEAL_COMPRESSIONS.values():
            raise HepixError(f"unknown SEAL compression {compression!r}; choose one of "
                             f"{', '.join(SEAL_COMPRESSIONS.values())}")
        self.inner = inner
        self.at_rest = at_rest
        self.compression = compression
        self.params = inner.params
        self.name = inner.name
        self.security = inner.security
        if at_rest is not None:
            self.params.ckks_only(f"a planned level and scale are CKKS's; {self.params.name} is "
                                  f"{self.params.scheme.upper()}: encrypt without --for-op", HepixError)
        self._symmetric = callable(getattr(inner, "encrypt_at", None))

    @property
    def max_row(self) -> int:
        return self.params.slots

    def _seal_bytes(self, rows) -> list[bytes]:
        plan = self.at_rest
        if plan is None:
            return list(self.inner.encrypt(rows))
        if self._symmetric:
            return self.inner.encrypt_at(rows, plan.level, plan.scale_bits)
        rows = np.asarray(rows)
        rows = rows[None, :] if rows.ndim == 1 else rows
        ctx = self.inner.ctx
        one = ctx.encrypt_complex if np.iscomplexobj(rows) else ctx.encrypt_vector
        return [one(row, scale_bits=plan.scale_bits, level=plan.level) for row in rows]

    def encrypt(self, rows) -> CiphertextBatch:
        cts = [seal_compressed(ct, self.compression) for ct in self._seal_bytes(rows)]
        return CiphertextBatch.from_list(cts, self.name, self.security)


def tile_for(params, halo: int, complex_packing: bool, height: int, width: int) -> tuple[int, int]:
    """The packed tile (``tile_h x tile_w``) that stores a ``height x width`` image channel in the fewest
    ciphertexts (then the least padding): at rest, padding is paid in bytes.  The preset's default tile
    (:func:`hecore.layouts.packed.default_tile`) fills the slots but may divide an image badly, e.g. 60x62
    tiles cover 256x256 with 25 ciphertexts where 26x128 tiles need 20."""
    best = None
    parts = 2 if complex_packing else 1
    for w in range(1, min(width, params.slots) + 1):
        rows = params.slots // (w + 2 * halo) - 2 * halo          # block rows (per half) that fit, less the halo
        if rows < 1:
            break
        th = min(rows * parts, height + (height % parts))
        th -= th % parts
        if th < parts:
            continue
        count = -(-height // th) * -(-width // w)
        key = (count, th * w)
        if best is None or key < best[0]:
            best = (key, (th, w))
    if best is None:
        raise HepixError(f"no tile with a halo of {halo} fits {params.name}'s {params.slots} slots")
    return best[1]
