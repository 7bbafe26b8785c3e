"""The run manifest: ``_manifest.json`` beside the tables a job writes.

It is written last, after the tables are in place, so a directory whose
manifest says ``"status": "complete"`` holds a whole run (see jobs/storage.py).
``encrypt`` rewrites it after each committed batch with ``"status": "partial"``
and the files so far; ``files`` and ``checksums`` are what ``hepix verify``
checks the tables against (jobs/verify.py).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

FORMAT = 1


@dataclass
class Counts:
    images_in: int = 0
    images_encrypted: int = 0
    images_rejected: int = 0
    images_decrypted: int = 0
    tiles: int = 0
    ciphertexts: int = 0
    ciphertext_bytes: int = 0
    rejects: int = 0


@dataclass
class RunManifest:
    job: str                                  # encrypt | process | decrypt
    run_id: str
    status: str                               # complete | partial (encrypt: some batches committed)
    created: str                              # ISO 8601, UTC
    finished: str
    input: str
    output: str
    layout: str | None = None
    strategy: str | None = None
    security: str | None = None               # ind-cpa | leaks
    preset: str | None = None
    params: dict | None = None
    key_fingerprint: str | None = None
    ops: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)   # tile, resize, pool size, conversions, ...
    counts: Counts = field(default_factory=Counts)
    timings: dict = field(default_factory=dict)   # seconds per stage
    workers: dict = field(default_factory=dict)   # cache rebuilds, python workers, tasks
    versions: dict = field(default_factory=dict)
    spark: dict = field(default_factory=dict)
    parent: dict | None = None                # the manifest of the input run (process, decrypt)
    # table -> [{"name", "rows", "bytes", "xxh3_xor"}]: the files that make the table (jobs.verify)
    files: dict = field(default_factory=dict)
    # table -> {"algorithm", "rows", "xxh3_xor"}: row checksums over the whole table
    checksums: dict = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)  # encrypt: every run that added batches, oldest first
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "RunManifest":
        d = json.loads(text)
        if d.get("format") != FORMAT:
            raise ValueError(f"manifest format {d.get('format')!r} is not {FORMAT}")
        d["counts"] = Counts(**d.get("counts", {}))
        return cls(**d)
