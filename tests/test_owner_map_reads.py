"""The owner map's tables go through the door the cluster's tables go through.

An owner map is the owner's, but it is a directory of files like any other: a Parquet file of 5 KB can
hold one 48 MiB string that every row refers to (a dictionary page), which a plain ``pq.read_table``
copies into every row.  Its footer is checked first (:mod:`schemas.footers`: the rows its batch
records, the dictionary page's size, the codecs), so such a file is one line and no memory, and a
clean map is read as before.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hecore.errors import OwnerMapError
from jobs.runtime.owner import OwnerMap
from schemas.tables import OWNER_IMAGES

TAG = "20261127T010203Z-0123abcd-b00000"
ROWS = 100


def image_rows(source: str, n: int = ROWS) -> list[dict]:
    return [{"image_id": f"{i:032x}", "source": source, "content_sha256": "0" * 64, "image_height": 8,
             "image_width": 8, "image_channels": 1, "ciphertexts": 1, "bytes": 10, "run_id": "r", "batch": TAG}
            for i in range(n)]


def owner_map(root: Path) -> Path:
    m = OwnerMap.for_encrypt(str(root / "map"), out=str(root / "ct"), input_="images", fingerprint="ab" * 32,
                             settings={}, overwrite=False)
    m.commit_batch(TAG, "r", pa.Table.from_pylist(image_rows("images/a.png"), schema=OWNER_IMAGES), [],
                   {"ciphertexts": []}, {"images_in": ROWS, "images_encrypted": ROWS})
    return root / "map"


def load_in_child(directory: Path) -> tuple[str, int]:
    """Load the map's images in a new process: what it printed (the error, or the count) and its peak RSS (KiB:
    the high-water mark of its own memory, not the forked test process's that ``ru_maxrss`` would include)."""
    code = ("import sys\n"
            "from jobs.runtime.owner import OwnerMap\n"
            "from hecore.errors import OwnerMapError\n"
            "try:\n"
            f"    print(len(OwnerMap.load({str(directory)!r}).images()))\n"
            "except OwnerMapError as e:\n"
            "    print('OwnerMapError:', e)\n"
            "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    said, rss = r.stdout.strip().splitlines()
    return said, int(rss)


def test_a_shared_48_mib_dictionary_string_is_refused_without_the_memory(tmp_path):
    clean = owner_map(tmp_path / "clean")
    said, clean_rss = load_in_child(clean)
    assert said == str(ROWS)
    bomb = owner_map(tmp_path / "bomb")
    rows = pa.Table.from_pylist(image_rows("-"), schema=OWNER_IMAGES)
    shared = pa.DictionaryArray.from_arrays(pa.array([0] * ROWS, pa.int32()), pa.array(["x" * (48 << 20)]))
    table = rows.set_column(rows.schema.get_field_index("source"), "source", shared)
    pq.write_table(table, bomb / "images" / f"{TAG}.parquet", compression="zstd", store_schema=False)
    del shared, table
    assert (bomb / "images" / f"{TAG}.parquet").stat().st_size < 1 << 20
    said, rss = load_in_child(bomb)
    assert said.startswith("OwnerMapError:") and "the owner map was changed" in said, said
    assert rss <= 1.5 * clean_rss, (rss, clean_rss)


def test_a_table_with_more_rows_than_its_batch_read_is_refused(tmp_path):
    d = owner_map(tmp_path)
    pq.write_table(pa.Table.from_pylist(image_rows("images/a.png", ROWS + 1), schema=OWNER_IMAGES),
                   d / "images" / f"{TAG}.parquet", compression="zstd")
    with pytest.raises(OwnerMapError, match="rows"):
        OwnerMap.load(str(d)).images()


@pytest.mark.parametrize("damage", ["garbage", "fifo", "huge"])
def test_a_damaged_table_is_one_owner_map_error(tmp_path, damage):
    import os

    d = owner_map(tmp_path)
    path = d / "images" / f"{TAG}.parquet"
    path.unlink()
    if damage == "garbage":
        path.write_bytes(os.urandom(5000))
    elif damage == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            f.truncate(1 << 40)                         # sparse
    with pytest.raises(OwnerMapError):
        OwnerMap.load(str(d)).images()


def test_a_clean_map_reads_as_before(tmp_path):
    m = OwnerMap.load(str(owner_map(tmp_path)))
    assert len(m.images()) == ROWS and m.rejects_table().num_rows == 0
    assert json.loads((tmp_path / "map" / "owner.json").read_text())["key_fingerprint"] == "ab" * 32
