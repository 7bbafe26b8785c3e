"""TFHE behind hepix's interfaces, without TFHE arithmetic: the secret-file discipline shared by
``secret.key`` and ``client.key``, the parameter description, the one op parser with a scheme, the
planner's op/scheme matrix, ``hepix plan`` and ``hepix keygen``'s refusals, and every op's plaintext
reference checked over all 256 inputs and every constant (the encrypted tests in test_tfhe.py then
need only a few pixels per op)."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from hecore.errors import InvalidParameters, KeyDirectoryError, SecretKeyMissing
from hecore.ops.spec import Chain, parse_chain, parse_op
from hecore.planner import chain_support, plan, support
from hecore.secretfile import make_private_directory, read_owner_only, write_private
from hecore.tfhe import ops as tops
from hecore.tfhe.params import TFHE_DEFAULT, TfheParams, TfhePublicMaterial
from jobs.cli import main

X = np.arange(256)


# --- one discipline for secret files ----------------------------------------------------------------

def _fake_tfhe_dir(root, client: bytes = b"not really a key") -> os.PathLike:
    """A TFHE key directory's manifest and client key (read_client_key does not parse the key)."""
    keys = make_private_directory(root / "keys")
    doc = {"format": 1, "scheme": "tfhe", "params": TFHE_DEFAULT.to_json(), "fingerprint": "ab" * 32}
    (keys / "hepix-keys.json").write_text(json.dumps(doc))
    write_private(keys / "client.key", client, 0o600)
    return keys


def test_client_key_is_read_with_the_secret_key_discipline(tmp_path):
    from hecore.tfhe.keys import read_client_key

    keys = _fake_tfhe_dir(tmp_path)
    assert read_client_key(keys) == b"not really a key"
    os.chmod(keys / "client.key", 0o640)
    with pytest.raises(KeyDirectoryError, match="chmod 600"):
        read_client_key(keys)
    os.chmod(keys / "client.key", 0o604)
    with pytest.raises(KeyDirectoryError, match="0604.*client key"):
        read_client_key(keys)
    os.chmod(keys / "client.key", 0o600)
    real = tmp_path / "elsewhere.key"
    os.replace(keys / "client.key", real)
    os.symlink(real, keys / "client.key")
    with pytest.raises(KeyDirectoryError, match="symbolic link"):
        read_client_key(keys)
    os.unlink(keys / "client.key")
    with pytest.raises(SecretKeyMissing, match="client.key"):
        read_client_key(keys)
    os.replace(real, keys / "client.key")
    if os.geteuid() == 0:           # only root can give a file away
        os.chown(keys / "client.key", 54321, -1)
        with pytest.raises(KeyDirectoryError, match="owned by"):
            read_client_key(keys)


def test_a_directory_at_the_secret_path_is_refused(tmp_path):
    (tmp_path / "secret.key").mkdir(mode=0o700)
    with pytest.raises(KeyDirectoryError, match="not a regular file"):
        read_owner_only(tmp_path / "secret.key", what="the secret key", missing="none")


def test_write_private_sets_the_mode_whatever_the_umask_and_refuses_links_and_existing_files(tmp_path):
    old = os.umask(0o077)
    try:
        write_private(tmp_path / "public.key", b"p", 0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "public.key").stat().st_mode) == 0o644
    with pytest.raises(FileExistsError):
        write_private(tmp_path / "public.key", b"again", 0o600)
    os.symlink(tmp_path / "target", tmp_path / "link.key")
    with pytest.raises(OSError):
        write_private(tmp_path / "link.key", b"s", 0o600)
    assert not (tmp_path / "target").exists()
    d = make_private_directory(tmp_path / "a" / "b")
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_ckks_key_functions_refuse_a_tfhe_directory_by_name(tmp_path):
    from hecore.seal.keys import key_scheme, read_info, read_secret_key

    keys = _fake_tfhe_dir(tmp_path)
    assert key_scheme(keys) == "tfhe"
    with pytest.raises(KeyDirectoryError, match="TFHE key directory"):
        read_info(keys)
    with pytest.raises(KeyDirectoryError, match="TFHE key directory"):
        read_secret_key(keys)


