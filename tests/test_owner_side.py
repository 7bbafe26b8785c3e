"""The owner's side against what it writes and what a cluster's metadata can make it do.

* Every path an owner's job writes is guarded (jobs/runtime/places.py): never inside the input, the keys,
  the owner map or any key directory, owner map or run; never over a file of the user's (a contact sheet
  replaces only an earlier contact sheet); an output directory is new or empty.
* Work grows with the rows the owner made, not with the metadata the cluster writes: row groups of no rows,
  files listed with no rows, many small row groups (schemas/footers.py, tasks/splits.py,
  jobs/runtime/runs.py).
* Manifest values are checked for fit, not just form: ``infer_layout`` against the ciphertexts' shape; a
  chain ``process`` records is one its readers accept; op specs hold ASCII digits only.

The unit tests need no Spark; the Spark tests share one small run (three 16x16 images, ``addonly-2048``).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from hecore.ops.spec import check_ascii_digits, parse_chain
from jobs.cli import main
from jobs.runtime import places
from schemas.footers import FooterChecker, FooterLimits, local_reader
from schemas.manifest import MAX_OPS, ManifestInvalid, check_recorded_ops, op_list
from tasks import contactsheet as cs
from tasks.splits import TASK_BYTES, TASK_ROWS, Split, plan_tasks, splits_of

pytestmark = pytest.mark.seconds(55)

SPARK = ["--master", "local[2]", "--quiet"]


def one_line_error(capsys, *needles: str) -> str:
    """The CLI's one-line error (no traceback), checked to name every needle."""
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if not line.startswith(("WARNING", "WARN"))
             and " WARN " not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# --- 1. where the owner's jobs write (no Spark) ---------------------------------------------------------

def fake_key_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "hepix-keys.json").write_text("{}")
    (path / "secret.key").write_bytes(b"the secret")
    return path


def sheet(path: Path) -> Path:
    """A contact sheet drawn by tasks/contactsheet.py at ``path``."""
    p = cs.panels(*(np.full((3, 3), v, dtype=np.uint8) for v in (1, 2, 3)))
    cs.draw([cs.SheetRow("one", "caption", cs.read_panels(p))], str(path), ["header"])
    return path


def test_an_output_directory_is_new_or_empty(tmp_path):
    places.check_new_out(str(tmp_path / "new"))
    (tmp_path / "empty").mkdir()
    places.check_new_out(str(tmp_path / "empty"))
    (tmp_path / "full" / "images").mkdir(parents=True)
    (tmp_path / "full" / "images" / "mine.png").write_bytes(b"x")
    with pytest.raises(places.OutputRefused, match="not empty.*pick a new directory or remove"):
        places.check_new_out(str(tmp_path / "full"))
    (tmp_path / "a-file").write_bytes(b"x")
    with pytest.raises(places.OutputRefused, match="is a file"):
        places.check_new_out(str(tmp_path / "a-file"))


def test_an_encrypt_output_holding_a_run_is_resumed_and_any_other_refused(tmp_path):
    run = tmp_path / "dst"
    (run / "ciphertexts").mkdir(parents=True)
    (run / "_manifest.json").write_text("{}")
    places.check_new_out(str(run), resume_job="encrypt")
    with pytest.raises(places.OutputRefused):
        places.check_new_out(str(run))
    (tmp_path / "other" / "ciphertexts").mkdir(parents=True)
    with pytest.raises(places.OutputRefused):
        places.check_new_out(str(tmp_path / "other"), resume_job="encrypt")


def test_what_a_killed_job_left_is_no_reason_to_refuse(tmp_path):
    (tmp_path / "out" / "_staging" / "x").mkdir(parents=True)
    places.check_new_out(str(tmp_path / "out"))


