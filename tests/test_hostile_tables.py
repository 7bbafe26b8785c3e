"""A hostile cluster, generated: Hypothesis forges tables, files and manifests, the owner's jobs run on them.

The cluster holds the directory it hands back, so it can change any row (ids, sizes, positions, ops,
key fingerprints, ciphertext bytes), any file (rename, duplicate, drop, garble, list a path outside)
and any manifest field -- and recompute every checksum.  Each example here applies a few such
forgeries to a copy of a small packed run (tests/hostile.py) and runs a job on it, then checks:

* no traceback reaches the user: the job returns 0, or 2 with a one-line error (verify: 1 for problems);
* nothing is written outside the job's output, and nothing under the test's sandbox is read except
  the input run, the keys, the owner map and the originals (Python's opens through an audit hook, Spark's
  reads through its reader);
* memory stays bounded: the Python workers run under a 2 GB address-space limit
  (``spark.executor.pyspark.memory``), the driver's Python allocations are traced;
* every image the forgeries did not touch is still processed exactly (decrypt: exact against its
  original; process: byte for byte the ciphertexts of an untouched run); an image decrypt reports as
  decrypted is exact unless its ciphertext was swapped for another valid one (undetectable, see
  docs/threat-model.md);
* ``images_in = decrypted + rejected`` (decrypt), ``images_in = processed + rejected`` (process).

Pure functions (manifest validation, path containment, row checks, PNG names) get many examples; the
Spark jobs few (each example is a job).  Profile: derandomized, no example database, no deadline.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tracemalloc
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hostile import coefficient_above_q, random_bytes, split_by_image, truncated, with_checksums
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from jobs.cli import main
from tasks.checksums import xor_all

pytestmark = pytest.mark.seconds(130)

settings.register_profile("hostile", database=None, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])
HOSTILE = settings.get_profile("hostile")
#: The Spark examples are whole jobs: report a failing one as found, without minutes of shrinking.
JOBS = settings(HOSTILE, phases=[Phase.explicit, Phase.reuse, Phase.generate])

SPARK = ["--master", "local[1]", "--quiet"]
IMAGES = {"alice.png": (10, 10, 1), "bob.png": (12, 12, 1), "carol.png": (12, 10, 3)}
DRIVER_PEAK = 256 * 2**20        # bytes of Python allocations the driver may trace during one job
PEAK_FLOOR = 16 * 2**20          # the least clean-run peak a forged run's is compared with


# --- the sandbox: keys, images, one encrypt run, sentinels outside ------------------------------------

class Sandbox:
    def __init__(self, root: Path):
        self.root = root
        self.images, self.keys, self.pub = root / "images", root / "keys", root / "pub"
        self.enc, self.owner, self.outside = root / "enc", root / "enc.owner", root / "outside"
        self.examples = 0

    def example_dir(self) -> Path:
        self.examples += 1
        d = self.root / "ex" / f"{self.examples:03d}"
        d.mkdir(parents=True)
        return d


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    sb = Sandbox(tmp_path_factory.mktemp("hostile"))
    sb.images.mkdir()
    rng = np.random.default_rng(7)
    for name, (h, w, c) in IMAGES.items():
        shape = (h, w) if c == 1 else (h, w, c)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(sb.images / name)
    assert hepix("keygen", "--out", sb.keys, "--preset", "addonly-2048") == 0
    assert hepix("export-public", "--keys", sb.keys, "--out", sb.pub) == 0
    assert hepix("encrypt", "--keys", sb.pub, "--input", sb.images, "--out", sb.enc, "--owner", sb.owner,
                 "--tile", "8x8", "--halo", "1", *SPARK) == 0
    sb.where = split_by_image(sb.enc)
    sb.ids = sorted(sb.where)
    sb.conf = sb.root / "spark.conf"
    sb.conf.write_text("spark.executor.pyspark.memory 2g\n")
    # sentinels: what a manifest could point outside the run at
    sb.outside.mkdir()
    shutil.copy(sb.enc / "ciphertexts" / sb.where[sb.ids[0]], sb.outside / "part-00000-outside.parquet")
    (sb.outside / "secret.txt").write_text("nothing for the cluster\n")
    # the untouched run processed once: what process must still produce for the images left alone
    # (and decrypted once: the driver's peak of clean runs, which a forged run may exceed by half at most)
    sb.clean_peak = {}
    sb.clean_peak["process"] = traced_peak("process", "--keys", sb.pub, "--input", sb.enc, "--out",
                                           sb.root / "baseline-proc", "--op", "brightness:5", "--conf", sb.conf, *SPARK)
    sb.processed = ciphertexts_by_key(sb.root / "baseline-proc")
    sb.clean_peak["decrypt"] = traced_peak("decrypt", "--keys", sb.keys, "--input", sb.enc, "--out",
                                           sb.root / "baseline-dec", "--owner", sb.owner, "--images", sb.images,
                                           "--png", "--conf", sb.conf, *SPARK)
    return sb


def traced_peak(*argv) -> int:
    """The driver's peak of traced Python allocations during one job that must succeed."""
    tracemalloc.start()
    try:
        assert hepix(*argv) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def within_clean_peak(watch: "Watch", sb: Sandbox, job: str) -> None:
    """A forged run costs the driver at most 1.5x the clean run's peak (or of a floor the clean runs of
    these small images sit under: Spark's and the check passes' own allocations)."""
    allowed = 1.5 * max(sb.clean_peak[job], PEAK_FLOOR)
    assert watch.peak <= allowed, (f"{job}: the driver traced {watch.peak / 2**20:.1f} MB; the clean run "
                                   f"{sb.clean_peak[job] / 2**20:.1f} MB")


def ciphertexts_by_key(run: Path) -> dict[tuple, bytes]:
    t = ds.dataset(str(run / "ciphertexts"), format="parquet").to_table(
        columns=["image_id", "channel", "tile_y", "tile_x", "index", "ct"])
    return {(r["image_id"], r["channel"], r["tile_y"], r["tile_x"], r["index"]): r["ct"] for r in t.to_pylist()}


# --- forgeries ----------------------------------------------------------------------------------------

