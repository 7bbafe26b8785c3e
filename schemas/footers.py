"""A listed Parquet file's footer, read with a bounded number of bytes and checked before any reader trusts it.

Spark's and pyarrow's Parquet readers believe the footer: a column chunk whose stored size says 2^40 makes
the JVM allocate it, a row count of 10^12 sizes pyarrow's buffers.  A file handed back by the cluster is
therefore checked first, from its size as listed and at most :data:`MAX_FOOTER_BYTES` of its tail:

* the file starts and ends with Parquet's magic and its footer length fits the file;
* the footer parses (pyarrow's metadata reader, given only the footer's bytes, in a child process under
  an address-space limit: the reader aborts its process on some inconsistent footers);
* every column chunk lies inside the file, before the footer, and its pages start inside it;
* no column chunk is compressed with a codec the table is not written with (a compressed page can
  inflate without bound), and no dictionary page is larger than :data:`MAX_DICTIONARY_BYTES` (a dictionary
  value is copied into every row that refers to it) -- the ciphertexts' no larger than the rows it can
  serve (:func:`_dictionary_bytes`);
* the row count is the row groups' sum and at most what the caller allows (the manifest's count for the
  file), and the stored sizes are at most rows x the largest row the parameters allow;
* no more row groups than rows, and no row group of no rows but the one of a file without rows (each row
  group is a reader's task: the work a file costs grows with its rows, never with its metadata).

:class:`FooterChecker` gives why a file fails (a rejects row's reason and one-line detail), or None;
nothing here raises on bad bytes, and a footer that crashes the reader costs only the child process.
"""
from __future__ import annotations

import atexit
import json
import os
import struct
from dataclasses import dataclass
from typing import Callable

MAGIC = b"PAR1"
#: The largest footer read: thousands of row groups of a few dozen columns fit in far less.
MAX_FOOTER_BYTES = 16 * 2**20
#: The largest dictionary page a column chunk may hold (Parquet writers fall back to plain pages at 1 MiB).
MAX_DICTIONARY_BYTES = 2 * 2**20
#: The column that holds the ciphertexts, and the most of its values a writer puts in a dictionary page
#: before it sees the page is full (pyarrow adds a write batch of 1024 values at a time): ciphertexts repeat
#: under the caching strategies, and such a page can then hold that many whole ciphertexts.
CIPHERTEXT_COLUMN = "ct"
DICTIONARY_VALUES = 1024
#: Bytes a row may hold besides its ciphertext: ids, labels, ops, numbers, and Parquet's page overhead.
ROW_METADATA_BYTES = 64 * 2**10
MAX_ROW_GROUPS = 1_000_000
#: The most bytes a column chunk of an empty row group holds (an empty page's header).
EMPTY_CHUNK_BYTES = 4096
#: The address space of the child process that parses footers.
CHILD_MEMORY = 2 * 2**30
#: The most values a row holds in one column (a list column: the ops of a run, schemas.manifest.MAX_OPS).
MAX_VALUES_PER_ROW = 64
#: pyarrow's name of the codec each ``compression`` option of schemas.tables.PARQUET_OPTIONS writes.
CODECS = {"none": ("UNCOMPRESSED",), "uncompressed": ("UNCOMPRESSED",), "zstd": ("ZSTD",),
          "snappy": ("SNAPPY",), "lz4": ("LZ4", "LZ4_RAW"), "gzip": ("GZIP",)}