def test_encrypt_resumes_its_run_and_owner_map_but_writes_neither_into_the_keys(tmp_path):
    keys = fake_key_dir(tmp_path / "keys")
    (tmp_path / "images").mkdir()
    (tmp_path / "dst" / "ciphertexts").mkdir(parents=True)
    (tmp_path / "dst" / "_manifest.json").write_text("{}")
    (tmp_path / "dst.owner").mkdir()
    (tmp_path / "dst.owner" / "owner.json").write_text("{}")
    ok = dict(keys=str(keys), images=str(tmp_path / "images"))
    places.check_encrypt_outputs(str(tmp_path / "dst"), str(tmp_path / "dst.owner"), **ok)
    places.check_encrypt_outputs(str(tmp_path / "new"), str(tmp_path / "new.owner"), **ok)
    for out, owner in ((keys / "dst", None), (tmp_path / "images" / "dst", None),
                       (tmp_path / "new", tmp_path / "new" / "owner"), (tmp_path / "new", keys / "owner"),
                       (tmp_path / "dst.owner" / "dst", None)):
        with pytest.raises(places.OutputRefused):
            places.check_encrypt_outputs(str(out), str(owner) if owner else None, **ok)


def test_a_side_output_never_lands_in_a_key_directory_an_owner_map_or_a_run(tmp_path):
    keys = fake_key_dir(tmp_path / "keys")
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "owner.json").write_text("{}")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "_manifest.json").write_text("{}")
    for target in (keys / "secret.key", keys / "sub" / "sheet.png", tmp_path / "owner" / "sheet.png",
                   tmp_path / "run" / "ciphertexts" / "sheet.png"):
        with pytest.raises(places.OutputRefused, match="lies inside"):
            places.check_side_file(str(target), "--contact-sheet", [], replaceable=cs.is_contact_sheet)
    assert (keys / "secret.key").read_bytes() == b"the secret"
    places.check_side_file(str(tmp_path / "sheet.png"), "--contact-sheet", [], replaceable=cs.is_contact_sheet)


def test_links_and_dot_dots_are_resolved_before_comparing(tmp_path):
    keys = fake_key_dir(tmp_path / "keys")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(keys, tmp_path / "elsewhere" / "link")
    inp = tmp_path / "input"
    inp.mkdir()
    guard = places.guarded(input=str(inp))
    for target in (tmp_path / "elsewhere" / "link" / "s.png", tmp_path / "elsewhere" / ".." / "keys" / "s.png"):
        with pytest.raises(places.OutputRefused):
            places.check_side_file(str(target), "--contact-sheet", guard)
    cwd = os.getcwd()
    os.chdir(tmp_path / "elsewhere")
    try:
        with pytest.raises(places.OutputRefused, match="--input"):
            places.check_location("../input/x", "--out", guard)
        with pytest.raises(places.OutputRefused):
            places.check_side_file("file://" + str(inp / "s.png"), "--contact-sheet", guard)
    finally:
        os.chdir(cwd)


def test_hdfs_paths_are_compared_as_text():
    guard = places.guarded(input="hdfs://nn:8020/runs/proc", keys="hdfs://nn:8020/keys")
    for inside in ("hdfs://nn:8020/runs/proc/out", "HDFS://NN:8020/runs/x/../proc/out", "hdfs://nn:8020/keys"):
        with pytest.raises(places.OutputRefused):
            places.check_location(inside, "--out", guard)
    places.check_location("hdfs://nn:8020/runs/proc-decrypted", "--out", guard)
    places.check_location("hdfs://other:8020/runs/proc/out", "--out", guard)


def test_a_contact_sheet_replaces_only_an_earlier_contact_sheet(tmp_path):
    earlier = sheet(tmp_path / "earlier.png")
    assert cs.is_contact_sheet(str(earlier))
    places.check_side_file(str(earlier), "--contact-sheet", [], replaceable=cs.is_contact_sheet)
    Image.fromarray(np.zeros((4, 4), dtype=np.uint8)).save(tmp_path / "photo.png")
    (tmp_path / "notes.txt").write_text("mine")
    os.symlink(earlier, tmp_path / "link.png")
    for other in ("photo.png", "notes.txt", "link.png"):
        assert not cs.is_contact_sheet(str(tmp_path / other)) or other == "link.png"
        with pytest.raises(places.OutputRefused):
            places.check_side_file(str(tmp_path / other), "--contact-sheet", [], replaceable=cs.is_contact_sheet)
    with pytest.raises(places.OutputRefused, match="directory"):
        places.check_side_file(str(tmp_path), "--contact-sheet", [], replaceable=cs.is_contact_sheet)


