"""``match:QUERY`` and ``infer:MODEL`` read and write their ciphertexts in the Python workers, as every job
does: Spark's own task metrics of each job (its event log) show no byte read or written by the JVM's Parquet
reader and writer, and next to nothing shuffled or handed back to the driver, while the results stay those
of the plaintext (exact squared L2 distances; the plaintext model's predictions).  Their decryption reads
an input of one task's worth on the driver, with pyarrow, and a larger one in the workers: both give the
same tables."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from PIL import Image

from bench.suites.corpuscluster import task_metrics
from jobs.cli import main

pytestmark = [pytest.mark.seconds(60), pytest.mark.spark, pytest.mark.slow]

SPARK = ["--master", "local[2]", "--quiet"]


def hepix(*argv) -> int:
    return main([str(a) for a in argv])


def logged(root: Path, name: str) -> tuple[list[str], Path]:
    """``--conf`` options that make a job's Spark session write its event log into a folder of its own."""
    events = root / f"events-{name}"
    events.mkdir()
    conf = root / f"{name}.conf"
    conf.write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir {events.as_uri()}\n"
                    "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n")
    return ["--conf", str(conf)], events


def ciphertext_bytes(table: Path) -> int:
    return sum(f.stat().st_size for f in table.glob("*.parquet"))


def assert_no_ciphertext_through_the_jvm(events: Path, moved: int) -> None:
    """What the job's tasks made the JVM move, from its event log: nothing read or written as Parquet, and what
    it shuffled and handed back to the driver a small fraction of the ``moved`` ciphertext bytes."""
    m = task_metrics(events)
    assert m is not None and m["tasks"] > 0, m
    assert m["input_bytes"] == 0 and m["output_bytes"] == 0, m
    assert m["shuffle_read_bytes"] + m["shuffle_write_bytes"] < moved / 100, (m, moved)
    assert m["result_bytes"] < moved / 10, (m, moved)


def in_the_workers(monkeypatch) -> None:
    """Make decrypt read its input in the workers however small it is (as it does past one task's worth)."""
    import jobs.infer
    import jobs.match

    for module in (jobs.infer, jobs.match):
        monkeypatch.setattr(module, "one_task", lambda splits: False)


