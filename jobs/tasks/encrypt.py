"""What runs inside Spark's Python workers: Arrow batches in, Arrow batches out.

These functions are the glue between Spark's ``mapInArrow``/``applyInArrow``
and ``hecore``: they shape rows after ``schemas.tables`` and call hecore for
everything cryptographic.  Expensive worker state (the HE context, a
strategy's cache table and randomness pool) is built from broadcast bytes
once per Python worker and kept in a module-level cache keyed by the
broadcast's token -- not once per task.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa

from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS

from .rows import EncryptMeta, ciphertext_rows
from .worker import inject_fault, worker_state

# --- failure injection (a test switch) ------------------------------------------------------





# --- decode: binaryFile rows -> tiles of raw pixels, or rejects ------------------------------





# --- encrypt: tiles -> ciphertext rows -----------------------------------------------------

@dataclass(frozen=True)
class EncryptPayload:
    """What the driver broadcasts to the encrypt tasks: public material and the strategy cache.

    With symmetric encryption (the key owner's run, ``hepix encrypt --encryption symmetric``)
    also the secret key: never in a log line or an error message.
    """

    public: object              # hecore.context.PublicMaterial
    strategy: str
    strategy_state: bytes | None
    allow_leaky: bool
    secret_key: bytes | None = field(default=None, repr=False)
    compression: str = "none"


def build_encryptor(payload: EncryptPayload):
    from hecore.context import HEContext
    from hecore.encrypt.strategies import make_strategy, strategy_from_state
    from hecore.kernels import warm_up

    warm_up()
    ctx = HEContext.from_public(payload.public)
    if payload.strategy_state is not None:
        strategy = strategy_from_state(ctx, payload.strategy_state, allow_leaky=payload.allow_leaky)
    else:
        strategy = make_strategy(payload.strategy, ctx, allow_leaky=payload.allow_leaky).prepare()
    return ctx, strategy




def build_symmetric_encryptor(payload: EncryptPayload):
    from hecore.encrypt.symmetric import SymmetricEncryptor

    # The driver already proved that the secret key belongs to the public key.
    return SymmetricEncryptor(payload.public, payload.secret_key, compression=payload.compression,
                              check_key=False)


def _encrypt_symmetric_batch(rb: pa.RecordBatch, *, token: str, broadcast, meta: EncryptMeta, rebuilds=None
                             ) -> Iterator[pa.RecordBatch]:
    """Every tile channel of ``rb`` in one native call (seeded secret-key encryption), a row each."""
    from hecore.ciphertexts import SECURITY_IND_CPA, CiphertextBatch
    from hecore.encrypt.symmetric import STRATEGY, encrypt_blocks

    enc = worker_state(token + "/symmetric", broadcast, build_symmetric_encryptor, rebuilds)
    params = enc.params
    tiles = rb.to_pylist()
    if not tiles:
        return
    r = tiles[0]["halo"]          # one run: one tile size and halo
    blocks = [np.frombuffer(t["pixels"], dtype=np.uint8).reshape(t["tile_h"] + 2 * r, t["tile_w"] + 2 * r)
              for t in tiles]
    t0 = time.perf_counter()
    cts = encrypt_blocks(enc, blocks, r, complex_packing=meta.layout == "packed-complex")
    per_ct = (time.perf_counter() - t0) / len(tiles)
    for tile, ct in zip(tiles, cts):
        yield ciphertext_rows(
            meta, tile, tile["channel"], CiphertextBatch.from_list([ct], STRATEGY, SECURITY_IND_CPA), STRATEGY,
            SECURITY_IND_CPA, params.scheme, level=params.data_primes, scale_bits=params.scale_bits, ops=[],
            post_scale=1.0, encrypt_seconds=np.full(1, per_ct), process_seconds=np.zeros(1))






def encrypt_partition(batches: Iterator[pa.RecordBatch], *, token: str, broadcast, meta: EncryptMeta,
                      rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Encrypt every tile channel of the partition, one record batch each."""
    if tasks is not None:
        tasks.add([os.getpid()])
    inject_fault("encrypt", before_output=True)
    if meta.encryption == "symmetric":
        for rb in batches:
            yield from _encrypt_symmetric_batch(rb, token=token, broadcast=broadcast, meta=meta, rebuilds=rebuilds)
        return
    ctx, strategy = worker_state(token, broadcast, build_encryptor, rebuilds)
    from hecore.ciphertexts import CiphertextBatch
    from hecore.layouts.packed import encrypt_plane

    params = ctx.params
    packed = meta.layout != "pixel"
    complex_packing = meta.layout == "packed-complex"
    for rb in batches:
        for tile in rb.to_pylist():
            r = tile["halo"]
            plane = np.frombuffer(tile["pixels"], dtype=np.uint8).reshape(tile["tile_h"] + 2 * r,
                                                                          tile["tile_w"] + 2 * r)
            t = time.perf_counter()
            if packed:      # the whole (edge-padded) tile channel and its halo in one fresh ciphertext
                batch = CiphertextBatch.from_list([encrypt_plane(ctx, plane, r, complex_packing)],
                                                  strategy.name, strategy.security)
            else:           # the valid pixels, one ciphertext each
                batch = strategy.encrypt(plane[: tile["h"], : tile["w"]])
            per_ct = (time.perf_counter() - t) / max(1, len(batch))
            n = len(batch)
            yield ciphertext_rows(
                meta, tile, tile["channel"], batch, strategy.name, strategy.security, params.scheme,
                level=params.data_primes, scale_bits=params.scale_bits, ops=[], post_scale=1.0,
                encrypt_seconds=np.full(n, per_ct), process_seconds=np.zeros(n))
            inject_fault("encrypt", before_output=False)




# --- shared by process and decrypt --------------------------------------------------------











# --- process: pointwise ops (brightness, watermark) ------------------------------------------



# --- process: the packed layout (every op within one tile channel) ----------------------------







# --- process: matching (distances to a query image) -------------------------------------------



# --- process: the mean filter (tile + halo) --------------------------------------------------







# --- decrypt -------------------------------------------------------------------------------



# One row per decrypted pixel value.  A packed ciphertext yields many rows; its count (cts), bytes and
# seconds go on the first of them and 0 on the rest, so that per-image sums stay right.




















# --- encrypt, writing Parquet from the Python workers --------------------------------------------



def encrypt_to_files(batches: Iterator[pa.RecordBatch], *, directory: str, token: str, broadcast,
                     meta: EncryptMeta, rebuilds=None, tasks=None) -> Iterator[pa.RecordBatch]:
    """Encrypt a partition and write its ciphertext rows as one Parquet file in ``directory``.

    Used when the workers see the output directory as a local path (local and
    local-cluster masters): the ciphertext bytes then never pass through the
    JVM, which otherwise spends most of a core moving them (Arrow, row
    conversion, its Parquet writer).  Only ``(file, rows, bytes)`` goes back
    to Spark; the driver keeps exactly the files successful tasks reported.
    The file is written under a temporary name and renamed when complete.
    """
    import uuid

    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tc = TaskContext.get()
    name = f"part-{tc.partitionId():05d}-{tc.attemptNumber()}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = os.path.join(directory, f".{name}.tmp")
    rows, writer = 0, None
    try:
        for rb in encrypt_partition(batches, token=token, broadcast=broadcast, meta=meta,
                                    rebuilds=rebuilds, tasks=tasks):
            if writer is None:
                writer = pq.ParquetWriter(tmp, CIPHERTEXTS, compression="none", use_dictionary=False,
                                          write_statistics=False, data_page_size=8 * 2**20)
            writer.write_batch(rb)
            rows += rb.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        yield pa.RecordBatch.from_pylist([{"file": None, "rows": 0, "bytes": 0}], schema=WRITTEN)
        return
    os.replace(tmp, os.path.join(directory, name))
    yield pa.RecordBatch.from_pylist(
        [{"file": name, "rows": rows, "bytes": os.path.getsize(os.path.join(directory, name))}], schema=WRITTEN)
