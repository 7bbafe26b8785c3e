"""Ringers for encrypted inference: the owner's reference is the encrypted circuit's answer (exactly under BFV,
within the slack under CKKS), the records the owner map keeps are read carefully, the rate at which ringers
catch a cluster that gets samples wrong is the formula's, and through the jobs an honest run passes while a
lying cluster's batch is rejected as integrity."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from hecore.infer import encrypted, ringers
from hecore.infer import models as infer
from hecore.infer.arithmetic import arithmetic
from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def task():
    return infer.digits_task("01")


def _decrypted(name, model, x, *, block=None):
    """The finished head outputs of the samples ``x`` run encrypted (one SIMD batch), as decrypt sees them."""
    ctx, _ = HEContext.generate(preset(name))
    ev = Evaluator(ctx)
    ar = arithmetic(ctx.params)
    q = ar.prepared(model)
    cts = [ev.load(c) for c in encrypted.encrypt_batch(ctx, x, block=block)]
    outs = encrypted.infer_encrypted(ev, model, cts, quantised=q, block=block)
    s = np.stack([ctx.decrypt_slots(ev.dump(c), len(x)) for c in outs], axis=1) / (q.divisor if q else 1.0)
    return ar.finished(s, model.binary), q


@pytest.mark.seconds(20)
@pytest.mark.parametrize("model_name,name,samples", [("logreg", "bfv-4096", 108), ("tinycnn", "bfv-8192", 6)])
def test_the_bfv_reference_is_the_encrypted_circuit_exactly(task, model_name, name, samples):
    model = infer.train(model_name, task, steps=60)
    x = task.x_test[:samples]
    got, q = _decrypted(name, model, x)
    ref = ringers.reference(model, x, q)
    assert np.array_equal(got, ref)
    assert ringers.differences(got, np.arange(samples), ref, exact=True) == []
    # one quantisation unit off at one sample is a difference
    off = got.copy()
    off[3, 0] += 1.0 / q.divisor
    assert [s for s, _ in ringers.differences(off, np.arange(samples), ref, exact=True)] == [3]


@pytest.mark.seconds(10)
def test_ckks_stays_far_within_the_slack_where_its_error_is_largest(task):
    """Block packing's rotations at paper-4096's scale give the largest error of every CKKS preset and layout
    (8e-4 seen over ten classes): an honest answer passes with room to spare, a wrong one by 0.05 does not."""
    model = infer.train("logreg", infer.digits_task("all"))
    x = infer.digits_task("all").x_test
    got, _ = _decrypted("paper-4096", model, x, block=encrypted.block_for(len(x), preset("paper-4096").slots, True))
    ref = ringers.reference(model, x, None)
    assert np.abs(got - ref).max() < ringers.CKKS_SLACK / 5
    assert ringers.differences(got, np.arange(len(x)), ref, exact=False) == []
    wrong = got.copy()
    wrong[7] += 0.05
    assert [s for s, _ in ringers.differences(wrong, np.arange(len(x)), ref, exact=False)] == [7]


def test_a_record_round_trips_and_a_changed_one_is_refused():
    px = np.arange(2 * 64).reshape(2, 64) % 17
    data = ringers.pack([5, 90], px)
    samples, back = ringers.unpack(data)
    assert samples.tolist() == [5, 90] and np.array_equal(back, px)
    assert len(data) == 8 + 2 * 68
    forged = [data[:-1], data + b"\0", b"HXR2" + data[4:], data[:4] + (3).to_bytes(4, "little") + data[8:],
              data[:-1] + bytes([17]), data[:8] + data[8:76] + data[8:76], b"", None]
    for bad in forged:
        with pytest.raises(ValueError):
            ringers.unpack(bad)
    with pytest.raises(ValueError, match="integers 0..16"):
        ringers.pack([1], np.full((1, 64), 17))


def test_draws_are_secret_sized_and_never_empty():
    sizes = [len(ringers.draw(108, 0.05)) for _ in range(400)]
    assert min(sizes) >= 1 and 4.5 < np.mean(sizes) < 6.5        # 108 x 0.05 = 5.4, plus the forced one rarely
    assert len(ringers.draw(1, 0.05)) == 1 and len(ringers.draw(10, 0.0)) == 0
    assert ringers.draw(20, 1.0).tolist() == list(range(20))
    with pytest.raises(ValueError, match="between 0 and 1"):
        ringers.draw(10, 1.5)


@pytest.mark.parametrize("wrong", [1, 10, 30])
def test_ringers_catch_wrong_samples_at_the_formula_s_rate(task, wrong):
    """A cluster that gets ``wrong`` of 108 samples wrong, chosen without knowing the ringers (no function of the
    ciphertexts knows them), over 600 runs with fresh ringers: caught at 1 - (1 - P)^wrong or better."""
    from jobs.runtime.inferringers import RingerCheck

    model = infer.train("logreg", task)
    x = task.x_test
    right = ringers.reference(model, x, None)
    p, trials, caught = 0.05, 600, 0
    rng = np.random.default_rng(4)
    for _ in range(trials):
        chosen = ringers.draw(len(x), p)
        check = RingerCheck({"b": (chosen, x[chosen])}, {"b"}, p, model, None)
        answer = right.copy()
        answer[rng.choice(len(x), wrong, replace=False)] += 0.1
        caught += check.problem("b", 0, len(x), answer) is not None
    formula = 1 - ringers.escape(p, wrong)
    # the measured rate against the formula's, within 4 standard deviations of a binomial
    assert caught / trials >= formula - 4 * np.sqrt(formula * (1 - formula) / trials)


# --- through the jobs -------------------------------------------------------------------------------------

SPARK = ["--master", "local[2]", "--quiet"]


@pytest.fixture(scope="module")
def bfv_run(tmp_path_factory):
    from jobs.cli import main

    root = tmp_path_factory.mktemp("ringers")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "bfv-4096"]) == 0
    assert main(["export-public", "--keys", str(root / "keys"), "--out", str(root / "pub")]) == 0
    assert main(["encrypt-digits", "--keys", str(root / "pub"), "--out", str(root / "enc"), "--ringers", "0.2"]
                + SPARK) == 0
    assert main(["process", "--keys", str(root / "pub"), "--input", str(root / "enc"), "--out", str(root / "proc"),
                 "--op", "infer:logreg"] + SPARK) == 0
    return root


def _decrypt(root, run, out, *extra):
    from jobs.cli import main

    return main(["decrypt", "--keys", str(root / "keys"), "--input", str(run), "--out", str(out), *extra] + SPARK)


def _rows(path):
    return ds.dataset(path).to_table().to_pylist() if path.exists() else []


def one_unit_more(root, lie):
    """A copy at ``lie`` of the run ``root / "proc"`` where a lying cluster added one quantisation unit to every
    score (another constant), checksums recomputed."""
    from hecore.seal.keys import load_public
    from tests.hostile import read_rows, write_rows

    shutil.copytree(root / "proc", lie)
    t = read_rows(lie)
    ctx = load_public(str(root / "pub"), eval_keys=False)
    ev = Evaluator(ctx)
    one = ctx.encode_vector(np.ones(ctx.params.slots))
    cts = [ev.dump(ev.add_plain(ev.load(c), one)) for c in t.column("ct").to_pylist()]
    write_rows(lie, t.set_column(t.schema.get_field_index("ct"), "ct", pa.array(cts, type=pa.binary())))
    return lie


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(40)
def test_an_honest_run_passes_its_ringers_and_a_lying_one_is_rejected(bfv_run, tmp_path, capsys):
    from jobs.runtime.owner import OwnerMap

    root = bfv_run
    owner = OwnerMap.load(str(root / "enc.owner"))
    kept = sum(len(ringers.unpack(v)[0]) for v in owner.spots().values())
    assert kept >= 1 and not [p for p in (root / "enc").rglob("*") if "spots" in p.parts]
    assert (root / "enc.owner" / "owner.json").stat().st_mode & 0o777 == 0o600

    assert _decrypt(root, root / "proc", tmp_path / "dec", "--owner", str(root / "enc.owner")) == 0
    out = capsys.readouterr().out
    assert f"ringers: {kept} compared in 1 batch, all agree with the model" in out
    metrics = {m["batch_id"]: m for m in _rows(tmp_path / "dec" / "inference_metrics")}
    assert metrics["all"]["ringers"] == kept and metrics["digits-01-0"]["ringers"] == kept
    assert not _rows(tmp_path / "dec" / "rejects")

    # without the owner map: decrypted, and the run says what went unchecked
    assert _decrypt(root, root / "proc", tmp_path / "plain") == 0
    assert "not checked: this run's digits have ringers" in capsys.readouterr().out
    assert _rows(tmp_path / "plain" / "inference_metrics")[-1]["ringers"] is None

    # a lying cluster: one quantisation unit added to every score (another constant), checksums recomputed
    lie = one_unit_more(root, tmp_path / "lie")
    assert _decrypt(root, lie, tmp_path / "caught", "--owner", str(root / "enc.owner")) == 0
    rejects = _rows(tmp_path / "caught" / "rejects")
    assert [(r["reason"], r["source"]) for r in rejects] == [("integrity", "digits-01-0")]
    assert "ringer(s) decrypt to other head outputs than the model gives" in rejects[0]["detail"]
    assert not _rows(tmp_path / "caught" / "predictions")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(40)
def test_a_dropped_or_swapped_sample_is_caught(tmp_path, capsys):
    """One sample per ciphertext, every sample a ringer: a dropped sample is missing, two swapped are wrong."""
    import pyarrow.compute as pc

    from jobs.cli import main
    from tests.hostile import read_rows, write_rows

    assert main(["keygen", "--out", str(tmp_path / "keys"), "--preset", "bfv-4096"]) == 0
    assert main(["export-public", "--keys", str(tmp_path / "keys"), "--out", str(tmp_path / "pub")]) == 0
    assert main(["encrypt-digits", "--keys", str(tmp_path / "pub"), "--out", str(tmp_path / "enc"), "--model",
                 "logreg", "--samples", "3", "--ringers", "1"] + SPARK) == 0
    assert "3 of the 3 digits are ringers" in capsys.readouterr().out
    assert main(["process", "--keys", str(tmp_path / "pub"), "--input", str(tmp_path / "enc"), "--out",
                 str(tmp_path / "proc"), "--op", "infer:logreg"] + SPARK) == 0
    for name in ("dropped", "swapped"):
        shutil.copytree(tmp_path / "proc", tmp_path / name)
    t = read_rows(tmp_path / "dropped")
    write_rows(tmp_path / "dropped", t.filter(pc.not_equal(t.column("image_id"), "digits-01-1")))
    t = read_rows(tmp_path / "swapped")
    cts = t.column("ct").to_pylist()
    ids = t.column("image_id").to_pylist()
    a, b = ids.index("digits-01-0"), ids.index("digits-01-1")
    cts[a], cts[b] = cts[b], cts[a]
    write_rows(tmp_path / "swapped", t.set_column(t.schema.get_field_index("ct"), "ct", pa.array(cts, pa.binary())))
    owner = ["--owner", str(tmp_path / "enc.owner")]
    assert _decrypt(tmp_path, tmp_path / "dropped", tmp_path / "d1", *owner) == 0
    assert [(r["reason"], r["source"]) for r in _rows(tmp_path / "d1" / "rejects")] == [
        ("missing-image", "digits-01-1")]
    assert _decrypt(tmp_path, tmp_path / "swapped", tmp_path / "d2", *owner) == 0
    assert sorted((r["reason"], r["source"]) for r in _rows(tmp_path / "d2" / "rejects")) == [
        ("integrity", "digits-01-0"), ("integrity", "digits-01-1")]
    assert [p["sample"] for p in _rows(tmp_path / "d2" / "predictions")] == [2]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(30)
def test_verify_owner_accepts_an_honest_run_by_its_ringers_and_not_a_lying_one(bfv_run, tmp_path, capsys):
    """`hepix verify --owner --keys` of an inference run: the ringers compared in a temporary directory, removed
    after; 0 for the honest run, 1 for a cluster that added one unit to every score (checksums recomputed)."""
    from jobs.cli import main

    root = bfv_run
    verify = ["verify", "--owner", str(root / "enc.owner"), "--keys", str(root / "keys"), *SPARK]
    capsys.readouterr()
    assert main([verify[0], str(root / "proc"), *verify[1:]]) == 0
    out = capsys.readouterr().out
    assert "the owner's ringers (the run's scores decrypted in a temporary directory" in out
    assert "verdict: every one of the" in out and "ringers agrees with the owner's copies" in out

    lie = one_unit_more(root, tmp_path / "lie")
    assert main([verify[0], str(lie), *verify[1:]]) == 1
    out = capsys.readouterr().out
    assert "verdict: not accepted: a ringer disagrees or a result was rejected" in out
    assert not list(Path(tempfile.gettempdir()).glob("hepix-verify-*/ringers"))      # its working tables are gone


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(30)
def test_an_owner_map_of_the_other_kind_of_run_is_refused_in_one_line(bfv_run, tmp_path, capsys):
    from PIL import Image

    from jobs.cli import main

    root = bfv_run
    (tmp_path / "img").mkdir()
    Image.fromarray(np.full((8, 8), 90, np.uint8)).save(tmp_path / "img" / "a.png")
    assert main(["encrypt", "--keys", str(root / "pub"), "--input", str(tmp_path / "img"), "--out",
                 str(tmp_path / "enc")] + SPARK) == 0
    capsys.readouterr()
    assert _decrypt(root, root / "proc", tmp_path / "a", "--owner", str(tmp_path / "enc.owner")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the owner map of an image run" in err[0] and "holds scores" in err[0]
    assert _decrypt(root, tmp_path / "enc", tmp_path / "b", "--owner", str(root / "enc.owner")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the owner map of encrypted digits" in err[0] and "holds images" in err[0]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.seconds(20)
def test_expect_ops_refuses_an_inference_run_of_another_model_before_decrypting(bfv_run, tmp_path, capsys):
    """The ringers are compared with the model the run records: a cluster that ran another model and recorded it
    passes them, so the owner names the model it asked for and decrypt refuses any other."""
    root = bfv_run
    capsys.readouterr()
    assert _decrypt(root, root / "proc", tmp_path / "a", "--owner", str(root / "enc.owner"),
                    "--expect-ops", "infer:tinycnn") == 2
    err = capsys.readouterr().err
    assert "--expect-ops infer:tinycnn" in err and "records the ops infer:logreg" in err
    assert not (tmp_path / "a" / "predictions").exists()
    assert _decrypt(root, root / "proc", tmp_path / "b", "--owner", str(root / "enc.owner"),
                    "--expect-ops", "infer:LogReg,task=01") == 0          # the same model, spelt otherwise
    assert len(_rows(tmp_path / "b" / "predictions")) > 0
