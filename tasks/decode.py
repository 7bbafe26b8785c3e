"""The decode stage: image files (Spark ``binaryFile`` rows) in, one row per tile channel of raw pixels
out -- or one reject row naming why a file is not an image hepix takes.  Also the pixel-value histogram a
scanning strategy builds its cache from, and the reference images decrypt scores against."""
from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from schemas.stages import ORIGINALS, TILES

#: The key of the ids made without one (``DecodeOptions.id_key`` None): random, this process only.
_PROCESS_ID_KEY = secrets.token_bytes(32)


def image_id_for(source: str, key: bytes | None = None) -> str:
    """The image id of ``source`` in one encrypt run: HMAC-SHA-256 under the run's secret ``key``, 128 bits.

    The key is drawn by the encrypt run's driver and never written anywhere, so the id is random to anyone
    but that run (the cluster cannot compute it from a guessed file name or image, and the ids of two runs
    over the same files are unrelated), yet one image gets one id across the retries of a task.  Which id
    is which file is written to the owner map only.
    """
    return hmac.new(key or _PROCESS_ID_KEY, source.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


@dataclass(frozen=True)
class DecodeOptions:
    tile_h: int
    tile_w: int
    resize: int | None
    conversions: tuple[str, ...]
    max_pixels: int
    halo: int = 0
    id_key: bytes | None = field(default=None, repr=False)     # the run's secret for image ids
    spots: tuple | None = None    # (positions, radius, ringer probability) of the owner's spot samples (hecore.integrity)
    spot_results: tuple | None = None   # (specs, preset, patches, chain): the samples keep its results


def decode_partition(batches: Iterator[pa.RecordBatch], opts: DecodeOptions) -> Iterator[pa.RecordBatch]:
    from hecore.errors import ImageError
    from hecore.images import ImagePolicy, LoadedImage, load_image, preprocess
    from hecore.layouts.tiling import tile_image

    policy = ImagePolicy(max_pixels=opts.max_pixels, conversions=frozenset(opts.conversions))
    for batch in batches:
        rows: list[dict] = []
        paths = batch.column("path").to_pylist()
        contents = batch.column("content")
        for i, source in enumerate(paths):
            content = contents[i].as_buffer()
            size = content.size if content is not None else 0
            try:
                img: LoadedImage = load_image(memoryview(content) if content is not None else b"",
                                              source=source, policy=policy)
                if opts.resize:
                    img = preprocess(img, opts.resize)
            except ImageError as e:
                rows.append({"source": source, "reject_stage": "decode", "reject_reason": e.reason,
                             "reject_detail": str(e), "bytes": size})
                continue
            digest = hashlib.sha256(content).hexdigest()
            grid, tiles = tile_image(img.pixels, opts.tile_h, opts.tile_w, opts.halo)
            spots = _spot_sample(img.pixels, opts.spots, opts.spot_results)
            common = {"image_id": image_id_for(source, opts.id_key), "source": source, "content_sha256": digest,
                      "image_height": img.height, "image_width": img.width,
                      "image_channels": img.channels, "conversions": list(img.conversions),
                      "tile_h": grid.tile_h, "tile_w": grid.tile_w, "halo": opts.halo, "bytes": size}
            # One row per tile and channel: units of equal work, which Spark's round-robin
            # repartition then spreads evenly (a whole RGB tile is three times a grey one).
            for t in tiles:
                planes = t.pixels if t.pixels.ndim == 3 else t.pixels[:, :, None]
                for c in range(img.channels):
                    rows.append({**common, "tile_y": t.ty, "tile_x": t.tx, "y": t.y, "x": t.x, "h": t.h,
                                 "w": t.w, "channel": c,
                                 "pixels": np.ascontiguousarray(planes[:, :, c]).tobytes(),
                                 "spots": spots if (t.ty, t.tx, c) == (0, 0, 0) else None})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=TILES)