PATHLIKE = st.sampled_from(["../../escape", "../../../../../tmp/escape", "/etc/passwd", "a/b", "..", ".", "",
                            "x" * 300, "ÄÖ-ü", "C:\\\\x", "\x00", "-", "ABCDEF0123456789ABCDEF0123456789"])
IDS = st.one_of(PATHLIKE, st.text(min_size=0, max_size=40), st.from_regex(r"[a-z0-9][a-z0-9-]{0,63}", fullmatch=True))
INTS = st.one_of(st.integers(-3, 40), st.sampled_from([2**31 - 1, -2**31, 2**16, 2**30, 4096]))
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                    | st.text(max_size=20), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                                                  max_size=3),
                    max_leaves=6)


@st.composite
def row_forgery(draw):
    column = draw(st.sampled_from(["image_id", "image_height", "image_width", "image_channels", "tile_y", "tile_x",
                                   "y", "h", "channel", "index", "halo", "tile_h", "ct", "key_fingerprint", "ops",
                                   "post_scale", "layout", "preset"]))
    if column == "image_id":
        value = draw(IDS)
    elif column == "ct":
        value = draw(st.sampled_from(["truncated", "above-q", "random", "empty", "swap", "double"]))
    elif column == "key_fingerprint":
        value = draw(st.sampled_from(["0" * 64, "f" * 64, "", "../x"]))
    elif column == "ops":
        value = draw(st.lists(st.sampled_from(["brightness:5", "meanfilter:3", "meanfilter:181", "watermark:1,1,5",
                                               "nonsense", "match:x"]), max_size=3))
    elif column == "post_scale":
        value = draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), 1e300, 0.5]))
    elif column in ("layout", "preset"):
        value = draw(st.sampled_from(["pixel", "packed-complex", "digits", "paper-4096", "", "../x"]))
    else:
        value = draw(INTS)
    rows = draw(st.sampled_from(["first", "all"]))
    return ("row", column, value, rows)


@st.composite
def file_forgery(draw):
    how = draw(st.sampled_from(["traverse", "absent", "duplicate", "garble", "drop", "schema", "empty-file"]))
    name = draw(st.sampled_from(["../../outside/part-00000-outside.parquet", "../../../../etc/passwd", "/etc/passwd",
                                 "sub/x.parquet", "..", "_manifest.json"]))
    return ("file", how, name, None)


@st.composite
def manifest_forgery(draw):
    field = draw(st.sampled_from(["surprise", "counts", "ops", "format", "files", "options", "layout", "preset",
                                  "params", "key_fingerprint", "status", "job", "run_id", "runs", "parent", "input"]))
    how = draw(st.sampled_from(["replace", "delete", "sub"]))
    value = draw(JSON)
    return ("manifest", field, value, how)


FORGERIES = st.lists(st.one_of(row_forgery(), file_forgery()), min_size=1, max_size=3)


def forge(sb: Sandbox, run: Path, forgeries, victims) -> set[str]:
    """Apply ``forgeries`` (each on its victim image) to ``run``; returns the images they touched ("*": all)."""
    doc = json.loads((run / "_manifest.json").read_text())
    touched: set[str] = set()
    for (kind, a, b, c), victim in zip(forgeries, victims):
        if kind == "manifest":
            touched.add("*")
            if c == "delete":
                doc.pop(a, None)
            elif c == "sub" and isinstance(doc.get(a), dict) and doc[a]:
                doc[a][sorted(doc[a])[0]] = b
            else:
                doc[a] = b
            continue
        name = sb.where[victim]
        touched.add(victim)
        files = doc.get("files")
        entries = files.get("ciphertexts") if isinstance(files, dict) else None
        if not isinstance(entries, list):               # an earlier forgery replaced the manifest's list
            continue
        i = next((k for k, e in enumerate(entries) if isinstance(e, dict) and e.get("name") == name), None)
        if i is None:                                   # an earlier forgery renamed or dropped it already
            continue
        path = run / "ciphertexts" / name
        if kind == "file":
            if a == "traverse":
                entries[i]["name"] = b
            elif a == "absent":
                entries[i]["name"] = "part-77777-absent.parquet"
            elif a == "duplicate":
                entries.append(dict(entries[i]))
            elif a == "garble":
                path.write_bytes(random_bytes(path.read_bytes()[:4000], seed=len(name)))
            elif a == "drop":
                entries.pop(i)
            elif a == "schema":
                t = pq.read_table(path)
                t = t.set_column(t.schema.get_field_index("image_height"), "image_height",
                                 pa.array([str(v) for v in t.column("image_height").to_pylist()]))
                pq.write_table(t, path)
            elif a == "empty-file":
                path.write_bytes(b"")
            continue
        try:
            t = pq.read_table(path)
        except (OSError, pa.ArrowException):            # an earlier forgery garbled or emptied the file
            continue
        n = t.num_rows
        mask = [k == 0 or c == "all" for k in range(n)]
        if a == "ct":
            other = pq.read_table(run / "ciphertexts" / sb.where[next(x for x in sb.ids if x != victim)])
            fn = {"truncated": truncated, "above-q": coefficient_above_q, "random": random_bytes,
                  "empty": lambda ct: b"", "swap": lambda ct: other.column("ct")[0].as_py(),
                  "double": lambda ct: ct + ct}[b]
            if b == "swap":
                touched.add("swap:" + victim)
            new = [fn(v) if m else v for v, m in zip(t.column("ct").to_pylist(), mask)]
        else:
            field = t.schema.field(a)
            try:
                new = [b if m else v for v, m in zip(t.column(a).to_pylist(), mask)]
                pa.array(new, type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
                continue                                # not storable in this column's type: no forgery
        i_col = t.schema.get_field_index(a)
        t = t.set_column(i_col, t.schema.field(i_col), pa.array(new, type=t.schema.field(i_col).type))
        t = with_checksums(t)
        pq.write_table(t, path, compression="none")
        e = next((e for e in entries if e["name"] == name), None)
        if e is not None:
            e.update(bytes=path.stat().st_size, rows=t.num_rows, xxh3_xor=xor_all(t.column("ct_xxh3").to_numpy()))
    (run / "_manifest.json").write_text(json.dumps(doc, indent=2, default=str))
    return touched


# --- watching the job ---------------------------------------------------------------------------------

_OPENED: list[str] | None = None


def _audit(event, args):
    if _OPENED is not None and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


class Watch:
    """What a job read (Python opens, Spark reads) and wrote under the sandbox, and its driver's peak."""

    def __init__(self, sb: Sandbox, allowed_reads: list[Path], out: Path):
        self.sb, self.allowed, self.out = sb, [p.resolve() for p in allowed_reads], out.resolve()
        self.spark_reads: list[str] = []

    def __enter__(self):
        global _OPENED
        from pyspark.sql.readwriter import DataFrameReader

        self.before = {p: p.stat().st_mtime_ns for p in self.sb.root.rglob("*") if p.is_file()}
        real_parquet, real_load = DataFrameReader.parquet, DataFrameReader.load
        watch = self

        def parquet(reader, *paths, **kw):
            watch.spark_reads.extend(str(p) for p in paths)
            return real_parquet(reader, *paths, **kw)

        def load(reader, path=None, *a, **kw):
            if path is not None:
                watch.spark_reads.extend([path] if isinstance(path, str) else list(path))
            return real_load(reader, path, *a, **kw)

        self._patches = [mock.patch.object(DataFrameReader, "parquet", parquet),
                         mock.patch.object(DataFrameReader, "load", load)]
        for p in self._patches:
            p.start()
        _OPENED = []
        tracemalloc.start()
        return self

    def __exit__(self, *exc):
        global _OPENED
        _, self.peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.opened, _OPENED = _OPENED, None
        for p in self._patches:
            p.stop()
        return False

    def _inside(self, path: str, roots) -> bool:
        p = Path(path.removeprefix("file://").removeprefix("file:")).resolve()
        return any(p == r or p.is_relative_to(r) for r in roots)

    def check(self) -> None:
        root = self.sb.root.resolve()
        for path in self.opened + self.spark_reads:
            if "://" in path and not path.startswith("file:"):
                continue
            if self._inside(path, [root]):
                assert self._inside(path, self.allowed + [self.out]), f"the job read {path}"
        after = {p: p.stat().st_mtime_ns for p in self.sb.root.rglob("*") if p.is_file()}
        changed = [p for p, t in after.items() if self.before.get(p) != t]
        outside = [p for p in changed if not p.resolve().is_relative_to(self.out)]
        assert outside == [], f"the job wrote outside its output: {outside[:3]}"
        assert self.peak < DRIVER_PEAK, f"the driver traced {self.peak / 2**20:.0f} MB of Python allocations"


def run_job(capfd, argv, watch: Watch) -> int:
    capfd.readouterr()
    with watch:
        rc = hepix(*argv)               # an exception here (a traceback) fails the example
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "Traceback" not in out, err[-2000:]
    assert rc in (0, 1, 2)
    if rc == 2:
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("hepix ")]
        assert len(lines) == 1, err[-2000:]
    watch.check()
    return rc


