"""Secret spot checks: what the owner keeps at encrypt time to catch a cluster that returns wrong results.

At encrypt, the owner draws ``k`` positions of each image uniformly at random, without replacement, from a
generator seeded by the operating system, and keeps the original values of the pixels in a window of radius
``r`` around each (every channel) -- in the owner map, never in anything the cluster gets.  At decrypt, the
op chain's plaintext reference is computed from those pixels alone and compared with the decrypted values:
on the stacked windows (:func:`check_patches`) when the windows decide their centres, else on an image-sized
array where every other pixel is unknown (:func:`check`: NaN, so an output value that depends on an unknown
pixel comes out NaN and is not compared).  The positions are real pixels, drawn after nothing the cluster
sees, so no function of the ciphertexts tells them from the others: a cluster that gets a fraction ``f`` of an
image's pixels wrong (whatever it computes, however it chooses them) passes with probability at most
``(1 - f)^k`` for ``k`` checked positions (:func:`escape_probability`).

Which chains are covered: every chain whose output value at a place depends on the pixels near it --
pointwise ops (brightness, contrast, watermark, TFHE's and BFV's 8-bit tables), windows (the mean filter,
every convolution, as far as ``r`` reaches), grey, downsample.  A global op (the DFT filter) makes every
output depend on every pixel: nothing is checked (the metrics row says 0 positions) -- except on ringers.

Results samples (:func:`keep_results`): when encrypt is told the chain (``--for-op``) and its results have an
exact grid, the owner computes that chain's finished results at the positions from the windows, right away,
and keeps those instead of the pixels (:class:`ResultSample`): ``c`` bytes a place whatever the window (a 5x5
convolution's windows are 25 pixels a place), compared as they are at decrypt; a run that records another
chain fails its check (a relabelled run would otherwise go unchecked).

Ringers (:func:`ringer`): at encrypt, each image becomes a ringer with a probability the owner chooses, drawn
in secret after nothing the cluster sees; a ringer's sample is the whole image, so its every output value is
compared, whatever the chain (a global op's too).  A cluster that gets ``m`` images wrong escapes them all
with probability ``(1 - p)^m`` (:func:`ringer_escape`).

Costs: nothing on the cluster; the owner keeps ``4 k + c (2r + 1)^2 k`` bytes per image at most (fewer where
windows overlap), ``4 k + c k`` with the declared chain's results, before the owner map's compression; decrypt
evaluates the reference on the windows, or on one image-sized array, per image (nothing with results).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

#: Window radius: the 3x3 neighbourhood (every 3x3 filter and convolution, downsample:2).
DEFAULT_RADIUS = 1
#: The most positions a sample may hold.
MAX_POSITIONS = 1_000_000
#: The most bytes one image's sample may take (the owner map's bound on a row): a ringer of an image with more
#: pixel values than this is sampled at positions instead.
MAX_SAMPLE_BYTES = 16 * 2**20
#: The largest radius a sample may record (the widest window hepix evaluates is the 15x15 mean filter).
MAX_RADIUS = 8
_MAGIC = b"HPXS"
_HEADER = struct.Struct("<4sBIIBBI")     # magic, version, height, width, channels, radius, positions
_VERSION = 1
_WHOLE = 2           # the version of a ringer's sample: every pixel, radius 0, no positions stored
_RESULTS = 3         # the version of a results sample: the declared chain's finished values, no pixel stored
_CHAIN = struct.Struct("<H")        # a results sample's chain: its length in bytes, then its text (UTF-8)


class SpotSampleError(ValueError):
    """A kept sample that is not one :func:`draw` or :func:`keep_results` writes (the owner map was changed)."""


def positions_for(fraction: float = 0.01, bits: int = 20) -> int:
    """The positions that catch a fraction ``fraction`` of wrong pixels with probability >= 1 - 2^-bits."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie strictly between 0 and 1, got {fraction!r}")
    return math.ceil(bits * math.log(2) / -math.log1p(-fraction))


