"""The owner's spot checks in decrypt's tasks: each image's kept sample (hecore.integrity: pixels, or the
declared chain's results) read from the broadcast, compared with the finished image (:func:`spot_check`),
and where that comparison reads the image (:func:`spot_mask`: what ``decrypt --spots-only`` decrypts)."""
from __future__ import annotations

import functools

import numpy as np


def spot_sample(spots, image_id: str) -> bytes | None:
    """Image ``image_id``'s spot sample from ``spots``: a broadcast (or a plain mapping) of image id -> bytes,
    or None when the run is not checked."""
    table = getattr(spots, "value", spots)
    return table.get(image_id) if table else None


def spot_check(spots: bytes, ops: list[str], preset: str, result: np.ndarray):
    """The owner's spot sample (bytes from the owner map) against one decrypted, finished image: a
    :class:`hecore.integrity.SpotResult`; a sample that does not read fails (the owner map was changed)."""
    from hecore import integrity
    from hecore.ops.spec import recorded_finish, recorded_reference_known

    try:
        sample = integrity.read_sample(spots)
    except integrity.SpotSampleError as e:
        return integrity.SpotResult(0, 0, 1, None, f"the owner map's spot sample of this image does not read: {e}")
    if isinstance(sample, integrity.ResultSample):      # the declared chain's results, kept at encrypt
        return integrity.check_results(sample, result, _chain_text(tuple(ops), preset))
    expected = functools.partial(recorded_reference_known, specs=ops, preset=preset)
    # a chain whose results have no exact grid (the DFT filter) is compared within its CKKS error
    slack = 0.0 if recorded_finish(ops, preset).snaps else integrity.APPROXIMATE_SLACK
    reach = _local_reach(tuple(ops), preset)
    if reach is not None and reach <= sample.radius:     # the windows alone decide their centres
        return integrity.check_patches(sample, result, expected, slack)
    return integrity.check(sample, result, expected, slack)


def spot_mask(spots: bytes | None, ops: list[str], preset: str) -> np.ndarray | None:
    """Where :func:`spot_check` reads the finished image: a (height, width) mask of the result (the sampled
    places for a chain whose windows decide their centres, else every value the chain's reference knows), or
    None when the image has no sample or its sample does not read (its check fails whatever is decrypted)."""
    from hecore import integrity
    from hecore.ops.spec import recorded_reference_known

    if spots is None:
        return None
    try:
        sample = integrity.read_sample(spots)
    except integrity.SpotSampleError:
        return None
    if isinstance(sample, integrity.ResultSample):
        if sample.chain != _chain_text(tuple(ops), preset):
            return None             # another chain than the declared one: its check fails whatever is decrypted
        return _at_centres(sample)
    reach = _local_reach(tuple(ops), preset)
    if reach is not None and reach <= sample.radius:
        return _at_centres(sample)
    known = np.isfinite(np.asarray(recorded_reference_known(sample.image(), ops, preset), dtype=np.float64))
    return known if known.ndim == 2 else known.any(axis=-1)


def _at_centres(sample) -> np.ndarray:
    """The (height, width) mask of a sample's places."""
    mask = np.zeros((sample.height, sample.width), dtype=bool)
    mask.flat[sample.centers] = True
    return mask


@functools.lru_cache(maxsize=64)
def _chain_text(ops: tuple[str, ...], preset: str) -> str:
    """A run's recorded chain as a results sample names it (:func:`hecore.ops.spec.op_chain_text`)."""
    from hecore.ops.spec import op_chain_text

    return "|".join(op_chain_text(list(ops), preset))


@functools.lru_cache(maxsize=64)
def _local_reach(ops: tuple[str, ...], preset: str) -> int | None:
    """How far a chain whose patches decide their centres reaches (:func:`hecore.integrity.reach`); None for
    any other chain (:func:`hecore.ops.spec.patch_local_chain`)."""
    from hecore import integrity
    from hecore.ops.spec import patch_local_chain, recorded_reference_known

    if not patch_local_chain(ops, preset):
        return None
    return integrity.reach(functools.partial(recorded_reference_known, specs=ops, preset=preset))
