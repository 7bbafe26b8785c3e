"""Encrypted frequency-domain filtering: the DFT -- Hadamard -- inverse DFT pipeline in CKKS (Costache,
Smart and Vivek, "Faster Homomorphic Evaluation of Discrete Fourier Transforms").

A vector of ``N`` pixel values (an image row, or a ``h x w`` tile row-major, ``N = h w``) sits in
the complex CKKS slots of one ciphertext, repeated to fill all ``N_ring / 2`` slots so that
rotations are cyclic over ``N``.  The pipeline is

    y = iDFT( mask * DFT(x) )

with ``mask`` a plaintext (the worked example: a low-pass filter) or an encrypted vector.

How the transforms are evaluated
--------------------------------
That paper evaluates the DFT as a full matrix product in its own ring encoding (one element per
ciphertext, no packing); a dense ``N x N`` product on packed slots would cost ``N`` plaintext
products.  Here the DFT is factorised like an FFT:

* a radix-2 decimation-in-frequency stage of half-size ``h`` is a sparse matrix with three
  diagonals (slot shifts ``0, +h, -h``): ``y[i] = (x[i] + x[i+h]) / 2`` on the top half of each
  block, ``y[i] = (x[i-h] - x[i]) w^j / 2`` on the bottom half;
* ``log2 N`` such stages give ``DFT(x) / N`` in *bit-reversed* order, and the exact inverse
  stages, applied in reverse, take that order back to natural order -- so the permutation that
  an FFT needs is never computed: the mask is simply permuted (it is public, or encrypted by
  the key holder already permuted, :func:`spectrum_order`);
* ``r`` consecutive stages multiply into one matrix with ``2^(r+1) - 1`` diagonals, so the
  ``log2 N`` stages are grouped into ``levels`` groups per transform (default 2): each group is
  one baby-step giant-step product over its diagonals (about ``2 sqrt(2^(r+1))`` rotations and
  ``2^(r+1)`` plaintext products) and costs exactly one level;
* a 2-D DFT of a ``h x w`` tile is the same with the row stages (shifts ``< w``) and the column
  stages (shifts multiple of ``w``).

Plaintext diagonals are encoded at the scale of the prime the following rescale divides by,
so every group leaves the ciphertext's scale exactly as it was.

Three ways to run the pipeline (``stages``):

``three``      DFT (``levels`` groups), Hadamard product with the mask (one more level; the
               mask may be a ciphertext), iDFT (``levels`` groups): depth ``2 levels + 1``.
``fold``       (default) the same, with the plaintext mask multiplied into the first group of
               the iDFT (its diagonals are scaled by the permuted mask): the same rotations and
               products, one level less, depth ``2 levels``.
``circulant``  ``iDFT diag(mask) DFT`` multiplied out in plaintext into one matrix (a real
               circulant for a 1-D symmetric mask, block-circulant for 2-D): depth 1, but ``N``
               diagonals, so ``N`` plaintext products -- cheap in depth, dear in time for large N.

NumPy's FFT pipeline (:func:`reference`) is the reference every result is checked against.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from hecore.errors import InvalidParameters

from .base import ImageOp, register

__all__ = ["STAGES", "Diagonals", "dif_stages", "inverse_stages", "compose", "group_stages",
           "apply_diagonals", "spectrum_order", "lowpass_mask", "reference", "DftPipeline",
           "DftFilter", "parse_dftfilter", "pipeline_depth"]

STAGES = ("three", "fold", "circulant")

#: shift -> the diagonal's values (length N): ``(M x)[i] = sum_s d_s[i] x[(i + s) mod N]``.
Diagonals = dict


def _check_dims(dims: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(int(d) for d in dims)
    if not dims or any(d < 2 or d & (d - 1) for d in dims):
        raise InvalidParameters(f"DFT sizes must be powers of two >= 2, got {dims}")
    return dims


def _stage(dims: tuple[int, ...], axis: int, half: int, inverse: bool) -> Diagonals:
    """One radix-2 DIF stage (or its exact inverse) of half-size ``half`` along ``axis``."""
    n = math.prod(dims)
    stride = math.prod(dims[axis + 1:])
    length = dims[axis]
    idx = np.arange(n)
    q = ((idx // stride) % length) % (2 * half)
    top = q < half
    j = np.where(top, q, q - half)
    tw = np.exp(-2j * np.pi * j / (2 * half))
    s = half * stride
    if not inverse:                                   # y_top = (u + v)/2, y_bot = (u - v) w / 2
        return {0: np.where(top, 0.5, -0.5 * tw), s: np.where(top, 0.5, 0), -s: np.where(top, 0, 0.5 * tw)}
    ctw = np.conj(tw)                                 # u = y_top + y_bot conj(w), v = y_top - y_bot conj(w)
    return {0: np.where(top, 1.0, -ctw), s: np.where(top, ctw, 0), -s: np.where(top, 0, 1.0)}


def dif_stages(dims: Sequence[int]) -> list[Diagonals]:
    """The forward stages in the order they are applied; together: ``DFT(x) / N``, bit-reversed."""
    dims = _check_dims(dims)
    out = []
    for axis, length in enumerate(dims):
        half = length // 2
        while half >= 1:
            out.append(_stage(dims, axis, half, False))
            half //= 2
    return out


def inverse_stages(dims: Sequence[int]) -> list[Diagonals]:
    """The exact inverses of :func:`dif_stages`, in the order they are applied (reverse)."""
    dims = _check_dims(dims)
    out = []
    for axis, length in enumerate(dims):
        half = length // 2
        while half >= 1:
            out.append(_stage(dims, axis, half, True))
            half //= 2
    return out[::-1]


def _norm(shift: int, n: int) -> int:
    return shift % n


def compose(after: Diagonals, before: Diagonals, n: int) -> Diagonals:
    """The diagonals of ``after @ before`` (``before`` applied first)."""
    out: dict[int, np.ndarray] = {}
    for s, a in after.items():
        for t, b in before.items():
            k = _norm(s + t, n)
            term = a * np.roll(b, -s)
            if k in out:
                out[k] = out[k] + term
            else:
                out[k] = term.astype(np.complex128)
    return {k: v for k, v in out.items() if np.any(np.abs(v) > 1e-15)}


def group_stages(stages: list[Diagonals], levels: int, n: int) -> list[Diagonals]:
    """``stages`` multiplied together in ``levels`` consecutive groups of near-equal size."""
    if not 1 <= levels <= len(stages):
        raise InvalidParameters(f"levels per transform must lie in 1..{len(stages)} (log2 N), got {levels}")
    sizes = [len(stages) // levels + (1 if i < len(stages) % levels else 0) for i in range(levels)]
    out, at = [], 0
    for size in sizes:
        g = compose({0: np.ones(n, dtype=np.complex128)}, stages[at], n)   # shifts mod n, +h and -h merged
        for st in stages[at + 1: at + size]:
            g = compose(st, g, n)
        out.append(g)
        at += size
    return out


def apply_diagonals(diags: Diagonals, x: np.ndarray) -> np.ndarray:
    """``M x`` in plaintext (the reference for the encrypted products)."""
    y = np.zeros(len(x), dtype=np.complex128)
    for s, d in diags.items():
        y += d * np.roll(x, -s)
    return y


def spectrum_order(dims: Sequence[int]) -> np.ndarray:
    """``perm`` such that slot ``i`` of the encrypted spectrum holds frequency ``perm[i]`` (flat,
    row-major): the per-axis bit reversal the DIF stages leave."""
    dims = _check_dims(dims)
    axes = []
    for length in dims:
        bits = length.bit_length() - 1
        r = np.array([int(format(i, f"0{bits}b")[::-1], 2) for i in range(length)])
        axes.append(r)
    grids = np.meshgrid(*axes, indexing="ij")
    return np.ravel_multi_index([g.reshape(-1) for g in grids], dims)


def lowpass_mask(dims: Sequence[int], cutoff: float) -> np.ndarray:
    """The ideal low-pass mask in natural (NumPy) frequency order, flat: 1 where the normalised
    frequency radius ``sqrt(sum (f_a / (dims_a / 2))^2) <= cutoff``, else 0.  Symmetric
    (``m[k] = m[-k]``), so the filtered image is real."""
    dims = _check_dims(dims)
    if not 0 < cutoff <= math.sqrt(len(dims)) + 1e-12:
        raise InvalidParameters(f"low-pass cutoff must lie in (0, {math.sqrt(len(dims)):.3g}], got {cutoff}")
    grids = np.meshgrid(*[np.fft.fftfreq(d) * 2 for d in dims], indexing="ij")
    r2 = sum(g * g for g in grids)
    return (r2 <= cutoff * cutoff + 1e-12).astype(np.float64).reshape(-1)


def reference(x: np.ndarray, mask: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """NumPy's FFT pipeline: ``ifftn(mask * fftn(x))`` over ``dims`` (flat in, flat out, complex)."""
    dims = _check_dims(dims)
    xs = np.asarray(x, dtype=np.complex128).reshape(dims)
    return np.fft.ifftn(np.fft.fftn(xs) * np.asarray(mask).reshape(dims)).reshape(-1)


