#!/usr/bin/env python3
"""Strip outputs, execution counts and run metadata from the notebooks, so git stores only their code.

    tools/strip_notebooks.py            # rewrite notebooks/*.ipynb in place
    tools/strip_notebooks.py --check    # exit 1 and name the notebooks that still carry outputs

A small nbformat step rather than nbstripout: two fields to clear do not justify
one more tool in the environment (tests/test_notebook.py runs the check).
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
KEEP_METADATA = ("kernelspec", "language_info")


def stripped(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata = {}
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in KEEP_METADATA}
    if "language_info" in nb.metadata:
        nb.metadata["language_info"] = {"name": nb.metadata["language_info"].get("name", "python")}
    return nb


def needs_strip(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    return nb != stripped(copy.deepcopy(nb))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        if not needs_strip(path):
            continue
        dirty.append(path)
        if not check:
            nbformat.write(stripped(nbformat.read(path, as_version=4)), path)
    if check and dirty:
        print("notebooks with outputs or run metadata (run tools/strip_notebooks.py): "
              + ", ".join(str(p) for p in dirty), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
