"""The image ops on the pixel layout's ciphertexts, working on the serialized bytes (see :mod:`.spec`).

Adding a constant is an addition to every component-0 word (mod each prime); the mean filter is a sum
of ciphertexts with small integer multiplicities, done by the fused kernels of :mod:`hecore.seal.kernels`.
No multiplication, rescale, relinearisation or rotation: every op here has depth 0.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from hecore.ciphertexts import SECURITY_IND_CPA, CiphertextBatch, CiphertextFormat
from hecore.seal.kernels import add_constant_c0, linear_combination

from .base import ImageOp, check_int, check_number
from .base import ImageOp as Op
from .windows import MeanFilter, WindowOp, halo_tiles, window_offsets  # noqa: F401 -- halo_tiles: the scatter's tiles

#: Largest |constant| (in units of 1/Delta) :func:`constant_word` accepts.
_CONSTANT_BOUND = 2**62


#: Bytes the coefficient table of one :func:`mean_filter_tile` block may take.
TABLE_BUDGET_BYTES = 64 << 20


def constant_word(fmt: CiphertextFormat, value: float, post_scale: float, scale_bits: int) -> np.ndarray:
    """``round(value / post_scale x 2^scale_bits)`` mod each data prime (uint64, one per prime).

    Added to every component-0 word of a ciphertext at scale ``2^scale_bits``,
    it adds ``value`` to the true value (``raw x post_scale``) of every slot.
    """
    value = check_number("value", value)
    post_scale = check_number("post_scale", post_scale)
    if post_scale == 0:
        raise ValueError("post_scale must not be 0")
    scaled = value / post_scale * 2.0 ** int(scale_bits)
    if not math.isfinite(scaled) or abs(scaled) >= _CONSTANT_BOUND:
        raise ValueError(
            f"constant {value} / post_scale {post_scale} at scale 2^{scale_bits} is {scaled:.3g} "
            f"in ciphertext units, not below 2^62"
        )
    c = round(scaled)
    return np.array([c % q for q in fmt.primes], dtype=np.uint64)


def _check_batch(batch: CiphertextBatch, fmt: CiphertextFormat) -> np.ndarray:
    """The batch's ciphertexts as a contiguous (count, stride) uint8 view, after checking them."""
    count = len(batch)
    offsets = np.asarray(batch.offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    bad = np.flatnonzero(sizes != fmt.stride)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"ciphertext {i} of the batch has {int(sizes[i])} bytes; this context's ciphertexts "
            f"have {fmt.stride} (other parameters or not a fresh ciphertext)"
        )
    start = int(offsets[0]) if count else 0
    data = np.ascontiguousarray(batch.data[start: start + count * fmt.stride])
    rows = data.reshape(count, fmt.stride)
    header = np.frombuffer(fmt.header, dtype=np.uint8)
    bad = np.flatnonzero(np.any(rows[:, : fmt.header_len] != header, axis=1))
    if bad.size:
        raise ValueError(
            f"ciphertext {int(bad[0])} of the batch has a header that differs from this context's "
            f"(other parameters, scale or level)"
        )
    return data


def add_constant(batch: CiphertextBatch, fmt: CiphertextFormat, value: float, post_scale: float,
                 scale_bits: int, *, mask: np.ndarray | None = None) -> CiphertextBatch:
    """A new batch: every ciphertext (or those where ``mask`` is True) with ``value`` added to its true value.

    The input must be ciphertexts of ``fmt`` (size and header are checked);
    the output keeps the input's strategy and security labels.
    """
    count = len(batch)
    data = _check_batch(batch, fmt)
    if mask is None:
        mask8 = np.ones(count, dtype=np.uint8)
    else:
        mask = np.asarray(mask)
        if mask.shape != (count,):
            raise ValueError(f"mask has shape {mask.shape}; expected ({count},) for a batch of {count}")
        mask8 = mask.astype(bool).astype(np.uint8)
    consts = constant_word(fmt, value, post_scale, scale_bits)
    out = np.empty(count * fmt.stride, dtype=np.uint8)
    scratch = np.empty(len(fmt.primes) * fmt.n, dtype=np.uint64)
    if count:
        add_constant_c0(out, data, count, fmt.header_array(), consts, fmt.n,
                        fmt.q_array(), mask8, scratch)
    return CiphertextBatch.uniform(out, count, fmt.stride, batch.strategy, batch.security)


def apply_pointwise(batch: CiphertextBatch, fmt: CiphertextFormat, op: Op, positions: np.ndarray,
                    post_scale: float, scale_bits: int) -> CiphertextBatch:
    """Apply a :class:`Brightness` (every ciphertext), :class:`Contrast` (every ciphertext) or
    :class:`Watermark` (the ciphertexts at its pixel).

    ``positions`` is an ``(len(batch), 2)`` integer array of each ciphertext's
    absolute pixel ``(py, px)``; ``post_scale`` the pipeline's current one,
    *before* the op (a contrast multiplies it by ``F``: the caller records
    ``post_scale x op.post_scale_factor`` with the result).
    A batch without the watermark pixel comes back as an unchanged copy.
    """
    positions = np.asarray(positions)
    if positions.shape != (len(batch), 2):
        raise ValueError(f"positions has shape {positions.shape}; expected ({len(batch)}, 2)")
    if not isinstance(op, ImageOp) or not op.pointwise:
        raise ValueError(f"{op!r} is not a pointwise operation (brightness, contrast or watermark)")
    return op.pixel_pointwise(batch, fmt, positions, post_scale, scale_bits)