def fresh_copy(sb: Sandbox) -> tuple[Path, Path]:
    d = sb.example_dir()
    run = d / "in"
    shutil.copytree(sb.enc, run)
    return d, run


def table(path: Path) -> list[dict]:
    return ds.dataset(str(path), format="parquet").to_table().to_pylist() if path.exists() else []


# --- the Spark jobs -------------------------------------------------------------------------------------

@pytest.mark.spark
@settings(JOBS, max_examples=6)
@given(data=st.data(), forgeries=FORGERIES)
def test_decrypt_of_a_forged_run(sandbox, capfd, data, forgeries):
    sb = sandbox
    d, run = fresh_copy(sb)
    victims = [data.draw(st.sampled_from(sb.ids)) for _ in forgeries]
    touched = forge(sb, run, forgeries, victims)
    out = d / "dec"
    watch = Watch(sb, [run, sb.keys, sb.owner, sb.images, sb.conf], out)
    rc = run_job(capfd, ["decrypt", "--keys", sb.keys, "--input", run, "--out", out, "--owner", sb.owner,
                         "--images", sb.images, "--png", "--conf", sb.conf, *SPARK], watch)
    assert rc in (0, 2)
    if rc == 2:
        return
    within_clean_peak(watch, sb, "decrypt")
    doc = json.loads((out / "_manifest.json").read_text())
    c = doc["counts"]
    assert c["images_in"] == c["images_decrypted"] + c["images_rejected"]
    metrics = {m["image_id"]: m for m in table(out / "metrics")}
    swapped = {t.removeprefix("swap:") for t in touched if t.startswith("swap:")}
    for iid, m in metrics.items():
        if iid not in swapped:          # a decrypted image is exact: a forgery never yields a wrong picture
            assert m["reference"] == "original" and m["exact_fraction"] == 1.0, m
    for iid in set(sb.ids) - touched:    # the images left alone are all there
        assert iid in metrics, (iid, table(out / "rejects"))
    pngs = list((out / "images").iterdir()) if (out / "images").exists() else []
    assert len(pngs) == len(metrics)


@pytest.mark.spark
@settings(JOBS, max_examples=4)
@given(data=st.data(), forgeries=FORGERIES)
def test_process_of_a_forged_run(sandbox, capfd, data, forgeries):
    sb = sandbox
    d, run = fresh_copy(sb)
    victims = [data.draw(st.sampled_from(sb.ids)) for _ in forgeries]
    touched = forge(sb, run, forgeries, victims)
    out = d / "proc"
    watch = Watch(sb, [run, sb.pub, sb.conf], out)
    rc = run_job(capfd, ["process", "--keys", sb.pub, "--input", run, "--out", out, "--op", "brightness:5",
                         "--conf", sb.conf, *SPARK], watch)
    assert rc in (0, 2)
    if rc == 2:
        return
    within_clean_peak(watch, sb, "process")
    c = json.loads((out / "_manifest.json").read_text())["counts"]
    assert c["images_in"] == c["images_encrypted"] + c["images_rejected"]
    got = ciphertexts_by_key(out)
    for key, ct in got.items():          # whatever was processed is byte for byte the untouched run's
        if key[0] not in {t.removeprefix("swap:") for t in touched}:
            assert ct == sb.processed[key], key
    for iid in set(sb.ids) - touched:
        assert {k for k in got if k[0] == iid} == {k for k in sb.processed if k[0] == iid}, iid


