"""Splits planned by image (tasks.imagesplits) and files written one image per row group
(tasks.files.RowGroupWriter): pyarrow only."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.footers import footer_bytes, local_reader
from schemas.tables import CIPHERTEXTS
from tasks.checksums import ct_checksums
from tasks.files import rows_to_file
from tasks.filesystem import FileAccess
from tasks.imagesplits import ImageTask, plan_by_image, split_images, usable_id
from tasks.splits import Split, splits_of


def rows(image_id: str, n: int, start: int = 0) -> pa.RecordBatch:
    cols = dict(run_id=["r"] * n, image_id=[image_id] * n, layout=["packed"] * n, scheme=["ckks"] * n,
                preset=["addonly-2048"] * n, strategy=["fresh"] * n, security=["ind-cpa"] * n,
                key_fingerprint=["f" * 64] * n, image_height=[8] * n, image_width=[8 * 64] * n, image_channels=[1] * n,
                tile_h=[8] * n, tile_w=[8] * n, halo=[0] * n, tile_y=[0] * n, tile_x=list(range(start, start + n)),
                y=[0] * n, x=[8 * i for i in range(start, start + n)], h=[8] * n, w=[8] * n, channel=[0] * n,
                index=[0] * n, ops=[[]] * n, post_scale=[1.0] * n, level=[0] * n, scale_bits=[20] * n,
                encrypt_seconds=[0.0] * n, process_seconds=[0.0] * n, ct=[b"c" * 100] * n)
    t = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in CIPHERTEXTS if f.name != "ct_xxh3"})
    t = t.append_column("ct_xxh3", ct_checksums(t.column("ct")))
    return t.select(CIPHERTEXTS.names).cast(CIPHERTEXTS).to_batches()[0]


def checked_splits(path) -> list[Split]:
    size = os.path.getsize(path)
    return splits_of(str(path), size, footer_bytes(size, local_reader(str(path))))


def test_the_workers_write_one_image_per_row_group_in_the_order_the_images_came(tmp_path):
    batches = [rows("bbb", 3), rows("aaa", 2), rows("bbb", 2, 3), rows("ccc", 1)]
    (report,) = list(rows_to_file(iter(batches), directory=str(tmp_path), attempt=lambda: (0, 0), by_image=True))
    f = pq.ParquetFile(tmp_path / report.column("file")[0].as_py())
    groups = [f.read_row_group(i, columns=["image_id", "tile_x"]).to_pydict() for i in range(f.num_row_groups)]
    assert [(g["image_id"][0], g["tile_x"]) for g in groups] == [("bbb", [0, 1, 2, 3, 4]), ("aaa", [0, 1]),
                                                                 ("ccc", [0])]
    assert all(len(set(g["image_id"])) == 1 for g in groups)


def test_the_driver_reads_which_images_each_row_group_holds(tmp_path):
    path = tmp_path / "part-1.parquet"
    with pq.ParquetWriter(path, CIPHERTEXTS) as w:
        w.write_batch(rows("aaa", 3))
        w.write_table(pa.Table.from_batches([rows("aaa", 1, 3), rows("bbb", 2)]))
        w.write_table(pa.Table.from_batches([rows("x" * 300, 2)]))
    splits = checked_splits(path)
    maps, problems = split_images(splits, FileAccess())
    assert problems == [] and maps == [{"aaa": 3}, {"aaa": 1, "bbb": 2}, {None: 2}]
    assert usable_id("x" * 300) is None and usable_id("aaa") == "aaa"


def test_a_file_changed_since_its_footer_was_checked_is_not_mapped(tmp_path):
    path = tmp_path / "part-1.parquet"
    pq.write_table(pa.Table.from_batches([rows("aaa", 3)]), path)
    splits = checked_splits(path)
    pq.write_table(pa.Table.from_batches([rows("bbb", 3)]), path)
    maps, problems = split_images(splits, FileAccess())
    assert maps == [None] and [p[1] for p in problems] == ["file-changed"]


def split(i: int, rows: int = 10, nbytes: int = 1000) -> Split:
    return Split(f"f{i}", 1, "d", 0, rows, nbytes)


def test_one_image_per_row_group_is_one_task_per_image_and_nothing_read_twice():
    maps = [{"aaa": 10}, {"bbb": 10}, {"aaa": 5}, {"ccc": 10}]
    plan = plan_by_image([split(i) for i in range(4)], maps, lambda i, n: 100 * n, parallelism=2)
    assert [(t.images, t.splits) for t in plan.tasks] == [(("aaa",), (0, 2)), (("bbb",), (1,)), (("ccc",), (3,))]
    assert plan.amplification == 1.0 and sorted(s for t in plan.tasks for s in t.owned) == [0, 1, 2, 3]


def test_row_groups_shared_by_images_make_one_task_unless_it_holds_too_many_values():
    maps = [{"aaa": 6, "bbb": 4}, {"bbb": 6, "ccc": 4}, {"ccc": 6}, {None: 3}]
    splits = [split(i) for i in range(4)]
    whole = plan_by_image(splits, maps, lambda i, n: 10, parallelism=1)
    assert [(t.images, t.splits) for t in whole.tasks] == [(("aaa", "bbb", "ccc"), (0, 1, 2)), ((), (3,))]
    assert whole.amplification == 1.0
    cut = plan_by_image(splits, maps, lambda i, n: 10, parallelism=3)        # a fair share: one image a task
    assert [(t.images, t.splits) for t in cut.tasks] == [(("aaa",), (0,)), (("bbb",), (0, 1)), (("ccc",), (1, 2)),
                                                         ((), (3,))]
    assert [t.owned for t in cut.tasks] == [(0,), (1,), (2,), (3,)]
    assert cut.amplification == pytest.approx(6 / 4)
    assert cut.images() == ["aaa", "bbb", "ccc"]
    again = cut.restricted(["bbb"])
    assert again.tasks == (ImageTask((0, 1), ("bbb",), ()),)


def test_images_taken_out_of_a_written_file_leave_one_image_per_row_group(tmp_path):
    from tasks.files import drop_images

    batches = [rows("aaa", 2), rows("bbb", 2), rows("ccc", 3)]
    (report,) = list(rows_to_file(iter(batches), directory=str(tmp_path), attempt=lambda: (0, 0), by_image=True))
    name = report.column("file")[0].as_py()
    drop_images(str(tmp_path), [name], {"bbb"})
    f = pq.ParquetFile(tmp_path / name)
    groups = [f.read_row_group(i, columns=["image_id"]).column(0).to_pylist() for i in range(f.num_row_groups)]
    assert groups == [["aaa", "aaa"], ["ccc", "ccc", "ccc"]]