@dataclass(frozen=True)
class FooterLimits:
    """What a listed file may claim: ``rows`` at most (the manifest's count for it), each row at most
    ``row_bytes`` (the largest ciphertext of the parameters plus :data:`ROW_METADATA_BYTES`), its column
    chunks compressed with one of ``codecs`` (pyarrow's names, e.g. ``UNCOMPRESSED``)."""

    rows: int
    row_bytes: int
    codecs: frozenset = frozenset({"UNCOMPRESSED"})

    @classmethod
    def for_table(cls, table: str, rows: int, ciphertext_bytes: int) -> "FooterLimits":
        """The limits of a file of ``table`` (its codec from schemas.tables.PARQUET_OPTIONS) listed with
        ``rows`` rows, whose ciphertexts are at most ``ciphertext_bytes``."""
        from schemas.tables import PARQUET_OPTIONS

        codec = PARQUET_OPTIONS.get(table, {}).get("compression", "none")
        return cls(rows=rows, row_bytes=ciphertext_bytes + ROW_METADATA_BYTES,
                   codecs=frozenset(CODECS.get(codec, ("UNCOMPRESSED",))))


def footer_bytes(size: int, read_at: Callable[[int, int], bytes]) -> bytes | str:
    """The footer of the Parquet file of ``size`` bytes (as listed), or why it has none this check reads.

    ``read_at(offset, length)`` returns that many bytes of the file; it is asked for the first four bytes,
    the last eight and the footer (at most :data:`MAX_FOOTER_BYTES`), nothing else."""
    if size < 12:
        return f"{size} bytes is too short for a Parquet file"
    try:
        head, tail = read_at(0, 4), read_at(size - 8, 8)
    except OSError as e:
        return f"cannot read it: {_first_line(e)}"
    if head != MAGIC or len(tail) != 8 or tail[4:] != MAGIC:
        return "it does not start and end with Parquet's magic bytes"
    length = struct.unpack("<I", tail[:4])[0]
    if length > min(size - 12, MAX_FOOTER_BYTES):
        return f"its footer claims {length} bytes in a file of {size} (at most {MAX_FOOTER_BYTES} are read)"
    try:
        footer = read_at(size - 8 - length, length)
    except OSError as e:
        return f"cannot read its footer: {_first_line(e)}"
    if len(footer) != length:
        return f"its footer is {len(footer)} bytes, not the {length} it claims"
    return footer


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def parsed_problem(footer: bytes, data_end: int, limits: FooterLimits, schema=None) -> tuple[str, str] | None:
    """The reason and detail why ``footer`` (of a file whose data ends at ``data_end``) breaks ``limits`` or
    lacks a column of ``schema`` (a pyarrow schema), or None.  Parsing runs pyarrow's Thrift reader, which
    aborts the process on some inconsistent footers: call it in :class:`FooterChecker`'s child process."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    framed = MAGIC + footer + struct.pack("<I", len(footer)) + MAGIC
    try:
        md = pq.read_metadata(pa.BufferReader(framed))
        got = md.schema.to_arrow_schema()
    except Exception as e:  # noqa: BLE001 -- Arrow's thrift reader refuses a bad footer in several types
        return "unreadable-file", f"its footer does not parse: {_first_line(e)}"
    why = _metadata_problem(md, data_end, limits)
    if why is not None:
        return "unreadable-file", why
    if schema is not None:
        wrong = [f.name for f in schema if (f.name in got.names and not _same_type(got.field(f.name).type, f.type))
                 or (f.name not in got.names and not f.nullable)]
        if wrong:
            return "bad-file-schema", f"columns {', '.join(wrong[:4])} are missing or of another type"
    return None


def _same_type(a, b) -> bool:
    """Equal types, a list's element nullability aside (Spark and pyarrow write it differently)."""
    import pyarrow as pa

    if pa.types.is_list(a) and pa.types.is_list(b):
        return _same_type(a.value_type, b.value_type)
    return a.equals(b)