@pytest.mark.spark
@settings(JOBS, max_examples=3)
@given(data=st.data(), forgeries=FORGERIES)
def test_verify_of_a_forged_run(sandbox, capfd, data, forgeries):
    sb = sandbox
    d, run = fresh_copy(sb)
    victims = [data.draw(st.sampled_from(sb.ids)) for _ in forgeries]
    forge(sb, run, forgeries, victims)
    rc = run_job(capfd, ["verify", run, "--rejects", d / "v", *SPARK], Watch(sb, [run], d / "v"))
    assert rc in (0, 1, 2)


@pytest.mark.spark
@settings(JOBS, max_examples=4)
@given(forgery=manifest_forgery())
def test_process_of_a_forged_manifest(sandbox, capfd, forgery):
    sb = sandbox
    d, run = fresh_copy(sb)
    forge(sb, run, [forgery], [sb.ids[0]])
    out = d / "proc"
    rc = run_job(capfd, ["process", "--keys", sb.pub, "--input", run, "--out", out, "--op", "brightness:5",
                         "--conf", sb.conf, *SPARK], Watch(sb, [run, sb.pub, sb.conf], out))
    if rc == 0:                          # a field processing does not depend on: the images are all there
        c = json.loads((out / "_manifest.json").read_text())["counts"]
        assert c["images_in"] == c["images_encrypted"] + c["images_rejected"]


# --- audit: no Spark, more examples ---------------------------------------------------------------------

@settings(HOSTILE, max_examples=12)
@given(data=st.data(), forgeries=st.lists(st.one_of(row_forgery(), file_forgery(), manifest_forgery()),
                                          min_size=1, max_size=3))
def test_audit_of_a_forged_run(sandbox, capfd, data, forgeries):
    sb = sandbox
    d, run = fresh_copy(sb)
    victims = [data.draw(st.sampled_from(sb.ids)) for _ in forgeries]
    touched = forge(sb, run, forgeries, victims)
    out = d / "audit"
    rc = run_job(capfd, ["audit", "--input", run, "--out", out, "--seed", "1"], Watch(sb, [run], out))
    assert rc in (0, 2)
    if rc == 0 and "*" not in touched:
        audited = {r["image_id"] for r in table(out / "audit") if r["test"] != "metadata"}
        assert set(sb.ids) - touched <= audited


# --- pure functions: many examples -----------------------------------------------------------------------

@settings(HOSTILE, max_examples=150)
@given(forgery=manifest_forgery())
def test_a_forged_manifest_is_a_manifest_or_one_field_named(sandbox, forgery):
    from schemas.manifest import FILE_NAME, ManifestInvalid, RunManifest

    doc = json.loads((sandbox.enc / "_manifest.json").read_text())
    _, field, value, how = forgery
    if how == "delete":
        doc.pop(field, None)
    elif how == "sub" and isinstance(doc.get(field), dict) and doc[field]:
        doc[field][sorted(doc[field])[0]] = value
    else:
        doc[field] = value
    try:
        m = RunManifest.from_json(json.dumps(doc, default=str))
    except ManifestInvalid as e:
        assert "\n" not in str(e) and "field '" in str(e)
        return
    for entries in m.files.values():
        assert all(FILE_NAME.match(e["name"]) for e in entries)
    assert isinstance(m.counts.images_in, int)


@settings(HOSTILE, max_examples=300)
@given(name=st.one_of(PATHLIKE, st.text(max_size=60)))
def test_a_listed_name_resolves_inside_its_directory_or_is_refused(name):
    from hecore.errors import ManifestError
    from jobs.runtime.storage import inside

    for base in ("/data/run/ciphertexts", "hdfs://nn:9820/run/ciphertexts", "file:/data/run/ciphertexts"):
        try:
            path = inside(base, name)
        except ManifestError:
            continue
        assert path.rsplit("/", 1)[0] == base and "/" not in name and name not in (".", "..")


@settings(HOSTILE, max_examples=300)
@given(image_id=st.one_of(IDS, st.text(max_size=80)), source=st.one_of(st.none(), st.text(max_size=80), PATHLIKE))
def test_a_png_name_stays_in_its_directory(tmp_path_factory, image_id, source):
    from tasks.metrics import png_path

    d = tmp_path_factory.getbasetemp() / "pngs"
    d.mkdir(exist_ok=True)
    try:
        path = png_path(str(d), image_id, source)
    except ValueError:
        return
    assert Path(path).parent == d.resolve() and Path(path).name.endswith(".png")


