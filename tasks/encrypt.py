"""The encrypt stage: decoded tile channels in, ciphertext rows out (or Parquet files the workers write).

The encryptor (hecore's: a pixel strategy with its cache, the public key's fresh encryption, or the key
owner's seeded secret-key encryption) is built once per Python worker from the broadcast bytes
(:func:`tasks.worker.worker_state`), not once per task.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa

from .files import rows_to_file
from .rows import RowMeta, ciphertext_rows, tiles_rows
from .worker import inject_fault, worker_state


@dataclass(frozen=True)
class EncryptPayload:
    """What the driver broadcasts to the encrypt tasks: the keys (a :class:`hecore.schemes.KeySet`; with the
    owner's secret for ``hepix encrypt --encryption symmetric`` and TFHE's client-key encryption -- never in
    a log line or an error message) and what fills the layout (a pixel strategy and its prepared cache, or
    fresh encryption)."""

    keys: object = field(repr=False)
    layout: object              # hecore.layouts.Layout
    strategy: str
    strategy_state: bytes | None
    allow_leaky: bool
    use_secret: bool = False
    compression: str = "none"   # SEAL's serialization (hepix encrypt --compression; zstd for the packed layouts)
    store: object = None        # hecore.seal.atrest.AtRest: stored compact (--store compact), or SEAL's bytes at the
                                # level and scale of the --for-op chain; None: the first level
    binding: bytes | None = field(default=None, repr=False)   # hecore.binding's key (encrypt --bind); never logged
    bind_unit: float | None = None      # keyed offsets of this size under the pixels (hecore.binding.offset_unit)
    bind_modulus: int | None = None     # keyed offsets uniform mod t under the pixels (BFV/BGV: modular_offsets_of)
    bind_table: bytes | None = None     # keyed check slots among the pixels, for this table (hecore.slotchecks)
    bind_spread: float | None = None    # check values uniform in [-spread, spread] (a chain with the DFT filter)


def build_encryptor(payload: EncryptPayload):
    """A worker's encryptor, built once per Python worker from the broadcast bytes."""
    if payload.strategy_state is not None:     # the caching strategies' kernels (fresh encryption needs none)
        from hecore.seal.kernels import warm_up

        warm_up()
    # check_key=False: the driver already proved that a secret key belongs to the public key.
    enc = payload.keys.encryptor(layout=payload.layout, strategy=payload.strategy,
                                 strategy_state=payload.strategy_state, allow_leaky=payload.allow_leaky,
                                 use_secret=payload.use_secret, compression=payload.compression, check_key=False)
    store = payload.store
    if store is not None and store.format == "compact":
        from hecore.seal.atrest import CompactEncryptor

        return CompactEncryptor(enc, store)
    from hecore.layouts import Layout

    if Layout.parse(payload.layout).packed and (store is not None or payload.compression != "none"):
        from hecore.seal.atrest import SealStoreEncryptor

        enc = SealStoreEncryptor(enc, store, payload.compression)
    return enc


def encrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, meta: RowMeta,
                      rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Encrypt every tile channel of the partition, one record batch of ciphertext rows each."""
    from hecore.layouts import Layout, encrypt_units

    if tasks is not None:
        tasks.add([os.getpid()])
    inject_fault("encrypt", before_output=True)
    enc = worker_state(token, broadcast, build_encryptor, rebuilds)
    params, layout = enc.params, Layout.parse(meta.layout)
    store = getattr(enc, "at_rest", None)
    # TFHE parameters have no modulus chain or scale: level and scale bits 0
    primes, scale_bits = ((store.primes, store.scale_bits) if store else
                          (getattr(params, "data_primes", 0), getattr(params, "scale_bits", 0)))
    for rb in batches:
        tiles = rb.to_pylist()
        if not tiles:
            continue
        halo = tiles[0]["halo"]         # one run: one tile size and halo
        blocks = [np.frombuffer(t["pixels"], dtype=np.uint8).reshape(t["tile_h"] + 2 * halo, t["tile_w"] + 2 * halo)
                  for t in tiles]
        t = time.perf_counter()
        checks = _check_values(broadcast, tiles, blocks)
        blocks = _spread(broadcast, tiles, _offset(broadcast, tiles, blocks), params.slots)
        units = encrypt_units(layout, enc, blocks, halo, [(tile["h"], tile["w"]) for tile in tiles], checks)
        if layout.packed:       # one encryptor call for the whole batch: share its time evenly
            yield from packed_rows(meta, enc, tiles, list(units), primes, scale_bits,
                                   (time.perf_counter() - t) / len(tiles))
            continue
        for tile, batch in zip(tiles, units):
            n = len(batch)
            per_ct = (time.perf_counter() - t) / n
            yield ciphertext_rows(
                meta, tile, tile["channel"], batch, enc.name, enc.security, params.scheme,
                level=primes, scale_bits=scale_bits, ops=[], post_scale=1.0,
                encrypt_seconds=np.full(n, per_ct), process_seconds=np.zeros(n))
            inject_fault("encrypt", before_output=False)
            t = time.perf_counter()


def _check_values(broadcast, tiles: list[dict], blocks: list) -> list | None:
    """The binding's check values of each tile channel (``encrypt --bind``: :mod:`hecore.binding`), or None."""
    payload = getattr(broadcast, "value", broadcast)
    key = getattr(payload, "binding", None)
    if key is None or any(getattr(payload, k, None) for k in ("bind_unit", "bind_modulus", "bind_table")):
        return None             # bound by keyed offsets (_offset) or check slots (_spread)
    from hecore.binding import check_values

    spread = getattr(payload, "bind_spread", None)
    return [check_values(key, t["image_id"], t["channel"], t["tile_y"], t["tile_x"], b.shape, spread)
            for t, b in zip(tiles, blocks)]