def _spot_sample(pixels: np.ndarray, spots: tuple | None, results: tuple | None = None) -> bytes | None:
    """The owner's spot sample of a decoded image (drawn here, where the image is whole; it goes to the
    owner map only): the whole image for a ringer (drawn with the given probability), else ``positions``
    positions of ``radius`` (none with 0 positions) -- with a declared chain (``results``: ``(specs, preset,
    patches, chain)``, jobs.encrypt.spot_results), that chain's finished results there rather than the pixels."""
    if spots is None:
        return None
    from hecore.integrity import draw, keep_results, ringer, ringer_fits

    positions, radius, ringers = spots
    if ringers and np.random.default_rng().random() < ringers and ringer_fits(*np.atleast_3d(pixels).shape):
        return ringer(pixels).to_bytes()            # drawn from a generator the operating system seeds
    if not positions:
        return None
    sample = draw(pixels, positions=positions, radius=radius)
    if results is not None:
        from hecore.ops.spec import recorded_reference_known

        specs, preset, patches, chain = results
        kept = keep_results(sample, functools.partial(recorded_reference_known, specs=specs, preset=preset),
                            chain, patches=patches)
        if kept is not None:
            return kept.to_bytes()
    return sample.to_bytes()


def histogram_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Pixel-value counts (0..255) over the valid region of every tile: the corpus scan."""
    counts = np.zeros(256, dtype=np.int64)
    for rb in batches:
        for tile in rb.to_pylist():
            plane = np.frombuffer(tile["pixels"], dtype=np.uint8).reshape(tile["tile_h"], tile["tile_w"])
            counts += np.bincount(plane[: tile["h"], : tile["w"]].reshape(-1), minlength=256)
    yield pa.RecordBatch.from_pydict({"value": np.arange(256, dtype=np.int32), "count": counts})


def result_sha256(values: np.ndarray) -> str:
    """SHA-256 of an image result rounded and clipped to 8 bits, with its shape (H x W x C)."""
    from hecore.quality import round_to_uint8

    a = np.ascontiguousarray(round_to_uint8(values))
    a = a if a.ndim == 3 else a[:, :, None]
    return hashlib.sha256(f"{a.shape[0]}x{a.shape[1]}x{a.shape[2]}:".encode() + a.tobytes()).hexdigest()


def originals_partition(batches: Iterator[pa.RecordBatch], opts: DecodeOptions,
                        ops: tuple[str, ...] = (), preset: str | None = None, match_key: bool = True
                        ) -> Iterator[pa.RecordBatch]:
    """Reference images, preprocessed exactly as ``encrypt`` did, keyed by the file's sha256 and (``match_key``:
    without an owner map, which names them by the first) by the sha256 of the rounded result ``ops`` (of the
    scheme of ``preset``) give on them (:func:`result_sha256`)."""
    from hecore.errors import ImageError
    from hecore.images import ImagePolicy, load_image, preprocess
    from hecore.ops.spec import recorded_chain, recorded_reference

    recorded_chain(list(ops), preset)           # refuses bad ops before any image

    policy = ImagePolicy(max_pixels=opts.max_pixels, conversions=frozenset(opts.conversions))
    for batch in batches:
        rows = []
        contents = batch.column("content")
        for i, source in enumerate(batch.column("path").to_pylist()):
            content = contents[i].as_buffer()
            if content is None:
                continue
            try:
                img = load_image(memoryview(content), source=source, policy=policy)
                if opts.resize:
                    img = preprocess(img, opts.resize)
            except ImageError:
                continue        # not one of the encrypted images; encrypt already reported it
            rows.append({"content_sha256": hashlib.sha256(content).hexdigest(),
                         "original": np.ascontiguousarray(img.pixels).tobytes(),
                         "orig_height": img.height, "orig_width": img.width, "orig_channels": img.channels,
                         "result_sha256": (result_sha256(recorded_reference(img.pixels, list(ops), preset))
                                           if match_key else None),
                         "orig_source": source})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=ORIGINALS)