@settings(HOSTILE, max_examples=60)
@given(data=st.data(), forgery=row_forgery())
def test_the_row_checks_catch_every_forged_row_by_itself_or_with_its_image(sandbox, data, forgery):
    from hecore.seal.checks import CiphertextChecker
    from hecore.seal.params import preset
    from jobs.runtime.inputcheck import ImageSummary, image_problems
    from tasks.rowchecks import RowExpect, check_batch

    sb = sandbox
    victim = data.draw(st.sampled_from(sb.ids))
    t = pq.read_table(sb.enc / "ciphertexts" / sb.where[victim])
    doc = json.loads((sb.enc / "_manifest.json").read_text())
    expect = RowExpect(fingerprint=doc["key_fingerprint"], layout="packed", preset="addonly-2048", ops=(),
                       tile=(8, 8), halo=1)
    if getattr(sb, "checker", None) is None:
        sb.checker = CiphertextChecker.for_params(preset("addonly-2048"))

    def verdict(table):
        problems = check_batch(table.to_batches()[0], expect, sb.checker)
        good = [r for r, p in zip(table.to_pylist(), problems) if p is None]
        image = None
        if len(good) == table.num_rows:
            ids = {r["image_id"] for r in good}
            if len(ids) == 1:
                col = lambda k: [r[k] for r in good]                         # noqa: E731
                image = image_problems(ImageSummary(
                    good[0]["image_id"], len(good), len({(r["channel"], r["tile_y"], r["tile_x"], r["index"])
                                                          for r in good}), good[0]["layout"],
                    (min(col("image_height")), max(col("image_height"))), (min(col("image_width")), max(col("image_width"))),
                    (min(col("image_channels")), max(col("image_channels"))),
                    (min(col("tile_h")), max(col("tile_h")), min(col("tile_w")), max(col("tile_w")))))
            else:
                image = ("split-image", "")
        return problems, image

    assert verdict(t) == ([None] * t.num_rows, None)                 # the untouched rows and image pass
    _, column, value, rows = forgery
    if column == "ct":
        assume(value != "swap")                                      # a valid ciphertext of the right key: undetectable
        value = {"truncated": truncated, "above-q": coefficient_above_q, "random": random_bytes,
                 "empty": lambda ct: b"", "double": lambda ct: ct + ct}[value](t.column("ct")[0].as_py())
    field = t.schema.field(column)
    old = t.column(column).to_pylist()
    new = [value if (k == 0 or rows == "all") else v for k, v in enumerate(old)]
    try:
        arr = pa.array(new, type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        assume(False)
    assume(arr.to_pylist() != old)
    forged = with_checksums(t.set_column(t.schema.get_field_index(column), field, arr))
    problems, image = verdict(forged)
    if column == "image_id" and rows == "all" and image is None:
        assert forged.column("image_id")[0].as_py() != victim         # a consistent new id: the owner map's catch
        return
    assert any(p is not None for p in problems) or image is not None, (column, value)
    for p in problems:
        assert p is None or (p[0] and "\n" not in p[0])


@settings(HOSTILE, max_examples=200)
@given(h=INTS, w=INTS, c=INTS, rows=st.integers(1, 8))
def test_assembling_never_allocates_what_the_rows_claim(h, w, c, rows):
    from schemas.stages import DECRYPTED
    from tasks.decrypt import assemble_group

    n = rows
    t = pa.Table.from_pylist([{"image_id": "a" * 32, "image_height": h, "image_width": w, "image_channels": c,
                               "layout": "packed", "strategy": "fresh", "security": "ind-cpa", "preset": "p",
                               "ops": [], "channel": 0, "y": k, "x": 0, "h": 1, "w": 1,
                               "raw": np.ones(1).tobytes(), "cts": 1, "ct_bytes": 1,
                               "encrypt_seconds": 0.0, "process_seconds": 0.0, "decrypt_seconds": 0.0, "error": None}
                              for k in range(n)], schema=DECRYPTED)
    tracemalloc.start()
    try:
        out = assemble_group(t, max_values=4096).to_pylist()[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    if out["reject_reason"] is None:
        assert h * w * c == n


def test_the_watch_sees_a_read_and_a_write_outside_and_a_big_allocation(sandbox):
    """The invariants above can fail: a read of a sentinel, a write beside the output, a large allocation."""
    sb = sandbox
    out = sb.example_dir() / "out"
    import subprocess

    for act, message in ((lambda: (sb.outside / "secret.txt").read_text(), "read"),
                         # a write from another process (as the JVM's): seen by the files' times, not by Python
                         (lambda: subprocess.run(["touch", str(sb.root / "ex" / "stray.txt")], check=True),
                          "wrote outside"),
                         (lambda: bytearray(DRIVER_PEAK + 2**20), "driver traced")):
        watch = Watch(sb, [sb.enc], out)
        with watch:
            kept = act()
        with pytest.raises(AssertionError, match=message):
            watch.check()
        del kept
    (sb.root / "ex" / "stray.txt").unlink()


# --- strings, labels and JSON documents: pure functions, no Spark -------------------------------------------

FP = "ab" * 32


def honest_row(**changes) -> dict:
    """One row of a 10x10 grey image's first tile as encrypt writes it (packed, 8x8 tiles, halo 1)."""
    r = {"run_id": "20260101T000000Z-0a0b0c0d", "image_id": "0123456789abcdef", "layout": "packed", "scheme": "ckks",
         "preset": "addonly-2048", "strategy": "fresh", "security": "ind-cpa", "key_fingerprint": FP,
         "image_height": 10, "image_width": 10, "image_channels": 1, "tile_h": 8, "tile_w": 8, "halo": 1,
         "tile_y": 0, "tile_x": 0, "y": 0, "x": 0, "h": 8, "w": 8, "channel": 0, "index": 0, "ops": [],
         "post_scale": 1.0, "level": 1, "scale_bits": 30, "encrypt_seconds": 0.0, "process_seconds": 0.0,
         "ct": b"\x01" * 64, "ct_xxh3": None}
    r.update(changes)
    return r


def row_expect():
    from tasks.rowchecks import RowExpect, run_labels

    return RowExpect(fingerprint=FP, layout="packed", preset="addonly-2048", tile=(8, 8), halo=1,
                     security="ind-cpa", **run_labels("addonly-2048", "fresh", {}))


def checked(*rows):
    from schemas.tables import CIPHERTEXTS
    from tasks.rowchecks import check_batch

    rb = pa.RecordBatch.from_pylist(list(rows), schema=CIPHERTEXTS)
    return check_batch(rb, row_expect(), None), rb


def test_an_honest_row_passes_the_row_checks():
    assert checked(honest_row())[0] == [None]


@pytest.mark.parametrize("image_id", ["0123456789abcdef\n", "0123456789abcdef\n-moon", "\n0123456789abcdef"])
def test_an_image_id_with_a_newline_is_refused(image_id):
    assert checked(honest_row(image_id=image_id))[0][0][0] == "bad-image-id"


@pytest.mark.parametrize("column,value,reason", [
    ("security", "leaks", "label-mismatch"), ("strategy", "zinc", "label-mismatch"),
    ("scheme", "bfv", "parameters-mismatch"), ("scale_bits", 31, "scale-mismatch"),
    ("level", 7, "scale-mismatch"), ("level", -1, "scale-mismatch")])
def test_a_row_label_that_is_not_the_runs_is_refused(column, value, reason):
    assert checked(honest_row(**{column: value}))[0][0][0] == reason


@settings(HOSTILE, max_examples=100)
@given(column=st.sampled_from(["image_id", "layout", "preset", "strategy", "security", "scheme", "key_fingerprint",
                               "run_id", "ops"]),
       size=st.sampled_from([257, 4096, 10 * 2**20]), many=st.booleans())
def test_a_string_bomb_is_refused_and_never_copied(column, size, many):
    """A value of up to 10 MiB in any string column (or an ops list of 65 items): the row is refused as
    ``oversized-value`` and neither its detail nor its CHECKED row carries the value."""
    from tasks.rowchecks import _checked_batch

    value = ["x" * 10] * 65 if column == "ops" and many else ["x" * size] if column == "ops" else "x" * size
    problems, rb = checked(honest_row(), honest_row(**{column: value}))
    assert problems[0] is None and problems[1][0] == "oversized-value" and len(problems[1][1]) < 200
    out = _checked_batch(rb, problems)
    longest = max(max((len(v) for v in out.column(c).to_pylist() if isinstance(v, str)), default=0)
                  for c in out.schema.names)
    assert longest <= 256


@settings(HOSTILE, max_examples=150)
@given(column=st.sampled_from(["layout", "preset", "strategy", "security", "scheme"]),
       value=st.text(max_size=256))
def test_a_reject_detail_echoes_at_most_a_few_dozen_characters_of_a_value(column, value):
    problems, _ = checked(honest_row(**{column: value}))
    if problems[0] is not None:
        assert len(problems[0][1]) < 160 and "\n" not in problems[0][1]


def nested(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


@settings(HOSTILE, max_examples=40)
@given(depth=st.sampled_from([33, 100, 999, 1001, 5000, 200_000]), kind=st.sampled_from(["list", "dict"]),
       field=st.sampled_from(["options", "spark", "params", "counts", "(document)"]))
def test_a_deeply_nested_manifest_is_a_one_line_error(sandbox_free_manifest, depth, kind, field):
    from schemas.manifest import ManifestInvalid, RunManifest

    doc = dict(sandbox_free_manifest)
    text = nested(depth, kind) if field == "(document)" else \
        json.dumps(doc)[:-1] + f', "{field}": ' + nested(depth, kind) + "}"
    with pytest.raises(ManifestInvalid) as e:
        RunManifest.from_json(text.encode())
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def sandbox_free_manifest():
    return {"format": 2, "job": "encrypt", "run_id": "20260101T000000Z-0a0b0c0d", "status": "complete",
            "created": "", "finished": "", "input": "", "output": ""}


def test_a_manifest_of_newlines_or_of_other_bytes_is_a_one_line_error(sandbox_free_manifest):
    from schemas.jsondoc import parse
    from schemas.manifest import ManifestInvalid, RunManifest

    assert RunManifest.from_json(json.dumps(sandbox_free_manifest).encode()).job == "encrypt"
    for data in (b"\n" * 100_000, b"\xff\xfe{}", b'{"format": 2' + b" " * 10):
        with pytest.raises(ManifestInvalid) as e:
            RunManifest.from_json(data)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="more than the 10"):
        parse(b"{}" * 6, max_bytes=10)


def owner_map(d: Path, images: list[dict] | None = None, **doc_changes) -> Path:
    """An owner map directory written by hand (one batch)."""
    from schemas.tables import OWNER_IMAGES

    (d / "images").mkdir(parents=True)
    tag = "20260101T000000Z-0a0b0c0d-b00000"
    rows = images if images is not None else [{"image_id": "0123456789abcdef", "source": "/x/a.png",
                                               "content_sha256": "0" * 64, "image_height": 10, "image_width": 10,
                                               "image_channels": 1, "ciphertexts": 4}]
    rows = [{"bytes": 1, "run_id": "20260101T000000Z-0a0b0c0d", "batch": tag, **r} for r in rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=OWNER_IMAGES), d / "images" / f"{tag}.parquet")
    doc = {"format": 1, "job": "encrypt", "status": "complete", "runs": [], "input": "", "output": "",
           "key_fingerprint": FP, "settings": {"preset": "addonly-2048"},
           "batches": [{"tag": tag, "run_id": "20260101T000000Z-0a0b0c0d", "images": f"images/{tag}.parquet",
                        "rejects": None, "files": {}, "counts": {}}]}
    doc.update(doc_changes)
    (d / "owner.json").write_text(json.dumps(doc))
    return d


@pytest.mark.parametrize("tamper", ["nested", "settings", "image-id", "image-size", "not-parquet", "huge-number"])
def test_a_tampered_owner_map_is_a_one_line_error(tmp_path, tamper):
    from hecore.errors import OwnerMapError
    from jobs.runtime.owner import OwnerMap

    d = tmp_path / "owner"
    if tamper == "nested":
        owner_map(d)
        (d / "owner.json").write_text('{"format": 1, "settings": ' + nested(100_000, "list") + "}")
    elif tamper == "settings":
        owner_map(d, settings={"max_pixels": "many"})
    elif tamper == "huge-number":
        owner_map(d)
        (d / "owner.json").write_text('{"format": ' + "9" * 5000 + "}")
    elif tamper in ("image-id", "image-size"):
        owner_map(d, images=[{"image_id": "0123456789abcdef\n" if tamper == "image-id" else "0123456789abcdef",
                              "source": "a", "content_sha256": "0", "image_height": -5 if tamper == "image-size" else 1,
                              "image_width": 1, "image_channels": 1, "ciphertexts": 1}])
    else:
        owner_map(d)
        next((d / "images").glob("*.parquet")).write_bytes(b"PAR1 not a table PAR1")
    with pytest.raises(OwnerMapError) as e:
        OwnerMap.load(str(d)).images()
    assert "\n" not in str(e.value)


def distance_expect():
    from jobs.runtime.distancecheck import DistanceExpect

    return DistanceExpect(fingerprint=FP, layout="packed", preset="addonly-2048", ops=(), metrics=("l1", "l2"),
                          bound=255.0, post_scale=1.0, integer=False, slots=1024)


def distance_row(**changes) -> dict:
    from jobs.runtime.distancecheck import DistanceExpect

    r = {"image_id": "0123456789abcdef", "query_image_id": "fedcba9876543210", "metric": "l2", "layout": "packed",
         "scheme": "ckks", "preset": "addonly-2048", "key_fingerprint": FP, "ops": [], "bound": 255.0, "parts": 4,
         "process_seconds": 0.0}
    r["distance_scale"] = DistanceExpect.scale(distance_expect(), r["metric"], r["parts"])
    r.update(changes)
    return r


class OwnerOf:
    """An owner map of two 10x10 grey images (the image and the query of :func:`distance_row`)."""

    def get(self, image_id):
        from jobs.runtime.owner import OwnerImage

        if image_id in ("0123456789abcdef", "fedcba9876543210"):
            return OwnerImage(image_id, "a.png", "0" * 64, 10, 10, 1, 4)
        return None


@pytest.mark.parametrize("change,reason", [
    ({"image_id": "0123456789abcdef\n"}, "bad-image-id"), ({"key_fingerprint": "0" * 64}, "key-mismatch"),
    ({"image_id": "0000000000000000"}, "unknown-image"), ({"query_image_id": "0000000000000000"}, "unknown-image"),
    ({"distance_scale": 1e300}, "bad-distance-scale"), ({"distance_scale": float("nan")}, "bad-distance-scale"),
    ({"parts": 10**9}, "malformed-row"), ({"parts": 0}, "malformed-row"), ({"bound": 1e12}, "malformed-row"),
    ({"metric": "l7"}, "malformed-row"), ({"ops": ["brightness:5"]}, "parameters-mismatch")])
def test_a_forged_distance_row_is_refused_before_it_is_decrypted(change, reason):
    from jobs.runtime.distancecheck import row_problem

    assert row_problem(distance_row(), distance_expect(), OwnerOf()) is None
    assert row_problem(distance_row(**change), distance_expect(), OwnerOf())[0] == reason


@settings(HOSTILE, max_examples=200)
@given(distance=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-3_999_159.0, 1e300])),
       metric=st.sampled_from(["l1", "l2"]))