class MissingNeighbour(KeyError, ValueError):
    """A ciphertext a window needs is not among the ones given."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def window_multiplicities(k: int, size: int, pos: int, weights: np.ndarray | None = None,
                          lo: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Along one axis of ``size`` pixels: the clamped coordinates the window at ``pos`` covers, and how often
    (each offset counted with its weight, 1 without ``weights``).

    Returns ``(coords, counts)`` (int64, ``coords`` ascending; without weights ``counts`` sum to ``k``).
    The 2-D multiplicities of one term of a kernel are the outer product of the row and the column ones.
    """
    lo = window_offsets(k)[0] if lo is None else lo
    coords = np.clip(np.arange(pos + lo, pos + lo + k), 0, size - 1)
    if weights is None:
        weights = np.ones(k, dtype=np.int64)
    uniq, inverse = np.unique(coords, return_inverse=True)
    counts = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(counts, inverse, np.asarray(weights, dtype=np.int64))
    return uniq.astype(np.int64), counts


def _needed_range(k: int, size: int, first: int, last: int, lo: int | None = None,
                  stride: int = 1) -> tuple[int, int]:
    """The clamped input coordinates [a, b] that outputs first..last need along one axis (output ``i``'s
    window starts at input ``stride i + lo``)."""
    lo = window_offsets(k)[0] if lo is None else lo
    return max(0, min(size - 1, stride * first + lo)), min(size - 1, max(0, stride * last + lo + k - 1))


def mean_filter_tile(fmt: CiphertextFormat, tile_cts: Mapping[tuple[int, int], object],
                     height: int, width: int, k: int, out_y: int, out_x: int, out_h: int, out_w: int,
                     *, strategy: str = "fresh", security: str = SECURITY_IND_CPA) -> CiphertextBatch:
    """The raw ``k x k`` window sums of the output region: :func:`window_tile` of ``meanfilter:k``."""
    return window_tile(fmt, tile_cts, height, width, MeanFilter(k), out_y, out_x, out_h, out_w,
                       strategy=strategy, security=security)


