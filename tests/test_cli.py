"""The `hepix` command line: keygen, export-public, bench, demo."""
from __future__ import annotations

import argparse
import stat
import sys

import pyarrow.parquet as pq
import pytest

from bench.schemas import BENCH_PIXEL
from jobs.cli import main
from tasks.contactsheet import read_layout


def test_keygen_writes_a_key_directory_with_a_private_secret_key(tmp_path, capsys):
    assert main(["keygen", "--out", str(tmp_path / "k"), "--preset", "addonly-2048"]) == 0
    assert stat.S_IMODE((tmp_path / "k" / "secret.key").stat().st_mode) == 0o600
    out = capsys.readouterr().out
    assert "export-public" in out


def test_keygen_into_a_non_empty_directory_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "something").write_text("x")
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and str(tmp_path / "k") in err


def test_export_public_leaves_the_secret_key_behind(tmp_path):
    main(["keygen", "--out", str(tmp_path / "k"), "--preset", "addonly-2048"])
    assert main(["export-public", "--keys", str(tmp_path / "k"), "--out", str(tmp_path / "pub")]) == 0
    assert not (tmp_path / "pub" / "secret.key").exists()
    assert (tmp_path / "pub" / "public.key").exists()


def test_bench_writes_one_row_per_strategy_with_speedups_against_fresh(tmp_path, capsys):
    rc = main(["bench", "--sizes", "8", "--preset", "addonly-2048", "--tile", "8", "--out", str(tmp_path)])
    assert rc == 0
    files = list((tmp_path / "bench_pixel").glob("*.parquet"))
    assert len(files) == 1
    t = pq.read_table(files[0])
    assert t.schema.equals(BENCH_PIXEL, check_metadata=False)
    rows = t.to_pylist()
    assert sorted(r["strategy"] for r in rows) == sorted(["fresh", "radix", "radix-rand", "scan", "full"])
    fresh = next(r for r in rows if r["strategy"] == "fresh")
    assert fresh["speedup_vs_fresh"] == pytest.approx(1.0)
    assert fresh["security"] == "ind-cpa"
    assert all(r["security"] == "leaks" for r in rows if r["strategy"] != "fresh")
    assert all(r["mse"] == 0 for r in rows)
    assert all(r["memcpy_mb_per_second"] > 0 for r in rows)
    assert "memcpy" in capsys.readouterr().out


def test_bench_rejects_an_unknown_strategy(tmp_path):
    with pytest.raises(SystemExit, match="unknown strategy 'fastest'"):
        main(["bench", "--sizes", "8", "--strategies", "fastest", "--out", str(tmp_path)])


@pytest.mark.slow
@pytest.mark.spark
def test_demo_runs_the_default_chain_draws_the_sheet_and_shows_every_strategy(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--size", "16", "--pixel-size", "8", "--out", str(out), "--master", "local[2]"]) == 0
    printed = capsys.readouterr().out
    assert "equal the same ops done in plaintext, after rounding: yes" in printed
    for name in ("fresh", "radix", "radix-rand", "scan", "full"):
        assert name in printed
    assert "not IND-CPA secure" in printed and "byte-identical ciphertexts" in printed   # says what leaks
    for job in ("encrypt", "process", "decrypt", "total"):
        assert any(line.split()[:1] == [job] for line in printed.splitlines()), job
    assert "pixel values/s" in printed and "B/pixel value" in printed
    assert "read_parquet(" in printed and "camera.png" in printed.split("duckdb.sql(")[-1]   # the query, and its answer
    metrics = pq.read_table(out / "decrypted" / "metrics").to_pylist()
    assert {(m["layout"], m["strategy"], m["width"], m["height"]) for m in metrics} == {
        ("packed-complex", "fresh", 16, 16)}
    for table_dir in ("encrypted/ciphertexts", "processed/ciphertexts", "owner/images", "decrypted/metrics"):
        assert (out / table_dir).is_dir()
    assert not (out / "encrypted" / "rejects").exists()          # rejects name files: they are the owner's
    assert len(list((out / "decrypted" / "images").glob("*.png"))) == 3
    assert (out / "demo.png").is_file() and printed.rstrip().splitlines()[-1].startswith(f"contact sheet: {out}")
    assert len(read_layout(str(out / "demo.png"))) == 3 * 4
    # the owner's spot checks ran on every image; the cluster's keys hold only what the chain needs
    assert "every image checked at the owner's secret positions" in printed
    assert all(m["spot_positions"] for m in metrics)
    assert not (out / "keys-public" / "relin.key").exists() and (out / "keys" / "relin.key").is_file()


def test_demo_will_not_replace_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="not a demo directory"):
        main(["demo", "--out", str(tmp_path / "precious")])
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me"


def test_from_the_cluster_archives_every_job_but_bench_and_report_is_there(monkeypatch):
    """A cluster-mode driver imports hepix from package.sh's zip, which leaves bench/ out, in a packed env
    that may lack what ``package.sh --without`` leaves out: the parser still builds (the YARN test's
    cluster-mode driver), with every job but ``bench`` and ``report``."""
    from jobs.cli import JOBS, build_parser

    absent = ("bench", "numba", "llvmlite", "sklearn", "duckdb", "matplotlib")
    for name in [m for m in sys.modules if m.split(".", 1)[0] in absent]:
        monkeypatch.delitem(sys.modules, name)
    for name in absent:
        monkeypatch.setitem(sys.modules, name, None)          # import NAME -> ModuleNotFoundError
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == set(JOBS) - {"bench", "report"}
    assert parser.parse_args(["verify", "somewhere"]).command == "verify"
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--suite", "ops"])


def test_local_paths_are_made_absolute_before_any_executor_sees_them(tmp_path, monkeypatch):
    from argparse import Namespace

    from jobs.cli import absolute_paths

    monkeypatch.chdir(tmp_path)
    args = Namespace(input="imgs/*.png", out="ct", owner="ct.owner", keys="hdfs://nn:9870/keys",
                     images="file:///data/imgs", contact_sheet=None, dst="../proc", op=["brightness:1"])
    absolute_paths(args)
    assert (args.input, args.out, args.owner) == (f"{tmp_path}/imgs/*.png", f"{tmp_path}/ct", f"{tmp_path}/ct.owner")
    assert args.dst == str(tmp_path.parent / "proc")
    assert (args.keys, args.images, args.contact_sheet, args.op) == ("hdfs://nn:9870/keys", "file:///data/imgs", None,
                                                                     ["brightness:1"])


def test_a_reader_that_leaves_early_does_not_stop_the_job(tmp_path):
    """``hepix keygen ... | head -1``: the console script's output pipe closed before the job prints -- the job
    still runs to its end and exits 0 (without the guard, the first print raised BrokenPipeError: exit 1)."""
    import subprocess
    from pathlib import Path

    script = Path(sys.executable).parent / "hepix"
    proc = subprocess.Popen([str(script), "keygen", "--out", str(tmp_path / "keys"), "--preset", "addonly-2048"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=300) == 0
    assert (tmp_path / "keys" / "secret.key").exists() and (tmp_path / "keys" / "hepix-keys.json").exists()