def test_a_decrypted_distance_is_kept_only_within_what_the_pixels_allow(distance, metric):
    """100 grey pixels 0..255 apart at most: squared L2 in 0..100 x 255^2, L1 in 0..100 x 255 (with the
    polynomial's error); anything else -- another key's noise, a forged scale -- is implausible."""
    from jobs.runtime.distancecheck import value_problem

    problem = value_problem(distance, distance_row(metric=metric), distance_expect(), OwnerOf())
    top = 100 * 255.0 ** 2 if metric == "l2" else 100 * 255.0 * 1.2
    if not (-0.2 * 100 * 255 <= distance <= top * 1.01 + 1):
        assert problem is not None and problem[0] == "implausible-values"
    if metric == "l2" and 0 <= distance <= 100 * 255.0 ** 2:
        assert problem is None


def test_a_fresh_ciphertext_with_its_scale_or_level_changed_is_refused(he_paper4096):
    """SEAL loads a ciphertext whose scale field was doubled (it decrypts to half the values) or that was
    switched down a level; a run no op has touched has neither, so the row is a ``scale-mismatch``."""
    from Pyfhel import PyCtxt

    from hecore.seal.checks import CiphertextChecker

    ctx, _ = he_paper4096
    ct = ctx.encrypt_vector(np.arange(8.0))
    checker = CiphertextChecker.for_context(ctx, exact_scale=(ctx.params.scale_bits, ctx.params.data_primes))
    doubled = PyCtxt(copy_ctxt=PyCtxt(pyfhel=ctx._he, bytestring=ct))
    doubled.set_scale(doubled.scale * 2)
    lower = PyCtxt(pyfhel=ctx._he, bytestring=ct)
    ctx._he.mod_switch_to_next(lower)
    assert checker.problem(ct) is None
    assert checker.problem(doubled.to_bytes()).reason == "scale-mismatch"
    assert checker.problem(lower.to_bytes()).reason == "scale-mismatch"
    assert CiphertextChecker.for_context(ctx).problem(doubled.to_bytes()) is None     # without: unchecked


