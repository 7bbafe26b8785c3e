"""The driver's check of the files the tasks say they wrote (the Python workers write every job's output): names of the tasks'
pattern only, each present where the driver looks, at the reported size -- else a clear error, nothing kept."""
from __future__ import annotations

import pyarrow as pa
import pytest

from hecore.errors import HepixError
from jobs.runtime.remote import file_access
from tasks.files import SHARED_OUT, checked_reports

NAME = "part-00003-0-0123abcd.parquet"


def report(name=NAME, size=10, rows=2, xor=5, ct_bytes=8) -> dict:
    return {"file": name, "rows": rows, "bytes": size, "xxh3_xor": xor, "ct_bytes": ct_bytes}


def test_reported_files_the_driver_sees_become_the_table_entries(tmp_path):
    (tmp_path / NAME).write_bytes(b"x" * 10)
    other = "part-00001-1-fedcba98.parquet"
    (tmp_path / other).write_bytes(b"x" * 4)
    entries = checked_reports([report(), report(other, size=4, rows=1, xor=-3)], str(tmp_path))
    assert entries == [{"name": other, "rows": 1, "bytes": 4, "xxh3_xor": -3, "ct_bytes": 8},
                       {"name": NAME, "rows": 2, "bytes": 10, "xxh3_xor": 5, "ct_bytes": 8}]


@pytest.mark.parametrize("name", ["../../etc/passwd", "/tmp/part-00003-0-0123abcd.parquet", "part-1.parquet",
                                  f"{NAME}/..", ".part-00003-0-0123abcd.parquet.tmp", ""])
def test_a_reported_name_not_of_the_tasks_pattern_names_no_path(tmp_path, name):
    with pytest.raises(HepixError, match="not a name it writes"):
        checked_reports([report(name)], str(tmp_path))


def test_a_file_the_driver_does_not_see_means_the_out_is_not_shared(tmp_path):
    with pytest.raises(HepixError) as e:
        checked_reports([report()], str(tmp_path))
    assert SHARED_OUT in str(e.value) and str(tmp_path) in str(e.value) and "does not see it" in str(e.value)


def test_a_file_of_another_size_than_reported_is_refused(tmp_path):
    (tmp_path / NAME).write_bytes(b"x" * 7)
    with pytest.raises(HepixError, match="sees 7 bytes, not 10"):
        checked_reports([report()], str(tmp_path))


def test_a_file_reported_twice_is_refused(tmp_path):
    (tmp_path / NAME).write_bytes(b"x" * 10)
    with pytest.raises(HepixError, match="not a name it writes"):
        checked_reports([report(), report()], str(tmp_path))


def test_workers_reach_local_file_and_hdfs_paths_alike(monkeypatch):
    """One data path on every deployment: the workers write local, file:// and hdfs:// outputs themselves."""
    monkeypatch.delenv("HEPIX_WEBHDFS", raising=False)
    monkeypatch.setenv("HADOOP_USER_NAME", "owner")
    assert file_access("/data/out").webhdfs is None
    fs, path = file_access("file:///data/out").open("file:///data/out")
    assert path == "/data/out" and fs.type_name == "local"
    hdfs = file_access("hdfs://nn:8020/out")
    assert (hdfs.webhdfs, hdfs.user) == ("http://nn:9870", "owner")
    assert file_access("hdfs://nn:8020/out", "0.0.0.0:50070").webhdfs == "http://nn:50070"
    assert file_access("hdfs://nn:8020/out", "10.0.0.5:9871").webhdfs == "http://10.0.0.5:9871"
    monkeypatch.setenv("HEPIX_WEBHDFS", "https://nn.example:9871")
    assert file_access("hdfs://nn:8020/out").webhdfs == "https://nn.example:9871"
    with pytest.raises(HepixError, match="s3a://b/out: hepix's workers read and write local paths"):
        file_access("s3a://b/out")


def test_rows_grouped_by_image_keep_their_order_whether_interleaved_or_in_runs():
    from tasks.files import _by_image

    def table(ids):
        return pa.Table.from_batches([pa.record_batch({"image_id": ids[:3], "n": list(range(3))}),
                                      pa.record_batch({"image_id": ids[3:], "n": list(range(3, len(ids)))})])

    interleaved = _by_image(table(["a", "b", "a", "c", "b", "a"]))
    assert [(p.column("image_id").to_pylist(), p.column("n").to_pylist()) for p in interleaved] == [
        (["a", "a", "a"], [0, 2, 5]), (["b", "b"], [1, 4]), (["c"], [3])]
    runs = _by_image(table(["a", "a", "b", "b", "b", "c"]))
    assert [p.column("n").to_pylist() for p in runs] == [[0, 1], [2, 3, 4], [5]]
