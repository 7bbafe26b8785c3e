"""Each ciphertext loaded by SEAL once: the row check's load is the one the work uses (hecore.seal.checks,
tasks.handoff, tasks.rowchecks.check_and_work_partition).  No Spark."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from Pyfhel import PyCtxt

from hecore.seal.checks import CiphertextChecker
from schemas.stages import WRITTEN
from schemas.tables import CIPHERTEXTS
from tasks import handoff, worker
from tasks.checksums import ct_checksums
from tasks.rowchecks import RowExpect, check_and_work_partition, run_labels

FP = "f" * 64


def rows(ctx, n: int = 3, compression: str = "none") -> pa.RecordBatch:
    """``n`` packed tiles (8x8, halo 0) of one 8 x 8n grey image, encrypted under ``ctx``."""
    cts = []
    for i in range(n):
        c = PyCtxt(pyfhel=ctx._he, bytestring=ctx.encrypt_vector(np.full(64, float(i))))
        cts.append(c.to_bytes(compr_mode=compression))
    cols = dict(run_id=["r"] * n, image_id=["0123456789abcdef"] * n, layout=["packed"] * n, scheme=["ckks"] * n,
                preset=[ctx.params.name] * n, strategy=["fresh"] * n, security=["ind-cpa"] * n,
                key_fingerprint=[FP] * n, image_height=[8] * n, image_width=[8 * n] * n, image_channels=[1] * n,
                tile_h=[8] * n, tile_w=[8] * n, halo=[0] * n, tile_y=[0] * n, tile_x=list(range(n)), y=[0] * n,
                x=[8 * i for i in range(n)], h=[8] * n, w=[8] * n, channel=[0] * n, index=[0] * n, ops=[[]] * n,
                post_scale=[1.0] * n, level=[ctx.params.data_primes - 1] * n, scale_bits=[ctx.params.scale_bits] * n,
                encrypt_seconds=[0.0] * n, process_seconds=[0.0] * n, ct=cts)
    t = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in CIPHERTEXTS if f.name != "ct_xxh3"})
    t = t.append_column("ct_xxh3", ct_checksums(t.column("ct")))
    return t.select(CIPHERTEXTS.names).cast(CIPHERTEXTS).to_batches()[0]


def expect(ctx) -> RowExpect:
    return RowExpect(fingerprint=FP, layout="packed", preset=ctx.params.name, tile=(8, 8), halo=0, security="ind-cpa",
                     **run_labels(ctx.params.name, "fresh", {}))


@pytest.mark.parametrize("compression", ["none", "zstd", "zlib"])
def test_the_checker_loads_what_the_context_loads_and_inflates_compressed_bytes_once(he_paper4096, compression):
    ctx, _ = he_paper4096
    raw = ctx.encrypt_vector(np.arange(8.0))
    c = PyCtxt(pyfhel=ctx._he, bytestring=raw)
    ctx._he.mod_switch_to_next(c)                      # stored one level down
    stored = c.to_bytes(compr_mode=compression)
    checker = CiphertextChecker.for_context(ctx)
    inflated = checker._inflated(stored)
    assert inflated == c.to_bytes(compr_mode="none")   # SEAL's own uncompressed serialization
    problem, loaded = checker.checked(stored)
    assert problem is None and isinstance(loaded, PyCtxt)
    assert loaded.mod_level == ctx.load_ciphertext(stored).mod_level == 1
    assert np.allclose(ctx.decrypt_slots(loaded, 8), np.arange(8.0), atol=1e-3)


def test_a_compressed_stream_that_inflates_too_far_is_still_a_bomb_and_a_corrupt_one_still_refused(he_addonly2048):
    ctx, _ = he_addonly2048
    checker = CiphertextChecker.for_context(ctx)
    good = PyCtxt(pyfhel=ctx._he, bytestring=ctx.encrypt_vector(np.zeros(4))).to_bytes(compr_mode="zstd")
    bomb = good[:16] + pa.Codec("zstd").compress(b"\0" * (checker.max_bytes + 4096), asbytes=True)
    assert checker.checked(bomb) == (checker.problem(bomb), None)
    assert checker.problem(bomb).reason == "decompression-bomb"
    assert checker.problem(good[:200]).reason == "seal-refused"
    assert checker.checked(good[:200])[1] is None


def test_the_work_takes_the_rows_and_ciphertexts_the_checks_made(he_addonly2048, monkeypatch):
    ctx, _ = he_addonly2048
    monkeypatch.setitem(worker._WORKER_CACHE, "load-once/checker", CiphertextChecker.for_context(ctx))
    rb = rows(ctx).append_column("file", pa.array(["part-0"] * 3))
    given = []

    def work(batches):
        for b in batches:
            given.append(handoff.take(b, ctx._he))
            yield pa.RecordBatch.from_pylist([], schema=WRITTEN)

    list(check_and_work_partition(iter([rb]), expect=expect(ctx), token="load-once/checker", broadcast=None,
                                  work=work, work_schema=WRITTEN))
    ((meta, loaded),) = given
    assert [m["tile_x"] for m in meta] == [0, 1, 2] and all("ct" not in m for m in meta)
    assert all(isinstance(c, PyCtxt) for c in loaded)
    assert [round(float(ctx.decrypt_slots(c, 1)[0])) for c in loaded] == [0, 1, 2]
    assert handoff.take(rb, ctx._he) is None                 # only the batch given, and only once


def test_ciphertexts_of_another_context_are_not_handed_to_the_work(he_addonly2048, he_addonly2048_other):
    ctx, _ = he_addonly2048
    other, _ = he_addonly2048_other
    rb = rows(ctx, 1)
    handoff.give(rb, [{}], [object()], ctx._he)
    assert handoff.take(rb, other._he) == ([{}], None)
    handoff.clear()


def test_the_chain_gives_the_same_ciphertexts_from_the_checks_loads_and_never_loads_again(he_addonly2048,
                                                                                          monkeypatch):
    from hecore.seal.evaluator import Evaluator
    from tasks.process import packed_partition

    ctx, _ = he_addonly2048
    ev = Evaluator(ctx)
    monkeypatch.setitem(worker._WORKER_CACHE, "load-once/checker", CiphertextChecker.for_context(ctx))
    monkeypatch.setitem(worker._WORKER_CACHE, "load-once/evaluator", ev)
    rb = rows(ctx)
    work = dict(token="load-once/evaluator", broadcast=None, specs=["brightness:5"], run_id="r")
    alone = pa.Table.from_batches(list(packed_partition(iter([rb]), **work)))

    def refuse(*_):
        raise AssertionError("the work loaded a ciphertext the checks had loaded")

    monkeypatch.setattr(Evaluator, "load", refuse)
    fused = list(check_and_work_partition(iter([rb]), expect=expect(ctx), token="load-once/checker", broadcast=None,
                                          work=lambda b: packed_partition(b, **work), work_schema=CIPHERTEXTS))
    done = [w for b in fused for w in b.column("work").to_pylist() if w is not None]
    assert [w["ct"] for w in done] == alone.column("ct").to_pylist()
    assert [w["ops"] for w in done] == [["brightness:5"]] * 3