def window_tile(fmt: CiphertextFormat, tile_cts: Mapping[tuple[int, int], object],
                height: int, width: int, op: WindowOp, out_y: int, out_x: int, out_h: int, out_w: int,
                *, strategy: str = "fresh", security: str = SECURITY_IND_CPA) -> CiphertextBatch:
    """The raw weighted ``k x k`` window sums of a windowed op (mean filter, convolution) over the output
    region, one ciphertext per pixel, row-major.

    ``tile_cts`` maps absolute pixel coordinates ``(py, px)`` of one channel
    of a ``height x width`` image to serialized ciphertexts of ``fmt``; it
    must hold every pixel the clamped windows of the region
    ``[out_y, out_y + out_h) x [out_x, out_x + out_w)`` touch (the tile plus
    its halo, see :func:`halo_tiles`), and may hold more.  Output pixel
    ``(y, x)`` is ``sum multiplicity x ct`` over its window (each clamped input counted with the sum of
    the weights that land on it); its true value is that times ``post_scale / divisor`` (deferred scaling,
    see :mod:`hecore.ops.windows`).
    ``strategy`` and ``security`` label the result: pass the inputs' labels
    (if any input leaks, so does the result).
    """
    height = check_int("height", height, 1)
    width = check_int("width", width, 1)
    if not isinstance(op, WindowOp):
        raise ValueError(f"{op!r} is not a windowed operation (mean filter or convolution)")
    k = op.k
    terms = op.terms()
    out_h = check_int("out_h", out_h, 0)
    out_w = check_int("out_w", out_w, 0)
    out_y = check_int("out_y", out_y, 0)
    out_x = check_int("out_x", out_x, 0)
    out_height, out_width, _ = op.out_shape(height, width, 1)
    if out_y + out_h > out_height or out_x + out_w > out_width:
        raise ValueError(
            f"output region rows {out_y}..{out_y + out_h - 1}, columns {out_x}..{out_x + out_w - 1} "
            f"passes the {out_height}x{out_width} image"
        )
    stride = fmt.stride
    count = out_h * out_w
    out = np.empty(count * stride, dtype=np.uint8)
    result = CiphertextBatch.uniform(out, count, stride, strategy, security)
    if count == 0:
        return result

    header = fmt.header_array()
    q = fmt.q_array()
    scratch = np.empty(fmt.words, dtype=np.uint64)
    lo, step = op.lo, op.stride
    c0, c1 = _needed_range(k, width, out_x, out_x + out_w - 1, lo, step)
    ncols = c1 - c0 + 1
    col_mult = [[window_multiplicities(k, width, step * x, cw, lo) for x in range(out_x, out_x + out_w)]
                for _, cw in terms]
    # Output rows are done in blocks so that the table of input coefficients stays bounded.
    per_row = ncols * fmt.words * 8
    block = max(1, min(out_h, (TABLE_BUDGET_BYTES // per_row - (k - 1)) // step))
    for y0 in range(out_y, out_y + out_h, block):
        y1 = min(out_y + out_h, y0 + block)          # outputs y0 .. y1 - 1
        r0, r1 = _needed_range(k, height, y0, y1 - 1, lo, step)
        nrows = r1 - r0 + 1
        table = np.empty((nrows * ncols, fmt.words), dtype=np.uint64)
        for r in range(r0, r1 + 1):
            for c in range(c0, c1 + 1):
                table[(r - r0) * ncols + (c - c0)] = _coefficients_at(fmt, tile_cts, r, c)
        coefs = np.zeros(((y1 - y0) * out_w, nrows * ncols), dtype=np.int16)
        for y in range(y0, y1):
            for (rw, _), cols_of in zip(terms, col_mult):
                rows, rcount = window_multiplicities(k, height, step * y, rw, lo)
                for j, (cols, ccount) in enumerate(cols_of):
                    idx = ((rows - r0)[:, None] * ncols + (cols - c0)[None, :]).ravel()
                    coefs[(y - y0) * out_w + j, idx] += np.outer(rcount, ccount).ravel().astype(np.int16)
        dst = np.arange((y0 - out_y) * out_w, (y1 - out_y) * out_w, dtype=np.int64)
        linear_combination(out, dst, header, table, coefs, q, fmt.n, scratch)
    return result


def _coefficients_at(fmt: CiphertextFormat, tile_cts, py: int, px: int) -> np.ndarray:
    try:
        ct = tile_cts[(py, px)]
    except KeyError:
        raise MissingNeighbour(
            f"the ciphertext of pixel (py={py}, px={px}) is missing: the filter's window needs it "
            f"(collect each tile's halo with halo_tiles)"
        ) from None
    try:
        return fmt.coefficients(ct)
    except ValueError as e:
        raise ValueError(f"ciphertext of pixel (py={py}, px={px}): {e}") from None


def _addmod(a: np.ndarray, b: np.ndarray, q: np.ndarray) -> np.ndarray:
    s = a + b                       # both below q < 2^63: no wrap-around
    return np.where(s >= q, s - q, s)


def weighted_sum(fmt: CiphertextFormat, batches: Sequence[CiphertextBatch], weights: Sequence[int], *,
                 strategy: str = "fresh", security: str = SECURITY_IND_CPA) -> CiphertextBatch:
    """``sum_k weights[k] x batches[k][i]`` for every ``i``: ciphertexts of equal counts combined word by word
    (mod each prime) with small integer weights -- what turns the channels of a pixel into one value
    (``grey``).  A weight times a word is one product when it cannot overflow 64 bits (the primes of the
    pixel layout's presets leave room for weights up to 2^8 and more), else doublings and additions.
    ``strategy`` and ``security`` label the result."""
    if len(batches) != len(weights) or not batches:
        raise ValueError(f"{len(batches)} batches for {len(weights)} weights")
    count = len(batches[0])
    if any(len(b) != count for b in batches):
        raise ValueError(f"the batches hold {sorted({len(b) for b in batches})} ciphertexts; they must agree")
    q = np.repeat(np.tile(fmt.q_array(), 2), fmt.n)            # the prime of every word
    widest = max(int(p) for p in fmt.primes).bit_length()
    rows = [_check_batch(b, fmt).reshape(count, fmt.stride)[:, fmt.header_len:] for b in batches]
    out = np.empty((count, fmt.stride), dtype=np.uint8)
    out[:, :fmt.header_len] = np.frombuffer(fmt.header, dtype=np.uint8)
    step = max(1, (8 << 20) // (8 * fmt.words))                # ciphertexts per pass: ~8 MiB of words
    for i in range(0, count, step):
        acc = np.zeros((min(step, count - i), fmt.words), dtype=np.uint64)
        for data, w in zip(rows, weights):
            x = np.ascontiguousarray(data[i:i + step]).view(np.uint64)
            term = _times_words(x, abs(int(w)), q, widest)
            if w < 0:
                term = np.where(term == 0, term, q - term)
            acc = _addmod(acc, term, q)
        out[i:i + len(acc), fmt.header_len:] = acc.view(np.uint8).reshape(len(acc), 8 * fmt.words)
    return CiphertextBatch.uniform(out.reshape(-1), count, fmt.stride, strategy, security)


def _times_words(x: np.ndarray, n: int, q: np.ndarray, widest: int) -> np.ndarray:
    """``n x`` mod ``q`` word by word, for words below their prime ``q`` (at most ``widest`` bits)."""
    if widest + n.bit_length() <= 64:
        return (x * np.uint64(n)) % q
    term, power = np.zeros_like(x), x.copy()
    while n:
        if n & 1:
            term = _addmod(term, power, q)
        n >>= 1
        if n:
            power = _addmod(power, power, q)
    return term