def test_key_scheme_of_a_missing_directory_says_how_to_make_one(tmp_path):
    from hecore.seal.keys import key_scheme

    with pytest.raises(KeyDirectoryError, match="hepix keygen"):
        key_scheme(tmp_path / "nothing")


# --- parameters ---------------------------------------------------------------------------------------

def test_tfhe_params_round_trip_and_refuse_what_hepix_does_not_build():
    assert TfheParams.from_json(json.loads(json.dumps(TFHE_DEFAULT.to_json()))) == TFHE_DEFAULT
    assert TFHE_DEFAULT.slots == 1 and "FheUint8" in TFHE_DEFAULT.describe()
    for bad in ({**TFHE_DEFAULT.to_json(), "parameters": "PARAM_MESSAGE_1_CARRY_1"},
                {**TFHE_DEFAULT.to_json(), "name": "tfhe-tiny"}, {"name": "tfhe-default"}):
        with pytest.raises(InvalidParameters):
            TfheParams.from_json(bad)


def test_public_material_fingerprint_is_the_server_keys_sha256():
    import hashlib

    pub = TfhePublicMaterial(TFHE_DEFAULT, b"server key bytes")
    assert pub.fingerprint() == hashlib.sha256(b"server key bytes").hexdigest() and pub.scheme == "tfhe"
    assert "server key bytes" not in repr(pub)


def test_a_tfhe_key_sets_encryptor_needs_the_client_key_and_the_pixel_layout():
    from hecore.schemes.tfhe import TfheKeys

    public, owner = TfheKeys(TFHE_DEFAULT, "fp", b"x"), TfheKeys(TFHE_DEFAULT, "fp", b"x", b"k")
    with pytest.raises(ValueError, match="client key"):
        public.encryptor(layout="pixel")
    with pytest.raises(ValueError, match="pixel layout"):
        owner.encryptor(layout="packed")
    with pytest.raises(ValueError, match="fresh"):
        owner.encryptor(layout="pixel", strategy="full")


# --- the one parser ----------------------------------------------------------------------------------

def test_parse_chain_with_scheme_tfhe_gives_tfhe_ops():
    chain = parse_chain(["brightness:60", " threshold:128", "lut:gamma-0.5"], scheme="tfhe")
    assert isinstance(chain, Chain) and chain.scheme == "tfhe" and chain.kind == "image"
    assert [op.spec for op in chain.ops] == ["brightness:60", "threshold:128", "lut:gamma-0.5"]
    assert isinstance(chain.ops[0], tops.Brightness)


@pytest.mark.parametrize("spec", ["threshold:128", "min:3", "max:9", "lut:invert", "brightness-wrap:60"])
def test_the_seal_parser_reads_tfhe_ops_as_a_bfv_table_and_the_op_parser_says_which_keys_run_them(spec):
    chain = parse_chain([spec])
    assert chain.scheme is None and [op.spec for op in chain.ops] == [spec]
    assert isinstance(chain.ops[0], tops.TfheOp.__args__)
    with pytest.raises(ValueError, match="CKKS and BGV cannot.*lut-16384.*keygen --scheme tfhe"):
        parse_op(spec)


