"""The checks every encrypted distance of a match run passes before and after the owner decrypts it.

A match run comes back from the cluster like an image run, so its rows get the image rows' defences:
the id is one hepix writes (and, with an owner map, one the owner made -- the query too), the row is of
this key, layout, parameters and ops, its metric is one the run asked for, no (image, metric) comes
twice, ``bound``, ``parts`` and ``distance_scale`` are the ones the run's ops and the owner's image give
(recomputed here, never believed), the ciphertext passes the keys' checker, and the decrypted distance
lies in what the pixels allow: ``0 .. pixels x bound^2 x post_scale^2`` for squared L2, ``0 .. pixels x
bound x post_scale`` (plus the polynomial's error) for L1.  A row that fails is a rejects row; its image's
distances are all left out.

The Python workers that decrypt the distances run :func:`row_problem` before a ciphertext reaches the
library, and the driver, which decides, runs it again over what they report (:mod:`tasks.match`); both
see the owner's images through :class:`KnownImages`, or an owner map itself.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from schemas.tables import IMAGE_ID

#: The most ciphertext pairs one distance may sum without an owner map (a 4096x4096 RGB image of 8x8 tiles).
MAX_PARTS = 3 * 512 * 512
#: A decrypted distance may stray this far (relative to its largest value, plus one) outside its range:
#: CKKS's error, far below what another key's ciphertext or a forged scale gives.
MARGIN = 1e-3

_ID = re.compile(IMAGE_ID)


@dataclass(frozen=True)
class DistanceExpect:
    """What every encrypted distance of one match run must say."""

    fingerprint: str
    layout: str
    preset: str
    ops: tuple[str, ...]            # the image ops applied before matching
    metrics: tuple[str, ...]
    bound: float                    # D: the largest raw |difference| the ops allow
    post_scale: float
    integer: bool                   # BFV/BGV: no division by parts
    slots: int                      # values one packed ciphertext holds (pixels per part, at most)

    @classmethod
    def for_run(cls, run) -> "DistanceExpect":
        """From the job's key and the input run's manifest (its ops parse; the numbers are recomputed)."""
        from hecore.ops.spec import parse_ops, raw_range, recorded_finish, run_kind

        parent, params = run.parent, run.keys.params
        image_ops = tuple(o for o in parent.ops if run_kind(o) != "match")
        lo, hi = raw_range(parse_ops(list(image_ops)))
        metrics = tuple((parent.options.get("match") or {}).get("metrics") or ("l1", "l2"))
        return cls(fingerprint=run.fingerprint, layout=parent.layout or "", preset=params.name, ops=image_ops,
                   metrics=metrics, bound=float(hi - lo),
                   post_scale=float(recorded_finish(list(image_ops), params.name).post_scale),
                   integer=bool(params.is_integer), slots=int(getattr(params, "slots", 1) or 1))

    def scale(self, metric: str, parts: int) -> float:
        from hecore.ops.matching import distance_scale

        return distance_scale(metric, self.post_scale, self.bound, parts, self.integer)

    def largest(self, metric: str, pixels: int) -> float:
        """The largest distance ``pixels`` values can be apart under ``metric``."""
        d = self.bound * abs(self.post_scale)
        return pixels * (d * d if metric == "l2" else d)


@dataclass(frozen=True)
class KnownImage:
    """The size of one image the owner encrypted (what the checks read of an owner map's record)."""

    image_height: int
    image_width: int
    image_channels: int


class KnownImages:
    """The owner map's images as the checks see them (``get(image_id)``: the image's size, or None): the
    sizes alone, to be shipped to the owner's executors that decrypt."""

    def __init__(self, sizes: dict[str, tuple[int, int, int]]):
        self.sizes = sizes

    @classmethod
    def of(cls, owner) -> "KnownImages":
        """The sizes of the images of the owner map ``owner`` (jobs.runtime.owner.OwnerMap)."""
        return cls({i: (m.image_height, m.image_width, m.image_channels) for i, m in owner.images().items()})

    def get(self, image_id) -> KnownImage | None:
        size = self.sizes.get(image_id) if isinstance(image_id, str) else None
        return KnownImage(*size) if size is not None else None


def valid_id(image_id) -> bool:
    """An image id of the form hepix writes."""
    return isinstance(image_id, str) and bool(_ID.fullmatch(image_id))


def row_problem(r: dict, expect: DistanceExpect, owner=None) -> tuple[str, str] | None:
    """Why the encrypted distance row ``r`` (without its bytes) is not one this run made, or None."""
    for k in ("image_id", "query_image_id", "metric", "layout", "preset", "key_fingerprint", "ops", "bound",
              "parts", "distance_scale"):
        if r.get(k) is None:
            return "malformed-row", f"the row has no {k}"
    if not valid_id(r["image_id"]) or not valid_id(r["query_image_id"]):
        return "bad-image-id", f"image id {_show(r['image_id'])} or query {_show(r['query_image_id'])} is not of " \
                               "the form hepix writes"
    if r["key_fingerprint"] != expect.fingerprint:
        return "key-mismatch", (f"made with key {_show(r['key_fingerprint'][:16])}, this key is "
                                f"{expect.fingerprint[:16]}")
    if owner is not None:
        if owner.get(r["image_id"]) is None or owner.get(r["query_image_id"]) is None:
            return "unknown-image", "no image of the owner map has this id (or the query's): the owner never made it"
    if r["layout"] != expect.layout or r["preset"] != expect.preset or list(r["ops"]) != list(expect.ops):
        return "parameters-mismatch", (f"layout {_show(r['layout'])}, preset {_show(r['preset'])}, ops "
                                       f"{_show('|'.join(r['ops']))} are not the run's")
    if r["metric"] not in expect.metrics:
        return "malformed-row", f"metric {_show(r['metric'])} is not one of the run's ({', '.join(expect.metrics)})"
    parts = r["parts"]
    most = _pixels(r["image_id"], owner, expect) if owner is not None else MAX_PARTS
    if not 1 <= parts <= most:
        return "malformed-row", f"{parts} parts, outside 1..{most}"
    if not _close(r["bound"], expect.bound):
        return "malformed-row", f"bound {_show(r['bound'])} is not the run's {expect.bound:g}"
    want = expect.scale(r["metric"], parts)
    if not _close(r["distance_scale"], want):
        return "bad-distance-scale", f"distance_scale {_show(r['distance_scale'])} is not the {want:g} of its parts"
    return None


def value_problem(distance: float, r: dict, expect: DistanceExpect, owner=None) -> tuple[str, str] | None:
    """Why a decrypted ``distance`` cannot be one of the run's images' (outside what its pixels allow)."""
    pixels = _pixels(r["image_id"], owner, expect) if owner is not None else r["parts"] * expect.slots
    top = expect.largest(r["metric"], pixels)
    error = 0.0
    if r["metric"] == "l1":                 # the polynomial's error per value, either way
        from hecore.ops.matching import l1_poly_error

        error = l1_poly_error() * expect.bound * abs(expect.post_scale) * pixels
    slack = MARGIN * top + 1.0
    if not (math.isfinite(distance) and -error - slack <= distance <= top + error + slack):
        return "implausible-values", (f"{r['metric']} distance {distance:.6g} outside 0..{top:.6g}: not a "
                                      "distance of these images (another key's ciphertext, or a forged scale)")
    return None


def _pixels(image_id: str, owner, expect: DistanceExpect) -> int:
    known = owner.get(image_id)
    return known.image_height * known.image_width * known.image_channels if known is not None else 0


def _close(a, b) -> bool:
    return isinstance(a, (int, float)) and math.isfinite(a) and abs(a - b) <= 1e-9 * max(abs(b), 1e-300)


def _show(v, limit: int = 40) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[:limit - 3] + "..."
