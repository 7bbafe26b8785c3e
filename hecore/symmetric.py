"""Secret-key (symmetric) CKKS encryption with seeded ciphertexts: the key owner's fast secure path.

Pyfhel 3.5 encrypts with the public key only.  The native extension ``hepix_seal`` (built from
``native/`` by ``make setup``, see tools/build_native.sh) links the very SEAL 4.1 library the
Pyfhel wheel ships and calls SEAL's ``Encryptor(context, secret_key).encrypt_symmetric``.  A
symmetric ciphertext's second component is uniformly random, so SEAL stores only the seed it is
expanded from: the serialized ciphertext is about half the size, and secret-key encryption costs
about half a public-key one (REFERENCE.md).  Each encryption draws a fresh seed and fresh error
(IND-CPA, like public-key encryption); nothing is cached.  SEAL expands the seed when the bytes
are loaded, so Pyfhel -- and every hepix job after encryption -- reads them like any ciphertext.

Only the holder of the secret key can encrypt this way: parties that must encrypt without it
keep using public-key encryption (:func:`hecore.packed.encrypt_tiles`).

Two packings of the packed layout (tiles, halo and slot order as in :mod:`hecore.packed`):

* real (:func:`encrypt_tiles`): one tile channel per ciphertext, the pixel values as the real
  parts of the slots; decrypts with :func:`hecore.packed.decrypt_tiles`, goes through
  ``hepix process`` like a public-key ciphertext;
* complex (:func:`encrypt_tiles_complex`): two tile channels per ciphertext, one in the real
  and one in the imaginary parts of the slots (twice the pixels per encryption and per byte);
  decrypts with :func:`decrypt_tiles_complex`.  Additions and real plaintext products act on
  both parts alike; ops that mix slots with conjugation do not, so the table jobs use the
  real packing.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from .ciphertexts import SECURITY_IND_CPA
from .context import HEContext, PublicMaterial
from .errors import HepixError, KeyMismatch
from .packed import PackedTile, check_tile_fits
from .pixel import channel_plane
from .tiling import TileGrid, tile_image, untile_channels

#: The ``strategy`` label of rows encrypted this way (the ``security`` label stays ind-cpa).
STRATEGY = "symmetric"
ENCRYPTIONS = ("public", "symmetric")
COMPRESSIONS = ("none", "zstd", "zlib")
#: Serialization of the seeded ciphertexts.  zstd shrinks the stored component to the primes' bit
#: widths (~40% less) but costs about as much time as the encryption itself.
DEFAULT_COMPRESSION = "none"


class NativeExtensionMissing(HepixError):
    """The ``hepix_seal`` extension is not installed (``make setup`` builds it)."""


def native_module():
    """The ``hepix_seal`` extension module, or :class:`NativeExtensionMissing` saying how to build it."""
    try:
        import hepix_seal
    except ImportError as e:
        raise NativeExtensionMissing(
            f"symmetric encryption needs hepix's native extension hepix_seal, which cannot be imported ({e}); "
            "build and install it with `make setup` (tools/build_native.sh), or encrypt with the public key "
            "(--encryption public)"
        ) from None
    return hepix_seal


def available() -> bool:
    try:
        native_module()
    except NativeExtensionMissing:
        return False
    return True


def seal_context_bytes(context: bytes) -> tuple[int, float, bytes]:
    """Split Pyfhel's ``to_bytes_context`` into (security bits, scale, SEAL's EncryptionParameters bytes).

    Pyfhel 3.5 writes its own prefix before SEAL's serialization: the security level (int32),
    the number of prime sizes (uint64), the sizes (int32 each) and the scale (float64).
    """
    head = struct.Struct("<iQ")
    if len(context) < head.size:
        raise HepixError(f"the context is {len(context)} bytes, too short to be a Pyfhel context")
    sec, count = head.unpack_from(context)
    if not 0 <= count <= 64:
        raise HepixError(f"the context bytes do not start with a Pyfhel context prefix ({count} prime sizes)")
    offset = head.size + 4 * count
    if len(context) < offset + 8:
        raise HepixError("the context bytes end inside Pyfhel's prefix")
    (scale,) = struct.unpack_from("<d", context, offset)
    return sec, scale, bytes(context[offset + 8:])


class SymmetricEncryptor:
    """Seeded secret-key CKKS encryption of batches of slot vectors (the GIL is released meanwhile).

    ``check_key`` (default) proves that ``secret_key`` belongs to ``public`` before anything is
    encrypted: a public-key encryption of known values must decrypt under it.
    """

    def __init__(self, public: PublicMaterial, secret_key: bytes, *, compression: str = DEFAULT_COMPRESSION,
                 check_key: bool = True):
        params = public.params
        if params.scheme != "ckks":
            raise HepixError(f"symmetric encryption is implemented for CKKS; {params.name} is "
                             f"{params.scheme.upper()}: use --encryption public, or keys of a CKKS preset")
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
        """From a context that holds the secret key (:func:`hecore.keys.load_secret`)."""
        ctx._require_secret("symmetric encryption")
        return cls(ctx.public, ctx.secret_key_bytes(), **kwargs)

    @classmethod
    def from_key_directory(cls, keys, **kwargs) -> "SymmetricEncryptor":
        """From a key directory with its secret key (0600; refused otherwise, and when missing)."""
        from .keys import read_public, read_secret_key

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

    def encrypt(self, values) -> list[bytes]:
        """Complex packing for complex input, real otherwise."""
        return self.encrypt_complex(values) if np.iscomplexobj(values) else self.encrypt_real(values)


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


# --- the packed layout ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TileRef:
    """Where one tile channel's values belong (what :func:`hecore.tiling.untile_channels` needs)."""

    ty: int
    tx: int
    y: int
    x: int
    h: int
    w: int
    channel: int


