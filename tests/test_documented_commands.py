"""The README's command block runs as written: each ``hepix`` line of it, in order, in a directory holding two
tiny images (``images/``), its relative paths as given; then the decrypted results are exact.  What the
block shows a new user is what works."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.seconds(60), pytest.mark.spark]

README = Path(__file__).resolve().parents[1] / "README.md"
#: The Spark jobs of the block run on two local cores, quietly (their flags are documented apart).
SPARK_JOBS = {"encrypt", "process", "decrypt"}
SPARK = ["--master", "local[2]", "--quiet"]


def readme_commands() -> list[list[str]]:
    """The README's first code block of commands alone (every line a ``hepix`` command) that starts with
    ``hepix keygen``."""
    for block in re.findall(r"```\n(.*?)```", README.read_text(), flags=re.S):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if lines and lines[0].startswith("hepix keygen") and all(line.startswith("hepix ") for line in lines):
            return [shlex.split(line)[1:] for line in lines]
    raise AssertionError("the README has no code block of hepix commands starting with keygen")


def test_the_readme_block_is_the_whole_way_round():
    kinds = [argv[0] for argv in readme_commands()]
    assert kinds[0] == "keygen" and kinds[-1] == "decrypt" and "process" in kinds, kinds


def test_the_readme_commands_run_as_written(tmp_path, monkeypatch):
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(9)
    Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(images / "colour.png")
    Image.fromarray(rng.integers(0, 256, (18, 13), dtype=np.uint8)).save(images / "grey.png")
    monkeypatch.chdir(tmp_path)
    for argv in readme_commands():
        full = argv + (SPARK if argv[0] in SPARK_JOBS else [])
        assert main(full) == 0, f"`hepix {shlex.join(argv)}` failed"
    decrypts = [argv for argv in readme_commands() if argv[0] == "decrypt"]
    for argv in decrypts:
        out = tmp_path / argv[argv.index("--out") + 1]
        rows = ds.dataset(out / "metrics").to_table().to_pylist()
        assert len(rows) == 2 and all((r["mse"], r["exact_fraction"]) == (0, 1.0) for r in rows), rows
        if "--png" in argv:
            assert len(list((out / "images").glob("*.png"))) == 2
