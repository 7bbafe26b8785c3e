"""The driver's side of tables the Python workers write themselves (:mod:`jobs.tasks.files`): where they
may, which files to keep, and leaving images out of what they wrote."""
from __future__ import annotations

import os


def worker_local_path(master: str, path: str) -> str | None:
    """``path`` as a local directory the Python workers can write, or None.

    Only for local and local-cluster masters (the workers run on this machine)
    and paths without a scheme other than ``file:``.
    """
    if not master.startswith("local"):
        return None
    if "://" in path and not path.startswith("file://"):
        return None
    return os.path.abspath(path.removeprefix("file://").removeprefix("file:"))


def keep_reported(directory: str, written) -> list[str]:
    """Remove from ``directory`` every file no successful task reported in ``written`` (WRITTEN rows):
    files of failed or speculative attempts, temporary files.  The names kept."""
    keep = {r["file"] for r in written if r["file"]}
    for name in os.listdir(directory):
        if name not in keep:
            os.remove(os.path.join(directory, name))
    return sorted(keep)


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
