"""Binding: keyed check values under the encryption that tie each ciphertext to its place.

A spot sample compares values; where a swapped or replayed ciphertext holds nearly the values of the right
one (a flat sky, a blank page), few of its pixels differ and the sample rarely lands on them.  Binding closes
that gap for CKKS's packed layout (one pixel per slot, in the real parts): encrypt (``--bind``) puts in the
imaginary part of every slot a value ``+1`` or ``-1`` drawn from the owner's secret key and the ciphertext's
place -- image id, channel, tile -- (:func:`check_values`).  Every op that adds real constants and combines
slots with real weights (:attr:`hecore.ops.base.ImageOp.real_linear`: brightness, contrast, watermark, the
mean filter, every convolution, grey) leaves in the imaginary parts the linear part of the chain applied to
those values, whatever the pixels; decrypt computes what that must be at :data:`CHECKS` places of each
ciphertext from the key alone (:func:`expected`) and compares.  A ciphertext of another place, image or run
carries other values: at each checked place it agrees with probability 1/2 at most (the values are
independent signs; a window's weighted sum of them agrees less often), so it passes all :data:`CHECKS` with
probability at most ``2^-24``, whatever its pixels.

Nothing changes on the cluster: the ciphertexts are of the same size, the ops the same; a check value of 1
beside a pixel of 255 makes the slot's magnitude sqrt(255^2 + 1), 8e-6 more, within the planner's margins.  Other layouts (the pixel
layout, complex packing: its imaginary parts hold pixels), BFV/BGV and TFHE have no free part to hold them.
Keyed offsets under the pixels (below) need none: real ones of a quarter pixel or less under CKKS, in both packed
layouts, and ones uniform mod t under BFV/BGV.

The DFT filter (:attr:`hecore.ops.base.ImageOp.real_on_blocks`) is a real linear map of each tile's block as a
whole, evaluated with complex weights: the imaginary parts follow it too, but a low-pass filter averages signs
towards each other and leaves no grid.  A chain with it is bound by check values drawn uniform in
``[-SPREAD, SPREAD]`` instead (:func:`check_values` with ``spread``), compared at every place of the block within
:data:`BLOCK_TOLERANCE` (:func:`expected_blocks`); what a ciphertext of another place passes with is bounded per
chain and tile by :func:`block_pass_log2`.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: Bytes of the owner's binding key (kept in the owner map, 0600, never in anything the cluster gets).
KEY_BYTES = 32
#: Places checked per ciphertext: one of another place passes with probability at most 2^-CHECKS.
CHECKS = 24
#: How far a decrypted imaginary part (raw units) may lie from the expected value.  The real-linear ops
#: combine raw values with integer weights (their divisors and factors go to the post-scale), so two
#: candidate values differ by 2 at least; CKKS's error stays below half the raw grid step, 0.5 (the planner's
#: budget, which the stored bits keep).
TOLERANCE = 0.5
#: The size of the check values of a chain checked over whole blocks (the DFT filter): uniform reals in
#: ``[-SPREAD, SPREAD]``.  Beside a pixel of 255 the slot's magnitude grows by 0.2 % at most (the filter's
#: gain stretches both parts alike), within the planner's margins.
SPREAD = 16.0
#: How far a decrypted imaginary part (raw) of a block-checked run may lie from its expected value: CKKS's error
#: after the DFT pipeline stayed below 4e-4 at dft-8192 for cutoffs 0.05 to 1, 25 times less
#: (``tests/test_dft_binding.py`` holds it below a tenth of this).
BLOCK_TOLERANCE = 0.01
#: The most a ciphertext of another place may pass a block-checked run's checks with (log2) for encrypt
#: ``--for-op`` to bind a chain with the DFT filter by default (:func:`block_pass_log2`).
BLOCK_BOUND_LOG2 = -20.0


def new_key() -> bytes:
    """A fresh binding key, from the operating system."""
    return os.urandom(KEY_BYTES)


def _stream(key: bytes, nbytes: int, *place) -> bytes:
    """``nbytes`` pseudo-random bytes of the key and a place: SHAKE-256 of the key and the place (a keyed
    sponge, which no output reveals the key of)."""
    return hashlib.shake_256(key + b"\0" + "\0".join(str(p) for p in place).encode()).digest(nbytes)


def _signs(key: bytes, domain: str, image_id: str, channel: int, tile_y: int, tile_x: int,
           shape: tuple[int, int]) -> np.ndarray:
    """Keyed +-1 values (float64, ``shape``) of one tile channel's place, in ``domain``."""
    n = shape[0] * shape[1]
    bits = np.unpackbits(np.frombuffer(_stream(key, -(-n // 8), domain, image_id, channel, tile_y, tile_x),
                                       dtype=np.uint8), count=n)
    return (bits.astype(np.float64) * 2.0 - 1.0).reshape(shape)


def check_values(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int,
                 shape: tuple[int, int], spread: float | None = None) -> np.ndarray:
    """The values (float64, ``shape``: the ciphertext's block) under the pixels of one tile channel: +-1, or
    with ``spread`` uniform reals in ``[-spread, spread]`` (on a grid of 2^32 points, 7.5e-9 apart at 16)."""
    if not spread:
        return _signs(key, "values", image_id, channel, tile_y, tile_x, shape)
    n = shape[0] * shape[1]
    words = np.frombuffer(_stream(key, 4 * n, "spread", image_id, channel, tile_y, tile_x), dtype="<u4")
    return (((words.astype(np.float64) + 0.5) / 2.0 ** 31 - 1.0) * float(spread)).reshape(shape)


def check_places(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int, tile: tuple[int, int],
                 halo: int) -> tuple[np.ndarray, np.ndarray]:
    """The :data:`CHECKS` places (block rows and columns, inside the tile: each one's window within the
    halo stays in the block) an output ciphertext is checked at: distinct cells of the tile."""
    cells_in = tile[0] * tile[1]
    want = min(CHECKS, cells_in)
    words = np.frombuffer(_stream(key, 4 * 8 * CHECKS, "places", image_id, channel, tile_y, tile_x), dtype="<u4")
    drawn = (words % cells_in).astype(np.int64)
    _, first = np.unique(drawn, return_index=True)
    cells = drawn[np.sort(first)][:want]            # distinct, in the order drawn
    if len(cells) < want:           # a tile of few cells: the rest in order
        cells = np.concatenate([cells, np.setdiff1d(np.arange(cells_in), cells)[:want - len(cells)]])
    ys, xs = np.divmod(cells, tile[1])
    return ys + halo, xs + halo


def why_not(ops: Sequence, *, blocks: bool = False, strided: bool = False) -> str | None:
    """Why check values cannot follow the chain ``ops`` (parsed), or None; ``blocks``: values checked over whole
    blocks (a run bound with ``spread``), which the DFT filter's also follow; ``strided``: keyed offsets, removed
    from each decoded tile, which a downsample's also follow (:attr:`hecore.ops.base.ImageOp.strided_linear`)."""
    other = [op.spec for op in ops if not getattr(op, "real_linear", False)      # a table op: not linear
             and not (blocks and getattr(op, "real_on_blocks", False))
             and not (strided and getattr(op, "strided_linear", False))]
    if other:
        return (f"{', '.join(other)} {'does' if len(other) == 1 else 'do'} more than add real constants and "
                "combine slots with real weights: the check values under the encryption would not survive")
    return None


def expected(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int, *, tile: tuple[int, int],
             halo: int, in_channels: int, reference, post_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, columns, values)``: where output ciphertext (``channel``, tile) is checked and the raw
    imaginary parts it must hold there (:func:`expected_many` of one)."""
    return expected_many(key, [(image_id, channel, tile_y, tile_x)], tile=tile, halo=halo, in_channels=in_channels,
                         reference=reference, post_scales=[post_scale])[0]


def expected_many(key: bytes, places: Sequence[tuple], *, tile: tuple[int, int], halo: int, in_channels: int,
                  reference, post_scales: Sequence[float]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`expected` of output ciphertexts ``places`` ``(image id, channel, tile row, tile column)`` of one
    run's tiles, inputs of ``in_channels`` channels each (grey combines three): the chain's linear part
    (``reference(x) - reference(0)`` on their windows, stacked: ``reference`` the chain's plaintext reference,
    post-scaled) applied to the inputs' check values, over each one's post-scale -- one evaluation for all."""
    side, steps = 2 * halo + 1, np.arange(-halo, halo + 1)
    shape = (tile[0] + 2 * halo, tile[1] + 2 * halo)
    windows, where = [], []
    for image_id, channel, ty, tx in places:
        values = np.stack([check_values(key, image_id, c, ty, tx, shape) for c in range(in_channels)], axis=-1)
        ys, xs = check_places(key, image_id, channel, ty, tx, tile, halo)
        windows.append(values[(ys[:, None] + steps)[:, :, None], (xs[:, None] + steps)[:, None, :]])
        where.append((ys, xs))
    stacked = np.concatenate(windows).reshape(-1, side, in_channels)
    linear = (np.asarray(reference(stacked), dtype=np.float64)
              - np.asarray(reference(np.zeros_like(stacked)), dtype=np.float64))
    centre = (linear if linear.ndim == 3 else linear[:, :, None])[halo::side, halo]
    out, start = [], 0
    for (ys, xs), place, post_scale in zip(where, places, post_scales):
        part = centre[start:start + len(ys)]
        start += len(ys)
        out.append((ys, xs, part[:, place[1] if part.shape[1] > 1 else 0] / post_scale))
    return out


def on_blocks(ops: Sequence) -> bool:
    """Whether the chain ``ops`` (parsed) holds an op checked over whole blocks (the DFT filter)."""
    return any(getattr(op, "real_on_blocks", False) for op in ops)


def expected_blocks(key: bytes, places: Sequence[tuple], *, tile: tuple[int, int], in_channels: int, reference,
                    post_scales: Sequence[float], spread: float, channelwise: bool = False) -> list[np.ndarray]:
    """The raw imaginary parts each output ciphertext at ``places`` must hold at every place of its block (no
    halo): the chain's linear part (``reference(x) - reference(0)``, the blocks stacked one under another, which
    the DFT filter transforms one tile at a time) of its place's check values, over its post-scale.
    ``channelwise``: the chain keeps channels apart (no grey), so each place's own channel alone is computed."""
    th, tw = tile
    channels = (lambda place: [place[1]]) if channelwise else (lambda place: range(in_channels))
    values = np.concatenate([
        np.stack([check_values(key, place[0], c, place[2], place[3], tile, spread) for c in channels(place)],
                 axis=-1)
        for place in places])
    linear = (np.asarray(reference(values), dtype=np.float64)
              - np.asarray(reference(np.zeros_like(values)), dtype=np.float64))
    linear = linear if linear.ndim == 3 else linear[:, :, None]
    return [linear[n * th:(n + 1) * th, :, place[1] if linear.shape[2] > 1 else 0] / post_scale
            for n, (place, post_scale) in enumerate(zip(places, post_scales))]


def block_pass_log2(ops: Sequence, tile: tuple[int, int], *, spread: float = SPREAD,
                    tolerance: float = BLOCK_TOLERANCE, enough: float = -64.0, most: int = 256) -> float:
    """log2 of a bound on the probability that a ciphertext whose check values are independent of a place's (one
    of another place, image or run) passes that place's check over the whole ``tile`` block, for the chain
    ``ops`` (parsed; linear, circular within a block: the DFT filter and pointwise ops).

    The chain's linear part is a block circulant ``A`` (its kernel: the response to one value, in raw units).  The
    check compares ``A c`` at every place; another ciphertext's values ``c'`` pass only if ``A d``, ``d = c - c'``,
    lies within ``tolerance`` everywhere, in particular at any ``s`` places ``R``.  ``c`` is uniform on
    ``[-spread, spread]`` (density ``1 / (2 spread)`` in each value) and independent of ``c'``, so ``A_RR d_R``
    (the rest held fixed) has density at most ``(2 spread)^-s / |det A_RR|`` and lands in the box of side
    ``2 tolerance`` with probability at most ``(tolerance / spread)^s / |det A_RR|``.  ``R`` is chosen greedily
    (elimination with the largest remaining pivot), the best prefix kept; it stops at ``enough`` or ``most``
    places.  0 when the chain leaves nothing to check (a filter that keeps the mean alone)."""
    from hecore.ops.spec import finish_for, reference

    th, tw = tile
    zero = np.asarray(reference(np.zeros((th, tw)), ops), dtype=np.float64)
    delta = np.zeros((th, tw))
    delta[0, 0] = 1.0
    kernel = (np.asarray(reference(delta, ops), dtype=np.float64) - zero) / float(finish_for(ops).post_scale)
    kernel = kernel if kernel.ndim == 2 else kernel[:, :, 0]
    diag = np.full(th * tw, kernel[0, 0])
    eliminated: list[tuple[np.ndarray, float]] = []    # (Schur column, pivot) of each place chosen
    per_place, log_det, best = np.log2(tolerance / spread), 0.0, 0.0
    for s in range(min(most, th * tw)):
        j = int(np.argmax(np.abs(diag)))
        pivot = float(diag[j])
        if abs(pivot) <= 1e-12:
            break
        column = np.roll(kernel, divmod(j, tw), axis=(0, 1)).reshape(-1)    # A[:, j] = k[(i - j) mod block]
        for done, p in eliminated:
            column = column - done * (done[j] / p)
        eliminated.append((column, pivot))
        diag = diag - column * column / pivot
        diag[j] = 0.0
        log_det += np.log2(abs(pivot))
        best = min(best, (s + 1) * per_place - log_det)
        if best <= enough:
            break
    return float(best)


def wrong(imaginary: np.ndarray, rows: np.ndarray, columns: np.ndarray, want: np.ndarray) -> int:
    """How many checked places of a decrypted block's imaginary parts (raw) miss their expected values."""
    return int(np.sum(np.abs(imaginary[rows, columns] - want) > TOLERANCE))


@dataclass(frozen=True)
class Binding:
    """What decrypt checks each ciphertext's imaginary parts with: the owner's key, and the channels each
    image was encrypted with (grey's output combines three)."""

    key: bytes = field(repr=False)
    channels: dict = field(repr=False)          # image id -> channels at encrypt
    unit: float | None = None                   # keyed offsets of this size (offset_unit); None: check values
    check: bool = True                          # keyed offsets: compare with the grid (False: only remove them)
    modulus: int | None = None                  # keyed offsets uniform mod t (BFV/BGV: modular_offsets_of)
    table: bytes | None = field(default=None, repr=False)   # keyed check slots drawn for this table (slotchecks)
    spread: float | None = None                 # check values uniform in [-spread, spread], checked over whole
                                                # blocks (a chain with the DFT filter); None: +-1 at CHECKS places

    @property
    def offsets(self) -> bool:
        """Whether the run is bound by keyed offsets (real or modular), not by check values."""
        return bool(self.unit or self.modulus)

    def _by_channels(self, places: Sequence[tuple]) -> dict[int, list[int]]:
        """The indices of ``places`` by their images' channels at encrypt (images the owner never encrypted left
        out)."""
        groups: dict[int, list[int]] = {}
        for n, place in enumerate(places):
            if place[0] in self.channels:
                groups.setdefault(self.channels[place[0]], []).append(n)
        return groups

    def without_offsets(self, places: Sequence[tuple], raws: Sequence[np.ndarray], ops: Sequence, *,
                        tile: tuple[int, int], halo: int) -> tuple[list[np.ndarray], list[int]]:
        """Keyed offsets: for each output ciphertext of one run's tiles (``places`` ``(image id, channel, tile
        row, tile column)``, ``raws`` the ``tile``-sized raw values decrypted from each, ``ops`` the chain the
        run records, parsed), its values with the chain's linear part of its place's offsets removed
        (:func:`offset_response`), and how many of them lie off the chain's grid (:func:`off_grid`; 0 when
        not :attr:`check`); an image the owner never encrypted gets its values as they are, every one
        counted off."""
        from hecore.ops.spec import finish_for, raw_range

        ops = list(ops)
        out = [np.asarray(r, dtype=np.float64) for r in raws]
        wrong = [r.size for r in out]
        stride = strides(ops)
        if why_not(ops, strided=True) is not None or (stride > 1 and halo):   # a run the owner did not ask for
            return out, wrong if self.check else [0] * len(out)
        finish = finish_for(ops)
        post_scale, offset, step = float(finish.post_scale), float(finish.offset), float(finish.step)
        for channels, members in self._by_channels(places).items():
            mine = [places[n] for n in members]
            every = check_stride(tile)
            if self.modulus:
                found = centred(np.stack([out[n] for n in members]).astype(np.int64) - modular_response(
                    self.key, mine, tile=tile, halo=halo, in_channels=channels, modulus=self.modulus, ops=ops,
                    post_scale=post_scale, stride=stride), self.modulus).astype(np.float64)
                lo, hi = raw_range(ops)
                missed = (out_of_range(found[:, ::every, ::every], lo, hi) if self.check
                          else np.zeros(len(members), int))
            else:
                found = np.stack([out[n] for n in members]) - offset_response(
                    self.key, mine, tile=tile, halo=halo, in_channels=channels, unit=self.unit, ops=ops,
                    post_scale=post_scale, stride=stride)
                missed = (off_grid(found[:, ::every, ::every], offset, step) if self.check and finish.snaps
                          else np.zeros(len(members), int))
            for n, values, count in zip(members, found, missed):
                out[n], wrong[n] = values, int(count)
        return out, wrong

    def from_slots(self, places: Sequence[tuple], rows: Sequence[np.ndarray], specs: Sequence[str], *,
                   block: tuple[int, int]) -> tuple[list[np.ndarray], list[int]]:
        """Keyed check slots (:mod:`hecore.slotchecks`): for each output ciphertext at ``places``, ``rows`` its
        decrypted slots, its ``block`` of values put back in order, and how many of its check slots differ from
        what the chain the run records (``specs``: a chain of 8-bit tables, or none at all) gives on them (0 when
        not :attr:`check`; every one for ops that are not a table, or an image the owner never encrypted)."""
        from hecore.ops.spec import is_table_chain
        from hecore.slotchecks import gather

        recorded = None
        if not specs:
            recorded = np.arange(256)
        elif is_table_chain(specs):
            from hecore.ops.lut import chain_of

            try:
                recorded = chain_of(list(specs))
            except ValueError:
                recorded = None
        values, missed = gather(self.key, places, rows, block, self.table, recorded)
        if not self.check:
            return values, [0] * len(values)
        return values, [m if p[0] in self.channels else max(m, 1) for p, m in zip(places, missed)]

    def mismatches(self, places: Sequence[tuple], imaginary: Sequence[np.ndarray], *, tile: tuple[int, int],
                   halo: int, reference, post_scales: Sequence[float], channelwise: bool = False) -> list[int]:
        """For each output ciphertext of one run's tiles -- ``places`` ``(image id, channel, tile row, tile
        column)``, the decrypted ``imaginary`` parts of its block (raw), its ``post_scales`` -- how many of its
        :data:`CHECKS` places miss the values its place gives (all of them for an image the owner never
        encrypted).  One evaluation of the chain's ``reference`` for every ciphertext of the same channels.  With
        :attr:`spread`, every place of the block is checked (:func:`expected_blocks`; ``halo`` is 0; ``channelwise``:
        the chain keeps channels apart)."""
        if self.spread:
            return self._block_mismatches(places, imaginary, tile=tile, reference=reference, post_scales=post_scales,
                                          channelwise=channelwise)
        out = [CHECKS] * len(places)
        for channels, members in self._by_channels(places).items():
            found = expected_many(self.key, [places[n] for n in members], tile=tile, halo=halo,
                                  in_channels=channels, reference=reference,
                                  post_scales=[post_scales[n] for n in members])
            for n, (ys, xs, want) in zip(members, found):
                out[n] = wrong(imaginary[n], ys, xs, want)
        return out


    def _block_mismatches(self, places: Sequence[tuple], imaginary: Sequence[np.ndarray], *, tile: tuple[int, int],
                          reference, post_scales: Sequence[float], channelwise: bool) -> list[int]:
        """:meth:`mismatches` of a run whose check values are checked over whole blocks."""
        out = [tile[0] * tile[1]] * len(places)
        for channels, members in self._by_channels(places).items():
            found = expected_blocks(self.key, [places[n] for n in members], tile=tile, in_channels=channels,
                                    reference=reference, post_scales=[post_scales[n] for n in members],
                                    spread=self.spread, channelwise=channelwise)
            for n, want in zip(members, found):
                out[n] = int(np.sum(np.abs(np.asarray(imaginary[n])[:tile[0], :tile[1]] - want) > BLOCK_TOLERANCE))
        return out

    def checks(self, tile: tuple[int, int]) -> int:
        """How many places of each ciphertext :meth:`mismatches` compares."""
        return tile[0] * tile[1] if self.spread else CHECKS


# --- keyed offsets: binding in both packed layouts, for a declared chain ------------------------------------
#
# Complex packing holds pixels in the imaginary parts too, so there is no free part for check values.  Keyed
# offsets need none: encrypt adds to every pixel value a keyed +-u (:func:`offset_values`; u a power of two
# no larger than 1/4, :func:`offset_unit`), so a ciphertext holds its pixels plus its place's offsets.  The
# chain's ops are linear in the pixels, so the decrypted raw values are the chain's results plus the chain's
# linear part applied to the offsets (:func:`offset_response`), which decrypt computes from the key alone and
# removes before the finish.  u is chosen so that the linear part of another place's offsets differs from this
# place's by an odd multiple of half the chain's grid step at every result whose window holds an odd number of
# differing signs among the inputs of least 2-adic weight -- with probability 1/2 at each result, independently
# for every result checked (each has an input no result before it has: :func:`offset_pass_log2`) -- so such a
# ciphertext's values lie half a step off the grid the results lie on (:func:`off_grid`) at about half its
# places, and each ciphertext is checked at hundreds of places (:func:`check_stride`), not the image at a
# sample.  The pixels are moved by u at most; the honest results
# must lie within a quarter step of the grid (CKKS's error at the planned scales is far below).  Nothing
# changes on the cluster, and the offsets cannot be peeled off the pixels there: they are the same numbers.

#: How far off the grid (in grid steps) a decrypted result may lie once the offsets are removed.
OFF_GRID = 0.25
#: Every how many rows and columns the results of a tile of :data:`STRIDE_FROM` values or more are compared with
#: the grid (all of them are freed of the offsets): a 60x62 tile is checked at 930 places; a smaller tile at every
#: value.
CHECK_STRIDE = 2
STRIDE_FROM = 1024


def check_stride(tile: tuple[int, int]) -> int:
    """Every how many rows and columns a ``tile``'s results are compared with the grid."""
    return CHECK_STRIDE if tile[0] * tile[1] >= STRIDE_FROM else 1
#: The impulse image :func:`offset_unit` measures a chain's weights on (its reach must stay inside).
_PROBE = 33


def _valuation(n: int) -> int:
    """The 2-adic valuation of a nonzero integer."""
    return (n & -n).bit_length() - 1


def _grid_weights(ops: Sequence, *, strided: bool = False) -> list[np.ndarray] | None:
    """The chain's weights counted in grid steps, one integer array per input channel: its linear part on a pixel
    of that channel at the centre of a probe image (``_PROBE x _PROBE``, every output channel stacked on the last
    axis); None when the chain leaves no grid, is not linear in the pixels (:func:`why_not`; with ``strided`` a
    downsample counts as linear), or its weights are not whole grid steps."""
    from hecore.ops.spec import finish_for, reference

    ops = list(ops)
    if not ops or why_not(ops, strided=strided) is not None:
        return None
    finish = finish_for(ops)
    if not finish.snaps:
        return None
    scale = float(finish.post_scale) * float(finish.step)
    zero = np.asarray(reference(np.zeros((_PROBE, _PROBE, 3)), ops), dtype=np.float64)
    out = []
    for c in range(3):
        impulse = np.zeros((_PROBE, _PROBE, 3))
        impulse[_PROBE // 2, _PROBE // 2, c] = 1.0
        weights = (np.asarray(reference(impulse, ops), dtype=np.float64) - zero) / scale
        weights = weights if weights.ndim == 3 else weights[:, :, None]
        rim = np.ones(weights.shape[:2], bool)
        rim[1:-1, 1:-1] = False
        whole = np.rint(weights)
        if np.any(np.abs(weights - whole) > 1e-6 + 2e-9 / scale) or np.any(whole[rim] != 0):   # 9-decimal reference
            return None
        out.append(whole.astype(np.int64))
    return out


def _least_valuation(weights: Sequence[np.ndarray]) -> int | None:
    nonzero = [int(abs(w)) for arr in weights for w in arr[arr != 0]]
    return min((_valuation(w) for w in nonzero), default=None)


def offset_unit(ops: Sequence, *, strided: bool = False) -> float | None:
    """The offsets' size u for the chain ``ops`` (parsed ops): ``2^-(v + 2)`` with ``v`` the least 2-adic
    valuation of the chain's weights counted in grid steps; None when the chain leaves no grid, is not linear
    in the pixels (:func:`why_not`; with ``strided``, a downsample counts as linear: its results are read from
    a stride of the slots, :func:`strides`), or its weights are not whole grid steps."""
    weights = _grid_weights(ops, strided=strided)
    least = None if weights is None else _least_valuation(weights)
    return None if least is None else 2.0 ** -(least + 2)


def offset_values(key: bytes, image_id: str, channel: int, tile_y: int, tile_x: int, shape: tuple[int, int],
                  unit: float) -> np.ndarray:
    """The keyed offsets (+-``unit``, float64, ``shape``: the tile's block) encrypt adds to one tile channel's
    pixels."""
    return offsets_of(key, [(image_id, channel, tile_y, tile_x)], shape, unit)[0]


def offsets_of(key: bytes, units: Sequence[tuple], shape: tuple[int, int], unit: float) -> np.ndarray:
    """:func:`offset_values` of many tile channels ``units`` ``(image id, channel, tile row, tile column)`` of one
    block ``shape`` at once (``len(units) x shape``)."""
    n = shape[0] * shape[1]
    size = -(-n // 8)
    drawn = b"".join(_stream(key, size, "offsets", *u) for u in units)
    bits = np.unpackbits(np.frombuffer(drawn, dtype=np.uint8).reshape(len(units), size), axis=1, count=n)
    return np.where(bits.reshape(len(units), *shape), unit, -unit)


def _mixes_channels(ops: Sequence) -> bool:
    return any(op.out_shape(8, 8, 3)[2] != 3 for op in ops)


def _linear(ops: Sequence, x: np.ndarray) -> np.ndarray:
    """The chain's plaintext ops applied to ``x`` as they are (no rounding: the offsets need none)."""
    for op in ops:
        x = op.apply_plain(x)
    return x


def _units(places: Sequence[tuple], in_channels: int, ops: Sequence) -> tuple[list[tuple], int]:
    """The tile channels whose offsets reach the output ciphertexts ``places`` ``(image id, channel, tile row,
    tile column)``, place by place, and how many each place has: every input channel's where the chain combines
    channels (grey), else the place's own channel's."""
    if not _mixes_channels(ops):
        return list(places), 1
    return [(image_id, c, ty, tx) for image_id, _, ty, tx in places for c in range(in_channels)], in_channels


def strides(ops: Sequence) -> int:
    """Every how many slots and rows of a packed block the chain's results sit (a downsample by F: every F-th)."""
    return int(np.prod([getattr(op, "packed_stride", 1) for op in ops], dtype=np.int64))


def strided_pass_log2(ops: Sequence, tile: tuple[int, int]) -> float | None:
    """log2 of what a ciphertext of another place passes the offsets' check of a downsampled ``tile`` (the input
    tile) with: 1/2 at each result checked (:func:`checked_results`), their blocks disjoint; None for a chain
    without a stride (:func:`strides`)."""
    s = strides(ops)
    return None if s == 1 else -float(checked_results(tile, s))


def checked_results(tile: tuple[int, int], stride: int = 1) -> int:
    """How many results of a ``tile`` (the input tile; a downsample's by ``stride``) decrypt compares with the
    grid or the range (:func:`check_stride`)."""
    out = (tile[0] // stride, tile[1] // stride)
    every = check_stride(out)
    return -(-out[0] // every) * -(-out[1] // every)


def offset_pass_log2(ops: Sequence, tile: tuple[int, int], *, modulus: int | None = None) -> float | None:
    """log2 of what a ciphertext of another place passes the keyed offsets' check of a ``tile`` (the input tile)
    with: 1/2 at each checked result under CKKS, (range + 1) / t under BFV/BGV (``modulus`` t;
    :func:`hecore.ops.spec.raw_range`), independently for every checked result (:func:`checked_results`).

    Independently because each result has an input no result before it (in row-major order) has: the last of
    its window, at the least 2-adic weight (CKKS: the inputs whose differing offsets move it by half a step) or
    at any nonzero weight, a unit mod the prime t (BFV/BGV).  So what another place's offsets move the results
    by is, result by result, a fresh fair coin's parity (CKKS) or a fresh uniform value mod t (BFV/BGV) -- the
    checked results' parities are of full rank over GF(2), their sums over GF(t).  None for a chain the offsets
    do not bind (:func:`why_not`; under CKKS, :func:`offset_unit`: a chain without a grid)."""
    from hecore.ops.spec import raw_range

    ops = list(ops)
    if not ops or why_not(ops, strided=True) is not None:
        return None
    count = checked_results(tile, strides(ops))
    if modulus is None:
        return None if offset_unit(ops, strided=True) is None else -float(count)
    lo, hi = raw_range(ops)
    return count * min(0.0, float(np.log2((np.floor(hi) - np.ceil(lo) + 1) / modulus)))


def _on_blocks(ops: Sequence, blocks: np.ndarray, *, tile: tuple[int, int], halo: int,
               post_scale: float) -> np.ndarray:
    """The chain's linear part (raw units) of ``blocks`` (``places x depth x block``), each place's output tile
    (``tile``) with its halo cut off: the blocks stacked into one tall image and evaluated at once (a result's
    window stays in its block; a downsample's blocks too, the block's sides multiples of its factor when there is
    no halo), the chain's constants -- where it puts them on the tall image (a watermark at one place of it) --
    subtracted."""
    n, depth, bh, bw = blocks.shape
    tall = np.moveaxis(blocks, 1, -1).reshape(n * bh, bw, depth)
    linear = np.asarray(_linear(ops, tall), dtype=np.float64) - np.asarray(_linear(ops, np.zeros_like(tall)))
    linear = linear.reshape(n, -1, *linear.shape[1:])
    if linear.ndim == 4:
        linear = linear[..., 0]
    return linear[:, halo:halo + tile[0], halo:halo + tile[1]] * (1.0 / post_scale)


def offset_response(key: bytes, places: Sequence[tuple], *, tile: tuple[int, int], halo: int, in_channels: int,
                    unit: float, ops: Sequence, post_scale: float, stride: int = 1) -> np.ndarray:
    """For each output ciphertext ``places`` ``(image id, channel, tile row, tile column)`` of one run's tiles,
    the chain's linear part applied to the offsets its inputs got (``len(places) x tile``, raw units): what
    decrypt removes from its values.  ``ops``: the chain (parsed); where it combines channels (grey) every input
    channel's offsets count, else only the place's own channel's (:func:`_units`); ``stride``: a downsampled
    tile's (:func:`strides`), whose inputs were ``stride`` times larger on each side."""
    bh, bw = tile[0] * stride + 2 * halo, tile[1] * stride + 2 * halo
    units, depth = _units(places, in_channels, ops)
    blocks = offsets_of(key, units, (bh, bw), unit).reshape(len(places), depth, bh, bw)
    return _on_blocks(ops, blocks, tile=tile, halo=halo, post_scale=post_scale)


# --- keyed offsets on exact integers (BFV/BGV) ------------------------------------------------------------
#
# BFV/BGV compute exactly mod t, so the offsets need no grid: encrypt adds to every pixel a keyed value drawn
# uniformly mod t (:func:`modular_offsets_of`), and the slots hold pixel + offset mod t (centred).  The chain is
# linear in the pixels with integer raw weights, so a ciphertext decrypts to the chain's raw results plus the
# chain's linear part of its offsets, mod t (:func:`modular_response`), which decrypt subtracts; what is left
# must lie within the chain's raw range on pixels 0..255 (:func:`hecore.ops.spec.raw_range`).  Another place's
# offsets leave a difference that is uniform mod t at every result with a nonzero weight (t is prime, so every
# nonzero weight is a unit), independently for every result checked (:func:`offset_pass_log2`): a result passes
# with probability (range + 1) / t -- 2,296 / 1,032,193 for a 3x3 mean filter on bfv-4096, 2^-8.8 -- so a tile
# of 80 values checked passes with probability 2^-705.

#: Bits of one limb of the offsets when the chain's linear part is evaluated in float64 (exact below 2^53: an
#: offset limb below 2^20 times raw weights summing to at most 2^12 over 25 taps stays far within).
_LIMB = 20
#: The largest plaintext modulus the modular offsets serve (the limbs' recombination stays in int64); every
#: preset's t is of 40 bits or fewer.
MAX_MODULUS_BITS = 43


def modular_offsets_of(key: bytes, units: Sequence[tuple], shape: tuple[int, int], modulus: int) -> np.ndarray:
    """The keyed offsets (int64 in [0, ``modulus``), ``len(units) x shape``) encrypt adds, mod t, to the pixels of
    each tile channel ``units`` ``(image id, channel, tile row, tile column)`` of one block ``shape``: 64 keyed
    bits each, reduced mod t (a bias below 2^-20 for any t of :data:`MAX_MODULUS_BITS` or fewer)."""
    n = shape[0] * shape[1]
    drawn = b"".join(_stream(key, 8 * n, "modular-offsets", *u) for u in units)
    return (np.frombuffer(drawn, dtype="<u8").reshape(len(units), *shape) % np.uint64(modulus)).astype(np.int64)


def centred(x: np.ndarray, modulus: int) -> np.ndarray:
    """``x`` mod t as the centred representatives -(t-1)/2 .. (t-1)/2 (what BFV/BGV's slots decrypt to)."""
    r = np.mod(x, modulus)
    return np.where(r > (modulus - 1) // 2, r - modulus, r)


def modular_response(key: bytes, places: Sequence[tuple], *, tile: tuple[int, int], halo: int, in_channels: int,
                     modulus: int, ops: Sequence, post_scale: float, stride: int = 1) -> np.ndarray:
    """For each output ciphertext ``places`` of one run's tiles, the chain's linear part (raw units, integer
    weights) of the offsets its inputs got, mod t (int64, ``len(places) x tile``): what decrypt subtracts.  The
    offsets are split into limbs of :data:`_LIMB` bits, each evaluated exactly in float64 as
    :func:`offset_response` evaluates signs (:func:`_on_blocks`), and the limbs recombined mod t in integers."""
    if not 2 < modulus < 2 ** MAX_MODULUS_BITS:
        raise ValueError(f"modular offsets need a plaintext modulus of 3 to {MAX_MODULUS_BITS} bits, not {modulus}")
    bh, bw = tile[0] * stride + 2 * halo, tile[1] * stride + 2 * halo
    units, depth = _units(places, in_channels, ops)
    offsets = modular_offsets_of(key, units, (bh, bw), modulus).reshape(len(places), depth, bh, bw)
    total = np.zeros((len(places), *tile), dtype=np.int64)
    for shift in range(_LIMB * ((int(modulus).bit_length() - 1) // _LIMB), -1, -_LIMB):   # Horner, top limb first
        limb = ((offsets >> shift) & ((1 << _LIMB) - 1)).astype(np.float64)
        part = np.rint(_on_blocks(ops, limb, tile=tile, halo=halo, post_scale=post_scale)).astype(np.int64)
        total = np.mod(total * (1 << _LIMB) + np.mod(part, modulus), modulus)      # below 2^63 for t < 2^43
    return total


def out_of_range(raw: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """How many values of each of ``raw`` (rows of tiles) lie outside the chain's raw range [``lo``, ``hi``]."""
    x = np.asarray(raw, dtype=np.float64)
    return np.count_nonzero((x < lo - 0.5) | (x > hi + 0.5), axis=tuple(range(1, x.ndim)))


def off_grid(raw: np.ndarray, offset: float, step: float) -> np.ndarray:
    """How many values of each of ``raw`` (rows of tiles) lie more than :data:`OFF_GRID` of a step off
    ``offset + step Z``."""
    x = np.asarray(raw, dtype=np.float64) * (1.0 / step)
    x -= offset / step
    x -= np.rint(x)
    np.abs(x, out=x)
    return np.count_nonzero(x > OFF_GRID, axis=tuple(range(1, x.ndim)))
