"""The driver's side of tables the Python workers write themselves (:mod:`jobs.tasks.files`): where they
may, which files to keep, and leaving images out of what they wrote."""
from __future__ import annotations

import os

from hecore.errors import HepixError

#: What ``--writer workers`` asks of a cluster (the driver checks it after every write).
SHARED_OUT = "--writer workers needs an --out that the driver and every worker see at the same path"


def worker_local_path(master: str, path: str, shared: bool = False) -> str | None:
    """``path`` as a local directory the Python workers can write, or None.

    For local and local-cluster masters (the workers run on this machine), or any master when the
    user says (``shared``: ``--writer workers``) that the path is a mount every worker and the driver
    share; and only for paths without a scheme other than ``file:``.
    """
    if not (master.startswith("local") or shared):
        return None
    if "://" in path and not path.startswith("file://"):
        return None
    return os.path.abspath(path.removeprefix("file://").removeprefix("file:"))


def checked_reports(reports: list[dict], directory: str) -> list[dict]:
    """The files the tasks reported (WRITTEN rows with a file), each checked before it names a path: a name
    the tasks give (:data:`jobs.tasks.files.WRITTEN_NAME`), reported once, present in ``directory`` with the
    reported size.

    A worker that wrote elsewhere (an --out that is not one shared mount) or a report that does not match
    its file fails the job with :data:`SHARED_OUT`, naming the directory; nothing is committed.
    """
    from .tasks.files import WRITTEN_NAME

    entries = {}
    for r in reports:
        name = r["file"]
        if not isinstance(name, str) or not WRITTEN_NAME.fullmatch(name) or name in entries:
            raise HepixError(f"a task reported the file {name!r}, which is not a name it writes; nothing was "
                             "committed")
        path = os.path.join(directory, name)
        size = os.path.getsize(path) if os.path.isfile(path) else None
        if size is None or size != r["bytes"]:
            seen = "does not see it" if size is None else f"sees {size} bytes, not {r['bytes']}"
            raise HepixError(f"{SHARED_OUT}: a worker wrote {name} ({r['bytes']} bytes) into {directory}, but "
                             f"the driver {seen}; give such an --out, or --writer spark (or auto)")
        entries[name] = {"name": name, "rows": int(r["rows"]), "bytes": size, "xxh3_xor": int(r["xxh3_xor"]),
                         "ct_bytes": int(r["ct_bytes"])}
    return [entries[n] for n in sorted(entries)]


def keep_reported(directory: str, written) -> list[dict]:
    """The files the successful tasks reported in ``written`` (WRITTEN rows), checked
    (:func:`checked_reports`); every other file of ``directory`` -- of failed or speculative attempts,
    temporary files -- removed."""
    entries = checked_reports([r.asDict() if hasattr(r, "asDict") else dict(r) for r in written
                               if r["file"] is not None], directory)
    keep = {e["name"] for e in entries}
    for name in os.listdir(directory):
        if name not in keep:
            os.remove(os.path.join(directory, name))
    return entries


def drop_images(directory: str, names: list[str], image_ids: set[str]) -> None:
    """Rewrite the Parquet files ``names`` of ``directory`` without the rows of ``image_ids`` (images judged
    bad after their rows were written); a file left empty is removed.  Rare: only a run with rejects."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from .tasks.files import WRITER_OPTIONS

    drop = sorted(image_ids)
    for name in names:
        path = os.path.join(directory, name)
        table = pq.read_table(path)
        keep = pc.invert(pc.is_in(table.column("image_id"), value_set=_strings(drop)).fill_null(False))
        if pc.all(keep).as_py():
            continue
        kept = table.filter(keep)
        if kept.num_rows == 0:
            os.remove(path)
            continue
        tmp = os.path.join(directory, f".{name}.tmp")
        pq.write_table(kept, tmp, **WRITER_OPTIONS)
        os.replace(tmp, path)


def keep_schema(directory: str) -> None:
    """Leave a file of no rows in ``directory`` when it has none (every row was bad): the table then still
    reads as an empty table of its schema, as one Spark writes from no rows does."""
    import pyarrow.parquet as pq

    from schemas.tables import CIPHERTEXTS

    if not any(name.endswith(".parquet") for name in os.listdir(directory)):
        pq.write_table(CIPHERTEXTS.empty_table(), os.path.join(directory, "part-00000-empty.parquet"))


def _strings(values: list[str]):
    import pyarrow as pa

    return pa.array(values, type=pa.string())
