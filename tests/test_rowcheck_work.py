"""The row checks with a job's work in the same task (tasks.rowchecks.check_and_work_partition), and the
written files cleaned of images judged bad afterwards (tasks.files.drop_images): pyarrow only."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.tables import CIPHERTEXTS
from tasks import worker
from tasks.checksums import ct_checksums
from tasks.files import drop_images, keep_reported, keep_schema
from tasks.rowchecks import RowExpect, check_and_work_partition, fused_schema

SEEN = pa.schema([("image_id", pa.string()), ("tile_x", pa.int32()), ("columns", pa.int32())])


class Refuses:
    """A ciphertext checker that refuses the ciphertexts starting with b"bad" (SEAL stays out of this test)."""

    class Problem:
        reason, detail = "seal-refused", "refused by the test"

    def problems(self, buffers):
        return [self.Problem() if bytes(b).startswith(b"bad") else None for b in buffers]


def rows(image_id: str, cts: list[bytes]) -> pa.RecordBatch:
    """One 8 x (8 * len(cts)) grey image in the packed layout, one ciphertext per 8x8 tile."""
    n = len(cts)
    cols = dict(run_id=["r"] * n, image_id=[image_id] * n, layout=["packed"] * n, scheme=["ckks"] * n,
                preset=["addonly-2048"] * n, strategy=["fresh"] * n, security=["ind-cpa"] * n,
                key_fingerprint=["f" * 64] * n, image_height=[8] * n, image_width=[8 * n] * n, image_channels=[1] * n,
                tile_h=[8] * n, tile_w=[8] * n, halo=[0] * n, tile_y=[0] * n, tile_x=list(range(n)), y=[0] * n,
                x=[8 * i for i in range(n)], h=[8] * n, w=[8] * n, channel=[0] * n, index=[0] * n, ops=[[]] * n,
                post_scale=[1.0] * n, level=[1] * n, scale_bits=[20] * n, encrypt_seconds=[0.0] * n,
                process_seconds=[0.0] * n, ct=cts)
    t = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in CIPHERTEXTS if f.name != "ct_xxh3"})
    t = t.append_column("ct_xxh3", ct_checksums(t.column("ct")))
    return t.cast(CIPHERTEXTS).to_batches()[0]


def seen(batches):
    """The work: one row per input row it is given (and how many columns that row had)."""
    for rb in batches:
        yield pa.RecordBatch.from_pydict({"image_id": rb.column("image_id"), "tile_x": rb.column("tile_x"),
                                          "columns": pa.array([rb.num_columns] * rb.num_rows, pa.int32())},
                                         schema=SEEN)


def test_the_work_gets_exactly_the_rows_that_pass_their_checks_and_both_leave_the_task(monkeypatch):
    monkeypatch.setitem(worker._WORKER_CACHE, "test/checker", Refuses())
    expect = RowExpect(fingerprint="f" * 64, layout="packed", preset="addonly-2048", tile=(8, 8), halo=0)
    good, broken = rows("aaa", [b"ct0", b"ct1"]), rows("bbb", [b"ct0", b"bad", b"ct2"])
    with_file = [rb.append_column("file", pa.array(["part-0"] * rb.num_rows)) for rb in (good, broken)]
    out = pa.Table.from_batches(list(check_and_work_partition(iter(with_file), expect=expect, token="test/checker",
                                                              broadcast=None, work=seen, work_schema=SEEN)),
                                schema=fused_schema(SEEN))
    checks = [r["check"] for r in out.to_pylist() if r["check"] is not None]
    work = [r["work"] for r in out.to_pylist() if r["work"] is not None]
    assert all((r["check"] is None) != (r["work"] is None) for r in out.to_pylist())
    assert [(c["image_id"], c["tile_x"], c["reason"]) for c in checks] == [
        ("aaa", 0, None), ("aaa", 1, None), ("bbb", 0, None), ("bbb", 1, "seal-refused"), ("bbb", 2, None)]
    assert {c["file"] for c in checks} == {"part-0"}
    assert sorted((w["image_id"], w["tile_x"]) for w in work) == [("aaa", 0), ("aaa", 1), ("bbb", 0), ("bbb", 2)]
    assert {w["columns"] for w in work} == {len(CIPHERTEXTS)}         # the input's columns, without ``file``


def test_the_rows_of_images_judged_bad_are_taken_out_of_the_written_files(tmp_path):
    names = [f"part-{i:05d}-0-{i:08x}.parquet" for i in range(3)]
    for name, batches in zip(names, ([rows("aaa", [b"x", b"y"]), rows("bbb", [b"z"])], [rows("bbb", [b"v"])],
                                     [rows("ccc", [b"w"])])):
        pq.write_table(pa.Table.from_batches(batches), tmp_path / name)
    (tmp_path / f".{names[0]}.tmp").write_bytes(b"half")
    reports = [{"file": n, "rows": 1, "bytes": (tmp_path / n).stat().st_size, "xxh3_xor": 0, "ct_bytes": 1}
               for n in names]
    entries = keep_reported(str(tmp_path), reports + [{"file": None}])
    assert [e["name"] for e in entries] == names and sorted(p.name for p in tmp_path.iterdir()) == names
    drop_images(str(tmp_path), names, {"bbb"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [names[0], names[2]]
    kept = pq.read_table(tmp_path / names[0])
    assert kept.schema == CIPHERTEXTS and kept.column("image_id").to_pylist() == ["aaa", "aaa"]
    assert kept.column("ct").to_pylist() == [b"x", b"y"]
    assert pq.read_table(tmp_path / names[2]).column("image_id").to_pylist() == ["ccc"]


def test_a_table_whose_every_image_was_dropped_still_reads_as_an_empty_table(tmp_path):
    pq.write_table(pa.Table.from_batches([rows("bbb", [b"v"])]), tmp_path / "part-1")
    drop_images(str(tmp_path), ["part-1"], {"bbb"})
    assert list(tmp_path.iterdir()) == []
    keep_schema(str(tmp_path))
    table = pq.read_table(tmp_path)
    assert table.num_rows == 0 and table.schema == CIPHERTEXTS