def escape_probability(fraction: float, positions: int) -> float:
    """The largest probability that ``positions`` uniformly drawn pixels all miss a fraction ``fraction``."""
    return float((1.0 - fraction) ** positions)


#: Positions per image (1380): a fraction f = 1 % of wrong pixels escapes with probability (1 - f)^k <= 2^-20.
DEFAULT_POSITIONS = positions_for(0.01, 20)


@dataclass(frozen=True)
class SpotSample:
    """One image's kept pixels: ``centers`` (sorted raster indices), and the values of every pixel within
    ``radius`` of one (``values``: known pixels in raster order, ``channels`` bytes each)."""

    height: int
    width: int
    channels: int
    radius: int
    centers: np.ndarray         # int64, sorted, unique, raster indices y * width + x
    values: np.ndarray          # uint8, (known pixels, channels)

    def known(self) -> np.ndarray:
        """The (height, width) mask of the pixels the sample holds."""
        mask = np.zeros((self.height, self.width), dtype=bool)
        ys, xs = np.divmod(self.centers, self.width)
        r = self.radius
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                mask[np.clip(ys + dy, 0, self.height - 1), np.clip(xs + dx, 0, self.width - 1)] = True
        return mask

    def image(self) -> np.ndarray:
        """The image as far as the sample knows it: float64 (height, width, channels), NaN where unknown."""
        out = np.full((self.height, self.width, self.channels), np.nan)
        out[self.known()] = self.values
        return out

    def patches(self) -> np.ndarray:
        """Every sampled window (coordinates clamped at the image's edges, as the ops replicate them), stacked:
        float64 (k (2r + 1), 2r + 1, channels), window ``i`` in rows ``i (2r + 1)`` on."""
        r, side = self.radius, 2 * self.radius + 1
        ys, xs = np.divmod(self.centers, self.width)
        steps = np.arange(-r, r + 1)
        yy = np.clip(ys[:, None] + steps, 0, self.height - 1)
        xx = np.clip(xs[:, None] + steps, 0, self.width - 1)
        where = np.searchsorted(np.flatnonzero(self.known()), yy[:, :, None] * self.width + xx[:, None, :])
        return self.values[where].reshape(len(self.centers) * side, side, self.channels).astype(np.float64)

    @property
    def whole(self) -> bool:
        """A ringer's sample: every pixel of the image (:func:`ringer`)."""
        return self.radius == 0 and len(self.centers) == self.height * self.width

    def to_bytes(self) -> bytes:
        head = _HEADER.pack(_MAGIC, _WHOLE if self.whole else _VERSION, self.height, self.width, self.channels,
                            self.radius, len(self.centers))
        if self.whole:                                  # the positions are every pixel's: none is stored
            return head + np.ascontiguousarray(self.values, np.uint8).tobytes()
        gaps = np.diff(self.centers, prepend=0)        # small numbers: the owner map's zstd keeps them in a byte or two
        return head + gaps.astype("<u4").tobytes() + np.ascontiguousarray(self.values, np.uint8).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, *, shape: tuple[int, int, int] | None = None) -> "SpotSample":
        """A sample written by :meth:`to_bytes`, checked (sizes, counts, ranges; ``shape`` = the image's
        recorded height, width and channels when known): anything else raises :class:`SpotSampleError`."""
        data = bytes(data)
        if len(data) < _HEADER.size:
            raise SpotSampleError(f"{len(data)} bytes is shorter than a spot sample's header")
        magic, version, h, w, c, r, k = _HEADER.unpack_from(data)
        if magic != _MAGIC or version not in (_VERSION, _WHOLE):
            raise SpotSampleError("not a spot sample of pixels (magic or version)")
        if version == _WHOLE:
            if shape is not None and (h, w, c) != tuple(shape):
                raise SpotSampleError(f"a ringer of a {w}x{h}x{c} image, recorded as "
                                      f"{shape[1]}x{shape[0]}x{shape[2]}")
            if not (h and w and c in (1, 3) and r == 0 and k == h * w and len(data) == _HEADER.size + k * c):
                raise SpotSampleError(f"implausible ringer ({w}x{h}x{c}, radius {r}, {k} positions, {len(data)} bytes)")
            values = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size).reshape(k, c)
            return cls(h, w, c, 0, np.arange(k, dtype=np.int64), values)
        if shape is not None and (h, w, c) != tuple(shape):
            raise SpotSampleError(f"a sample of a {w}x{h}x{c} image, recorded as {shape[1]}x{shape[0]}x{shape[2]}")
        if not (h and w and c in (1, 3) and r <= MAX_RADIUS and 0 < k <= h * w):
            raise SpotSampleError(f"implausible spot sample header ({w}x{h}x{c}, radius {r}, {k} positions)")
        end = _HEADER.size + 4 * k
        if len(data) < end:
            raise SpotSampleError(f"{len(data)} bytes cannot hold {k} positions")
        gaps = np.frombuffer(data, dtype="<u4", count=k, offset=_HEADER.size).astype(np.int64)
        centers = np.cumsum(gaps)
        if np.any(centers >= h * w) or np.any(gaps[1:] <= 0):
            raise SpotSampleError("spot positions outside the image, or not sorted and unique")
        sample = cls(h, w, c, r, centers, np.zeros((0, c), np.uint8))
        n = int(sample.known().sum())
        if len(data) != end + n * c:
            raise SpotSampleError(f"{len(data)} bytes, but {k} positions of radius {r} keep {n * c} value bytes")
        values = np.frombuffer(data, dtype=np.uint8, offset=end).reshape(n, c)
        return cls(h, w, c, r, centers, values)