def pipeline_depth(stages: str, levels: int) -> int:
    if stages == "three":
        return 2 * levels + 1
    if stages == "fold":
        return 2 * levels
    if stages == "circulant":
        return 1
    raise InvalidParameters(f"unknown DFT pipeline {stages!r}; expected one of {STAGES}")


# --- the encrypted side ---------------------------------------------------------------------

@dataclass
class _Product:
    """One BSGS matrix-vector product: ``giant offset -> [(baby step, diagonal pre-rotated)]``."""

    unit: int
    baby: list[int]
    giants: dict[int, list[tuple[int, np.ndarray]]]
    encoded: dict = field(default_factory=dict)

    @property
    def diagonals(self) -> int:
        return sum(len(v) for v in self.giants.values())

    @property
    def rotations(self) -> int:
        return sum(1 for b in self.baby if b) + sum(1 for g in self.giants if g)


def _bsgs(diags: Diagonals, n: int) -> _Product:
    """Arrange ``diags`` for a baby-step giant-step product: shifts ``k u`` (``u`` their common
    unit) written ``k = g + b`` with ``b`` in the baby steps ``0, u, .., (B-1) u`` and ``g`` a
    multiple of ``B u``; the diagonal of ``k`` is pre-rotated by ``-g`` so that
    ``M x = sum_g rot(sum_b d'_k * rot(x, b), g)``."""
    shifts = sorted(diags)
    unit = 0
    for s in shifts:
        unit = math.gcd(unit, s)
    unit = math.gcd(unit, n) or n
    period = n // unit
    ks = [s // unit for s in shifts]
    signed = [k - period if k > period // 2 else k for k in ks]
    lo, hi = min(signed), max(signed)
    span = hi - lo + 1
    best = None
    for bsize in (1 << e for e in range(0, max(1, span).bit_length() + 1)):
        giants = {((k - lo) // bsize) for k in signed}
        cost = bsize - 1 + len(giants)
        if best is None or cost < best[0]:
            best = (cost, bsize)
    bsize = best[1]
    giants: dict[int, list] = {}
    baby = set()
    for s, k in zip(shifts, signed):
        g = lo + ((k - lo) // bsize) * bsize
        b = k - g
        baby.add(b * unit)
        giants.setdefault(g * unit, []).append((b * unit, np.roll(diags[s], g * unit)))
    return _Product(unit, sorted(baby), giants)


@dataclass
class DftPipeline:
    """The plaintext side of one pipeline: dims, mask and how it is staged, ready to evaluate.

    Built once (public: no key material) and reused for every vector of the same shape; the
    encoded plaintexts are cached per evaluator the first time :meth:`evaluate` runs."""

    dims: tuple[int, ...]
    mask: np.ndarray                  # natural frequency order, flat (length N)
    stages: str = "fold"
    levels: int = 2
    products: list = field(default_factory=list)
    hadamard: np.ndarray | None = None   # "three": the permuted mask, applied between the transforms
    inverse_levels: int | None = None    # the iDFT's groups when not ``levels`` (e.g. 2 + 1 to fit depth 4)

    @classmethod
    def build(cls, dims: Sequence[int], mask: np.ndarray | None, *, stages: str = "fold",
              levels: int = 2, inverse_levels: int | None = None) -> "DftPipeline":
        dims = _check_dims(dims)
        n = math.prod(dims)
        if stages not in STAGES:
            raise InvalidParameters(f"unknown DFT pipeline {stages!r}; expected one of {STAGES}")
        encrypted_mask = mask is None
        if encrypted_mask and stages != "three":
            raise InvalidParameters("an encrypted mask needs the three-stage pipeline (stages='three')")
        m = np.ones(n) if encrypted_mask else np.asarray(mask, dtype=np.complex128).reshape(-1)
        if m.size != n:
            raise InvalidParameters(f"the mask has {m.size} values for a DFT of {n}")
        perm = spectrum_order(dims)
        m_perm = m[perm]
        p = cls(dims, m, stages, levels, inverse_levels=inverse_levels)
        if stages == "circulant":
            p.products = [_bsgs(_circulant(dims, m), n)]
            return p
        fwd = group_stages(dif_stages(dims), levels, n)
        inv = group_stages(inverse_stages(dims), inverse_levels or levels, n)
        if stages == "fold":
            inv[0] = compose(inv[0], {0: m_perm.astype(np.complex128)}, n)
        elif not encrypted_mask:
            p.hadamard = m_perm
        p.products = [_bsgs(g, n) for g in fwd], [_bsgs(g, n) for g in inv]
        return p

    @property
    def n(self) -> int:
        return math.prod(self.dims)

    @property
    def depth(self) -> int:
        if self.stages == "circulant" or not self.inverse_levels:
            return pipeline_depth(self.stages, self.levels)
        return self.levels + self.inverse_levels + (1 if self.stages == "three" else 0)

    def _all(self) -> list[_Product]:
        if self.stages == "circulant":
            return list(self.products)
        fwd, inv = self.products
        return list(fwd) + list(inv)

    @property
    def rotations(self) -> int:
        return sum(p.rotations for p in self._all())

    @property
    def plaintext_products(self) -> int:
        return sum(p.diagonals for p in self._all()) + (1 if self.hadamard is not None else 0)

    # plaintext run of the very same products (checks the factorisation, no encryption)
    def apply_plain(self, x: np.ndarray, mask_values: np.ndarray | None = None) -> np.ndarray:
        v = np.asarray(x, dtype=np.complex128).reshape(-1)

        def run(prod: _Product, v):
            y = np.zeros_like(v)
            for g, terms in prod.giants.items():
                inner = sum(d * np.roll(v, -b) for b, d in terms)
                y += np.roll(inner, -g)
            return y

        if self.stages == "circulant":
            return run(self.products[0], v)
        fwd, inv = self.products
        for prod in fwd:
            v = run(prod, v)
        if self.hadamard is not None:
            v = v * self.hadamard
        elif mask_values is not None:
            v = v * np.asarray(mask_values)[spectrum_order(self.dims)]
        for prod in inv:
            v = run(prod, v)
        return v

    # --- encrypted ----------------------------------------------------------------------
    def replicate(self, values: np.ndarray, slots: int) -> np.ndarray:
        """``values`` (length N) repeated over ``slots`` so that rotations are cyclic over N."""
        if slots % self.n:
            raise InvalidParameters(f"a DFT of {self.n} needs a ring whose {slots} slots are a multiple of it; "
                                    f"use a preset with at least {self.n} slots")
        return np.tile(np.asarray(values).reshape(-1), slots // self.n)

    def evaluate(self, ev, c, encrypted_mask=None, stats: dict | None = None):
        """The pipeline on ciphertext ``c`` (the vector replicated over the slots, see
        :meth:`replicate`); ``encrypted_mask``: a ciphertext of the mask in spectrum order
        (:func:`spectrum_order`), replicated, for ``stages='three'`` built with ``mask=None``.
        ``stats`` (optional) receives encode/compute seconds."""
        ev.params.ckks_only(f"the DFT pipeline needs CKKS (complex slots), not {ev.params.scheme.upper()}")
        if ev.slots % self.n:
            self.replicate(np.zeros(self.n), ev.slots)         # raises the message
        if ev.level(c) + self.depth > ev.params.depth:
            raise InvalidParameters(
                f"the {self.stages} DFT pipeline with {self.levels} level(s) per transform needs depth {self.depth}; "
                f"{ev.params.name} affords {ev.params.depth - ev.level(c)} here (use `hepix plan` for a preset)")
        stats = stats if stats is not None else {}
        stats.setdefault("encode_seconds", 0.0)
        if self.stages == "circulant":
            return self._product(ev, self.products[0], c, stats)
        fwd, inv = self.products
        for prod in fwd:
            c = self._product(ev, prod, c, stats)
        if self.hadamard is not None:
            t0 = time.perf_counter()
            pt = ev.encode(self.replicate(self.hadamard, ev.slots), level=ev.level(c), scale=ev.level_prime(c))
            stats["encode_seconds"] += time.perf_counter() - t0
            c = ev.rescale(ev.multiply_plain(c, pt))
        elif encrypted_mask is not None:
            mk = ev.mod_switch(encrypted_mask, ev.level(c) - ev.level(encrypted_mask))
            c = ev.multiply(c, mk)
        for prod in inv:
            c = self._product(ev, prod, c, stats)
        return c

    def _product(self, ev, prod: _Product, c, stats: dict):
        level = ev.level(c)
        key = (id(ev), level)
        cache = prod.encoded.get(key)
        if cache is None:
            t0 = time.perf_counter()
            q = ev.level_prime(c)
            cache = {(g, b): ev.encode(self.replicate(d, ev.slots), level=level, scale=q)
                     for g, terms in prod.giants.items() for b, d in terms}
            prod.encoded.clear()               # one evaluator at a time: keep memory bounded
            prod.encoded[key] = cache
            stats["encode_seconds"] += time.perf_counter() - t0
        # baby steps are multiples of a power-of-two unit: each from the previous one by a step of
        # (mostly) one unit, one key switch each, where a direct rotation by 3u, 5u, ... takes two or three
        babies, prev, prev_b = {}, c, 0
        for b in prod.baby:
            babies[b] = prev = prev if b == prev_b else ev.rotate(prev, b - prev_b)
            prev_b = b
        out = None
        for g, terms in prod.giants.items():
            inner = None
            for b, _ in terms:
                inner = ev.add_into(inner, ev.multiply_plain(babies[b], cache[(g, b)]))
            if g:
                inner = ev.rotate(inner, g)
            out = ev.add_into(out, inner)
        return ev.rescale(out)


def _circulant(dims: tuple[int, ...], mask: np.ndarray) -> Diagonals:
    """The diagonals of ``iDFT diag(mask) DFT`` multiplied out: ``M[i, i'] = k[(p(i) - p(i')) mod dims]``
    with ``k = ifftn(mask)`` (constant diagonals in 1-D, block-structured in 2-D)."""
    n = math.prod(dims)
    kern = np.fft.ifftn(np.asarray(mask).reshape(dims))
    coords = np.unravel_index(np.arange(n), dims)
    out = {}
    for s in range(n):
        j = (np.arange(n) + s) % n
        cj = np.unravel_index(j, dims)
        diff = tuple((a - b) % d for a, b, d in zip(coords, cj, dims))
        d = kern[diff]
        if np.any(np.abs(d) > 1e-15):
            out[s] = d.astype(np.complex128)
    return out


# --- the hepix op ---------------------------------------------------------------------------

_FORM = "'dftfilter:lowpass=R[,levels=L][,stages=fold|three|circulant]', e.g. dftfilter:lowpass=0.5"


@register
@dataclass(frozen=True)
class DftFilter(ImageOp):
    """``dftfilter:lowpass=R[,levels=L][,stages=fold|three|circulant]`` on packed tiles (CKKS).

    The tile's block (rows x cols slots, both powers of two; encrypt with ``--halo 0``) goes
    through the 2-D DFT, the low-pass mask of normalised cutoff ``R`` (:func:`lowpass_mask`),
    and the inverse 2-D DFT.  The filter is circular *per tile*: its reference is NumPy's FFT
    pipeline on each tile's block (:func:`reference`), not on the whole image.
    """

    cutoff: float
    levels: int = 2
    stages: str = "fold"
    tile: tuple | None = None          # (tile_h, tile_w): set by `hepix process` from the input's tiles

    name: ClassVar[str] = "dftfilter"
    form: ClassVar[str] = _FORM
    needs_rotation: ClassVar[bool] = True
    post_scale_factor: ClassVar[float] = 1.0
    halo: ClassVar[int] = 0
    pointwise: ClassVar[bool] = False
    packed_only: ClassVar[bool] = True
    position_free: ClassVar[bool] = False
    shift_invariant: ClassVar[bool] = False
    real_on_blocks: ClassVar[bool] = True     # iDFT diag(mask) DFT is real for a symmetric mask

    def __post_init__(self):
        if not (isinstance(self.cutoff, (int, float)) and 0 < float(self.cutoff) <= math.sqrt(2)):
            raise ValueError(f"low-pass cutoff must lie in (0, 1.414], got {self.cutoff!r}")
        if self.stages not in STAGES:
            raise ValueError(f"stages must be one of {STAGES}, got {self.stages!r}")
        if not isinstance(self.levels, int) or not 1 <= self.levels <= 8:
            raise ValueError(f"levels per transform must be an integer in 1..8, got {self.levels!r}")
        if self.tile is not None:
            th, tw = (int(v) for v in self.tile)
            _check_dims((th, tw))
            object.__setattr__(self, "tile", (th, tw))

    @property
    def depth(self) -> int:
        return pipeline_depth(self.stages, self.levels)

    @property
    def spec(self) -> str:
        c = repr(float(self.cutoff)).rstrip("0").rstrip(".")
        tile = f",tile={self.tile[0]}x{self.tile[1]}" if self.tile else ""
        return f"dftfilter:lowpass={c},levels={self.levels},stages={self.stages}{tile}"

    def mask(self, dims: Sequence[int]) -> np.ndarray:
        return lowpass_mask(dims, float(self.cutoff))

    def pipeline(self, dims: Sequence[int]) -> DftPipeline:
        return _pipeline_cached(tuple(dims), float(self.cutoff), self.levels, self.stages)

    def apply_block(self, block: np.ndarray) -> np.ndarray:
        """The plaintext reference on one tile block (2-D array): the real part of NumPy's pipeline."""
        dims = block.shape
        return reference(block.reshape(-1), self.mask(dims), dims).real.reshape(dims)

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        """The reference on a whole (H, W) or (H, W, C) image, tile by tile as the packed layout
        computes it: each ``tile_h x tile_w`` block (edge pixels repeated beyond the image, as
        `hepix encrypt` pads) filtered on its own, its valid part kept -- every block of every channel in
        one batched FFT."""
        arr = np.asarray(img, dtype=np.float64)
        h, w = arr.shape[:2]
        th, tw = self.tile or (h, w)
        planes = arr if arr.ndim == 3 else arr[:, :, None]
        ny, nx = -(-h // th), -(-w // tw)
        padded = np.pad(planes, ((0, ny * th - h), (0, nx * tw - w), (0, 0)), mode="edge")
        blocks = padded.reshape(ny, th, nx, tw, -1).transpose(0, 2, 4, 1, 3)       # (ny, nx, C, th, tw)
        mask = self.mask((th, tw)).reshape(th, tw)
        filtered = np.fft.ifft2(np.fft.fft2(blocks) * mask).real
        out = filtered.transpose(0, 3, 1, 4, 2).reshape(ny * th, nx * tw, -1)[:h, :w]
        return out if arr.ndim == 3 else out[:, :, 0]

    @classmethod
    def parse(cls, args: str, spec: str) -> "DftFilter":
        return parse_dftfilter(args)

    def raw_step(self, lo, hi, ps):
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * self.gain      # the DC passes; the rest rings
        return mid - half, mid + half, ps

    def grid_step(self, ps, offset, step):
        return None                                               # no grid: raw x post_scale, as decrypted

    def for_tiles(self, layout, tile, halo, slots):
        """The filter for the input's tiles, which must suit it (packed layout, no halo, power-of-two sides)."""
        import dataclasses

        from hecore.layouts import Layout

        from .packed import check_dft_tiles

        if Layout.parse(layout) is not Layout.PACKED:
            raise ValueError(f"{self.spec} runs in the packed layout only; encrypt with --layout packed")
        check_dft_tiles(self, tile[0], tile[1], halo, slots)
        return dataclasses.replace(self, tile=tuple(tile))

    def packed(self, ev, c, geom, post_scale):
        from .packed import check_dft_tiles

        check_dft_tiles(self, geom.tile_h, geom.tile_w, geom.halo, ev.slots)
        return self.pipeline((geom.rows, geom.cols)).evaluate(ev, c), post_scale

    @property
    def gain(self) -> float:
        """The worst-case factor by which the filter can stretch values about their mean: the L1 norm of
        its (per-tile) kernel, ``sum |ifft2(mask)|`` (the DC gain is 1).  Without a tile (not yet
        planned for an input) 12, which bounds it for every tile of up to 4096 pixels (64x64: 10.7 at
        the worst cutoff)."""
        if self.tile is None:
            return 12.0
        k = np.fft.ifftn(self.mask(self.tile).reshape(self.tile))
        return float(np.abs(k).sum())


_PIPELINES: dict = {}


def _pipeline_cached(dims, cutoff, levels, stages) -> DftPipeline:
    key = (dims, cutoff, levels, stages)
    if key not in _PIPELINES:
        if len(_PIPELINES) > 4:
            _PIPELINES.clear()
        _PIPELINES[key] = DftPipeline.build(dims, lowpass_mask(dims, cutoff), stages=stages, levels=levels)
    return _PIPELINES[key]


def parse_dftfilter(args: str) -> DftFilter:
    """The :class:`DftFilter` of the text after ``dftfilter:``."""
    opts = {}
    for part in args.split(","):
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"bad dftfilter option {part!r}: expected {_FORM}")
        opts[k.strip().lower()] = v.strip()
    unknown = set(opts) - {"lowpass", "levels", "stages", "tile"}
    if unknown or "lowpass" not in opts:
        raise ValueError(f"bad dftfilter spec {args!r}: expected {_FORM}")
    try:
        cutoff = float(opts["lowpass"])
        levels = int(opts.get("levels", 2))
    except ValueError:
        raise ValueError(f"bad dftfilter spec {args!r}: lowpass must be a number, levels an integer; "
                         f"expected {_FORM}") from None
    if not re.fullmatch(r"[a-z]+", opts.get("stages", "fold")):
        raise ValueError(f"bad dftfilter stages {opts['stages']!r}: expected one of {STAGES}")
    tile = None
    if "tile" in opts:
        m = re.fullmatch(r"(\d+)x(\d+)", opts["tile"])
        if not m:
            raise ValueError(f"bad dftfilter tile {opts['tile']!r}: expected HxW, e.g. tile=64x64")
        tile = (int(m.group(1)), int(m.group(2)))
    try:
        return DftFilter(cutoff, levels, opts.get("stages", "fold"), tile)
    except InvalidParameters as e:
        raise ValueError(f"bad dftfilter spec {args!r}: {e}") from None
