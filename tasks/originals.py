"""The originals of ``hepix decrypt --images`` found by the task that scores an image, not shipped to it.

A small job first indexes the files of ``--images`` (:func:`index_partition`: each file's path, the SHA-256
of its bytes and, for a run without an owner map, the SHA-256 of the rounded result the run's ops give
on it -- tasks.decode.originals_partition, which decodes the file as encrypt did).  The task that decrypts
an image then looks its original up in that index (by the content hash the owner map recorded for the
id, or by the result the image decrypted to), reads that one file itself and decodes it again
(:func:`read_original`): only the file whose hash is the one indexed counts, so a file changed since is no
original.  No image passes between tasks.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pyarrow as pa

from .decode import DecodeOptions, originals_partition
from .filesystem import FileAccess

#: One row per indexed file of ``--images``.
INDEX = pa.schema([("path", pa.string()), ("content_sha256", pa.string()), ("result_sha256", pa.string())])


def index_partition(batches: Iterator[pa.RecordBatch], *, opts: DecodeOptions, ops: tuple[str, ...],
                    preset: str | None, match_key: bool) -> Iterator[pa.RecordBatch]:
    """The INDEX rows of Spark's ``binaryFile`` rows: the content hash of every file, and with ``match_key``
    (no owner map) the result hash of every file that decodes as encrypt decoded (the others are left out,
    as tasks.decode.originals_partition leaves them)."""
    for batch in batches:
        if not match_key:
            contents = batch.column("content")
            rows = [{"path": p, "content_sha256": hashlib.sha256(contents[i].as_buffer()).hexdigest(),
                     "result_sha256": None}
                    for i, p in enumerate(batch.column("path").to_pylist()) if contents[i].is_valid]
        else:
            rows = [{"path": r["orig_source"], "content_sha256": r["content_sha256"],
                     "result_sha256": r["result_sha256"]}
                    for o in originals_partition(iter([batch]), opts, ops, preset, match_key=True)
                    for r in o.select(["orig_source", "content_sha256", "result_sha256"]).to_pylist()]
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=INDEX)


def read_original(path: str, content_sha256: str, *, access: FileAccess, opts: DecodeOptions,
                  ops: tuple[str, ...], preset: str | None, result_sha256: str | None = None) -> dict | None:
    """The original at ``path`` decoded as encrypt decoded it -- ``original`` (bytes), ``orig_height``,
    ``orig_width``, ``orig_channels``, ``orig_source`` -- when its bytes still hash to ``content_sha256``
    (and, given ``result_sha256``, its processed result still hashes to that); else None."""
    try:
        fs, local = access.open(path)
        with fs.open_input_stream(local) as f:
            content = f.read()
    except (OSError, ValueError, pa.ArrowException):
        return None
    if hashlib.sha256(content).hexdigest() != content_sha256:
        return None
    batch = pa.RecordBatch.from_pydict({"path": pa.array([path], pa.string()),
                                        "content": pa.array([content], pa.binary())})
    for out in originals_partition(iter([batch]), opts, ops, preset, match_key=result_sha256 is not None):
        for row in out.to_pylist():
            if result_sha256 is not None and row["result_sha256"] != result_sha256:
                return None
            return {k: row[k] for k in ("original", "orig_height", "orig_width", "orig_channels", "orig_source")}
    return None