_PART = st.sampled_from(["a", "b", "..", ".", "keys", "link"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_PART, min_size=1, max_size=6))
def test_a_path_is_refused_exactly_when_it_resolves_inside_a_guarded_directory(tmp_path, parts):
    """Whatever ``..``, ``.`` and links a path holds, it is refused exactly when its resolved form lies in
    the key directory (or in the guarded input)."""
    root = tmp_path / "h"
    if not root.exists():
        fake_key_dir(root / "keys")
        (root / "a" / "b").mkdir(parents=True)
        (root / "input").mkdir()
        os.symlink(root / "keys", root / "a" / "link")
        os.symlink(root / "input", root / "link")
    path = os.path.join(str(root), *parts, "out.png")
    real = os.path.realpath(path)
    inside = any(real == d or real.startswith(d + os.sep)
                 for d in (str(root / "keys"), str(root / "input")))
    guard = places.guarded(input=str(root / "input"))
    try:
        places.check_location(path, "--contact-sheet", guard)
        refused = False
    except places.OutputRefused:
        refused = True
    assert refused == inside, (path, real)


def test_decrypt_refuses_a_contact_sheet_over_the_secret_key_before_reading_it(tmp_path, capsys):
    keys = fake_key_dir(tmp_path / "keys")
    rc = main(["decrypt", "--keys", str(keys), "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out"),
               "--images", str(tmp_path), "--contact-sheet", str(keys / "secret.key")])
    assert rc == 2
    one_line_error(capsys, "--contact-sheet", "key directory")
    assert (keys / "secret.key").read_bytes() == b"the secret" and not (tmp_path / "out").exists()


# --- 2. work bounded by rows, not metadata (no Spark) ----------------------------------------------------

LIMITS = FooterLimits(rows=10**6, row_bytes=70_000)


def padded_file(path: Path, rows: int, empty_groups: int, row_group_rows: int | None = None) -> Path:
    """A ciphertext-like file of ``rows`` rows (in row groups of ``row_group_rows``), then ``empty_groups``
    row groups of no rows, written as pyarrow writes them by default (an empty dictionary page each)."""
    t = pa.table({"image_id": [f"{i:032x}" for i in range(rows)], "ct": [bytes([i % 256]) * 900
                                                                          for i in range(rows)]})
    with pq.ParquetWriter(path, t.schema, compression="none") as w:
        if rows:
            w.write_table(t, row_group_size=row_group_rows or rows)
        for _ in range(empty_groups):
            w.write_table(t.slice(0, 0))
    return path


def footer_refusal(path: Path, limits: FooterLimits = LIMITS):
    with FooterChecker() as checker:
        return checker.problem(os.path.getsize(path), local_reader(str(path)), limits)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(0, 40), empty=st.integers(0, 300))
def test_row_groups_of_no_rows_are_refused_but_the_one_of_an_empty_file(tmp_path, rows, empty):
    path = padded_file(tmp_path / f"f-{rows}-{empty}.parquet", rows, empty)
    found = footer_refusal(path)
    if empty == 0 or (rows == 0 and empty == 1):
        assert found is None
    else:
        assert found is not None and found[0] == "unreadable-file" and "\n" not in found[1]
        assert "row group" in found[1]


def test_more_row_groups_than_the_rows_listed_are_refused(tmp_path):
    path = padded_file(tmp_path / "f.parquet", 30, 0, row_group_rows=1)
    assert footer_refusal(path, FooterLimits(rows=30, row_bytes=70_000)) is None
    found = footer_refusal(path, FooterLimits(rows=20, row_bytes=70_000))
    assert found is not None and "30 row groups for at most 20 rows" in found[1]


def test_a_row_group_of_no_rows_is_no_split(tmp_path):
    path = padded_file(tmp_path / "empty.parquet", 0, 1)
    size = os.path.getsize(path)
    from schemas.footers import footer_bytes

    assert splits_of(str(path), size, footer_bytes(size, local_reader(str(path)))) == []
    path = padded_file(tmp_path / "rows.parquet", 5, 0, row_group_rows=2)
    size = os.path.getsize(path)
    got = splits_of(str(path), size, footer_bytes(size, local_reader(str(path))))
    assert [(s.row_group, s.rows) for s in got] == [(0, 2), (1, 2), (2, 1)]


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 3 * TASK_BYTES)), min_size=0, max_size=400),
       parallelism=st.integers(1, 64))