def _offset(broadcast, tiles: list[dict], blocks: list) -> list:
    """The tile channels' blocks with the binding's keyed offsets added (:func:`hecore.binding.offsets_of`; BFV/BGV:
    :func:`hecore.binding.modular_offsets_of`, mod t), or as they are when the run has none."""
    payload = getattr(broadcast, "value", broadcast)
    unit, modulus = getattr(payload, "bind_unit", None), getattr(payload, "bind_modulus", None)
    if not unit and not modulus:
        return blocks
    from hecore.binding import centred, modular_offsets_of, offsets_of

    places = [(t["image_id"], t["channel"], t["tile_y"], t["tile_x"]) for t in tiles]
    if modulus:                 # BFV/BGV: pixel + offset mod t, as the slots' centred integers
        offsets = modular_offsets_of(payload.binding, places, blocks[0].shape, modulus)
        return list(centred(offsets + np.stack(blocks).astype(np.int64), modulus))
    return list(offsets_of(payload.binding, places, blocks[0].shape, unit) + np.stack(blocks))


def _spread(broadcast, tiles: list[dict], blocks: list, slots: int) -> list:
    """The tile channels' blocks as full slot rows, each one's pixels in its keyed order among check slots
    (:func:`hecore.slotchecks.spread`), or as they are when the run has none."""
    payload = getattr(broadcast, "value", broadcast)
    table = getattr(payload, "bind_table", None)
    if not table:
        return blocks
    from hecore.slotchecks import spread

    places = [(t["image_id"], t["channel"], t["tile_y"], t["tile_x"]) for t in tiles]
    return list(spread(payload.binding, places, blocks, slots, table))


#: Tile channels per record batch of the packed layouts' rows (one ciphertext each, ~130 KB at N=4096).
ROWS_PER_BATCH = 128


def packed_rows(meta: RowMeta, enc, tiles: list[dict], units: list, level: int, scale_bits: int,
                per_ct: float) -> Iterator[pa.RecordBatch]:
    """The packed layouts' ciphertext rows, :data:`ROWS_PER_BATCH` tile channels per record batch."""
    for i in range(0, len(tiles), ROWS_PER_BATCH):
        yield tiles_rows(meta, tiles[i:i + ROWS_PER_BATCH], units[i:i + ROWS_PER_BATCH], enc.name, enc.security,
                         enc.params.scheme, level, scale_bits, per_ct)
        inject_fault("encrypt", before_output=False)


# --- encrypt, writing Parquet from the Python workers --------------------------------------------

def encrypt_to_files(batches: Iterator[pa.RecordBatch], *, directory: str, access, attempt, token: str, broadcast,
                     meta: RowMeta, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Encrypt a partition and write its ciphertext rows as one Parquet file in ``directory``, reached
    through ``access`` and named by the task's ``attempt`` (:func:`tasks.files.rows_to_file`: the
    ciphertext bytes never pass through the JVM)."""
    yield from rows_to_file(encrypt_partition(batches, token=token, broadcast=broadcast, meta=meta,
                                              rebuilds=rebuilds, tasks=tasks), directory=directory, attempt=attempt,
                            access=access)