@dataclass(frozen=True)
class ComplexTile:
    """One ciphertext holding two tile channels: ``real`` in the real parts of the slots, ``imag`` in
    the imaginary parts (None when an image has an odd number of tile channels: imaginary parts 0)."""

    real: TileRef
    imag: TileRef | None
    ct: bytes
    halo: int = 0
    security: str = SECURITY_IND_CPA


def _units(pixels: np.ndarray, tile_h: int, tile_w: int, halo: int):
    grid, tiles = tile_image(pixels, tile_h, tile_w, halo)
    refs, planes = [], []
    for t in tiles:
        for c in range(grid.channels):
            refs.append(TileRef(t.ty, t.tx, t.y, t.x, t.h, t.w, c))
            planes.append(np.asarray(channel_plane(t.pixels, c), dtype=np.float64).reshape(-1))
    return grid, refs, np.stack(planes)


def encrypt_tiles(pixels: np.ndarray, enc: SymmetricEncryptor, tile_h: int, tile_w: int, halo: int = 0
                  ) -> tuple[TileGrid, list[PackedTile]]:
    """Real packing: as :func:`hecore.packed.encrypt_tiles`, every tile channel encrypted with the
    secret key in one native call for the whole image."""
    check_tile_fits(enc.params, tile_h, tile_w, halo)
    grid, refs, planes = _units(pixels, tile_h, tile_w, halo)
    cts = enc.encrypt_real(planes)
    return grid, [PackedTile(r.ty, r.tx, r.y, r.x, r.h, r.w, r.channel, ct, halo=halo) for r, ct in zip(refs, cts)]


def encrypt_tiles_complex(pixels: np.ndarray, enc: SymmetricEncryptor, tile_h: int, tile_w: int,
                          halo: int = 0) -> tuple[TileGrid, list[ComplexTile]]:
    """Complex packing: tile channels in row-major order, paired (1st real + 2nd imaginary, ...)."""
    check_tile_fits(enc.params, tile_h, tile_w, halo)
    grid, refs, planes = _units(pixels, tile_h, tile_w, halo)
    if len(refs) % 2:
        planes = np.vstack([planes, np.zeros((1, planes.shape[1]))])
    values = planes[0::2] + 1j * planes[1::2]
    cts = enc.encrypt_complex(values)
    out = [ComplexTile(refs[2 * i], refs[2 * i + 1] if 2 * i + 1 < len(refs) else None, ct, halo)
           for i, ct in enumerate(cts)]
    return grid, out


def decrypt_block_complex(ctx: HEContext, ct, tile_h: int, tile_w: int, halo: int = 0
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The two ``tile_h x tile_w`` blocks (real part, imaginary part; halo cut off) of one ciphertext."""
    bh, bw = tile_h + 2 * halo, tile_w + 2 * halo
    block = ctx.decrypt_complex_slots(ct, bh * bw).reshape(bh, bw)[halo:halo + tile_h, halo:halo + tile_w]
    return block.real, block.imag


def decrypt_tiles_complex(ctx: HEContext, grid: TileGrid, tiles: Iterable[ComplexTile]) -> np.ndarray:
    """Decrypt complex-packed tiles into a float image of the grid's size (raw values before rounding)."""
    def pieces():
        for ct in tiles:
            re, im = decrypt_block_complex(ctx, ct.ct, grid.tile_h, grid.tile_w, ct.halo)
            yield ct.real, ct.real.channel, re
            if ct.imag is not None:
                yield ct.imag, ct.imag.channel, im
    return untile_channels(grid, pieces())
