"""Shared pytest helpers.

The real data sets live next to the repository, in ``../shared/datasets/``
relative to the repository root. Tests that need them skip with a clear
message when they are absent, so the suite also runs on a bare checkout.
"""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


def shared_dataset(relpath: str) -> Path:
    """Path of ``relpath`` inside ``../shared/datasets``, or skip the test if it is absent."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"../shared/datasets not found: {SHARED_DATASETS} does not exist")
    path = SHARED_DATASETS / relpath
    if not path.exists():
        pytest.skip(f"../shared/datasets/{relpath} not found: {path} does not exist")
    return path


@pytest.fixture
def usc_sipi() -> Path:
    """The USC-SIPI image folder (``../shared/datasets/usc-sipi``); skips when absent."""
    return shared_dataset("usc-sipi")