@pytest.mark.parametrize("spec,match", [
    ("meanfilter:3", "filter sums neighbours"), ("contrast:1.5", "Lut.from_table"), ("watermark:1,2,3", "TFHE"),
    ("match:q", "matching is CKKS"), ("infer:logreg", "inference is CKKS"), ("brightness:1.5", "integer"),
    ("threshold:256", "0..255"), ("blur:3", "unknown TFHE operation"),
])
def test_the_tfhe_parser_refuses_what_tfhe_does_not_run(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_chain([spec], scheme="tfhe")


def test_parse_chain_refuses_an_unknown_scheme_and_an_empty_tfhe_chain():
    with pytest.raises(ValueError, match="unknown scheme"):
        parse_chain(["brightness:1"], scheme="paillier")
    with pytest.raises(ValueError, match="no operation"):
        parse_chain([], scheme="tfhe")


def test_seal_chains_parse_as_before():
    chain = parse_chain(["brightness:50", "meanfilter:3"])
    assert chain.scheme is None and [op.spec for op in chain.ops] == ["brightness:50", "meanfilter:3"]


# --- the planner: every op/scheme pair -------------------------------------------------------------------

@pytest.mark.parametrize("spec,scheme,ok,why", [
    ("threshold:128", "ckks", False, "CKKS cannot: an 8-bit table is exact"),
    ("threshold:128", "bfv", True, "lut-16384, packed layout: exact, batched"),
    ("threshold:128", "tfhe", True, "255 where x >= 128"),
    ("lut:gamma-0.5", "bgv", False, "in BFV, not BGV"),
    ("brightness:60", "ckks", True, "clipped to 0..255 once"),
    ("brightness:60", "tfhe", True, "saturating"),
    ("brightness:1.5", "bfv", False, "non-integer"),
    ("brightness:1.5", "tfhe", False, "integer"),
    ("brightness-wrap:60", "ckks", False, "CKKS cannot"),
    ("meanfilter:3", "tfhe", False, "sums neighbours"),
    ("meanfilter:3", "bfv", True, "bfv-4096"),
    ("match:q,l1", "bfv", False, "approximation of |x|"),
    ("match:q,l1", "ckks", True, "match-8192"),
    ("min:200", "tfhe", True, "exact"),
])
def test_support_says_yes_or_no_and_why_for_every_pair(spec, scheme, ok, why):
    s = support(spec, scheme)
    assert s.ok is ok and why in s.why, s


def test_tfhe_runs_only_in_the_pixel_layout():
    assert not support("threshold:1", "tfhe", "packed").ok
    assert support("threshold:1", "tfhe", "pixel").ok
    assert plan([], "pixel", scheme="tfhe") == [TFHE_DEFAULT] and plan([], "packed", scheme="tfhe") == []


def test_chain_support_names_the_preset_or_the_failing_op():
    assert chain_support(["brightness:60", "threshold:200"], "tfhe").ok
    bad = chain_support(["brightness:60", "threshold:200"], "ckks")
    assert not bad.ok and bad.why.startswith("threshold:200: CKKS cannot")
    bfv = chain_support(["brightness:60", "threshold:200"], "bfv")
    assert bfv.ok and "lut-16384: one table for the chain" in bfv.why
    good = chain_support(["brightness:60", "match:q,l1"], "ckks")
    assert good.ok and "match-8192" in good.why


def test_hepix_plan_prints_every_pair_and_the_keygen_line(capsys):
    assert main(["plan", "--op", "brightness:60", "--op", "threshold:128"]) == 0
    out = capsys.readouterr().out
    assert "ckks  no: CKKS cannot: an 8-bit table is exact" in out and "bfv   yes: lut-16384" in out
    assert "smallest: lut-16384" in out
    assert "tfhe  yes" in out and "hepix keygen --scheme tfhe" in out
    assert main(["plan", "--op", "threshold:128", "--scheme", "ckks"]) == 1
    assert "CKKS cannot run it" in capsys.readouterr().out
    assert main(["plan", "--op", "brightness:60", "--scheme", "bfv"]) == 0
    out = capsys.readouterr().out
    assert "smallest: bfv-4096" in out and "tfhe" not in out


def test_hepix_plan_names_a_bad_tfhe_argument(capsys):
    assert main(["plan", "--op", "threshold:300"]) == 2
    assert "0..255" in capsys.readouterr().err


def test_hepix_keygen_tfhe_refuses_options_of_other_schemes(tmp_path, capsys):
    assert main(["keygen", "--scheme", "tfhe", "--no-rotations", "--out", str(tmp_path / "k")]) == 2
    assert "--no-rotations" in capsys.readouterr().err
    assert main(["keygen", "--scheme", "tfhe", "--preset", "paper-4096", "--out", str(tmp_path / "k")]) == 2
    assert "CKKS preset" in capsys.readouterr().err
    assert main(["keygen", "--scheme", "tfhe", "--op", "meanfilter:3", "--out", str(tmp_path / "k")]) == 2
    assert "TFHE cannot run meanfilter:3" in capsys.readouterr().err
    assert main(["keygen", "--preset", "paper-4096", "--compressed-server-key", "--out", str(tmp_path / "k")]) == 2
    assert not (tmp_path / "k").exists()


# --- the plaintext references, exhaustively ------------------------------------------------------------

def test_every_reference_equals_its_closed_form_for_every_input_and_constant():
    for b in range(-255, 256):
        assert np.array_equal(tops.Brightness(b).table(), np.clip(X + b, 0, 255)), b
        assert np.array_equal(tops.BrightnessWrap(b).table(), (X + b) % 256), b
    for c in range(256):
        assert np.array_equal(tops.Threshold(c).table(), np.where(X >= c, 255, 0)), c
        assert np.array_equal(tops.Min(c).table(), np.minimum(X, c)), c
        assert np.array_equal(tops.Max(c).table(), np.maximum(X, c)), c
    assert np.array_equal(tops.Lut("invert").table(), 255 - X)
    assert np.array_equal(tops.Lut("gamma-2").table(), [round(255 * (x / 255) ** 2) for x in range(256)])
    assert np.array_equal(tops.Lut("stretch-64-191").table(),
                          [min(255, max(0, round(255 * (x - 64) / 127))) for x in range(256)])


def test_the_native_reference_is_the_python_one_for_every_constant():
    from hecore.tfhe.native import native_module

    ref = native_module().ServerKey.reference
    for op in ([tops.Brightness(b) for b in range(-255, 256)] + [tops.BrightnessWrap(b) for b in range(-255, 256)]
               + [cls(c) for cls in (tops.Threshold, tops.Min, tops.Max) for c in range(256)]):
        assert ref(op.native_op, constant=op.constant) == op.table().tobytes(), op.spec


def test_any_8bit_function_is_a_lut_spec():
    table = np.random.default_rng(1).integers(0, 256, 256, dtype=np.uint8)
    op = tops.Lut.from_table(table)
    assert np.array_equal(tops.parse_op(op.spec).table(), table) and op.native_table == table.tobytes()
    with pytest.raises(ValueError, match="512 hex digits"):
        tops.parse_op("lut:hex-00ff")
    with pytest.raises(ValueError, match="256 integers"):
        tops.Lut.from_table(np.arange(255))


@pytest.mark.parametrize("spec,match", [
    ("brightness:256", "-255..255"), ("threshold:-1", "integer"), ("min:300", "0..255"),
    ("lut:gamma-20", "0.1..10"), ("lut:stretch-200-100", "LO < HI"), ("lut:sepia", "unknown lookup table"),
    ("blur:3", "unknown TFHE operation"), ("brightness", "bad TFHE operation"), ("brightness:1.5", "integer"),
])
def test_bad_specs_name_the_problem(spec, match):
    with pytest.raises(ValueError, match=match):
        tops.parse_op(spec)


def test_fused_chains_compute_the_same_function_with_fewer_bootstraps():
    rng = np.random.default_rng(2)
    makers = [lambda: tops.Brightness(int(rng.integers(-255, 256))), lambda: tops.BrightnessWrap(int(rng.integers(0, 256))),
              lambda: tops.Threshold(int(rng.integers(0, 256))), lambda: tops.Min(int(rng.integers(0, 256))),
              lambda: tops.Max(int(rng.integers(0, 256))), lambda: tops.Lut("invert")]
    fused_any = 0
    for _ in range(300):
        chain = [makers[i]() for i in rng.integers(0, len(makers), int(rng.integers(2, 4)))]
        fused = tops.fuse(chain)
        assert np.array_equal(tops.chain_table(fused), tops.chain_table(chain)), chain
        assert tops.bootstraps(fused) <= tops.bootstraps(chain)
        fused_any += len(fused) < len(chain)
    assert fused_any > 50
    assert tops.fuse([tops.Brightness(60), tops.Threshold(200)]) == [tops.Threshold(140)]
    assert tops.fuse([tops.Brightness(60), tops.Brightness(-60)]) == [tops.Min(195)]     # saturated, then back
    assert tops.fuse([tops.Min(200), tops.Max(50)]) == [tops.Min(200), tops.Max(50)]


# --- the row checks and the recorded ops ---------------------------------------------------------------

def test_tfhe_rows_of_a_size_no_ciphertext_has_are_refused_by_name():
    from hecore.tfhe.checks import TfheCiphertextChecker

    check = TfheCiphertextChecker(TFHE_DEFAULT)
    # of the right size, these reach tfhe-rs's own load (no key needed), which refuses them
    assert check.problem(b"x" * 871).reason == "tfhe-refused" and check.problem(b"x" * 66101).reason == "tfhe-refused"
    assert check.problem(b"").reason == "empty-ciphertext"
    bad = check.problem(b"x" * 870)
    assert bad.reason == "ciphertext-size" and "870 bytes" in bad.detail and "871 (seeded)" in bad.detail


def test_recorded_ops_follow_the_scheme_of_the_preset():
    from hecore.ops.spec import recorded_finish, recorded_reference

    img = np.array([[0, 150, 200, 255]], dtype=np.uint8)
    assert recorded_reference(img, ["brightness:60", "threshold:255"], "tfhe-default").tolist() == [[0, 0, 255, 255]]
    # CKKS/BFV/BGV: no clipping between ops (clipped once by the owner at the end)
    assert recorded_reference(img, ["brightness:60", "brightness:-60"], "paper-4096").tolist() == [[0, 150, 200, 255]]
    assert recorded_reference(img, ["brightness:60", "brightness:-60"], "tfhe-default").tolist() == [[0, 150, 195, 195]]
    assert float(recorded_finish(["threshold:3"], "tfhe-default").post_scale) == 1.0
    with pytest.raises(ValueError, match="TFHE"):
        recorded_finish(["meanfilter:3"], "tfhe-default")


def test_a_tfhe_manifest_validates_and_a_seal_op_in_it_does_not():
    from schemas.manifest import ManifestInvalid, validated

    base = {"format": 0, "job": "process", "run_id": "20261123T000000Z-0123abcd", "status": "complete",
            "created": "x", "finished": "y", "input": "", "output": "", "preset": "tfhe-default",
            "params": TFHE_DEFAULT.to_json(), "layout": "pixel", "strategy": "tfhe-full",
            "ops": ["brightness:60", "threshold:128"]}
    from schemas.manifest import FORMAT
    base["format"] = FORMAT
    assert validated(base).ops == ["brightness:60", "threshold:128"]
    with pytest.raises(ManifestInvalid, match="scheme"):
        validated({**base, "ops": ["contrast:2"]})
    with pytest.raises(ManifestInvalid):
        validated({**base, "params": {**TFHE_DEFAULT.to_json(), "bits": 16}})
    from hecore.seal.params import preset
    seal = {**base, "preset": "paper-4096", "params": preset("paper-4096").to_json(), "strategy": "fresh"}
    with pytest.raises(ManifestInvalid, match="BFV keys only"):
        validated(seal)                                  # threshold: not a CKKS op
    lut = {**seal, "preset": "lut-16384", "params": preset("lut-16384").to_json()}
    assert validated(lut).ops == ["brightness:60", "threshold:128"]   # a BFV table chain
    assert validated({**seal, "ops": ["brightness:60", "meanfilter:3"]}).preset == "paper-4096"
