"""The workers' reader of a job's input: one row group of one checked file per split, read only while the
file is the one the driver checked, and every problem a reason instead of a failed task."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.footers import footer_bytes, local_reader
from tasks.filesystem import FileAccess
from tasks.splits import read_splits, splits_of

SCHEMA = pa.schema([pa.field("image_id", pa.string(), nullable=False), ("ct", pa.binary())])


def written(path, groups: int, rows: int) -> list:
    """A Parquet file of ``groups`` row groups of ``rows`` rows; its splits as the driver plans them."""
    table = pa.table({"image_id": [f"img{i:03d}" for i in range(groups * rows)],
                      "ct": [bytes([i % 256]) * 100 for i in range(groups * rows)]}, schema=SCHEMA)
    pq.write_table(table, path, row_group_size=rows)
    size = path.stat().st_size
    return splits_of(str(path), size, footer_bytes(size, local_reader(str(path))))


def read(splits) -> tuple[pa.Table | None, list]:
    problems: list = []
    batches = list(read_splits(splits, access=FileAccess(), schema=SCHEMA, problems=problems))
    return (pa.Table.from_batches(batches) if batches else None), problems


def test_each_row_group_is_a_split_and_every_row_is_read_once(tmp_path):
    splits = written(tmp_path / "part-0.parquet", groups=3, rows=70)
    assert [s.row_group for s in splits] == [0, 1, 2]
    table, problems = read(splits)
    assert problems == []
    assert table.column("image_id").to_pylist() == [f"img{i:03d}" for i in range(210)]
    assert set(table.column("file").to_pylist()) == {str(tmp_path / "part-0.parquet")}
    assert all(f.nullable for f in table.schema)            # as Spark's Arrow batches hand them


def test_a_split_reads_only_its_row_group(tmp_path):
    splits = written(tmp_path / "part-0.parquet", groups=3, rows=5)
    table, _ = read([splits[1]])
    assert table.column("image_id").to_pylist() == [f"img{i:03d}" for i in range(5, 10)]


def test_a_file_rewritten_after_its_check_is_not_read(tmp_path):
    path = tmp_path / "part-0.parquet"
    splits = written(path, groups=2, rows=4)
    pq.write_table(pa.table({"image_id": ["x"] * 8, "ct": [b"y" * 100] * 8}, schema=SCHEMA), path,
                   row_group_size=4)
    table, problems = read(splits)
    assert table is None
    assert [p[1] for p in problems] == ["file-changed", "file-changed"]


def test_a_file_of_another_size_is_not_read(tmp_path):
    path = tmp_path / "part-0.parquet"
    splits = written(path, groups=1, rows=4)
    with open(path, "ab") as f:
        f.write(b"more")
    table, problems = read(splits)
    assert table is None and problems[0][1] == "file-changed" and "not the" in problems[0][2]


def test_a_vanished_file_is_a_reason_not_a_failed_task(tmp_path):
    path = tmp_path / "part-0.parquet"
    splits = written(path, groups=1, rows=4)
    path.unlink()
    table, problems = read(splits)
    assert table is None and problems[0][0] == str(path) and problems[0][1] == "unreadable-file"


def test_a_file_whose_pages_were_overwritten_fails_its_split_only(tmp_path):
    bad, good = tmp_path / "part-0.parquet", tmp_path / "part-1.parquet"
    splits = written(bad, groups=1, rows=4) + written(good, groups=1, rows=4)
    data = bytearray(bad.read_bytes())
    data[4:40] = b"\xff" * 36                            # the first page's header, inside the checked size
    bad.write_bytes(bytes(data))
    table, problems = read(splits)
    assert [p[1] for p in problems] == ["unreadable-file"] and problems[0][0] == str(bad)
    assert table.num_rows == 4 and set(table.column("file").to_pylist()) == {str(good)}


def test_other_schemes_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="s3a://b/x: the workers read and write local, file:// and hdfs://"):
        FileAccess().open("s3a://b/x")
