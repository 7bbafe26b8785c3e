"""Parquet footers that lie: the footer check (schemas/footers.py) refuses them before any reader does.

A cluster can rewrite one number in a file's footer -- a column chunk's size, a row count, an offset --
and Spark's and pyarrow's readers believe it.  The files here are tiny, written by pyarrow the way the
workers write ciphertext files; the lies are written into their footers (tests/hostile.py decodes and
encodes the footer's Thrift).  No Spark here.
"""
from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile import column_chunks, field, lie_in_footer, read_footer, write_footer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.footers import MAX_FOOTER_BYTES, FooterChecker, FooterLimits, footer_bytes, local_reader

ROWS = 4
CT = 3000
LIMITS = FooterLimits(rows=ROWS, row_bytes=CT + 65536)


def write_file(path: Path, **options) -> Path:
    """A small file of the shape of a ciphertext file: ids, a list column, a binary column."""
    t = pa.table({"image_id": [f"{i:016x}" for i in range(ROWS)], "ops": [["brightness:5"]] * ROWS,
                  "ct": [bytes([i]) * CT for i in range(ROWS)]})
    pq.write_table(t, path, **{"compression": "none", "use_dictionary": False, **options})
    return path


CHECKER = FooterChecker()


def problem(path: Path, limits: FooterLimits = LIMITS) -> str | None:
    """The one-line detail of the checker's refusal of ``path`` (reason unreadable-file), or None."""
    found = CHECKER.problem(os.path.getsize(path), local_reader(str(path)), limits)
    if found is None:
        return None
    assert found[0] == "unreadable-file" and "\n" not in found[1]
    return found[1]


@pytest.fixture
def good(tmp_path) -> Path:
    return write_file(tmp_path / "part-00000.parquet")


def test_an_honest_file_passes(good):
    assert problem(good) is None


def test_a_column_chunk_of_two_to_the_forty_bytes_is_refused(good):
    lie_in_footer(good, chunk_size=2**40)
    assert "do not lie inside the file" in problem(good)


def test_a_row_count_of_ten_to_the_twelve_is_refused(good):
    lie_in_footer(good, rows=10**12)
    assert "10000000000" in problem(good)


def test_more_rows_than_the_manifest_lists_are_refused(good):
    assert "the manifest allows 3" in problem(good, FooterLimits(rows=3, row_bytes=CT + 65536))


def test_a_data_page_outside_the_file_is_refused(good):
    lie_in_footer(good, data_offset=os.path.getsize(good) + 10)
    assert "inside the file" in problem(good)


def test_chunks_larger_than_the_largest_rows_are_refused(good):
    assert "more than 4 rows" in problem(good, FooterLimits(rows=ROWS, row_bytes=100))


def test_a_compressed_chunk_is_refused_where_the_table_is_written_uncompressed(tmp_path):
    path = write_file(tmp_path / "z.parquet", compression="zstd")
    assert "compressed with ZSTD" in problem(path)


def test_a_dictionary_page_of_a_ten_mebibyte_value_is_refused(tmp_path):
    """40 rows sharing one 10 MiB id: one dictionary value that every row would copy."""
    t = pa.table({"image_id": ["x" * (10 * 2**20)] * 40, "ct": [b"c"] * 40})
    path = tmp_path / "bomb.parquet"
    pq.write_table(t, path, compression="none", use_dictionary=["image_id"], dictionary_pagesize_limit=2**25)
    assert "dictionary page" in problem(path, FooterLimits(rows=40, row_bytes=2**30))


@pytest.mark.parametrize("damage", ["short", "no-magic", "long-footer", "garbage-footer"])
def test_a_broken_tail_is_refused_in_one_line(good, damage):
    data = good.read_bytes()
    if damage == "short":
        good.write_bytes(data[:10])
    elif damage == "no-magic":
        good.write_bytes(data[:-4] + b"PAR0")
    elif damage == "long-footer":
        good.write_bytes(data[:-8] + (MAX_FOOTER_BYTES + 1).to_bytes(4, "little") + b"PAR1")
    else:
        n = int.from_bytes(data[-8:-4], "little")
        good.write_bytes(data[:-8 - n] + b"\xff" * n + data[-8:])
    why = problem(good)
    assert why and "\n" not in why


