"""Key hygiene: no secret key where processing runs, in logs or in tables.

One small encrypt -> process -> decrypt run (addonly-2048, a 64x64 USC-SIPI crop,
packed layout) with verbose logging, then every byte it produced -- captured
output, log records, every file under the output directories, every cell of every
table -- is searched for the secret key: the key file's bytes, the uncompressed
serialization's coefficient bytes, and their base64 and hex spellings.
"""
from __future__ import annotations

import base64
import logging
import stat
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from he_pipeline import usc_crop
from PIL import Image

from hecore.flooding import flood, flooding_noise
from jobs.cli import main

pytestmark = pytest.mark.spark

SPARK = ["--master", "local[2]", "--quiet"]
WINDOW = 48            # bytes of key material that must not appear anywhere


def hepix_ok(*argv) -> None:
    assert main([str(a) for a in argv]) == 0, f"hepix {' '.join(map(str, argv))} failed"


def key_needles(keys: Path) -> list[bytes]:
    """Byte strings whose presence would mean the secret key leaked."""
    from hecore.seal.keys import load_secret

    stored = (keys / "secret.key").read_bytes()
    raw = load_secret(keys)._he.to_bytes_secret_key(compr_mode="none")
    pieces = []
    for blob in (stored, raw[len(raw) // 3:]):      # the raw key's coefficients, past its header
        for start in range(0, len(blob) - WINDOW, max(WINDOW, len(blob) // 8)):
            pieces.append(blob[start:start + WINDOW])
    needles = []
    for p in pieces:
        needles.append(p)
        needles.append(p.hex().encode())
        for shift in range(3):      # base64 of the whole key contains these, whatever the alignment
            needles.append(base64.b64encode(p[shift:])[4:-4])
    return needles


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hygiene")
    (root / "img").mkdir()
    Image.fromarray(usc_crop("5.1.12.tiff")).save(root / "img" / "clock.png")
    hepix_ok("-vv", "keygen", "--preset", "addonly-2048", "--out", root / "keys")
    hepix_ok("-vv", "export-public", "--keys", root / "keys", "--out", root / "public")
    return root


def test_keygen_writes_the_secret_key_0600_and_the_public_copy_has_none(run):
    assert stat.S_IMODE((run / "keys" / "secret.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in (run / "public").iterdir()) == ["context.bin", "hepix-keys.json", "public.key"]


def test_process_runs_with_a_key_directory_holding_only_public_material(run, monkeypatch):
    """The processing side gets the public copy and never touches a secret key, not even by accident."""
    import hecore.seal.context
    import hecore.seal.keys

    def forbidden(*a, **k):
        raise AssertionError("process loaded a secret key")
    monkeypatch.setattr(hecore.seal.keys, "load_secret", forbidden)
    real_from_public = hecore.seal.context.HEContext.from_public.__func__

    def from_public(cls, public, secret_key=None):
        assert secret_key is None, "process built a context with a secret key"
        return real_from_public(cls, public)
    monkeypatch.setattr(hecore.seal.context.HEContext, "from_public", classmethod(from_public))
    hepix_ok("-vv", "encrypt", "--keys", run / "public", "--input", run / "img", "--out", run / "enc", *SPARK)
    hepix_ok("-vv", "process", "--keys", run / "public", "--input", run / "enc", "--out", run / "proc",
             "--op", "brightness:20", *SPARK)
    assert not (run / "public" / "secret.key").exists()
    assert ds.dataset(str(run / "proc" / "ciphertexts"), format="parquet").count_rows() > 0


def test_no_secret_key_bytes_in_logs_or_tables(run, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    if not (run / "proc").exists():
        hepix_ok("-vv", "encrypt", "--keys", run / "public", "--input", run / "img", "--out", run / "enc", *SPARK)
        hepix_ok("-vv", "process", "--keys", run / "public", "--input", run / "enc", "--out", run / "proc",
                 "--op", "brightness:20", *SPARK)
    hepix_ok("-vv", "decrypt", "--keys", run / "keys", "--input", run / "proc", "--out", run / "dec",
             "--owner", run / "enc.owner", "--images", run / "img", "--png", *SPARK)
    out, err = capfd.readouterr()
    haystacks = {"stdout": out.encode(), "stderr": err.encode(),
                 "log records": "\n".join(r.getMessage() for r in caplog.records).encode()}
    for d in ("enc", "proc", "dec"):
        for f in (run / d).rglob("*"):
            if f.is_file():
                haystacks[str(f.relative_to(run))] = f.read_bytes()
        for table in (run / d).iterdir():
            if table.is_dir() and any(table.glob("*.parquet")):
                for col in ds.dataset(str(table), format="parquet").to_table().columns:
                    cells = [c if isinstance(c, bytes) else str(c).encode() for c in col.to_pylist()]
                    haystacks[f"{d}/{table.name} cells"] = b"\x00".join(cells)
    assert len(haystacks) > 10
    needles = key_needles(run / "keys")
    found = [(name, i) for name, hay in haystacks.items() for i, n in enumerate(needles) if n in hay]
    assert found == []


def test_a_decrypt_key_from_another_key_set_fails_naming_both_fingerprints(run, tmp_path, capsys):
    hepix_ok("keygen", "--preset", "addonly-2048", "--out", tmp_path / "other")
    if not (run / "enc").exists():
        hepix_ok("encrypt", "--keys", run / "public", "--input", run / "img", "--out", run / "enc", *SPARK)
    capsys.readouterr()
    rc = main(["decrypt", "--keys", str(tmp_path / "other"), "--input", str(run / "enc"), "--out",
               str(tmp_path / "dec"), *SPARK])
    err = capsys.readouterr().err
    assert rc == 2 and "KeyMismatch" in err
    theirs = (run / "keys" / "hepix-keys.json").read_text().split('"fingerprint": "')[1][:16]
    assert theirs in err


# --- noise flooding --------------------------------------------------------------------------------

def test_flooding_noise_has_the_requested_spread_and_is_fresh():
    a, b = flooding_noise(200_000, 2.0), flooding_noise(200_000, 2.0)
    assert abs(a.std() - 2.0) < 0.02 and abs(a.mean()) < 0.02
    assert not np.array_equal(a, b)
    assert np.array_equal(flood(np.ones(3), 0.0), np.ones(3))
    with pytest.raises(ValueError, match="-1"):
        flooding_noise(3, -1.0)


def test_decrypt_with_flooding_perturbs_the_released_values(run):
    if not (run / "enc").exists():
        hepix_ok("encrypt", "--keys", run / "public", "--input", run / "img", "--out", run / "enc", *SPARK)
    hepix_ok("decrypt", "--keys", run / "keys", "--input", run / "enc", "--out", run / "dec-plain",
             "--owner", run / "enc.owner", "--images", run / "img", *SPARK)
    hepix_ok("decrypt", "--keys", run / "keys", "--input", run / "enc", "--out", run / "dec-flood",
             "--owner", run / "enc.owner", "--images", run / "img", "--flood-std", "2", *SPARK)
    plain = ds.dataset(str(run / "dec-plain" / "metrics"), format="parquet").to_table().to_pylist()[0]
    flooded = ds.dataset(str(run / "dec-flood" / "metrics"), format="parquet").to_table().to_pylist()[0]
    assert plain["exact_fraction"] == 1.0
    assert 2.0 < flooded["mse"] < 6.0            # N(0, 2^2) rounded and clipped: about 4
    assert '"flood_std": 2.0' in (run / "dec-flood" / "_manifest.json").read_text()


def test_the_key_search_finds_a_key_written_raw_base64_or_hex(run):
    """The search above can fail: a log line carrying the key in any of these spellings is caught."""
    stored = (run / "keys" / "secret.key").read_bytes()
    needles = key_needles(run / "keys")
    for leaked in (stored, b"key=" + base64.b64encode(stored) + b"\n", b"x" + base64.b64encode(b"ab" + stored),
                   stored.hex().encode()):
        assert any(n in leaked for n in needles)