@pytest.mark.parametrize("ops, checked", [((), True), (("brightness:40", "watermark:1,1,9", "meanfilter:3"), True),
                                          (("contrast:1.5",), True), (("dftfilter:lowpass=4",), False)])
def test_the_scale_is_checked_exactly_after_any_chain_that_does_not_multiply(he_paper4096, ops, checked):
    """Additions and rotations keep a CKKS ciphertext's scale and level, so a processed run's rows are held
    to the stored ones as a fresh run's are; after a multiplying op the scale is left to decrypt's ranges."""
    from dataclasses import replace
    from types import SimpleNamespace

    from Pyfhel import PyCtxt

    from hecore.seal.checks import CiphertextChecker
    from tasks.rowchecks import _ciphertext_checker

    ctx, _ = he_paper4096
    ct = ctx.encrypt_vector(np.arange(8.0))
    forged = PyCtxt(pyfhel=ctx._he, bytestring=ct)
    forged.set_scale(forged.scale * 2)
    expect = replace(row_expect(), preset="paper-4096", ops=ops, scale_bits=ctx.params.scale_bits,
                     max_level=ctx.params.data_primes)
    keys = SimpleNamespace(checker=lambda **kw: CiphertextChecker.for_context(ctx, **kw))
    checker = _ciphertext_checker(expect, keys)
    assert checker.problem(ct) is None
    problem = checker.problem(forged.to_bytes())
    assert (problem is not None and problem.reason == "scale-mismatch") == checked


class _Rows:
    """Stands in for a DataFrame whose rows a job streams (``toLocalIterator``)."""

    class Row(dict):
        def asDict(self):
            return dict(self)

    def __init__(self, rows):
        self.rows = rows

    def toLocalIterator(self):
        return iter(self.Row(r) for r in self.rows)


class _Keys:
    def checker(self):
        class Accepts:
            def problem(self, ct):
                return None
        return Accepts()