def _metadata_problem(md, data_end: int, limits: FooterLimits) -> str | None:
    """Why the parsed footer ``md`` of a file whose data ends at ``data_end`` breaks ``limits``, or None."""
    groups = md.num_row_groups
    if groups > min(MAX_ROW_GROUPS, max(limits.rows, 1)):
        return (f"its footer claims {groups} row groups for at most {limits.rows} rows (a row group holds at "
                "least one row; a file of no rows has at most one)")
    rows = 0
    stored = 0
    empty = 0
    for g in range(groups):
        rg = md.row_group(g)
        if rg.num_rows < 0:
            return f"row group {g} claims {rg.num_rows} rows"
        rows += rg.num_rows
        empty += rg.num_rows == 0
        for c in range(rg.num_columns):
            col = rg.column(c)
            why = _chunk_problem(col, data_end, limits, rg.num_rows) if rg.num_rows \
                else _empty_chunk_problem(col, data_end)
            if why is not None:
                return f"row group {g}, column {col.path_in_schema}: {why}"
            stored += col.total_uncompressed_size
    if md.num_rows != rows:
        return f"its footer claims {md.num_rows} rows, its row groups {rows}"
    if empty and (rows or empty > 1):
        return (f"{empty} of its {groups} row groups hold no rows (hepix's writers write none, but the one "
                "of a file without rows): each would cost a reader a task")
    if rows > limits.rows:
        return f"its footer claims {rows} rows, the manifest allows {limits.rows}"
    if stored > max(rows, 1) * limits.row_bytes:
        return (f"its column chunks claim {stored} bytes, more than {rows} rows of at most {limits.row_bytes} "
                "bytes each")
    return None


def _chunk_problem(col, data_end: int, limits: FooterLimits, rows: int) -> str | None:
    """Why one column chunk (of a row group of ``rows`` rows) is not a chunk inside the file of the sizes and
    codec the limits allow, or None."""
    if col.compression not in limits.codecs:
        return f"compressed with {col.compression}, which this table is never written with"
    start, data = col.data_page_offset, col.data_page_offset
    if col.has_dictionary_page:
        start = col.dictionary_page_offset
        most = _dictionary_bytes(col.path_in_schema, rows, limits)
        if start is None or not 4 <= start <= data or data - start > most:
            return f"a dictionary page at {start} before data at {data} (at most {most} bytes)"
    size, unpacked = col.total_compressed_size, col.total_uncompressed_size
    if start is None or start < 4 or size < 1 or unpacked < 0 or start + size > data_end or data >= start + size:
        return f"{size} bytes at offset {start} do not lie inside the file's {data_end} bytes of data"
    if not 0 <= col.num_values <= MAX_VALUES_PER_ROW * max(limits.rows, 1):
        return f"{col.num_values} values in a file of at most {limits.rows} rows"
    if col.compression == "UNCOMPRESSED" and unpacked != size:
        return f"an uncompressed chunk of {size} bytes claims {unpacked} bytes unpacked"
    return None


def _dictionary_bytes(column: str, rows: int, limits: FooterLimits) -> int:
    """The largest dictionary page a column chunk may have: :data:`MAX_DICTIONARY_BYTES`, and for the
    ciphertexts :data:`DICTIONARY_VALUES` whole rows -- never more than the row group's rows, so that no
    value of it is larger than its rows could hold."""
    if column != CIPHERTEXT_COLUMN:
        return MAX_DICTIONARY_BYTES
    return max(MAX_DICTIONARY_BYTES, min(rows, DICTIONARY_VALUES) * limits.row_bytes)


def _empty_chunk_problem(col, data_end: int) -> str | None:
    """Why a column chunk of a row group without rows is more than the few bytes writers give one (pyarrow
    writes an empty dictionary page, and no data page offset), or None."""
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    size = col.total_compressed_size
    if not 0 <= size <= EMPTY_CHUNK_BYTES or not 0 <= col.total_uncompressed_size <= EMPTY_CHUNK_BYTES \
            or start is None or start < 4 or start + size > data_end or col.num_values != 0:
        return f"a chunk of no rows claims {size} bytes at offset {start} and {col.num_values} values"
    return None


def local_reader(path: str) -> Callable[[int, int], bytes]:
    """``read_at`` for a local file, opened without following a symlink for every read."""

    def read_at(offset: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)

    return read_at