def test_tasks_are_bounded_by_rows_and_bytes_not_by_row_groups(sizes, parallelism):
    splits = [Split("f", 1, "x", i, rows, nbytes) for i, (rows, nbytes) in enumerate(sizes)]
    tasks = plan_tasks(splits, parallelism)
    assert [i for t in tasks for i in t] == list(range(len(splits)))      # every split once, in order
    rows = sum(r for r, _ in sizes)
    big = sum(1 for _, b in sizes if b >= TASK_BYTES)
    target = max(1, min(TASK_ROWS, -(-rows // parallelism))) if sizes else 1
    assert len(tasks) <= rows // target + big + 1
    for t in tasks[:-1]:                   # each task but the last has its rows or its bytes
        assert sum(splits[i].rows for i in t) >= target or sum(splits[i].nbytes for i in t) >= TASK_BYTES


def test_three_thousand_one_row_groups_are_a_few_dozen_tasks():
    splits = [Split("f", 1, "x", i, 1, 70_000) for i in range(3000)]
    assert len(plan_tasks(splits, 2)) == -(-3000 // TASK_ROWS)


# --- 3. manifest values checked for fit (no Spark) -------------------------------------------------------

_NON_ASCII_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


@settings(max_examples=60, deadline=None)
@given(digit=_NON_ASCII_DIGITS, template=st.sampled_from(
    ["brightness:{}0", "contrast:1.{}", "watermark:1,{},5", "meanfilter:{}", "dftfilter:lowpass=0.{}"]))
def test_image_op_specs_with_non_ascii_digits_are_refused(digit, template):
    spec = template.format(digit)
    with pytest.raises(ValueError, match="ASCII digits"):
        parse_chain([spec])
    with pytest.raises(ManifestInvalid, match="ASCII digits"):
        op_list([spec], "ops")
    parse_chain([template.format("3")])                 # the ASCII spelling parses


@pytest.mark.parametrize("spec", ["threshold:١٢٨", "brightness:５０", "min:٣", "lut:gamma-٠.٥", "max:²"])
def test_table_op_specs_with_non_ascii_digits_are_refused_in_one_line(spec):
    with pytest.raises(ValueError, match="ASCII digits") as e:
        parse_chain([spec], scheme="tfhe")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="ASCII digits"):
        check_ascii_digits(spec)


def test_the_threshold_refusal_gives_the_ascii_spelling():
    with pytest.raises(ValueError, match=r"\(threshold:128\)"):
        parse_chain(["threshold:١٢٨"], scheme="tfhe")


def test_a_match_query_is_a_name_and_not_checked_for_digits():
    check_ascii_digits("match:٣-cat.png")


class _Parent:
    def __init__(self, ops, preset="addonly-2048"):
        self.ops, self.preset = ops, preset


def test_a_chain_longer_than_readers_accept_is_refused_before_any_work():
    from hecore.errors import HepixError
    from jobs.runtime.runs import check_recordable_ops

    check_recordable_ops(_Parent(["brightness:1"] * 60), ["brightness:2"] * 4)
    with pytest.raises(HepixError, match=f"more than the {MAX_OPS}"):
        check_recordable_ops(_Parent(["brightness:1"] * 60), ["brightness:2"] * 5)
    with pytest.raises(ManifestInvalid):
        check_recorded_ops(["brightness:1"] * (MAX_OPS + 1), "addonly-2048")
    with pytest.raises(HepixError, match="could not record"):
        check_recordable_ops(_Parent([], "lut-16384"), ["lut:hex-" + "00" * 256])


def test_decrypt_shapes_must_fit_the_manifest_layout():
    from hecore.infer.layouts import parse_layout
    from jobs.infer import shape_problem

    coefficients, pixel = parse_layout("coefficients"), parse_layout("pixel-per-ciphertext")
    assert shape_problem(coefficients, False, 2048, 3, 1, 3, 0, 1) is None
    assert "one sample per batch" in shape_problem(coefficients, False, 2048, 0, 108, 0, 2048, 64)
    assert shape_problem(pixel, False, 2048, 0, 108, 0, 2048, 64) is None
    assert shape_problem(None, False, 2048, 0, 108, 0, 2048, 64) is None
    assert "block 2048" in shape_problem(pixel, False, 2048, 0, 1, 0, 0, 1)
    assert "starts at sample 6144" in shape_problem(pixel, False, 2048, 3, 1, 3, 0, 1)
    assert shape_problem(None, True, 2048, 0, 108, 0, 128, 4) is None
    assert "starts at sample 2048" in shape_problem(None, False, 2048, 1, 5, 0, 2048, 64)


# --- Spark: one small run ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """Three 16x16 grey images encrypted (packed, addonly-2048) and brightened, with their owner map."""
    root = tmp_path_factory.mktemp("owner-side")
    src = root / "images"
    src.mkdir()
    rng = np.random.default_rng(3)
    for i in range(3):
        Image.fromarray(rng.integers(0, 200, (16, 16), dtype=np.uint8)).save(src / f"i{i}.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(src), "--out", str(root / "enc"),
                 "--tile", "8x8", "--halo", "0"] + SPARK) == 0
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc"),
                 "--op", "brightness:5"] + SPARK) == 0
    return root


