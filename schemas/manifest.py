"""The run manifest: ``_manifest.json`` beside the tables a job writes, and its schema.

It is written last, after the tables are in place, so a directory whose
manifest says ``"status": "complete"`` holds a whole run (see jobs/runtime/storage.py).
``encrypt`` rewrites it after each committed batch with ``"status": "partial"``
and the files so far; ``files`` and ``checksums`` are what ``hepix verify``
checks the tables against (jobs/verify.py).

A manifest is read from a directory the cluster held, so it is untrusted: :meth:`RunManifest.from_json`
checks every field against :data:`FIELDS` (types, ranges, known fields only, file names of a strict
pattern, ops that parse, parameters that are a preset's) and raises :class:`ManifestInvalid` naming the
first bad field; nothing in it names a file outside its directory or sizes an allocation unchecked.
The manifest handed to the cluster names no owner path: encrypt writes ``input`` and ``output`` empty
(the owner's paths stay in its owner map, jobs/runtime/owner.py).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields

#: 2: the ciphertext table without ``source`` and ``content_sha256`` (they stay with the owner).
FORMAT = 2

#: File names a manifest may list: a plain name in its table's directory, never a path.
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,254}$")
RUN_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$")
FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")
#: A table of 256 8-bit outputs, as hex (the declared chain keyed check slots bind: hecore.slotchecks).
TABLE_HEX = re.compile(r"^[0-9a-f]{512}$")
JOBS = ("encrypt", "process", "decrypt", "audit")
TABLES = ("ciphertexts", "rejects", "metrics", "distances", "predictions", "inference_metrics", "audit", "images")
MAX_COUNT = 2**53            # counts and sizes: integers a float64 still holds exactly
MAX_FILES = 1_000_000
MAX_OPS = 64
#: The longest op spec a manifest (and a row's ``ops``) records.
MAX_OP_CHARS = 200
MAX_TEXT = 4096
#: The largest manifest read: a million listed files of about 200 bytes each fit.
MAX_BYTES = 256 * 2**20


class ManifestInvalid(ValueError):
    """A manifest field that fails its schema: ``field`` is its dotted path."""

    def __init__(self, field_path: str, message: str):
        self.field = field_path
        super().__init__(f"field '{field_path}' {message}")


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
    job: str                                  # encrypt | process | decrypt | audit
    run_id: str
    status: str                               # complete | partial (encrypt: some batches committed)
    created: str                              # ISO 8601, UTC
    finished: str
    input: str                                # "" for encrypt: the owner's input stays with the owner
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
    def from_json(cls, text: bytes | str) -> "RunManifest":
        """The manifest in ``text`` (bytes or text, at most :data:`MAX_BYTES`, nested at most
        :data:`schemas.jsondoc.MAX_DEPTH` levels), every field checked (:class:`ManifestInvalid` names the
        first bad one)."""
        from .jsondoc import parse

        try:
            d = parse(text, max_bytes=MAX_BYTES)
        except ValueError as e:
            raise ManifestInvalid("(document)", str(e)) from None
        return validated(d)


# --- the schema --------------------------------------------------------------------------------------

def _fail(path: str, message: str):
    raise ManifestInvalid(path, message)


def text(max_len: int = MAX_TEXT, pattern: re.Pattern | None = None, choices=None, optional: bool = False):
    def check(v, path):
        if v is None and optional:
            return None
        if not isinstance(v, str) or len(v) > max_len:
            _fail(path, f"must be a string of at most {max_len} characters, got {_show(v)}")
        if pattern is not None and not pattern.fullmatch(v):
            _fail(path, f"must match {pattern.pattern}, got {_show(v)}")
        if choices is not None and v not in choices():
            _fail(path, f"must be one of {', '.join(sorted(choices()))}, got {_show(v)}")
        return v
    return check


def integer(lo: int = 0, hi: int = MAX_COUNT, optional: bool = False):
    def check(v, path):
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            _fail(path, f"must be an integer in {lo}..{hi}, got {_show(v)}")
        return v
    return check


def number(lo: float = 0.0, hi: float = 1e15, optional: bool = False):
    def check(v, path):
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            _fail(path, f"must be a finite number in {lo:g}..{hi:g}, got {_show(v)}")
        return v
    return check


def boolean(v, path):
    if not isinstance(v, bool):
        _fail(path, f"must be true or false, got {_show(v)}")
    return v


def listing(item, max_len: int):
    def check(v, path):
        if not isinstance(v, list) or len(v) > max_len:
            _fail(path, f"must be a list of at most {max_len} items, got {_show(v)}")
        return [item(x, f"{path}[{i}]") for i, x in enumerate(v)]
    return check


def record(spec: dict, optional: bool = False, open_keys=None):
    """A JSON object whose keys are those of ``spec`` (each optional); ``open_keys`` checks any other key."""
    def check(v, path):
        if v is None and optional:
            return None
        if not isinstance(v, dict):
            _fail(path, f"must be an object, got {_show(v)}")
        out = {}
        for k, x in v.items():
            sub = f"{path}.{k}"
            if k in spec:
                out[k] = spec[k](x, sub)
            elif open_keys is not None:
                text(128, re.compile(r"^[A-Za-z0-9_.-]+$"))(k, sub)
                out[k] = open_keys(x, sub)
            else:
                _fail(sub, f"is not a field hepix writes here (known: {', '.join(sorted(spec))})")
        return out
    return check


def anything_small(v, path):
    """A JSON value of bounded size (version strings, Spark's own details)."""
    if len(json.dumps(v)) > MAX_TEXT:
        _fail(path, "is too large")
    return v


def _show(v) -> str:
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _layouts():
    from hecore.layouts import Layout
    return set(Layout.names()) | {"digits"}


def _strategies():
    from hecore.encrypt.strategies import strategy_names
    from hecore.tfhe.encryptor import strategy_name
    from hecore.tfhe.params import ENCODINGS
    return set(strategy_names()) | {"symmetric"} | {strategy_name(e) for e in ENCODINGS}


def _presets():
    from hecore.seal.params import PRESETS
    from hecore.tfhe.params import TFHE_PRESETS
    return set(PRESETS) | set(TFHE_PRESETS)


def _preset_params(preset: str) -> dict:
    from hecore.seal.params import PRESETS
    from hecore.tfhe.params import TFHE_PRESETS
    return (TFHE_PRESETS[preset] if preset in TFHE_PRESETS else PRESETS[preset]).to_json()


def _is_bfv(preset: str) -> bool:
    from hecore.seal.params import PRESETS
    return preset in PRESETS and PRESETS[preset].is_bfv


def _conversions():
    from hecore.images import CONVERSIONS
    return set(CONVERSIONS)


def op_list(v, path):
    """Image ops that parse (hecore.ops.spec), the last possibly a ``match:`` or ``infer:`` run."""
    specs = listing(text(MAX_OP_CHARS), MAX_OPS)(v, path)
    from hecore.ops.spec import check_ascii_digits, run_kind

    for i, spec in enumerate(specs):
        try:
            check_ascii_digits(spec)
            kind = run_kind(spec)
            if kind == "match" and i == len(specs) - 1:
                from hecore.ops.spec import parse_match
                parse_match(spec)
            elif kind == "infer" and i == len(specs) - 1:
                from hecore.infer.models import parse_infer
                parse_infer(spec.partition(":")[2])
            else:
                _parse_image_op(spec)
        except (ValueError, TypeError) as e:
            _fail(f"{path}[{i}]", f"is not an operation hepix applies: {e}")
    return specs


def _parse_image_op(spec: str) -> None:
    """An image op of either vocabulary (CKKS/BFV/BGV's, else TFHE's); :func:`validated` then checks the
    ops against the run's preset (:func:`hecore.ops.spec.recorded_chain`)."""
    from hecore.ops.spec import parse_op
    try:
        parse_op(spec)
    except ValueError as seal_error:
        from hecore.tfhe.ops import parse_op as parse_tfhe_op
        try:
            parse_tfhe_op(spec)
        except ValueError:
            raise seal_error from None


#: How a run's ciphertexts are stored (hecore.seal.atrest.AtRest.to_json; ``hepix encrypt --store compact``, or
#: ``--for-op``: ``format`` seal, SEAL's bytes at the planned level).
AT_REST = record({"level": integer(0, 64), "primes": integer(1, 64), "scale_bits": integer(0, 128),
                  "drop0": integer(0, 64), "drop1": integer(0, 64), "error_bound": number(0, 1e300),
                  "tolerance": number(0, 1e300), "chain": op_list,
                  "format": text(16, choices=lambda: {"seal", "compact"})})


def store(v, path):
    """``seal`` (SEAL's serialization) or the compact format's record."""
    if v == "seal":
        return v
    return AT_REST(v, path)


FILE_ENTRY = record({"name": text(255, FILE_NAME), "rows": integer(), "bytes": integer(),
                     "xxh3_xor": integer(-2**63, 2**63 - 1)})
TILE = listing(integer(1, 4096), 2)
SEAL_PARAMS = record({
    "scheme": text(8), "n": integer(1, 2**17), "qi_sizes": listing(integer(1, 64), 64),
    "scale_bits": integer(0, 128), "security_bits": integer(0, 1024), "name": text(64),
    "plain_modulus_bits": integer(0, 64), "rotations": boolean})
#: hecore.tfhe.params.TfheParams.to_json
TFHE_PARAMS = record({
    "name": text(64), "scheme": text(8), "parameters": text(128), "compression": text(128),
    "public_key": text(128), "library": text(64), "bits": integer(1, 64), "blocks": integer(1, 64),
    "security_bits": integer(0, 1024),
    "failure_log2": integer(-1024, 0), "layouts": listing(text(32, choices=_layouts), 4)})


#: The parameter record of each scheme family (:attr:`hecore.schemes.base.Scheme.name`).
PARAMS_RECORDS = {"seal": SEAL_PARAMS, "tfhe": TFHE_PARAMS}


def key_params(v, path):
    """A key's parameters: the record of the family its ``scheme`` names (a TFHE parameter set's, or a
    CKKS/BFV/BGV preset's; SEAL's for a name no family has, which that record then refuses)."""
    from hecore.schemes import SCHEME_NAMES

    family = SCHEME_NAMES.get(v.get("scheme")) if isinstance(v, dict) and isinstance(v.get("scheme"), str) else None
    return PARAMS_RECORDS.get(family.name if family is not None else "", SEAL_PARAMS)(v, path)


SETTINGS = record({
    "key_fingerprint": text(64, FINGERPRINT), "preset": text(64, choices=_presets), "params": key_params,
    "layout": text(32, choices=_layouts), "strategy": text(32, choices=_strategies),
    "strategy_options": record({}, open_keys=anything_small), "tile": TILE, "encryption": text(16),
    "compression": text(16), "halo": integer(0, 1024), "resize": integer(1, 65536, optional=True),
    "conversions": listing(text(16, choices=_conversions), 8), "max_pixels": integer(1, 2**40),
    "store": store, "bind": boolean, "bind_unit": number(2.0 ** -40, 0.25, optional=True),
    "bind_modulus": integer(3, 2**43, optional=True), "bind_table": text(512, TABLE_HEX, optional=True),
    "bind_spread": number(1, 1024, optional=True),
    "task": text(8, choices=lambda: {"01", "all"}), "samples": integer(1, 2**31), "ringers": number(0, 1)})
OPTIONS = record({
    "tile": TILE, "halo": integer(0, 1024), "resize": integer(1, 65536, optional=True),
    "conversions": listing(text(16, choices=_conversions), 8), "settings": SETTINGS,
    "pool_size": integer(1, 2**20, optional=True), "top_k": integer(1, 256, optional=True),
    "radix": integer(2, 256, optional=True), "sigma": number(0, 1e6, optional=True),
    "encryption": text(16), "compression": text(16), "max_pixels": integer(1, 2**40), "store": store,
    "encoding": text(16, choices=lambda: {"seeded", "full", "compact", "list"}),
    "images": text(optional=True), "owner": boolean, "integrity": boolean, "flood_std": number(0, 1e12),
    "spots_only": boolean, "bound": boolean, "bound_offsets": boolean, "bound_slots": boolean, "ringers": boolean,
    "seed": integer(0, 2**63, optional=True),
    "match": record({"query": text(), "query_image_id": text(), "metrics": listing(text(8), 4),
                     "bound": number(0, 1e300)}),
    "task": text(8), "pack": boolean, "samples": integer(), "model": text(32), "binary": boolean,
    "infer_layout": text(32, re.compile(r"pixel-per-ciphertext|coefficients|windows|block-[0-9]{1,5}"), optional=True),
    "input_ciphertexts": integer(optional=True), "input_bytes": integer(optional=True),
    "encrypt_seconds": number(optional=True), "max_ciphertexts": integer(2, 2**40, optional=True),
})
FIELDS = {
    "job": text(16, choices=lambda: set(JOBS)),
    "run_id": text(32, RUN_ID),
    "status": text(16, choices=lambda: {"complete", "partial"}),
    "created": text(64), "finished": text(64), "input": text(), "output": text(),
    "layout": text(32, choices=_layouts, optional=True),
    "strategy": text(32, choices=_strategies, optional=True),
    "security": text(16, choices=lambda: {"ind-cpa", "leaks"}, optional=True),
    "preset": text(64, choices=_presets, optional=True),
    "params": record({}, optional=True, open_keys=anything_small),
    "key_fingerprint": text(64, FINGERPRINT, optional=True),
    "ops": op_list,
    "options": OPTIONS,
    "counts": record({f.name: integer() for f in fields(Counts)}),
    "timings": record({}, open_keys=number(0, 1e9)),
    "workers": record({"cache_rebuilds": integer(), "rebuild_pids": listing(integer(0, 2**31), 4096),
                       "python_workers": integer(), "tasks": integer()}),
    "versions": record({}, open_keys=text(64, optional=True)),
    "spark": record({}, open_keys=anything_small),
    "parent": record({"job": text(16, choices=lambda: set(JOBS)), "run_id": text(32, RUN_ID), "output": text()},
                     optional=True),
    "files": record({t: listing(FILE_ENTRY, MAX_FILES) for t in TABLES}),
    "checksums": record({t: record({"algorithm": text(16), "rows": integer(), "xxh3_xor": integer(-2**63, 2**63 - 1)})
                         for t in TABLES}),
    "runs": listing(text(32, RUN_ID), 100_000),
    "format": integer(0, 2**31),
}


def _check_ops_of_scheme(ops: list, preset) -> None:
    """The image ops of a run are those of its scheme's vocabulary: TFHE's for a TFHE preset, CKKS/BFV/BGV's
    otherwise (:func:`op_list` accepted each in either)."""
    from hecore.ops.spec import is_table_chain, is_tfhe_preset, parse_op, recorded_chain, run_kind
    try:
        if is_tfhe_preset(preset):
            recorded_chain(ops, preset)
        elif is_table_chain(ops):                # 8-bit tables: BFV's (hecore.ops.lut)
            if not _is_bfv(preset):
                raise ValueError(f"8-bit table ops ({' | '.join(ops)}) run on BFV keys only")
            recorded_chain(ops, preset)
        else:
            for o in ops:
                if run_kind(o) == "image":
                    parse_op(o)
    except (ValueError, TypeError) as e:
        _fail("ops", f"are not operations of the run's scheme ({_show(preset)}): {e}")


def check_recorded_ops(ops: list, preset) -> None:
    """Check a run's ``ops`` (with its ``preset``) as every reader of its manifest does -- at most
    :data:`MAX_OPS` ops of at most :data:`MAX_OP_CHARS` characters that parse, in the preset's scheme --,
    raising :class:`ManifestInvalid` naming what fails: a job checks the chain it will record before it
    works, so that it never commits a run its readers refuse."""
    _check_ops_of_scheme(op_list(ops, "ops"), preset)


def validated(d) -> RunManifest:
    """``d`` (parsed JSON) as a :class:`RunManifest`, every field checked against :data:`FIELDS`."""
    if not isinstance(d, dict):
        _fail("(document)", f"must be a JSON object, got {_show(d)}")
    if d.get("format") != FORMAT:
        _fail("format", f"is {_show(d.get('format'))}, not {FORMAT}: written by another version of hepix "
                        "(before the ciphertext table lost its source and content columns); encrypt again")
    out = {}
    for k, v in d.items():
        if k not in FIELDS:
            _fail(k, "is not a field of a hepix manifest")
        out[k] = FIELDS[k](v, k)
    for k in ("job", "run_id", "status", "created", "finished", "input", "output"):
        if k not in out:
            _fail(k, "is missing")
    if out.get("params") is not None:
        preset = out.get("preset")
        if preset is None or _preset_params(preset) != out["params"]:
            _fail("params", f"are not the parameters of preset {_show(preset)}: hepix keys are always a preset's")
    _check_ops_of_scheme(out.get("ops") or [], out.get("preset"))
    out["counts"] = Counts(**out.get("counts", {}))
    return RunManifest(**out)