def test_a_footer_that_crashes_the_parquet_reader_is_refused_and_the_checker_goes_on(good, tmp_path):
    """A schema whose column type disagrees with its statistics makes pyarrow's reader abort its process:
    the child dies, the file is refused, the next file is checked by a new child."""
    footer = read_footer(good)
    field(field(footer, 2)[2][1][1], 1)[2] = 0          # image_id's physical type: BYTE_ARRAY -> BOOLEAN
    write_footer(good, footer)
    assert "crashes the Parquet reader" in problem(good)
    assert problem(write_file(tmp_path / "next.parquet")) is None


def test_the_footer_is_read_within_its_bound(good):
    """The check reads the magic, the tail and the footer: never a column chunk, never more than the cap."""
    reads = []
    read = local_reader(str(good))

    def recording(offset, length):
        reads.append(length)
        return read(offset, length)

    lie_in_footer(good, chunk_size=2**40)
    footer_bytes(os.path.getsize(good), recording)
    assert len(reads) == 3 and max(reads) <= MAX_FOOTER_BYTES and sum(reads) < os.path.getsize(good)


def _int_fields(fields, path=()):
    """Paths of every integer field in a decoded footer."""
    for i, (fid, t, v) in enumerate(fields):
        if t in (4, 5, 6):
            yield (*path, i)
        elif t == 12:
            yield from _int_fields(v, (*path, i))
        elif t in (9, 10) and v[0] == 12:
            for j, item in enumerate(v[1]):
                yield from _int_fields(item, (*path, i, j))


def _entry(fields, path):
    node = fields
    i = 0
    while True:
        entry = node[path[i]]
        if i == len(path) - 1:
            return entry
        if entry[1] == 12:
            node, i = entry[2], i + 1
        else:
            node, i = entry[2][1][path[i + 1]], i + 2


NUMBERS = st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, 2**40, 10**12]),
                    st.integers(-64, 2**16))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_number_rewritten_in_a_footer_is_refused_or_read_within_bounds(tmp_path_factory, data):
    """Any integer of the footer set to anything: the check says why in one line, or pyarrow reads the
    file with at most a few times its size allocated (a bounded memory pool; nothing is timed)."""
    base = tmp_path_factory.mktemp("footer")
    path = write_file(base / "part.parquet")
    footer = read_footer(path)
    paths = list(_int_fields(footer))
    entry = _entry(footer, data.draw(st.sampled_from(paths)))
    entry[2] = data.draw(NUMBERS)
    limit = 2**31 - 1 if entry[1] == 5 else 2**15 - 1 if entry[1] == 4 else 2**63 - 1
    entry[2] = max(-limit - 1, min(limit, entry[2]))
    write_footer(path, footer)
    why = problem(path)
    if why is not None:
        assert "\n" not in why
        return
    assert read_in_a_child(path) == 0


#: The child that reads files for :func:`read_in_a_child`: pyarrow imported once (0.6 s of a core a start), then
#: for each path on its standard input a fork of it reads the file under the address-space limit and leaves with
#: the status a fresh interpreter would (0: read or refused cleanly; 3: out of memory; 1: any other exception;
#: a signal: its negative number), which the child prints back.
READER = """\
import os, resource, sys, traceback
limit = int(sys.argv[1])
import pyarrow as pa, pyarrow.parquet as pq
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            pq.read_table(line.rstrip("\\n"))
        except MemoryError:
            code = 3
        except (pa.ArrowException, OSError, ValueError):
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
READ_LIMIT = 2 * 2**30


class Reader:
    """One child process, started on first use, that reads files under :data:`READ_LIMIT` (:data:`READER`)."""

    def __init__(self):
        self.proc = None

    def __call__(self, path: Path) -> int:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", READER, str(READ_LIMIT)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        assert ready, f"reading {path} took more than 120 s"
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


_reader = Reader()


@pytest.fixture(scope="module", autouse=True)
def _close_the_reader():
    yield
    _reader.close()


def read_in_a_child(path: Path) -> int:
    """Read ``path`` whole with pyarrow in a child process under a 2 GiB address-space limit: its exit code
    (0, or 1 for a clean refusal; a signal or a memory error means the check let a lie through)."""
    return _reader(path)


def test_the_thrift_helpers_rewrite_a_footer_byte_for_byte(good):
    """The test's own footer codec: decoding and encoding gives the same footer back."""
    copy = good.with_name("copy.parquet")
    shutil.copy(good, copy)
    write_footer(copy, read_footer(copy))
    assert copy.read_bytes() == good.read_bytes()
    assert all(field(m, 7)[2] > 0 for m in column_chunks(read_footer(good)))


