"""The nightly Airflow DAG's steps (conf/airflow/hepix_nightly_steps.py) against hostile input, without Airflow.

What the cluster can write (manifests in ROOT), what the operator configures (paths, extra options) and what a
run carries (its night) reach the DAG's decisions and command lines only after a check: a night is a date; a
manifest is read with byte and nesting caps, a bad one refused in one line; only the owner's records make a step
skip its night; the commands are argument lists no shell reads.  tests/test_airflow_dag.py runs the DAG itself.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.seconds(3)


def load_steps():
    name = "hepix_nightly_steps"
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "conf" / "airflow" / "hepix_nightly_steps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


steps = load_steps()
RUN, PARENT = "20260302T013000Z-0badc0de", "20260302T013100Z-0badc0de"
log = logging.getLogger("test_airflow_hostile")


@pytest.fixture
def config(tmp_path):
    return steps.Config(root=str(tmp_path / "root"), owner_root=str(tmp_path / "root.owner"),
                        images=str(tmp_path / "images"), hepix=str(Path(sys.executable).parent / "hepix"),
                        keys=str(tmp_path / "keys"), encrypt_args=["--tile", "8x8"])


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# --- nights -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["2026-3-1", "2026-02-30", "2026-13-01", "../2026-03-01", "2026-03-01/..",
                                 "2026-03-01\n", "2026-03-01 ", "2026-03-01T00:00", "", "night=2026-03-01",
                                 "\uff12\uff10\uff12\uff16-03-01", "\u0662\u0660\u0662\u0666-03-01", None, 20260301])
def test_a_night_that_is_not_a_date_is_refused_before_it_names_a_path(config, bad):
    with pytest.raises(steps.Refused, match=r"^night .* is not a date YYYY-MM-DD$") as e:
        config.paths(bad)
    assert "\n" not in str(e.value)


def test_a_night_names_its_four_directories(config, tmp_path):
    p = config.paths("2026-03-01")
    assert (p.ct, p.processed) == (f"{tmp_path}/root/ct/night=2026-03-01",
                                   f"{tmp_path}/root/processed/night=2026-03-01")
    assert (p.owner, p.dec) == (f"{tmp_path}/root.owner/owner/night=2026-03-01",
                                f"{tmp_path}/root.owner/dec/night=2026-03-01")


# --- manifests the cluster wrote ------------------------------------------------------------------------------
def test_a_manifest_nested_a_hundred_thousand_deep_is_refused_in_one_line(config, caplog, tmp_path):
    p = config.paths("2026-03-01")
    write(Path(p.processed) / "_manifest.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(steps.Refused) as e:
        steps.read_manifest(p.processed)
    assert "nests deeper than" in str(e.value) and "\n" not in str(e.value)
    # where the DAG asks whether the night is done: one warning line, and the answer "not done" (the job runs)
    write(Path(p.dec) / "_manifest.json",
          json.dumps({"status": "complete", "run_id": RUN, "parent": {"run_id": PARENT}}))
    with caplog.at_level(logging.WARNING):
        assert config.decrypt_done(p, log) is False
    [line] = refusals(caplog)
    assert "nests deeper than" in line and "\n" not in line


@pytest.mark.parametrize("text, why", [
    ('{"a": ' * 40 + "1" + "}" * 40, "nests deeper than"),
    (b"\xff\xfe{}", "is not UTF-8"),
    ('{"status": "complete", "run_id": "../../x"}', "is not a hepix run id"),
    ('{"status": "complete", "run_id": "%s", "parent": "x"}' % RUN, "parent is not a record"),
    ('{"status": ["complete"]}', "not a hepix manifest"),
    ("[1, 2]", "not a hepix manifest"),
    ('{"status": "complete", "run_id": "%s"' % RUN, "is not JSON"),
])
def test_a_malformed_manifest_is_refused_in_one_line(tmp_path, text, why):
    path = tmp_path / "_manifest.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(steps.Refused, match=why) as e:
        steps.read_manifest(str(tmp_path))
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


def test_a_manifest_larger_than_the_cap_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(steps, "MAX_MANIFEST_BYTES", 1000)
    (tmp_path / "_manifest.json").write_text(json.dumps({"status": "complete", "run_id": RUN, "pad": "x" * 2000}))
    with pytest.raises(steps.Refused, match="more than the 1000"):
        steps.read_manifest(str(tmp_path))


def test_a_manifest_that_is_not_a_regular_file_is_refused(tmp_path):
    import os

    os.mkfifo(tmp_path / "_manifest.json")          # a reader that opened it plainly would wait for a writer
    with pytest.raises(steps.Refused, match="not a regular file"):
        steps.read_manifest(str(tmp_path))
    (tmp_path / "_manifest.json").unlink()
    (tmp_path / "_manifest.json").symlink_to("/etc/hostname")
    with pytest.raises(steps.Refused):
        steps.read_manifest(str(tmp_path))


# --- only the owner's records decide what a night has done, in directories that are what they seem -------
def plant(directory: str, doc: dict) -> None:
    write(Path(directory) / "_manifest.json", json.dumps(doc))


def owner_map(directory: str, status: str, runs: list[str]) -> None:
    write(Path(directory) / "owner.json", json.dumps({"format": 1, "job": "encrypt", "status": status, "runs": runs,
                                                      "batches": []}))


def test_a_planted_complete_manifest_of_a_future_night_does_not_make_its_encrypt_or_process_skip(config):
    p = config.paths("2026-12-24")
    plant(p.ct, {"job": "encrypt", "status": "complete", "run_id": RUN, "runs": [RUN]})
    plant(p.processed, {"job": "process", "status": "complete", "run_id": PARENT, "parent": {"run_id": RUN}})
    assert config.encrypt_done(p, log) is False and config.process_done(p, log) is False
    # nothing of the owner's: encrypt starts the night afresh (--overwrite replaces what was planted)
    assert "--overwrite" in config.encrypt_command(p, "/keys", fresh=True)
    # a partial owner map (encrypt committed a batch, then failed): not done either, and resumed
    owner_map(p.owner, "partial", [RUN])
    assert config.encrypt_done(p, log) is False and config.process_done(p, log) is False
    # the owner map says complete, and the cluster's copy is that run: done; another run there: not done
    owner_map(p.owner, "complete", [RUN])
    assert config.encrypt_done(p, log) is True and config.process_done(p, log) is True
    write(Path(p.ct) / "_manifest.json", json.dumps({"job": "encrypt", "status": "complete", "run_id": PARENT,
                                                     "runs": [PARENT]}))
    assert config.encrypt_done(p, log) is False and config.process_done(p, log) is False


def test_a_night_directory_the_cluster_made_a_link_elsewhere_is_refused(config, tmp_path):
    p = config.paths("2026-12-24")
    config.check_cluster_dirs(p)                            # nothing there yet
    elsewhere = Path(config.owner_root) / "owner" / "night=2026-12-23"
    elsewhere.mkdir(parents=True)
    Path(p.ct).parent.mkdir(parents=True)
    Path(p.ct).symlink_to(elsewhere)
    with pytest.raises(steps.Refused, match="symbolic link or leads outside"):
        config.check_cluster_dirs(p)
    Path(p.ct).unlink()
    Path(p.ct).mkdir()
    config.check_cluster_dirs(p)
    Path(config.root, "processed").symlink_to(tmp_path)
    with pytest.raises(steps.Refused, match="symbolic link or leads outside"):
        config.check_cluster_dirs(p)


def test_a_planted_decrypt_manifest_on_the_clusters_side_decides_nothing(config):
    p = config.paths("2026-12-24")
    plant(p.processed, {"job": "process", "status": "complete", "run_id": PARENT, "parent": {"run_id": RUN}})
    assert config.decrypt_done(p, log) is False             # OWNER_ROOT/dec holds nothing
    plant(p.dec, {"job": "decrypt", "status": "complete", "run_id": RUN, "parent": {"run_id": PARENT}})
    assert config.decrypt_done(p, log) is True


def test_an_earlier_decrypt_of_another_processed_run_is_kept_aside_not_overwritten(config):
    p = config.paths("2026-12-24")
    assert config.set_aside_decrypt(p, log) is None                 # nothing there yet
    plant(p.dec, {"job": "decrypt", "status": "complete", "run_id": RUN, "parent": {"run_id": RUN}})
    write(Path(p.dec) / "metrics" / "part-0.parquet", "the owner's earlier metrics")
    kept = config.set_aside_decrypt(p, log)
    assert kept is not None and kept.parent == Path(config.owner_root) / "dec-replaced" / "night=2026-12-24"
    assert not Path(p.dec).exists()
    assert (kept / "metrics" / "part-0.parquet").read_text() == "the owner's earlier metrics"


def test_a_malformed_owner_map_is_refused_in_one_line_and_decides_nothing(config, caplog):
    p = config.paths("2026-12-24")
    write(Path(p.owner) / "owner.json", "[" * 100_000)
    with caplog.at_level(logging.WARNING):
        assert config.encrypt_done(p, log) is False
    [line] = refusals(caplog)
    assert "owner map refused" in line and "\n" not in line


def test_one_nights_encrypt_at_a_time(tmp_path, caplog):
    """Two encrypt steps at once (a backfill beside a scheduled night) would each miss what the other takes."""
    import threading

    entered = threading.Event()

    def second():
        with steps.exclusive(str(tmp_path), log):
            entered.set()

    with caplog.at_level(logging.INFO):
        with steps.exclusive(str(tmp_path), log):
            other = threading.Thread(target=second)
            other.start()
            assert not entered.wait(0.5)
        assert entered.wait(30)
        other.join()
    assert any("waiting for it to finish" in r.getMessage() for r in caplog.records)


# --- settings ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change, why", [
    ({"root": "relative/root"}, "must be an absolute path"),
    ({"owner_root": "hdfs://nn/owner"}, "must be a local directory"),
    ({"owner_root": "{root}/owner"}, "lies inside HEPIX_NIGHTLY_ROOT"),
    ({"root": "{owner_root}/root"}, "lies inside HEPIX_NIGHTLY_OWNER_ROOT"),
    ({"encrypt_args": ["--tile", "8x8", "--out=/elsewhere"]}, "--out is an option the DAG sets itself"),
    ({"encrypt_args": ["--overwr"]}, "--overwr is an option the DAG sets itself"),
])
def test_a_bad_setting_is_refused(tmp_path, change, why):
    given = {"root": str(tmp_path / "root"), "owner_root": str(tmp_path / "owner"), "images": str(tmp_path / "img"),
             "hepix": "hepix"}
    given.update({k: v.format(**given) if isinstance(v, str) else v for k, v in change.items()})
    with pytest.raises(steps.Refused, match=why):
        steps.Config(**given)


def test_encrypt_declares_the_night_s_chain_and_no_other_can_be_slipped_in(tmp_path):
    config = steps.Config(root=str(tmp_path / "root"), owner_root=str(tmp_path / "owner"),
                          images=str(tmp_path / "img"), hepix="hepix", ops=["brightness:20", "meanfilter:3"])
    argv = config.encrypt_command(config.paths("2026-03-01"), "/keys", fresh=False)
    assert [a for a in argv if a.startswith("--for-op")] == ["--for-op=brightness:20", "--for-op=meanfilter:3"]
    with pytest.raises(steps.Refused, match="--for-op is an option the DAG sets itself"):
        steps.Config(root=str(tmp_path / "root"), owner_root=str(tmp_path / "owner"), images=str(tmp_path / "img"),
                     hepix="hepix", encrypt_args=["--for-op", "grey"])


def test_extra_arguments_are_split_like_shell_words_and_a_bad_quote_is_refused():
    assert steps.split_args("X", "--tile '8x8;touch PWNED;:' --input-list '/a b/c'") == \
        ["--tile", "8x8;touch PWNED;:", "--input-list", "/a b/c"]
    with pytest.raises(steps.Refused, match="No closing quotation"):
        steps.split_args("HEPIX_NIGHTLY_OPS", "brightness:20 'x")


# --- commands: lists of arguments, no shell ---------------------------------------------------------------------
def test_a_shell_injection_in_the_extra_encrypt_options_runs_nothing(tmp_path, caplog):
    keys, pub = tmp_path / "keys", tmp_path / "pub"
    assert main(["keygen", "--out", str(keys), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(keys), "--out", str(pub)]) == 0
    (tmp_path / "images").mkdir()
    pwned = tmp_path / "PWNED"
    config = steps.Config(root=str(tmp_path / "root"), owner_root=str(tmp_path / "root.owner"),
                          images=str(tmp_path / "images"), hepix=str(Path(sys.executable).parent / "hepix"),
                          encrypt_args=steps.split_args("X", f"--tile '8x8;touch {pwned};:'"))
    p = config.paths("2026-03-01")
    argv = config.encrypt_command(p, str(pub), fresh=True)
    assert f"8x8;touch {pwned};:" in argv
    with caplog.at_level(logging.INFO):
        code = steps.Command(argv).run(log)
    assert code != 0 and not pwned.exists()
    assert any("8x8;touch" in r.getMessage() for r in caplog.records if r.getMessage().startswith("hepix encrypt"))


def test_a_public_key_parameter_naming_a_secret_key_directory_is_refused(tmp_path):
    keys, pub = tmp_path / "keys", tmp_path / "pub"
    assert main(["keygen", "--out", str(keys), "--preset", "addonly-2048"]) == 0
    assert main(["export-public", "--keys", str(keys), "--out", str(pub)]) == 0
    assert steps.public_key_dir(str(pub)) == str(pub)
    with pytest.raises(steps.Refused, match="holds a secret key"):
        steps.public_key_dir(str(keys))
    for bad in ("", "relative/pub", None, "/pub\x00x"):
        with pytest.raises(steps.Refused):
            steps.public_key_dir(bad)


def test_a_value_beginning_with_a_dash_is_never_read_as_an_option(config):
    p = config.paths("2026-03-01")
    assert "--keys=--overwrite" in config.encrypt_command(p, "--overwrite", fresh=False)
    assert "--overwrite" not in config.encrypt_command(p, "--overwrite", fresh=False)
    assert config.process_args(p, "-x")[1] == "--keys=-x"


def test_a_command_runs_with_its_paths_whole_and_no_shell(tmp_path, caplog):
    spaced = tmp_path / "a dir; with $(spaces) and `quotes`"
    spaced.mkdir()
    script = "import sys; print(repr(sys.argv[1:]))"
    with caplog.at_level(logging.INFO):
        assert steps.Command([sys.executable, "-c", script, str(spaced), "$HOME", "*"]).run(log) == 0
    assert repr([str(spaced), "$HOME", "*"]) in [r.getMessage() for r in caplog.records]
    with pytest.raises(steps.Refused):
        steps.Command("echo hi")


def test_the_helper_imports_nothing_but_the_standard_library_and_hepixs_json_reader():
    helper = str(REPO_ROOT / "conf" / "airflow" / "hepix_nightly_steps.py")
    code = ("import sys, importlib.util; sys.path = [p for p in sys.path if 'site-packages' not in p]; "
            f"spec = importlib.util.spec_from_file_location('s', {helper!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['s'] = m; spec.loader.exec_module(m); "
            "m._jsondoc(); print(sorted(k for k in sys.modules if k.split('.')[0] in ('jobs', 'hecore', 'schemas', "
            "'tasks', 'pyarrow', 'numpy', 'pyspark')))")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