class FooterChecker:
    """Checks footers in a child process (``python -m schemas.footers``) limited to
    :data:`CHILD_MEMORY` bytes of address space; a child that dies on a footer is replaced, and that file
    is refused.  Use as a context manager.

    The child holds nothing but the footers it was sent (no key, no path: it reads no file), so the jobs of
    one process check their footers in the same one: :meth:`close` keeps it, idle, for the next checker
    (:data:`_IDLE`), and it ends when this process does (its input closes).  A job that starts a child
    instead pays an interpreter and pyarrow's import, about 0.2 s of a core, before its first footer."""

    def __init__(self, schema=None):
        self._schema = b"" if schema is None else schema.serialize().to_pybytes()
        self._child = None

    def __enter__(self) -> "FooterChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._child is not None:
            child, self._child = self._child, None
            if child.poll() is None and not _IDLE and _OWNER[0] == os.getpid():
                _IDLE.append(child)
            else:
                _end(child)

    def problem(self, size: int, read_at: Callable[[int, int], bytes], limits: FooterLimits) -> tuple[str, str] | None:
        """The reason and one-line detail why the file of ``size`` bytes cannot be read within ``limits``."""
        footer = footer_bytes(size, read_at)
        if isinstance(footer, str):
            return "unreadable-file", footer
        return self.footer_problem(size, footer, limits)

    def footer_problem(self, size: int, footer: bytes, limits: FooterLimits) -> tuple[str, str] | None:
        """:meth:`problem` for a file of ``size`` bytes whose footer (:func:`footer_bytes`) is ``footer``."""
        request = {"data_end": size - 8 - len(footer), "rows": limits.rows, "row_bytes": limits.row_bytes,
                   "codecs": sorted(limits.codecs), "schema": len(self._schema), "length": len(footer)}
        child = self._start()
        try:
            child.stdin.write(json.dumps(request).encode() + b"\n" + self._schema + footer)
            child.stdin.flush()
            line = child.stdout.readline()
        except (BrokenPipeError, OSError):
            line = b""
        if not line:
            code = child.wait()
            self._child = None
            return "unreadable-file", f"its footer crashes the Parquet reader (exit {code})"
        answer = json.loads(line)
        return None if answer is None else (answer[0], answer[1])

    def _start(self):
        import subprocess
        import sys

        if _OWNER[0] != os.getpid():     # a forked copy of this process: the idle child is its parent's
            _IDLE.clear()
            _OWNER[0] = os.getpid()
        while self._child is None and _IDLE:
            child = _IDLE.pop()
            if child.poll() is None:
                self._child = child
            else:
                _end(child)
        if self._child is None:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            self._child = subprocess.Popen([sys.executable, "-m", "schemas.footers"], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        return self._child


#: The child a closed :class:`FooterChecker` left for the next one (at most one), ended at exit; and the
#: process it serves (a process forked from this one starts its own).
_IDLE: list = []
_OWNER = [os.getpid()]


@atexit.register
def _end_idle() -> None:
    if _OWNER[0] == os.getpid():
        while _IDLE:
            _end(_IDLE.pop())


def _end(child) -> None:
    """Close a child's input (it then exits) and reap it."""
    try:
        child.stdin.close()
    except OSError:
        pass
    child.wait()


def _serve() -> None:
    """The child: limits its own address space, then requests (a JSON line, then the table's schema and the
    footer's bytes) in, one JSON line out each, until EOF."""
    import resource
    import sys

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))

    schemas: dict[bytes, object] = {}
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        line = inp.readline()
        if not line:
            return
        req = json.loads(line)
        given = inp.read(req["schema"])
        footer = inp.read(req["length"])
        if given and given not in schemas:
            import pyarrow as pa

            if len(schemas) >= 16:      # a process's jobs read a few tables
                schemas.clear()
            schemas[given] = pa.ipc.read_schema(pa.py_buffer(given))
        limits = FooterLimits(rows=req["rows"], row_bytes=req["row_bytes"], codecs=frozenset(req["codecs"]))
        out.write(json.dumps(parsed_problem(footer, req["data_end"], limits, schemas.get(given))).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
