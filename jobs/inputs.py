"""Checks a job makes on its input run and key directory before any work starts."""
from __future__ import annotations

from pathlib import Path

from hecore.errors import HepixError, KeyDirectoryError
from hecore.keys import SECRET, check_fingerprint
from schemas.manifest import RunManifest

from .storage import Storage, read_manifest


def complete_run(storage: Storage, directory: str, jobs: tuple[str, ...]) -> RunManifest:
    """The manifest of a complete run of one of ``jobs`` in ``directory``, or a clear error."""
    manifest = read_manifest(storage, directory)
    if manifest is None:
        raise HepixError(
            f"{directory} holds no complete hepix run (no _manifest.json): it was never written, or its "
            "job did not finish; rerun the job that makes it"
        )
    if manifest.status != "complete" or manifest.job not in jobs:
        raise HepixError(f"{directory} holds a {manifest.status} '{manifest.job}' run; expected the output of "
                         f"{' or '.join(jobs)}")
    return manifest


def same_key(manifest: RunManifest, fingerprint: str, directory: str) -> None:
    check_fingerprint(manifest.key_fingerprint or "", fingerprint, what=f"the ciphertexts in {directory}")


def refuse_secret_key_directory(keys: str) -> None:
    """The processing side never opens a key directory that holds a secret key (it only looks)."""
    from .remote import is_hdfs, list_names

    if (SECRET in list_names(keys)) if is_hdfs(keys) else (Path(keys) / SECRET).exists():
        raise KeyDirectoryError(
            f"{keys} holds a secret key ({SECRET}); processing runs where the data owner's secret must "
            f"not be, so it refuses this directory without opening the file. Give it the public part: "
            f"`hepix export-public --keys {keys} --out PUBLIC_DIR`, then --keys PUBLIC_DIR"
        )