def ringer_fits(height: int, width: int, channels: int) -> bool:
    """Whether a ringer of an image of this size fits :data:`MAX_SAMPLE_BYTES`."""
    return _HEADER.size + height * width * channels <= MAX_SAMPLE_BYTES


def ringer(pixels: np.ndarray) -> SpotSample:
    """A ringer: the sample of every pixel.  The whole chain's result is then known, so every value is
    compared -- a global op's too (the DFT filter), which no sample of a few pixels reaches."""
    arr = np.asarray(pixels, dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    h, w, c = arr.shape
    return SpotSample(h, w, c, 0, np.arange(h * w, dtype=np.int64), arr.reshape(h * w, c))


def ringer_escape(probability: float, corrupted_images: int) -> float:
    """The probability that ``corrupted_images`` images, each made a ringer independently with ``probability``
    at encrypt (in secret), all escape it."""
    return float((1.0 - probability) ** corrupted_images)


@dataclass(frozen=True)
class ResultSample:
    """The finished results of one declared chain at ``k`` secret places of one image, computed by the owner at
    encrypt from the whole image (:func:`keep_results`): ``centers`` (sorted raster indices of the *result*,
    ``height`` x ``width`` x ``channels``), ``values`` (uint8, (k, channels)).  A few bytes a place whatever
    the chain's window (a 5x5 convolution's sample of windows keeps 25 pixels a place); it checks that chain
    alone, compared as it is, with nothing evaluated at decrypt."""

    height: int
    width: int
    channels: int
    chain: str                  # the chain's ops as runs record them, joined by "|"
    centers: np.ndarray         # int64, sorted, unique, raster indices y * width + x of the result
    values: np.ndarray          # uint8, (positions, channels)

    def to_bytes(self) -> bytes:
        chain = self.chain.encode()
        head = _HEADER.pack(_MAGIC, _RESULTS, self.height, self.width, self.channels, 0, len(self.centers))
        gaps = np.diff(self.centers, prepend=0)
        return (head + _CHAIN.pack(len(chain)) + chain + gaps.astype("<u4").tobytes()
                + np.ascontiguousarray(self.values, np.uint8).tobytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> "ResultSample":
        """A sample written by :meth:`to_bytes`, checked (sizes, counts, ranges): anything else raises
        :class:`SpotSampleError`."""
        data = bytes(data)
        if len(data) < _HEADER.size + _CHAIN.size:
            raise SpotSampleError(f"{len(data)} bytes is shorter than a results sample's header")
        magic, version, h, w, c, r, k = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _RESULTS:
            raise SpotSampleError("not a results sample (magic or version)")
        if not (h and w and c in (1, 3) and r == 0 and 0 < k <= h * w):
            raise SpotSampleError(f"implausible results sample header ({w}x{h}x{c}, {k} positions)")
        (n,) = _CHAIN.unpack_from(data, _HEADER.size)
        start = _HEADER.size + _CHAIN.size + n
        if len(data) != start + 4 * k + k * c:
            raise SpotSampleError(f"{len(data)} bytes, but a chain of {n} bytes and {k} results of {c} values "
                                  f"take {start + 4 * k + k * c}")
        try:
            chain = data[_HEADER.size + _CHAIN.size:start].decode()
        except UnicodeDecodeError:
            raise SpotSampleError("a results sample's chain is not text") from None
        gaps = np.frombuffer(data, dtype="<u4", count=k, offset=start).astype(np.int64)
        centers = np.cumsum(gaps)
        if np.any(centers >= h * w) or np.any(gaps[1:] <= 0):
            raise SpotSampleError("result positions outside the result, or not sorted and unique")
        values = np.frombuffer(data, dtype=np.uint8, offset=start + 4 * k).reshape(k, c)
        return cls(h, w, c, chain, centers, values)


def read_sample(data: bytes) -> SpotSample | ResultSample:
    """A kept sample of either kind (:meth:`SpotSample.from_bytes`, :meth:`ResultSample.from_bytes`), by its
    version byte; anything else raises :class:`SpotSampleError`."""
    data = bytes(data)
    if len(data) > 4 and data[:4] == _MAGIC and data[4] == _RESULTS:
        return ResultSample.from_bytes(data)
    return SpotSample.from_bytes(data)


def keep_results(sample: SpotSample, expected_at, chain: str, *, patches: bool) -> ResultSample | None:
    """The finished results (rounded, saturated) of a chain whose results have an exact grid, at the places
    ``sample``'s pixels decide (``expected_at`` as for :func:`check`; ``patches``: on the stacked windows, each
    window's centre its place's result, as :func:`check_patches`): the sample to keep instead of the pixels.
    None when the pixels decide no result (the chain reaches further than the sample's radius)."""
    if patches:
        r, side = sample.radius, 2 * sample.radius + 1
        want = np.asarray(expected_at(sample.patches()), dtype=np.float64)
        want = want if want.ndim == 3 else want[:, :, None]
        values, centers = want[r::side, r], sample.centers
        shape = (sample.height, sample.width, want.shape[-1])
    else:
        want = np.asarray(expected_at(sample.image()), dtype=np.float64)
        want = want if want.ndim == 3 else want[:, :, None]
        known = np.all(np.isfinite(want), axis=-1).reshape(-1)
        centers = np.flatnonzero(known).astype(np.int64)
        values, shape = want.reshape(-1, want.shape[-1])[known], want.shape
    if not len(centers) or not np.all(np.isfinite(values)):
        return None
    return ResultSample(*shape, chain, centers, np.clip(np.rint(values), 0, 255).astype(np.uint8))


def check_results(sample: ResultSample, result: np.ndarray, chain: str) -> SpotResult:
    """Compare ``result`` (the decrypted, finished image) with the kept results, when the run records the
    chain they were computed for (``chain``, as :attr:`ResultSample.chain`).  A run that records another chain
    fails: the owner kept the results of the chain it declared, and a cluster that relabelled its run could
    otherwise return anything unchecked."""
    if chain != sample.chain:
        return SpotResult(0, 0, 1, None, f"the owner kept the results of {sample.chain or 'no op'} (the chain "
                                         f"declared at encrypt), the run records {chain or 'no op'}: not the "
                                         "run asked for (decrypt --no-integrity if you ran that chain yourself)")
    got = np.asarray(result)
    if got.ndim == 2:
        got = got[:, :, None]
    if got.shape != (sample.height, sample.width, sample.channels):
        return SpotResult(0, 0, 1, None, f"the result is {'x'.join(map(str, got.shape))} values, the op chain on the "
                                         f"owner's image gives {sample.height}x{sample.width}x{sample.channels}")
    ys, xs = np.divmod(sample.centers, sample.width)
    at = got[ys, xs]
    wrong = at != sample.values
    first = None
    if wrong.any():
        i, ch = (int(v) for v in np.argwhere(wrong)[0])
        first = (int(ys[i]), int(xs[i]), ch, int(sample.values[i, ch]), int(at[i, ch]))
    return SpotResult(len(ys), int(sample.values.size), int(wrong.sum()), first)


def draw(pixels: np.ndarray, *, positions: int = DEFAULT_POSITIONS, radius: int = DEFAULT_RADIUS,
         rng: np.random.Generator | None = None) -> SpotSample:
    """The sample of one image (uint8, (H, W) or (H, W, C)): ``positions`` distinct places (all of them in a
    smaller image), each with the pixels within ``radius``."""
    arr = np.asarray(pixels, dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    h, w, c = arr.shape
    if not 0 <= radius <= MAX_RADIUS:
        raise ValueError(f"spot radius must lie in 0..{MAX_RADIUS}, got {radius}")
    if positions < 1:
        raise ValueError(f"spot positions must be at least 1, got {positions}")
    rng = rng if rng is not None else np.random.default_rng()       # seeded from the operating system
    k = min(positions, h * w)
    centers = np.sort(rng.choice(h * w, size=k, replace=False)).astype(np.int64)
    sample = SpotSample(h, w, c, radius, centers, np.zeros((0, c), np.uint8))
    return SpotSample(h, w, c, radius, centers, arr[sample.known()])


@dataclass(frozen=True)
class SpotResult:
    """What one image's spot check found: ``positions`` sampled places whose output was compared, ``values``
    output values compared in all, ``wrong`` of them different; ``first``: where the first wrong one is."""

    positions: int
    values: int
    wrong: int
    first: tuple | None = None
    why: str | None = None          # a failure that is not a wrong value (the sample, the image's size)

    @property
    def ok(self) -> bool:
        return self.wrong == 0

    def describe(self) -> str:
        if self.ok:
            return f"{self.values} values at {self.positions} secret positions as the op chain gives them"
        if self.why is not None:
            return self.why
        y, x, ch, want, got = self.first
        return (f"{self.wrong} of {self.values} values at the owner's secret positions differ from the op chain's "
                f"result (first: row {y}, column {x}, channel {ch}: {got}, expected {want}); the cluster's "
                "result is not the chain applied to this image")


#: How far beyond half a level a value of an approximate chain (one whose results have no exact grid: the DFT
#: filter) may lie from the reference and pass: far above CKKS's error there (1e-4 measured), so honest
#: results never fail; a lie of one level passes only where the reference lies this close to a rounding edge.
APPROXIMATE_SLACK = 0.01


def _differ(want: np.ndarray, got: np.ndarray, slack: float) -> np.ndarray:
    """Where the finished values ``got`` are not the reference ``want`` rounded and saturated (with ``slack``:
    and lie more than ``0.5 + slack`` from it)."""
    expected = np.clip(np.rint(want), 0, 255)
    wrong = expected != got
    if slack:
        wrong &= np.abs(np.clip(want, 0, 255) - got) > 0.5 + slack
    return wrong


def check(sample: SpotSample, result: np.ndarray, expected_at, slack: float = 0.0) -> SpotResult:
    """Compare ``result`` (the decrypted, finished image: uint8 (H', W') or (H', W', C')) with
    ``expected_at(known)``, the op chain's reference on the sample's partial image (NaN where it cannot
    know), at every value the reference knows (``slack``: :data:`APPROXIMATE_SLACK` for an approximate
    chain)."""
    got = np.asarray(result)
    if got.ndim == 2:
        got = got[:, :, None]
    want = np.asarray(expected_at(sample.image()), dtype=np.float64)
    if want.ndim == 2:
        want = want[:, :, None]
    if want.shape != got.shape:
        return SpotResult(0, 0, 1, None, f"the result is {'x'.join(map(str, got.shape))} values, the op chain on the "
                                         f"owner's image gives {'x'.join(map(str, want.shape))}")
    known = np.isfinite(want)
    expected = np.clip(np.rint(np.where(known, want, 0)), 0, 255)
    wrong = known & _differ(np.where(known, want, 0), got, slack)
    ys, xs = np.divmod(sample.centers, sample.width)
    oy = ys * want.shape[0] // sample.height
    ox = xs * want.shape[1] // sample.width
    positions = int(np.all(known[oy, ox], axis=-1).sum())
    first = None
    if wrong.any():
        y, x, ch = (int(v) for v in np.argwhere(wrong)[0])
        first = (y, x, ch, int(expected[y, x, ch]), int(got[y, x, ch]))
    return SpotResult(positions, int(known.sum()), int(wrong.sum()), first)


def check_patches(sample: SpotSample, result: np.ndarray, expected_at, slack: float = 0.0) -> SpotResult:
    """:func:`check` at the sampled places alone, for a chain that commutes with moving the image and reaches
    no further than the sample's radius: ``expected_at`` runs on the stacked windows (:meth:`SpotSample.patches`,
    a few thousand values instead of the image), each window's centre is its place's result."""
    got = np.asarray(result)
    if got.ndim == 2:
        got = got[:, :, None]
    if got.shape[:2] != (sample.height, sample.width):
        return SpotResult(0, 0, 1, None, f"the result is {'x'.join(map(str, got.shape))} values, the op chain on the "
                                         f"owner's image keeps its {sample.height}x{sample.width} pixels")
    r, side = sample.radius, 2 * sample.radius + 1
    want = np.asarray(expected_at(sample.patches()), dtype=np.float64)
    if want.ndim == 2:
        want = want[:, :, None]
    centre = want[r::side, r]                                   # (positions, channels out)
    ys, xs = np.divmod(sample.centers, sample.width)
    at = got[ys, xs]
    if centre.shape != at.shape or not np.all(np.isfinite(centre)):
        return SpotResult(0, 0, 1, None, "the op chain's result at the sampled places has another shape than the "
                                         f"result's ({'x'.join(map(str, got.shape))})")
    expected = np.clip(np.rint(centre), 0, 255)
    wrong = _differ(centre, at, slack)
    first = None
    if wrong.any():
        i, ch = (int(v) for v in np.argwhere(wrong)[0])
        first = (int(ys[i]), int(xs[i]), ch, int(expected[i, ch]), int(at[i, ch]))
    return SpotResult(len(ys), int(expected.size), int(wrong.sum()), first)


def reach(expected_at) -> int | None:
    """The smallest radius whose window decides a chain's output at the window's centre (``expected_at`` as for
    :func:`check`), or None when no radius up to :data:`MAX_RADIUS` does (a global op: the DFT filter)."""
    side = 4 * MAX_RADIUS           # a power of two: the DFT filter takes it
    mid = side // 2
    for r in range(MAX_RADIUS + 1):
        partial = np.full((side, side, 1), np.nan)
        partial[mid - r:mid + r + 1, mid - r:mid + r + 1] = 128.0
        out = np.asarray(expected_at(partial), dtype=np.float64)
        if np.all(np.isfinite(out[mid * out.shape[0] // side, mid * out.shape[1] // side])):
            return r
    return None