def test_audit_reads_no_listed_file_whose_footer_lies_nor_a_link_nor_a_file_twice(tmp_path):
    """audit's scan (pyarrow, no Spark) gets the same per-file guard as the Spark jobs."""
    from jobs.audit import _listed_files
    from schemas.manifest import RunManifest
    from schemas.tables import CIPHERTEXTS

    src = tmp_path / "run"
    (src / "ciphertexts").mkdir(parents=True)
    outside = tmp_path / "outside.parquet"
    names = {}
    for name in ("good", "lying", "rows", "link"):
        path = src / "ciphertexts" / f"part-{name}.parquet"
        pq.write_table(CIPHERTEXTS.empty_table(), outside if name == "link" else path, compression="none")
        names[name] = path.name
    lie_in_footer(src / "ciphertexts" / names["lying"], chunk_size=2**40)
    lie_in_footer(src / "ciphertexts" / names["rows"], rows=10**12)
    (src / "ciphertexts" / names["link"]).symlink_to(outside)
    listed = [names["good"], names["lying"], names["rows"], names["link"], names["good"]]
    manifest = RunManifest(job="encrypt", run_id="20260101T000000Z-0a0b0c0d", status="complete", created="",
                           finished="", input="", output="", preset="addonly-2048",
                           files={"ciphertexts": [{"name": n, "rows": 0, "bytes": 0, "xxh3_xor": 0} for n in listed]})
    good, rejects, _ = _listed_files(src, manifest)
    assert [p.name for p in good] == [names["good"]]
    assert [(r["source"], r["reason"]) for r in rejects] == [
        (names["lying"], "unreadable-file"), (names["rows"], "unreadable-file"), (names["link"], "unreadable-file"),
        (names["good"], "duplicate-file")]
    assert all("\n" not in r["detail"] for r in rejects)


def test_repeated_ciphertexts_may_share_a_dictionary_but_no_value_larger_than_its_rows(tmp_path):
    """The caching strategies repeat ciphertexts (a writer may dictionary-encode them); one 10 MiB value
    shared by 40 rows is more than those rows may hold."""
    repeated = tmp_path / "repeated.parquet"
    pq.write_table(pa.table({"ct": [bytes([i % 10]) * CT for i in range(1000)]}), repeated, compression="none",
                   dictionary_pagesize_limit=2**26)
    assert pq.read_metadata(repeated).row_group(0).column(0).has_dictionary_page
    assert problem(repeated, FooterLimits(rows=1000, row_bytes=CT + 65536)) is None
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"ct": [b"c" * (10 * 2**20)] * 40}), bomb, compression="none",
                   dictionary_pagesize_limit=2**26)
    assert "dictionary page" in problem(bomb, FooterLimits(rows=40, row_bytes=CT + 65536))


def test_the_checkers_of_one_process_share_one_child_and_each_asks_with_its_own_schema(good):
    """A closed checker leaves its child for the next one; each request carries its checker's schema."""
    wanted = pa.schema([("image_id", pa.string()), ("ct", pa.binary())])
    other = pa.schema([("image_id", pa.int64())])
    size, read_at = os.path.getsize(good), local_reader(str(good))
    with FooterChecker(wanted) as first:
        assert first.problem(size, read_at, LIMITS) is None
        pid = first._child.pid
    with FooterChecker(other) as second:
        reason, detail = second.problem(size, read_at, LIMITS)
        assert second._child.pid == pid
    assert reason == "bad-file-schema" and "image_id" in detail
    with FooterChecker(wanted) as third:
        assert third.problem(size, read_at, LIMITS) is None and third._child.pid == pid


def test_a_forked_process_starts_a_child_of_its_own(good):
    """A process forked while a child waits idle never writes into its parent's child."""
    size, read_at = os.path.getsize(good), local_reader(str(good))
    with FooterChecker() as checker:
        assert checker.problem(size, read_at, LIMITS) is None
        parents = checker._child.pid
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # the forked copy: report its child's pid, then leave at once
        try:
            with FooterChecker() as checker:
                ok = checker.problem(size, read_at, LIMITS) is None
                os.write(w, f"{int(ok)} {checker._child.pid}".encode())
        finally:
            os._exit(0)
    os.close(w)
    ok, theirs = os.read(r, 64).decode().split()
    os.close(r)
    os.waitpid(pid, 0)
    assert ok == "1" and int(theirs) != parents
    with FooterChecker() as checker:                # and the parent's child still answers the parent
        assert checker.problem(size, read_at, LIMITS) is None and checker._child.pid == parents
