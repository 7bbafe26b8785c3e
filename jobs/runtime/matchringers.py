"""The owner's ringers in the decrypt of a match run: an image encrypted as a ringer (``encrypt --ringers P``) has
every pixel in the owner map, so its distances to the query are known to the owner whenever the query's pixels
are too -- the query a ringer as well, or its original given with ``--images``.  Each such decrypted distance is
compared with the one the plaintext images give (the same ops, the same polynomial for L1); a distance that
differs makes its image an ``integrity`` reject.  Ringers are real images, drawn in secret at encrypt, so nothing
the cluster sees tells their distances from the others': a cluster that gets ``m`` images' distances wrong
escapes every ringer with probability ``(1 - P)^m`` (:func:`hecore.integrity.ringer_escape`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: How far a decrypted distance may lie from the plaintext one, as a fraction of the largest distance the
#: image's pixels allow (plus half a unit): far above CKKS's error on a distance (below 1e-6 of the distance in
#: tests/test_matching.py), so an honest distance never fails; BFV/BGV's are exact.
TOLERANCE = 1e-5


@dataclass(frozen=True)
class RingerVerdict:
    """What the ringers of one match run found: ``checked`` ringer images compared, ``wrong`` image id ->
    why its distance is not the plaintext one; ``why_not``: why no ringer could be compared (or None)."""

    checked: int
    wrong: dict
    why_not: str | None = None


def whole_pixels(sample: bytes | None) -> np.ndarray | None:
    """A ringer's image from its owner-map sample (uint8, (H, W) or (H, W, 3)); None for any other sample."""
    from hecore import integrity

    if sample is None:
        return None
    try:
        kept = integrity.read_sample(sample)
    except integrity.SpotSampleError:
        return None
    if not isinstance(kept, integrity.SpotSample) or not kept.whole:
        return None
    pixels = kept.values.reshape(kept.height, kept.width, kept.channels)
    return pixels[:, :, 0] if kept.channels == 1 else pixels


def query_original(images: str, record, options) -> np.ndarray | None:
    """The query's original from the owner's ``--images`` directory: the file of the owner map's name for it
    (``record``: its :class:`jobs.runtime.owner.OwnerImage`), if its bytes are the ones encrypt read (SHA-256),
    decoded as encrypt decoded it (``options``: :class:`tasks.decode.DecodeOptions`); None otherwise."""
    import hashlib
    import os
    from urllib.parse import unquote, urlparse

    from hecore.errors import ImageError
    from hecore.images import ImagePolicy, load_image, preprocess

    name = os.path.basename(unquote(urlparse(record.source).path))
    path = os.path.join(images, name)
    try:
        with open(path, "rb") as f:
            content = f.read()
    except OSError:
        return None
    if hashlib.sha256(content).hexdigest() != record.content_sha256:
        return None
    policy = ImagePolicy(max_pixels=options.max_pixels, conversions=frozenset(options.conversions))
    try:
        img = load_image(content, source=record.source, policy=policy)
        img = preprocess(img, options.resize) if options.resize else img
    except ImageError:
        return None
    return img.pixels


def plain_distances(image: np.ndarray, query: np.ndarray, expect) -> dict[str, float]:
    """The distances the plaintext images give after the run's ops (``expect``: the run's
    :class:`tasks.distances.DistanceExpect`): ``l2`` exact, ``l1`` as the encrypted polynomial computes it."""
    from hecore.ops.matching import plain_distances as distances
    from hecore.ops.spec import recorded_reference

    a = recorded_reference(image, list(expect.ops), expect.preset)
    b = recorded_reference(query, list(expect.ops), expect.preset)
    d = distances(a, b, expect.bound * abs(expect.post_scale))
    return {"l2": d["l2"], "l1": d["l1_poly"]}


def check_ringers(found: dict, samples: dict, expect, query_id: str, query: np.ndarray | None = None
                  ) -> RingerVerdict:
    """Compare the decrypted distances ``found`` ((image id, metric) -> row with ``distance``) of every ringer
    image (``samples``: image id -> the owner map's sample bytes) with the plaintext ones; the query's pixels
    from its own sample when it is a ringer, else ``query`` (its original, decoded as encrypt did)."""
    query = whole_pixels(samples.get(query_id)) if query is None else query
    metrics: dict[str, list[str]] = {}
    for iid, metric in sorted(found):
        metrics.setdefault(iid, []).append(metric)
    ringers = {iid: image for iid in metrics if (image := whole_pixels(samples.get(iid))) is not None}
    if not ringers:
        return RingerVerdict(0, {}, "no image of the run is a ringer (encrypt --ringers P keeps some whole)")
    if query is None:
        return RingerVerdict(0, {}, "the query is not a ringer: give its original with --images to compare the "
                                    f"{len(ringers)} ringers' distances")
    wrong = {}
    for iid, image in sorted(ringers.items()):
        if image.shape != query.shape:
            continue                            # not matched: the job rejected it for its size
        want = plain_distances(image, query, expect)
        for metric in metrics[iid]:
            got = found[(iid, metric)]["distance"]
            slack = 0.5 + (0.0 if expect.integer else TOLERANCE * expect.largest(metric, image.size))
            if abs(got - want[metric]) > slack:
                wrong[iid] = (f"its {metric} distance to the query decrypts to {got:.6g}, the owner's copy of both "
                              f"images gives {want[metric]:.6g}: the cluster's result is not the chain applied to "
                              "this image (a ringer)")
                break
    return RingerVerdict(len(ringers), wrong)