def rows(path: Path) -> list[dict]:
    """A table's rows, in a fixed order, without what differs from run to run (ids, times)."""
    got = ds.dataset(path).to_table().to_pylist()
    return sorted(({k: v for k, v in r.items() if k not in ("run_id", "decrypt_seconds")} for r in got), key=repr)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Five 10x12 grey images in 8x8 tiles at tenseal-8192 (the smallest preset that squares), encrypted once."""
    root = tmp_path_factory.mktemp("match-workers")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(11)
    pixels = {f"{n}.png": rng.integers(0, 256, (10, 12), dtype=np.uint8) for n in "qabcd"}
    for name, a in pixels.items():
        Image.fromarray(a).save(images / name)
    assert hepix("keygen", "--out", root / "keys", "--preset", "tenseal-8192") == 0
    assert hepix("export-public", "--keys", root / "keys", "--out", root / "pub") == 0
    assert hepix("encrypt", "--keys", root / "pub", "--input", images, "--out", root / "enc", "--tile", "8x8",
                 *SPARK) == 0
    owner = ds.dataset(root / "enc.owner" / "images").to_table().to_pylist()
    return root, pixels, {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in owner}


def test_match_reads_checks_and_writes_in_the_workers(corpus, tmp_path, monkeypatch):
    root, pixels, ids = corpus
    conf, events = logged(tmp_path, "match")
    assert hepix("process", "--keys", root / "pub", "--input", root / "enc", "--out", tmp_path / "m",
                 "--op", f"match:{ids['q.png']},l2", *SPARK, *conf) == 0
    assert_no_ciphertext_through_the_jvm(events, ciphertext_bytes(root / "enc" / "ciphertexts"))

    decrypt = ["decrypt", "--keys", root / "keys", "--input", tmp_path / "m", "--owner", root / "enc.owner", *SPARK]
    assert hepix(*decrypt, "--out", tmp_path / "d0") == 0                 # a few distances: read by the driver
    in_the_workers(monkeypatch)
    conf, events = logged(tmp_path, "decrypt")
    assert hepix(*decrypt, "--out", tmp_path / "d", *conf) == 0
    assert_no_ciphertext_through_the_jvm(events, ciphertext_bytes(tmp_path / "m" / "distances"))
    assert rows(tmp_path / "d" / "distances") == rows(tmp_path / "d0" / "distances")
    got = {r["source"].rsplit("/", 1)[-1]: r["distance"]
           for r in ds.dataset(tmp_path / "d" / "distances").to_table().to_pylist()}
    q = pixels["q.png"].astype(np.float64)
    assert got.keys() == {"a.png", "b.png", "c.png", "d.png"}
    assert all(round(d) == ((pixels[n] - q) ** 2).sum() for n, d in got.items()), got


def test_inference_reads_checks_and_writes_in_the_workers(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    from hecore.infer import layouts
    from hecore.infer import models as infer

    assert hepix("keygen", "--out", tmp_path / "keys", "--preset", "bfv-4096") == 0
    assert hepix("export-public", "--keys", tmp_path / "keys", "--out", tmp_path / "pub") == 0
    conf, events = logged(tmp_path, "encrypt")
    assert hepix("encrypt-digits", "--keys", tmp_path / "pub", "--out", tmp_path / "enc", "--model", "logreg",
                 "--samples", "24", "--layout", "coefficients", *SPARK, *conf) == 0
    m = task_metrics(events)
    assert m is None or (m["input_bytes"] == 0 and m["output_bytes"] == 0), m

    conf, events = logged(tmp_path, "process")
    assert hepix("process", "--keys", tmp_path / "pub", "--input", tmp_path / "enc", "--out", tmp_path / "p",
                 "--op", "infer:logreg", *SPARK, *conf) == 0
    assert_no_ciphertext_through_the_jvm(events, ciphertext_bytes(tmp_path / "enc" / "ciphertexts"))

    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "p", "--out", tmp_path / "d0",
                 *SPARK) == 0                                               # 24 head outputs: read by the driver
    in_the_workers(monkeypatch)
    conf, events = logged(tmp_path, "decrypt")
    assert hepix("decrypt", "--keys", tmp_path / "keys", "--input", tmp_path / "p", "--out", tmp_path / "d",
                 *SPARK, *conf) == 0
    assert_no_ciphertext_through_the_jvm(events, ciphertext_bytes(tmp_path / "p" / "ciphertexts"))
    for name in ("predictions", "inference_metrics"):
        assert rows(tmp_path / "d" / name) == rows(tmp_path / "d0" / name)
    preds = ds.dataset(tmp_path / "d" / "predictions").to_table().to_pylist()
    task = infer.digits_task("01")
    plain = infer.predictions(layouts.plain_outputs(infer.train("logreg", task), task.x_test[:24]), True)
    assert sorted((p["sample"], p["prediction"]) for p in preds) == list(enumerate(plain.tolist()))


def test_a_bad_image_is_left_out_of_the_distances_and_a_bad_query_stops_the_job(corpus, tmp_path, capsys):
    """Rows the checking pass refuses leave their image out of the reading tasks' partial sums: a truncated
    ciphertext of image a makes it a rejects row, the others get their distances.  A query whose rows fail
    their checks stops the job before anything is matched, in one line."""
    from hostile import image_mask, read_rows, set_where, truncated, write_rows

    root, pixels, ids = corpus
    forged = tmp_path / "enc"
    shutil.copytree(root / "enc", forged)
    t = read_rows(forged)
    write_rows(forged, set_where(t, image_mask(t, ids["a.png"]), "ct", truncated))
    assert hepix("process", "--keys", root / "pub", "--input", forged, "--out", tmp_path / "m",
                 "--op", f"match:{ids['q.png']},l2", *SPARK) == 0
    rejects = ds.dataset(tmp_path / "m" / "rejects").to_table().to_pylist()
    assert {r["image_id"] for r in rejects} == {ids["a.png"]}
    distances = ds.dataset(tmp_path / "m" / "distances").to_table().to_pylist()
    assert sorted(r["image_id"] for r in distances) == sorted(ids[n] for n in ("b.png", "c.png", "d.png"))

    capsys.readouterr()
    assert hepix("process", "--keys", root / "pub", "--input", forged, "--out", tmp_path / "m2",
                 "--op", f"match:{ids['a.png']},l2", *SPARK) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the query image fails its checks" in err, err
    assert not (tmp_path / "m2" / "_manifest.json").exists()


@pytest.fixture(scope="module")
def ringer_match(corpus, tmp_path_factory):
    """``(root, owner map, image ids by name, run)``: the corpus encrypted with every image a ringer
    (``encrypt --ringers 1``), then matched against q.png (l2)."""
    base = tmp_path_factory.mktemp("ringer-match")
    owner, ids = ringer_match_run(corpus, base)
    return corpus[0], owner, ids, base / "m"


def ringer_match_run(corpus, base):
    """``(owner map, image ids by name)`` of the corpus encrypted into ``base / "enc"`` with every image a ringer
    (``encrypt --ringers 1``), then matched against q.png (l2) into ``base / "m"``."""
    root, _, _ = corpus
    enc, owner = base / "enc", base / "enc.owner"
    assert hepix("encrypt", "--keys", root / "pub", "--input", root / "images", "--out", enc, "--tile", "8x8",
                 "--ringers", "1", *SPARK) == 0
    ids = {r["source"].rsplit("/", 1)[-1]: r["image_id"] for r in ds.dataset(owner / "images").to_table().to_pylist()}
    assert hepix("process", "--keys", root / "pub", "--input", enc, "--out", base / "m",
                 "--op", f"match:{ids['q.png']},l2", *SPARK) == 0
    return owner, ids


def swapped_distances(run, forged, a_id: str, b_id: str):
    """A copy at ``forged`` of the match run ``run`` with images ``a_id``'s and ``b_id``'s encrypted distances
    swapped, checksums recomputed."""
    import pyarrow as pa
    from hostile import read_rows, write_rows

    shutil.copytree(run, forged)
    t = read_rows(forged, "distances")
    cts, who = t.column("ct").to_pylist(), t.column("image_id").to_pylist()
    a, b = who.index(a_id), who.index(b_id)
    cts[a], cts[b] = cts[b], cts[a]
    i = t.schema.get_field_index("ct")
    write_rows(forged, t.set_column(i, t.schema.field(i), pa.array(cts, t.schema.field(i).type)), "distances")
    return forged


def test_ringers_distances_are_compared_and_a_swapped_distance_is_an_integrity_reject(corpus, tmp_path, capsys):
    """Every image a ringer (``encrypt --ringers 1``): decrypt compares each image's distance to the query with
    the one the owner's copies of both give; a cluster that swaps two images' encrypted distances (checksums
    recomputed) has both rejected as ``integrity``, the others kept."""
    root, pixels, _ = corpus
    owner, ids = ringer_match_run(corpus, tmp_path)
    decrypt = ["decrypt", "--keys", root / "keys", "--owner", owner, *SPARK]
    capsys.readouterr()
    assert hepix(*decrypt, "--input", tmp_path / "m", "--out", tmp_path / "d", "--images", root / "images") == 0
    assert "ringers: 4 images' distances compared with the owner's copies, 0 wrong" in capsys.readouterr().out
    assert len(ds.dataset(tmp_path / "d" / "distances").to_table()) == 4

    forged = swapped_distances(tmp_path / "m", tmp_path / "forged", ids["a.png"], ids["b.png"])
    assert hepix(*decrypt, "--input", forged, "--out", tmp_path / "d2") == 0
    assert "2 wrong (integrity)" in capsys.readouterr().out
    rejects = ds.dataset(tmp_path / "d2" / "rejects").to_table().to_pylist()
    assert {(r["image_id"], r["reason"]) for r in rejects} == {(ids["a.png"], "integrity"), (ids["b.png"], "integrity")}
    kept = ds.dataset(tmp_path / "d2" / "distances").to_table().to_pylist()
    assert sorted(r["image_id"] for r in kept) == sorted(ids[n] for n in ("c.png", "d.png"))


def test_verify_owner_accepts_a_match_run_by_its_ringers_and_not_one_with_two_distances_swapped(ringer_match,
                                                                                              tmp_path, capsys):
    """`hepix verify --owner --keys` of a match run whose images are all ringers: its tables whole, then 0 for the
    honest run, 1 when two images' encrypted distances are swapped (checksums recomputed); nothing is left of the
    decrypted distances."""
    root, owner, ids, run = ringer_match
    capsys.readouterr()
    assert hepix("verify", run, "--owner", owner, "--keys", root / "keys", *SPARK) == 0
    out = capsys.readouterr().out
    assert ", complete: OK" in out              # the keyless checks take the encrypted distances as the job wrote them
    assert "the owner's ringers (the run's distances decrypted in a temporary directory" in out
    assert "verdict: every one of the 4 ringers agrees with the owner's copies" in out

    forged = swapped_distances(run, tmp_path / "forged", ids["a.png"], ids["b.png"])
    assert hepix("verify", forged, "--owner", owner, "--keys", root / "keys", *SPARK) == 1
    out = capsys.readouterr().out
    assert "2 wrong (integrity)" in out and "verdict: not accepted" in out
    assert not list(Path(tempfile.gettempdir()).glob("hepix-verify-*/ringers"))      # its working tables are gone


def test_verify_owner_lists_what_it_rejected_and_passes_images_on_for_the_query(ringer_match, tmp_path, capsys):
    """`hepix verify --owner --keys --images` of a match run with two distances swapped: the query's original read
    from ``--images`` as decrypt reads it, and the rejected images listed with their reasons in verify's own
    output, since the directory decrypt wrote them in is removed."""
    root, owner, ids, run = ringer_match
    forged = swapped_distances(run, tmp_path / "forged", ids["a.png"], ids["b.png"])
    capsys.readouterr()
    assert hepix("verify", forged, "--owner", owner, "--keys", root / "keys", "--images", root / "images",
                 *SPARK) == 1
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  rejected: ")]
    assert len(listed) == 2 and all(": integrity: " in line for line in listed), out
    assert "listed in the list below (verify's directory is temporary)" in out
    # the temporary directory is named on decrypt's first line alone (what it decrypts into), not as a place to look
    assert [line for line in out.splitlines() if "hepix-verify-" in line and not line.startswith("hepix decrypt ")] \
        == [], out


def test_a_query_that_is_no_ringer_is_read_from_images_or_the_ringers_are_not_compared(corpus):
    """The query's pixels come from its own sample when it is a ringer, else from ``--images`` (the file the
    owner map names, with the bytes encrypt read); without them no ringer is compared, and the run says why."""
    import dataclasses
    import hashlib

    from hecore import integrity
    from jobs.runtime.matchringers import RingerVerdict, check_ringers, query_original
    from jobs.runtime.owner import OwnerImage
    from tasks.decode import DecodeOptions
    from tasks.distances import DistanceExpect

    root, pixels, _ = corpus
    expect = DistanceExpect(fingerprint="", layout="packed", preset="tenseal-8192", ops=(), metrics=("l2",),
                            bound=255.0, post_scale=1.0, integer=False, slots=4096)
    q, a = pixels["q.png"], pixels["a.png"]
    samples = {"A": integrity.ringer(a).to_bytes(), "Q": integrity.draw(q, positions=5).to_bytes()}
    d = float(((a.astype(float) - q) ** 2).sum())
    found = {("A", "l2"): {"distance": d, "query_image_id": "Q"}}
    unknown = check_ringers(found, samples, expect, "Q")
    assert unknown.checked == 0 and "give its original with --images" in unknown.why_not
    record = OwnerImage("Q", "file:/elsewhere/q.png", hashlib.sha256((root / "images" / "q.png").read_bytes())
                        .hexdigest(), 10, 12, 1, 2)
    query = query_original(str(root / "images"), record, DecodeOptions(1, 1, None, (), 2**26))
    assert np.array_equal(query, q)
    other = dataclasses.replace(record, content_sha256="0" * 64)        # another file of that name
    assert query_original(str(root / "images"), other, DecodeOptions(1, 1, None, (), 2**26)) is None
    assert check_ringers(found, samples, expect, "Q", query) == RingerVerdict(1, {})
    found[("A", "l2")]["distance"] = d + 1000.0
    assert set(check_ringers(found, samples, expect, "Q", query).wrong) == {"A"}