def test_inference_outputs_are_streamed_checked_and_bounded_per_batch():
    """Head outputs of a 2-batch task with 2 outputs: a repeated output, a batch id outside the task, a
    post_scale of 1e300 and another key's row are refused (their batches with them); a good batch is kept."""
    from types import SimpleNamespace

    from jobs.infer import _checked_outputs

    run = SimpleNamespace(fingerprint=FP, run_id="20260101T000000Z-0a0b0c0d", keys=_Keys())

    def out(batch, index, **changes):
        return {"image_id": f"digits-01-{batch}", "key_fingerprint": FP, "post_scale": 1.0, "h": 4, "y": 0,
                "index": index, "ct": b"x", **changes}

    rows = [out(0, 0), out(0, 1),                                   # batch 0: whole and good
            out(1, 0), out(1, 0),                                   # batch 1: output 0 twice
            out(2, 0), out(0, 1, image_id="digits-01-0\n"),         # outside the task; a forged id
            out(1, 1, post_scale=1e300), out(1, 1, key_fingerprint="0" * 64)]
    rejects: list[dict] = []
    batches, bad, n = _checked_outputs(run, _Rows(rows), rejects, "01", 2, 2)
    assert n == len(rows) and set(batches) == {"digits-01-0"} and len(batches["digits-01-0"]) == 2
    assert {"digits-01-1", "digits-01-2"} <= bad
    assert {r["reason"] for r in rejects} == {"duplicate-row", "bad-image-id", "malformed-row", "key-mismatch"}
    assert all(len(r["detail"]) < 200 and "\n" not in r["detail"] for r in rejects)


def test_a_row_the_work_fails_on_becomes_a_reject_and_the_task_goes_on(he_addonly2048):
    """In the checking pass that also does the job's work, a row the work cannot process (SEAL: "encoded
    values are too large" for a forged scale) is a ``work-failed`` CHECKED row -- its image is then left
    out -- and the other rows' output still comes; without such a pass the failure is raised as before."""
    from types import SimpleNamespace

    from schemas.tables import CIPHERTEXTS
    from tasks.rowchecks import check_and_work_partition
    from tasks.worker import work_failed

    ctx, _ = he_addonly2048
    ct = ctx.encrypt_vector(np.zeros(4))
    rb = pa.RecordBatch.from_pylist([honest_row(ct=ct), honest_row(ct=ct, tile_x=1, x=8, w=2)], schema=CIPHERTEXTS)

    def work(batches):
        for b in batches:
            rows = b.to_pylist()
            for r in rows:
                if r["tile_x"] == 1:
                    assert work_failed(r, ValueError("encoded values are too large\nsecond line"))
            yield b.filter(pa.array([r["tile_x"] == 0 for r in rows]))

    out = list(check_and_work_partition(iter([rb]), expect=row_expect(), token="work-failed-test",
                                        broadcast=SimpleNamespace(value=None), work=work, work_schema=CIPHERTEXTS))
    checks = [c for b in out for c in b.column("check").to_pylist() if c is not None]
    works = [w for b in out for w in b.column("work").to_pylist() if w is not None]
    assert [(c["tile_x"], c["reason"]) for c in checks] == [(0, None), (1, "work-failed")]
    assert "too large" in checks[1]["detail"] and "\n" not in checks[1]["detail"]
    assert [w["tile_x"] for w in works] == [0]
    assert not work_failed(honest_row(), ValueError("x"))           # no pass around: the caller raises


def test_a_pixel_row_the_pointwise_work_fails_on_is_a_reject_and_its_batch_goes_on(he_addonly2048):
    """The pixel layout's pointwise ops work on a whole batch at once; a row they cannot take (a cut
    ciphertext) is found row by row and recorded, and the batch's other rows come out processed."""
    from types import SimpleNamespace

    from hecore.ciphertexts import CiphertextBatch
    from hecore.encrypt.strategies import make_strategy
    from schemas.tables import CIPHERTEXTS
    from tasks.process import pointwise_partition
    from tasks.worker import collect_failures

    ctx, _ = he_addonly2048
    cts = list(make_strategy("fresh", ctx).encrypt(np.array([[10, 20, 30]], dtype=np.uint8)))
    rows = [honest_row(layout="pixel", tile_h=1, tile_w=3, halo=0, h=1, w=3, index=i, ct=bytes(c),
                       scale_bits=ctx.params.scale_bits) for i, c in enumerate(cts)]
    rows[1]["ct"] = rows[1]["ct"][:-8]
    rb = pa.RecordBatch.from_pylist(rows, schema=CIPHERTEXTS)
    keys = SimpleNamespace(value=SimpleNamespace(context=lambda: ctx))

    def run():
        return list(pointwise_partition(iter([rb]), token="pointwise-failed-test", broadcast=keys,
                                        spec="brightness:5", run_id=rows[0]["run_id"]))

    failures: list = []
    collect_failures(failures)
    try:
        out = run()
    finally:
        collect_failures(None)
    assert [r["index"] for b in out for r in b.to_pylist()] == [0, 2]
    assert [key[-1] for key, _ in failures] == [1] and "\n" not in failures[0][1]
    got = ctx.decrypt_pixels(CiphertextBatch.from_arrow(out[0].column("ct")))
    np.testing.assert_allclose(got, [15.0, 35.0], atol=1e-3)
    with pytest.raises(ValueError):                                 # no checking pass around: raised
        run()


@settings(HOSTILE, max_examples=200)
@given(value=JSON, wrap=st.integers(0, 60))
def test_a_json_document_parses_to_itself_within_the_depth_bound_and_is_refused_past_it(value, wrap):
    from schemas.jsondoc import MAX_DEPTH, depth, parse

    doc = value
    for _ in range(wrap):
        doc = [doc]
    text = json.dumps(doc)
    if depth(doc, 10_000) <= MAX_DEPTH:
        got = parse(text.encode(), max_bytes=2**20)
        assert json.dumps(got) == text
    else:
        with pytest.raises(ValueError) as e:
            parse(text.encode(), max_bytes=2**20)
        assert "\n" not in str(e.value)
