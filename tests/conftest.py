"""Shared pytest helpers.

The data sets -- USC-SIPI TIFFs in ``usc-sipi/``, DIV2K PNGs in ``div2k/`` -- are read in place
from ``$HEPIX_DATASETS`` when it is set, else from ``../shared/datasets/`` next to the repository
(the same variable and meaning as for ``hepix bench``).  Where a data set's folder is absent, the
tests that read its images run on stand-ins: scikit-image sample images (:data:`STAND_INS`),
written once per session into a temporary folder under the same names, in the same file format,
size and mode as the images they replace.  So a bare clone runs every such test, and
``HEPIX_DATASETS=/nonexistent`` runs the stand-ins where the data sets are present.
:func:`shared_dataset` is the one place that decides; the report header says which it chose.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bench.clusters.options import submit_jvm_opts

REPO_ROOT = Path(__file__).resolve().parent.parent

# The jobs these tests run one after the other in this process share a Spark session where they hold no
# secret (jobs.runtime.session.KEEP_ENV): its Python workers and the JVM's warm code serve the next job.
os.environ.setdefault("HEPIX_KEEP_SESSION", "1")

# The owner's key records (hecore.keyring) of a test run: every key set the tests make is recorded there, not in
# the user's own records; one file for all the run's processes (a key directory one of them makes, another uses).
os.environ.setdefault("HEPIX_KEYRING", os.path.join(
    tempfile.gettempdir(), "hepix-test-keyrings", os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}",
    "keyring.json"))


# The JVMs the tests start through ``spark-submit`` (the submit scripts, Airflow's operator) get the options of
# short-lived ones (bench.clusters.options.submit_jvm_opts: Spark's classes from the class-data archive, C1 only,
# Spark's expressions interpreted), as the tests' clusters and the applications submitted to them do.
os.environ.setdefault("SPARK_SUBMIT_OPTS", submit_jvm_opts())


#: The folder holding ``usc-sipi/`` and ``div2k/``.
DATASETS = Path(os.environ.get("HEPIX_DATASETS") or REPO_ROOT.parent / "shared" / "datasets")


@dataclass(frozen=True)
class StandIn:
    """A scikit-image sample standing in for one data set image, and what it keeps of it."""

    sample: str      # a function of skimage.data
    fit: str         # how it gets the real image's shape: "as-is", "centre-crop" or "halve" (2x2 means)
    shape: tuple     # the real image's (height, width) or (height, width, 3); the stand-in's too
    why: str         # what the tests read from the real image that the stand-in also has

    def pixels(self) -> np.ndarray:
        import skimage.data

        img = getattr(skimage.data, self.sample)()
        h, w = self.shape[:2]
        if self.fit == "centre-crop":
            y, x = (img.shape[0] - h) // 2, (img.shape[1] - w) // 2
            img = img[y:y + h, x:x + w]
        elif self.fit == "halve":
            f = img.astype(np.float64)
            img = np.rint((f[0::2, 0::2] + f[1::2, 0::2] + f[0::2, 1::2] + f[1::2, 1::2]) / 4).astype(np.uint8)
        if img.shape != self.shape or img.dtype != np.uint8:
            raise AssertionError(f"stand-in {self.sample} ({self.fit}) is {img.shape} {img.dtype}, not {self.shape}")
        return img


#: Data set file -> its stand-in.  The tests crop these images at fixed places (64x64 at (96, 96)
#: and (100, 98), the centre, (120, 100) for the audit), so each stand-in has the real image's size.
STAND_INS = {
    "usc-sipi/5.1.12.tiff": StandIn(
        "clock", "centre-crop", (256, 256),
        "the clock (256x256 grey) <- a wall clock photograph: grey, no pixel at 0 or 255 (so flooding noise is "
        "not cut by clipping); its 64x64 crop at (96, 96) has 93 grey levels occurring at least twice in smooth "
        "areas (the audit needs > 50 such classes, recovered from neighbouring pixels)"),
    "usc-sipi/5.1.13.tiff": StandIn(
        "coins", "centre-crop", (256, 256),
        "the resolution chart (256x256 grey) <- coins: another grey picture with the chart's high contrast "
        "(bright coins on a dark ground), far from the clock stand-in, so matching distances are large"),
    "usc-sipi/7.1.01.tiff": StandIn(
        "camera", "as-is", (512, 512),
        "a 512x512 grey photograph <- camera (512x512 grey), as the benchmarks use it without the data set; "
        "its centre 64x64 crop leaves room below 255 for a +5 watermark at (10, 20)"),
    "usc-sipi/4.1.05.tiff": StandIn(
        "chelsea", "centre-crop", (256, 256, 3),
        "the house (256x256 RGB) <- a cat photograph: RGB, no value at 255; the green channel of its 64x64 "
        "crop at (120, 100), which the audit reads, has 146 levels occurring at least twice"),
    "usc-sipi/4.1.01.tiff": StandIn(
        "astronaut", "halve", (256, 256, 3),
        "a 256x256 RGB photograph <- astronaut (512x512 RGB) halved"),
}

_stand_in_root: Path | None = None


def stand_ins() -> Path:
    """The folder of stand-ins (``usc-sipi/...``), written on first use and removed when the session ends."""
    global _stand_in_root
    if _stand_in_root is None:
        from PIL import Image

        root = Path(tempfile.mkdtemp(prefix="hepix-stand-ins-"))
        for relpath, s in STAND_INS.items():
            path = root / relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            fmt = {".tiff": "TIFF", ".png": "PNG"}[path.suffix]
            Image.fromarray(s.pixels()).save(path, format=fmt)
        _stand_in_root = root
    return _stand_in_root


def real_dataset_present(name: str) -> bool:
    """Whether the data set folder ``name`` (``usc-sipi`` or ``div2k``) is there to read."""
    return (DATASETS / name).is_dir()


def shared_dataset(relpath: str) -> Path:
    """Path of ``relpath`` (``usc-sipi/5.1.12.tiff``, or a folder: ``usc-sipi``) in the data sets,
    or of its stand-in when the data set's folder is absent.

    A file missing from a data set that is present fails the test rather than switching to a
    stand-in: the run says which images it used.
    """
    dataset = relpath.split("/", 1)[0]
    if real_dataset_present(dataset):
        path = DATASETS / relpath
        if not path.exists():
            pytest.fail(f"{relpath} is missing from the data sets in {DATASETS}: restore it, or run on the "
                        "scikit-image stand-ins with HEPIX_DATASETS=/nonexistent")
        return path
    path = stand_ins() / relpath
    if not path.exists():
        pytest.fail(f"{relpath}: {DATASETS / dataset} is absent and {relpath} has no stand-in; "
                    "add one to STAND_INS in tests/conftest.py")
    return path


@pytest.fixture
def usc_sipi() -> Path:
    """The USC-SIPI image folder, or the folder of its stand-ins (see :func:`shared_dataset`)."""
    return shared_dataset("usc-sipi")


def pytest_report_header(config):
    if real_dataset_present("usc-sipi"):
        return f"datasets: USC-SIPI read from {DATASETS / 'usc-sipi'}"
    return (f"datasets: {DATASETS / 'usc-sipi'} absent: scikit-image stand-ins for "
            f"{', '.join(sorted(STAND_INS))}")


# --- HE contexts ----------------------------------------------------------------------
# Session-scoped: each fixture generates keys once and returns what
# ``HEContext.generate`` returns, ``(ctx, secret_key_bytes)``.  Tests must not
# mutate these contexts (monkeypatch attributes only through ``monkeypatch``).

@pytest.fixture(scope="session")
def he_paper4096():
    """A context with fresh keys at preset ``paper-4096`` (N=4096, Q=2^109)."""
    from hecore.seal.context import HEContext
    from hecore.seal.params import preset

    return HEContext.generate(preset("paper-4096"))


@pytest.fixture(scope="session")
def he_addonly2048():
    """A context with fresh keys at preset ``addonly-2048`` (cheap: N=2048, one prime)."""
    from hecore.seal.context import HEContext
    from hecore.seal.params import preset

    return HEContext.generate(preset("addonly-2048"))


@pytest.fixture(scope="session")
def he_addonly2048_other():
    """A second, independent key at ``addonly-2048`` (same parameters, other key)."""
    from hecore.seal.context import HEContext
    from hecore.seal.params import preset

    return HEContext.generate(preset("addonly-2048"))


@pytest.fixture(scope="session")
def tfhe_key_dir(tmp_path_factory) -> Path:
    """A TFHE owner's key directory (``hecore.tfhe.keys.keygen``), made once per test run for every process of
    it (a keygen is about 12 s of a core): the first process to ask makes it under the run's shared temporary
    root, holding a lock the others wait on.  Tests only read it (copy it to change anything)."""
    import fcntl

    from hecore.tfhe import keys as tfhe_keys

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base    # a worker's parent: this run's
    out, done = root / "tfhe-keys" / "keys", root / "tfhe-keys" / "done"
    out.parent.mkdir(exist_ok=True)
    with open(root / "tfhe-keys.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)          # a keygen that died half-way
            tfhe_keys.keygen(out)
            done.touch()
    return out


# --- where the run's CPU goes: HEPIX_TEST_CPU_PROFILE=DIR (tests/cpuprofile.py) -------------------------------

def pytest_configure(config):
    import cpuprofile

    config.pluginmanager.register(cpuprofile, "hepix-cpuprofile")


# --- leaving the test process ----------------------------------------------------------------
# Pyfhel 3.5 (SEAL's global memory pool) sometimes frees memory twice while the interpreter
# tears down, turning a passing run into SIGABRT (exit 134).  Once pytest has reported, leave
# with its exit status and skip the teardown.  HEPIX_NO_FAST_EXIT=1 turns this off.

def pytest_sessionfinish(session, exitstatus):
    session.config._hepix_exitstatus = int(exitstatus)
    if _stand_in_root is not None:
        shutil.rmtree(_stand_in_root, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    status = getattr(config, "_hepix_exitstatus", None)
    if status is None or os.environ.get("HEPIX_NO_FAST_EXIT") == "1":
        return
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


# --- the order of the files ---------------------------------------------------------------------
# `make test` runs whole files on two processes (pytest-xdist --dist loadfile, collection order kept):
# a file marked ``@pytest.mark.seconds(N)`` (about N seconds on a quiet 2-core machine) starts before
# every file of a smaller N or none, so that the last file to finish is a short one.

def _file_seconds(item) -> float:
    mark = item.get_closest_marker("seconds")
    return float(mark.args[0]) if mark else 0.0


def pytest_collection_modifyitems(session, config, items):
    seconds: dict[str, float] = {}
    for item in items:
        seconds.setdefault(item.nodeid.split("::")[0], _file_seconds(item))
    items.sort(key=lambda item: -seconds[item.nodeid.split("::")[0]])      # stable: files stay whole
