"""Shared pytest helpers.

The real data sets live next to the repository, in ``../shared/datasets/``
relative to the repository root. Tests that need them skip with a clear
message when they are absent, so the suite also runs on a bare checkout.
"""
from __future__ import annotations

import os
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


# --- HE contexts ----------------------------------------------------------------------
# Session-scoped: each fixture generates keys once and returns what
# ``HEContext.generate`` returns, ``(ctx, secret_key_bytes)``.  Tests must not
# mutate these contexts (monkeypatch attributes only through ``monkeypatch``).

@pytest.fixture(scope="session")
def he_paper4096():
    """A context with fresh keys at preset ``paper-4096`` (N=4096, Q=2^109)."""
    from hecore.context import HEContext
    from hecore.params import preset

    return HEContext.generate(preset("paper-4096"))


@pytest.fixture(scope="session")
def he_addonly2048():
    """A context with fresh keys at preset ``addonly-2048`` (cheap: N=2048, one prime)."""
    from hecore.context import HEContext
    from hecore.params import preset

    return HEContext.generate(preset("addonly-2048"))


@pytest.fixture(scope="session")
def he_addonly2048_other():
    """A second, independent key at ``addonly-2048`` (same parameters, other key)."""
    from hecore.context import HEContext
    from hecore.params import preset

    return HEContext.generate(preset("addonly-2048"))


# --- leaving the test process ----------------------------------------------------------------
# Pyfhel 3.5 (SEAL's global memory pool) sometimes frees memory twice while the interpreter
# tears down, turning a passing run into SIGABRT (exit 134).  Once pytest has reported, leave
# with its exit status and skip the teardown.  HEPIX_NO_FAST_EXIT=1 turns this off.

def pytest_sessionfinish(session, exitstatus):
    session.config._hepix_exitstatus = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    status = getattr(config, "_hepix_exitstatus", None)
    if status is None or os.environ.get("HEPIX_NO_FAST_EXIT") == "1":
        return
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
