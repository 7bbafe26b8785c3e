"""``grey``: an RGB image to one channel, ``Y = (77 R + 150 G + 29 B) / 256`` (ITU-R BT.601's luma in
integers, the weights summing to 256).

The channels of a pixel sit in different ciphertexts (one per tile channel in the packed layouts, one per
value in the pixel layout), so the op brings a tile's channels together (the process job groups the rows by
image and tile) and sums them with the integer weights: doublings and additions, exact in every scheme, no
level, no key but the public one.  The division by 256 is deferred to the key holder like every divisor
(``post_scale / 256``), so the result is exact after the one rounding at the end.  A grey image passes
unchanged: its one channel is weighted by 256, so that every image of a run shares the chain's post-scale.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from .base import ImageOp, as_image, register
from .windows import times

__all__ = ["Grey", "LUMA"]

#: The weights of R, G and B (ITU-R BT.601 in integers), over :data:`LUMA_DIVISOR`.
LUMA = (77, 150, 29)
LUMA_DIVISOR = 256


@register
@dataclass(frozen=True)
class Grey(ImageOp):
    """``grey``: one channel out of three, ``(77 R + 150 G + 29 B) / 256``; a grey image is unchanged."""

    real_linear: ClassVar[bool] = True

    name: ClassVar[str] = "grey"
    form: ClassVar[str] = "'grey' (no argument): RGB to one channel, Y = (77 R + 150 G + 29 B) / 256"
    takes_args: ClassVar[bool] = False
    pointwise: ClassVar[bool] = False
    post_scale_factor: ClassVar[float] = 1.0 / LUMA_DIVISOR

    @classmethod
    def parse(cls, args, spec):
        if args.strip():
            raise ValueError(f"bad operation spec {spec!r}: expected {cls.form}")
        return cls()

    @property
    def spec(self) -> str:
        return "grey"

    @staticmethod
    def weights(channels: int) -> tuple[int, ...]:
        """The integer weight of each of ``channels`` channels (1 or 3)."""
        if channels == 3:
            return LUMA
        if channels == 1:
            return (LUMA_DIVISOR,)
        raise ValueError(f"grey takes an image of 1 or 3 channels, not {channels}")

    def out_shape(self, height: int, width: int, channels: int) -> tuple[int, int, int]:
        self.weights(channels)
        return height, width, 1

    def regroup(self, packed: bool) -> str:
        return "channels"

    def rotates(self, packed: bool) -> bool:
        return False

    def raw_step(self, lo, hi, ps):
        return lo * LUMA_DIVISOR, hi * LUMA_DIVISOR, ps / LUMA_DIVISOR

    def grid_step(self, ps, offset, step):
        return ps / LUMA_DIVISOR, offset * LUMA_DIVISOR, step

    @property
    def error_window(self) -> int:
        return LUMA_DIVISOR ** 2

    def apply_plain(self, img: np.ndarray) -> np.ndarray:
        arr = as_image(img)
        if arr.ndim == 2:
            return arr.copy()
        w = self.weights(arr.shape[2])
        return sum(float(wc) * arr[:, :, c] for c, wc in enumerate(w)) / LUMA_DIVISOR

    # --- encrypted: the channels of one tile -------------------------------------------------------

    def packed_channels(self, ev, cts: Sequence, post_scale: float):
        """The tile's channel ciphertexts (in channel order) as one: ``(ciphertext, new post_scale)``."""
        total = None
        for c, w in zip(cts, self.weights(len(cts))):
            term = times(ev, c, w)
            total = term if total is None else ev.add(total, term)
        return total, post_scale / LUMA_DIVISOR

    def pixel_channels(self, fmt, batches: Sequence, *, strategy: str, security: str):
        """The channel batches of one tile (in channel order, each its pixels row-major) as one batch."""
        from .pixel import weighted_sum

        return weighted_sum(fmt, batches, self.weights(len(batches)), strategy=strategy, security=security)