def decrypt_argv(root: Path, run: str, out: Path, *extra) -> list[str]:
    return ["decrypt", "--keys", str(root / "keys"), "--input", str(root / run), "--out", str(out),
            "--owner", str(root / "enc.owner"), *extra] + SPARK


@pytest.mark.spark
def test_decrypt_never_writes_a_contact_sheet_over_the_secret_key_or_into_the_input(small_run, tmp_path, capsys):
    root = small_run
    secret = (root / "keys" / "secret.key").read_bytes()
    assert main(decrypt_argv(root, "proc", tmp_path / "a", "--images", str(root / "images"), "--contact-sheet",
                             str(root / "keys" / "secret.key"))) == 2
    one_line_error(capsys, "--contact-sheet", "key directory")
    assert (root / "keys" / "secret.key").read_bytes() == secret
    assert main(decrypt_argv(root, "proc", tmp_path / "b", "--images", str(root / "images"), "--contact-sheet",
                             str(root / "proc" / "ciphertexts" / "sheet.png"))) == 2
    one_line_error(capsys, "--contact-sheet", "--input")
    assert not (root / "proc" / "ciphertexts" / "sheet.png").exists()
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.spark
def test_decrypt_into_a_directory_of_the_users_files_is_refused_and_they_are_kept(small_run, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (out / "metrics").mkdir()
    (out / "images" / "holiday.png").write_bytes(b"mine")
    (out / "metrics" / "notes.txt").write_text("mine too")
    assert main(decrypt_argv(small_run, "proc", out, "--png")) == 2
    one_line_error(capsys, "--out", "not empty", "pick a new directory or remove")
    assert (out / "images" / "holiday.png").read_bytes() == b"mine"
    assert (out / "metrics" / "notes.txt").read_text() == "mine too"


@pytest.mark.spark
def test_verify_never_deletes_a_rejects_directory_of_the_users(small_run, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    assert main(["verify", str(small_run / "enc"), "--rejects", str(mine)] + SPARK) == 2
    one_line_error(capsys, "--rejects", "not empty")
    assert (mine / "keep.txt").read_text() == "mine"


@pytest.mark.spark
def test_decrypt_writes_a_contact_sheet_beside_its_tables_never_into_one(small_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(decrypt_argv(small_run, "proc", out, "--images", str(small_run / "images"), "--contact-sheet",
                             str(out / "metrics" / "sheet.png"))) == 2
    one_line_error(capsys, "--contact-sheet", "a table of --out")
    assert main(decrypt_argv(small_run, "proc", out, "--images", str(small_run / "images"), "--contact-sheet",
                             str(out / "sheet.png"))) == 0
    assert cs.is_contact_sheet(str(out / "sheet.png")) and (out / "metrics").is_dir()
    shutil.copy(out / "sheet.png", tmp_path / "earlier.png")
    (out / "sheet.png").unlink()
    os.utime(tmp_path / "earlier.png", (0, 0))
    assert main(decrypt_argv(small_run, "proc", tmp_path / "again", "--images", str(small_run / "images"),
                             "--contact-sheet", str(tmp_path / "earlier.png"))) == 0    # an earlier sheet: replaced
    assert cs.is_contact_sheet(str(tmp_path / "earlier.png")) and (tmp_path / "earlier.png").stat().st_mtime > 0
    capsys.readouterr()


@pytest.mark.spark
def test_audit_refuses_an_output_inside_its_input_or_the_owner_map(small_run, tmp_path, capsys):
    for out in (small_run / "proc" / "audit", small_run / "enc.owner" / "audit"):
        assert main(["audit", "--input", str(small_run / "proc"), "--owner", str(small_run / "enc.owner"),
                     "--out", str(out)]) == 2
        one_line_error(capsys, "--out", "lies inside")
        assert not out.exists()


def _pad(run: Path, empty_groups: int, empty_files: int) -> None:
    """A cluster's metadata: the run's rows rewritten as one file followed by ``empty_groups`` row groups of
    no rows, and ``empty_files`` more files of no rows listed besides it; checksums kept consistent."""
    doc = json.loads((run / "_manifest.json").read_text())
    entries = doc["files"]["ciphertexts"]
    t = pa.concat_tables([pq.read_table(run / "ciphertexts" / e["name"]) for e in entries])
    for e in entries:
        (run / "ciphertexts" / e["name"]).unlink()
    path = run / "ciphertexts" / "part-00000-padded.parquet"
    with pq.ParquetWriter(path, t.schema, compression="none") as w:
        w.write_table(t, row_group_size=t.num_rows)
        for _ in range(empty_groups):
            w.write_table(t.slice(0, 0))
    xor = 0
    for e in entries:
        xor ^= e.get("xxh3_xor", 0)
    listed = [{"name": path.name, "rows": t.num_rows, "bytes": path.stat().st_size, "xxh3_xor": xor}]
    for i in range(empty_files):
        name = f"part-{i + 1:05d}-empty.parquet"
        pq.write_table(t.slice(0, 0), run / "ciphertexts" / name)
        listed.append({"name": name, "rows": 0, "bytes": (run / "ciphertexts" / name).stat().st_size,
                       "xxh3_xor": 0})
    doc["files"]["ciphertexts"] = listed
    (run / "_manifest.json").write_text(json.dumps(doc, indent=2))


@pytest.fixture
def planned(monkeypatch):
    """The Spark tasks the driver plans for the input, as a list that grows with each plan (both planners:
    by image for decrypt, by rows for the rest)."""
    import tasks.imagesplits as imagesplits
    import tasks.splits as splits

    counts: list[int] = []
    by_rows, by_image = splits.plan_tasks, imagesplits.plan_by_image

    def count_rows(*a, **k):
        out = by_rows(*a, **k)
        counts.append(len(out))
        return out

    def count_images(*a, **k):
        out = by_image(*a, **k)
        counts.append(len(out.tasks))
        return out

    monkeypatch.setattr(splits, "plan_tasks", count_rows)
    monkeypatch.setattr(imagesplits, "plan_by_image", count_images)
    return counts


def _tasks(planned: list[int], argv) -> tuple[int, int]:
    """The exit status of ``argv`` and how many tasks its driver planned."""
    before = len(planned)
    rc = main(argv)
    return rc, sum(planned[before:])


def _rejects(out: Path) -> list[dict]:
    return pq.read_table(out / "rejects").to_pylist()


@pytest.mark.spark
@pytest.mark.slow
def test_empty_row_groups_and_empty_files_cost_no_more_than_the_clean_run(small_run, tmp_path, capsys, planned):
    """3,000 row groups of no rows in the file that holds the rows, and 1,000 more files of no rows listed:
    decrypt and process plan no more Spark tasks than for the clean run (the work is bounded by rows, not
    by row groups or files), each case refused in one rejects row (the file's images are then
    missing-image rejects)."""
    root = small_run
    for run in ("enc", "proc"):
        shutil.copytree(root / run, tmp_path / run)
        _pad(tmp_path / run, 3000, 1000)
    shutil.copytree(root / "keys", tmp_path / "keys")
    shutil.copytree(root / "enc.owner", tmp_path / "enc.owner")
    rc, clean = _tasks(planned, decrypt_argv(root, "proc", tmp_path / "dec-clean"))
    assert rc == 0 and clean > 0
    rc, padded = _tasks(planned, decrypt_argv(tmp_path, "proc", tmp_path / "dec-padded"))
    assert rc == 0
    reasons = [(r["reason"], r["detail"]) for r in _rejects(tmp_path / "dec-padded")]
    assert sum("row groups" in d for _, d in reasons) == 1
    assert sum("more files are listed with no rows" in d for _, d in reasons) == 1
    assert {r for r, _ in reasons} == {"unreadable-file", "missing-image"}
    assert padded <= clean, (clean, padded)
    pub = ["--keys", str(root / "pub"), "--op", "brightness:1"] + SPARK
    rc, clean = _tasks(planned, ["process", "--input", str(root / "enc"), "--out", str(tmp_path / "p-clean"), *pub])
    assert rc == 0 and clean > 0
    rc, padded = _tasks(planned, ["process", "--input", str(tmp_path / "enc"), "--out", str(tmp_path / "p-padded"),
                                  *pub])
    assert rc == 0
    assert len(_rejects(tmp_path / "p-padded")) == 2
    assert padded <= clean, (clean, padded)
    capsys.readouterr()


@pytest.mark.spark
def test_process_refuses_a_chain_its_readers_would_refuse_before_any_work(small_run, tmp_path, capsys):
    ops = [a for _ in range(MAX_OPS + 6) for a in ("--op", "brightness:1")]
    assert main(["process", "--keys", str(small_run / "pub"), "--input", str(small_run / "proc"),
                 "--out", str(tmp_path / "long"), *ops] + SPARK) == 2
    one_line_error(capsys, f"more than the {MAX_OPS}")
    ops = [a for _ in range(MAX_OPS) for a in ("--op", "brightness:1")]       # 1 applied + 64 > 64
    assert main(["process", "--keys", str(small_run / "pub"), "--input", str(small_run / "proc"),
                 "--out", str(tmp_path / "long2"), *ops] + SPARK) == 2
    one_line_error(capsys, f"more than the {MAX_OPS}", "input's 1 ops")
    assert not (tmp_path / "long").exists() and not any((tmp_path / "long2").glob("*/**/*.parquet"))
    assert main(["process", "--keys", str(small_run / "pub"), "--input", str(small_run / "proc"),
                 "--out", str(tmp_path / "digits"), "--op", "brightness:٥"] + SPARK) == 2
    one_line_error(capsys, "ASCII digits", "brightness:5")


@pytest.mark.spark
@pytest.mark.slow
def test_an_infer_layout_that_does_not_fit_the_ciphertexts_is_a_rejects_row_not_a_traceback(tmp_path, capsys):
    """A processed logistic regression of SIMD batches whose manifest says ``coefficients`` (one sample per
    ciphertext), or an input whose manifest says so: every batch is a ``bad-batch`` reject, no IndexError."""
    pytest.importorskip("sklearn")
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(tmp_path / "keys"), "--out", str(tmp_path / "pub")]) == 0
    assert main(["encrypt-digits", "--keys", str(tmp_path / "pub"), "--out", str(tmp_path / "enc"),
                 "--samples", "20"] + SPARK) == 0
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"),
                 "--out", str(tmp_path / "proc"), "--op", "infer:logreg"] + SPARK) == 0
    for run in ("enc", "proc"):
        shutil.copytree(tmp_path / run, tmp_path / f"{run}-forged")
        doc = json.loads((tmp_path / f"{run}-forged" / "_manifest.json").read_text())
        doc["options"]["infer_layout"] = "coefficients"
        (tmp_path / f"{run}-forged" / "_manifest.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["decrypt", "--keys", str(tmp_path / "keys"), "--input", str(tmp_path / "proc-forged"),
                 "--out", str(tmp_path / "dec")] + SPARK) == 0
    assert "Traceback" not in capsys.readouterr().err
    rejects = _rejects(tmp_path / "dec")
    assert rejects and {r["reason"] for r in rejects} == {"bad-batch"}
    assert all("one sample per batch" in r["detail"] for r in rejects)
    assert pq.read_table(tmp_path / "dec" / "predictions").num_rows == 0
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc-forged"),
                 "--out", str(tmp_path / "proc2"), "--op", "infer:logreg"] + SPARK) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert {r["reason"] for r in _rejects(tmp_path / "proc2")} == {"bad-batch"}
