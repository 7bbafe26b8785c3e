"""`hepix audit`: distinguishers over a ciphertext table, run WITHOUT any key.

Thin: read the input run's manifest (its public parameters) -> check every row of exactly the files it
lists (tasks/rowchecks.py, keyless: SEAL's validation against the parameters) -> for each good image
channel, read its ciphertexts -> :func:`hecore.audit.audit_group` -> the metadata test over the other
columns (:mod:`hecore.audit.metadata`) -> write the ``audit`` table, the ``rejects`` table, the pictures
the attacker sees (pixel layout) and a manifest, and print a short summary.  It plays the untrusted
cluster: it is given no key directory at all, only the table and the parameters recorded next to it.

The table may come from a hostile cluster, so nothing in it is believed: a row SEAL refuses, of other
parameters, or with an image id not of hepix's form is a rejects row and its image is not audited;
picture file names come from checked ids and are resolved inside ``--out/images`` before writing.

``--images`` gives candidate images: the metadata test tries to confirm them from the table's columns
(as a guesser would), and, with ``--owner`` (the owner map: which id is which file), the distinguishers'
recoveries are scored against the originals.

The audit runs on one machine with pyarrow (no Spark session): the attacks compare every ciphertext of
an image channel with every other, which is one process's work.  Local paths (or file://) only.
"""
from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from hecore.audit import Geometry, Verdict, audit_group
from hecore.audit.metadata import candidate_values, column_verdicts
from hecore.audit.sealbytes import plain_layout
from hecore.errors import HepixError, ImageError
from hecore.layouts import Layout
from hecore.seal.context import PlainCodec, chain_primes
from hecore.seal.params import Params
from schemas.manifest import MAX_BYTES, Counts, RunManifest
from schemas.tables import AUDIT, CIPHERTEXTS, REJECTS
from tasks.rowchecks import RowExpect, check_batch

from .runtime import runinfo
from .runtime.console import table
from .runtime.inputcheck import ImageSummary, image_problems, reject_row
from .runtime.runs import exit_status
from .runtime.storage import MANIFEST, inside, parse_manifest

log = logging.getLogger(__name__)

DEFAULT_MAX_CTS = 4096
META_COLUMNS = ["image_id", "channel", "layout", "preset", "strategy", "security"]


def add_arguments(p) -> None:
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` or `hepix process` (local)")
    p.add_argument("--out", required=True, help="new directory: audit/ and rejects/ (Parquet), images/ (PNG), "
                        "_manifest.json")
    p.add_argument("--images", help="candidate images: the metadata test tries to confirm them from the table's "
                        "columns; with --owner, the attacks' recoveries are scored against them")
    p.add_argument("--owner", metavar="DIR", help="the owner map encrypt wrote: which image id is which file (to "
                        "score the recoveries against --images)")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --images")
    p.add_argument("--seed", type=int, help="seed of the samples the tests draw (default: random)")
    p.add_argument("--max-ciphertexts", type=int, default=DEFAULT_MAX_CTS, metavar="N",
                   help="audit at most the first N ciphertexts of each image channel (whole tiles in table "
                        "order; default %(default)s: a 64x64 image in the pixel layout, ~0.5 GB at N=4096)")
    p.add_argument("--fail-on-rejects", action="store_true",
                   help="exit 1 when any row or image of the table was rejected (the audit still runs on the rest)")


def _local(path: str) -> Path:
    if "://" in path and not path.startswith("file://"):
        raise HepixError(f"hepix audit reads local paths; {path} is not one (copy the table locally first)")
    return Path(path.removeprefix("file://"))


def _candidates(images: str, recursive: bool, opts: dict) -> list[tuple[Path, bytes, np.ndarray | None]]:
    """The candidate images: path, bytes and pixels (preprocessed as the run's options say, if they decode)."""
    from hecore.images import ImagePolicy, load_image, preprocess

    policy = ImagePolicy(conversions=frozenset(opts.get("conversions", [])))
    root = _local(images)
    files = [root] if root.is_file() else sorted(root.rglob("*") if recursive else root.glob("*"))
    out = []
    for f in files:
        if not f.is_file():
            continue
        content = f.read_bytes()
        try:
            img = load_image(memoryview(content), source=str(f), policy=policy)
            if opts.get("resize"):
                img = preprocess(img, opts["resize"])
            pixels = img.pixels
        except ImageError:
            pixels = None
        out.append((f, content, pixels))
    return out


def _listed_files(src: Path, manifest) -> tuple[list[Path], list[dict]]:
    """The ciphertext files the manifest lists (each inside the table's directory) that read with the table's
    schema, a rejects row for every other listed file, and the schema to read them with: the table's, plus
    any other column the files hold (the metadata test looks at every column the cluster is handed)."""
    entries = manifest.files.get("ciphertexts")
    if entries is None:
        raise HepixError(f"{src / MANIFEST}: field 'files.ciphertexts' is missing: the run lists no ciphertext table")
    from hecore.schemes import scheme_for_preset
    from schemas.footers import FooterChecker, FooterLimits

    largest = scheme_for_preset(manifest.preset).keyless_checker(manifest.preset).max_bytes
    good, rejects, extra, seen = [], [], [], set()
    with FooterChecker(CIPHERTEXTS) as checker:
        for e in entries:
            path = Path(inside(str(src / "ciphertexts"), e["name"]))
            why = _file_refusal(path, e, seen, checker, FooterLimits.for_table("ciphertexts", e["rows"], largest))
            if why is not None:
                rejects.append(reject_row("", "audit", e["name"], why[0], f"{e['name']}: {why[1]}"))
                continue
            try:
                schema = pq.read_schema(path)
                missing = [f.name for f in CIPHERTEXTS if f.name not in schema.names or
                           not schema.field(f.name).type.equals(f.type)]
                if missing:
                    rejects.append(reject_row("", "audit", e["name"], "bad-file-schema", f"{e['name']}: columns "
                                              f"{', '.join(missing[:4])} are missing or of another type"))
                    continue
                extra += [f for f in schema
                          if f.name not in CIPHERTEXTS.names and f.name not in [x.name for x in extra]]
            except (OSError, pa.ArrowInvalid) as err:
                rejects.append(reject_row("", "audit", e["name"], "unreadable-file", f"{e['name']}: {err}"))
                continue
            good.append(path)
    return good, rejects, pa.schema(list(CIPHERTEXTS) + extra)


def _file_refusal(path: Path, entry: dict, seen: set, checker, limits) -> tuple[str, str] | None:
    """Why audit does not read the listed file ``path`` (a repeat, missing, a symbolic link, a footer that
    lies: schemas/footers.py), or None; ``seen`` collects the names read."""
    from schemas.footers import local_reader

    if entry["name"] in seen:
        return "duplicate-file", "listed again in the manifest; it is read once"
    seen.add(entry["name"])
    if path.is_symlink():
        return "unreadable-file", "a symbolic link; hepix reads only the run's own files"
    if not path.is_file():
        return "missing-file", "listed in the manifest but not there"
    return checker.problem(path.stat().st_size, local_reader(str(path)), limits)


def run(args) -> int:
    src, dst, parent = _open_input(args)
    params = Params.from_json(parent.params)
    owner = None
    if args.owner:
        from .runtime.owner import OwnerMap

        owner = OwnerMap.load(args.owner)
    candidates = _candidates(args.images, args.recursive, parent.options) if args.images else []
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix audit {run_id}: {args.input} ({parent.layout} layout, strategy {parent.strategy} labelled "
          f"{parent.security}, {params.name}) -> {args.out}; no key used")

    files, rejects, schema = _listed_files(src, parent)
    for r in rejects:
        r["run_id"] = run_id
    try:
        dataset = ds.dataset([str(p) for p in files], format="parquet", schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        dataset = ds.dataset([str(p) for p in files], format="parquet", schema=CIPHERTEXTS)
    bad, per_image, images_seen = check_rows(dataset, parent, run_id, rejects)
    t_all = time.perf_counter()
    rows, n_cts = _audit_channels(dataset, params, owner, candidates, args, dst, bad, rejects,
                                  {"run_id": run_id, "input_run_id": parent.run_id})
    rows += _metadata_rows(dataset, parent, candidates, {i: d for i, d in per_image.items() if i not in bad},
                           run_id, n_cts)
    seconds = time.perf_counter() - t_all
    _write(dst, rows, rejects, RunManifest(
        job="audit", run_id=run_id, status="complete", created=started.isoformat(),
        finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=parent.layout,
        strategy=parent.strategy, security=parent.security, preset=parent.preset, params=parent.params,
        key_fingerprint=parent.key_fingerprint, ops=parent.ops,
        options={"images": args.images, "seed": args.seed, "owner": owner is not None},
        counts=Counts(images_in=len(images_seen), images_encrypted=len({r["image_id"] for r in rows
                                                                        if r["test"] != "metadata"}),
                      images_rejected=len(bad), ciphertexts=n_cts, rejects=len(rejects)),
        timings={"audit_seconds": seconds}, versions=runinfo.versions(),
        parent={"job": parent.job, "run_id": parent.run_id, "output": parent.output}))
    _print_summary(args, parent, rows, rejects, bad, n_cts, seconds)
    return exit_status(args, len(rejects))


def _open_input(args):
    """The input and output directories and the input run's manifest, or a one-line refusal."""
    src, dst = _local(args.input), _local(args.out)
    if not (src / MANIFEST).is_file():
        raise HepixError(f"{args.input} holds no complete hepix run (no _manifest.json); audit the output "
                         "directory of `hepix encrypt` or `hepix process`")
    parent = parse_manifest(_read_capped(src / MANIFEST, MAX_BYTES), str(src / MANIFEST))
    if parent.job not in ("encrypt", "process") or not parent.params or not parent.preset:
        raise HepixError(f"{args.input} holds a '{parent.job}' run; audit the output of encrypt or process")
    if args.max_ciphertexts < 2:
        raise HepixError(f"--max-ciphertexts {args.max_ciphertexts}: the tests compare ciphertexts, give 2 or more")
    from .runtime import places

    places.check_new_out(args.out)
    places.check_location(args.out, "--out", places.guarded(input=args.input, owner=args.owner))
    return src, dst, parent


def _read_capped(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, its size checked before anything is read (a one-line error past ``limit``)."""
    size = path.stat().st_size
    if size > limit:
        raise HepixError(f"{path}: {size} bytes is more than a hepix manifest holds ({limit})")
    with open(path, "rb") as f:
        return f.read(size + 1)           # the size listed, plus one byte to see a file that grew since


def _audit_channels(dataset, params: Params, owner, candidates, args, dst: Path, bad: set, rejects: list[dict],
                    ids: dict) -> tuple[list[dict], int]:
    """Run the distinguishers on each good image channel (its first ``--max-ciphertexts`` rows): the audit
    rows, and how many ciphertexts they read.  A channel whose rows do not form one group is rejected whole."""
    primes = chain_primes(params)                       # public: SEAL regenerates them from the parameters
    codec = PlainCodec(params) if params.complex_slots else None
    truth_images = {hashlib.sha256(c).hexdigest(): px for _, c, px in candidates if px is not None}
    rng = np.random.default_rng(args.seed)
    (dst / "images").mkdir(parents=True, exist_ok=True)
    rows, n_cts = [], 0
    groups = dataset.to_table(columns=["image_id", "channel"]).group_by(["image_id", "channel"]).aggregate([])
    for image_id, channel in sorted(zip(groups["image_id"].to_pylist(), groups["channel"].to_pylist()),
                                    key=lambda k: (str(k[0]), k[1] if k[1] is not None else -1)):
        if image_id is None or image_id in bad:
            continue
        flt = (pc.field("image_id") == image_id) & (pc.field("channel") == channel)
        t = dataset.head(args.max_ciphertexts, filter=flt, columns=META_COLUMNS + ["y", "x", "w", "index", "ct"])
        t = t.combine_chunks()          # the tests need one buffer; row order does not matter to them
        meta = {c: t[c][0].as_py() for c in META_COLUMNS}
        known = owner.get(image_id) if owner is not None else None
        geom = truth = None
        if not Layout.parse(meta["layout"]).packed:
            idx, w = t["index"].to_numpy(), t["w"].to_numpy()
            geom = Geometry(t["y"].to_numpy() + idx // w, t["x"].to_numpy() + idx % w)
            pixels = truth_images.get(known.content_sha256) if known is not None else None
            if pixels is not None:
                plane = pixels if pixels.ndim == 2 else pixels[:, :, channel]
                truth = plane[geom.rows, geom.cols]
        try:
            data, offsets = plain_layout(*_binary_buffers(t["ct"]), params)
            verdicts = audit_group(data, offsets, primes, codec, geom, truth, rng)
        except HepixError as e:         # rows of one channel that do not form one group (levels, sizes)
            rejects.append(reject_row(ids["run_id"], "audit", "", "inconsistent-image", str(e),
                                      {"image_id": image_id}))
            bad.add(image_id)
            continue
        n_cts += t.num_rows
        source = known.source if known is not None else image_id
        for v in verdicts:
            rows.append({**ids, "source": source, **{k: meta[k] for k in (
                "image_id", "layout", "preset", "strategy", "security")}, "channel": int(channel),
                "ciphertexts": t.num_rows, "test": v.test, "verdict": v.verdict, "statistic": v.statistic,
                "detail": v.detail, "classes_found": v.classes_found, "classes_true": v.classes_true,
                "recovered_fraction": v.recovered_fraction,
                "exact_difference_fraction": v.exact_difference_fraction,
                "picture": _write_picture(dst, image_id, channel, v), "seconds": v.seconds})
    return rows, n_cts


def _binary_buffers(ct) -> tuple[np.ndarray, np.ndarray]:
    """The bytes and int64 offsets of a one-chunk binary column, without copying the bytes."""
    arr = ct.chunk(0) if isinstance(ct, pa.ChunkedArray) else ct
    _, off_buf, data_buf = arr.buffers()
    off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(off_buf, dtype=off_type)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
    return np.frombuffer(data_buf, dtype=np.uint8), offsets


def _write_picture(dst: Path, image_id: str, channel: int, v) -> str | None:
    """Write what the attacker sees (a verdict's picture) as ``images/<id>-c<ch>-<test>.png``; its name, or None.
    The id passed the strict image-id check; the resolved path is still checked to lie in ``images/``."""
    if v.picture is None:
        return None
    from hecore.images import array_to_image_bytes

    picture = f"images/{image_id}-c{int(channel)}-{v.test}.png"
    target = (dst / picture).resolve()
    if target.parent != (dst / "images").resolve():
        raise HepixError(f"internal error: picture {picture!r} outside {dst / 'images'}")
    target.write_bytes(array_to_image_bytes(v.picture, "PNG"))
    return picture


def _metadata_rows(dataset, parent, candidates, per_image: dict, run_id: str, n_cts: int) -> list[dict]:
    """The metadata test: one row per column the cluster is handed besides the ciphertexts."""
    t_meta = time.perf_counter()
    cand = [candidate_values(p, c, px) for p, c, px in candidates] or None
    columns = [n for n in dataset.schema.names if n not in ("ct",)] + ["ct"]
    return [{"run_id": run_id, "input_run_id": parent.run_id, "image_id": "*", "source": "*",
             "channel": -1, "layout": parent.layout or "", "preset": parent.preset or "",
             "strategy": parent.strategy or "", "security": parent.security or "",
             "ciphertexts": n_cts, "test": "metadata", "verdict": v.verdict, "statistic": v.statistic,
             "detail": v.detail, "classes_found": None, "classes_true": None, "recovered_fraction": None,
             "exact_difference_fraction": None, "picture": None, "seconds": time.perf_counter() - t_meta}
            for v in column_verdicts(per_image, columns, cand)]


def _write(dst: Path, rows: list[dict], rejects: list[dict], manifest: RunManifest) -> None:
    (dst / "audit").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=AUDIT), dst / "audit" / "part-00000.parquet",
                   compression="zstd")
    (dst / "rejects").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{n: r.get(n) for n in REJECTS.names} for r in rejects], schema=REJECTS),
                   dst / "rejects" / "part-00000.parquet", compression="zstd")
    (dst / MANIFEST).write_text(manifest.to_json())


def _print_summary(args, parent, rows: list[dict], rejects: list[dict], bad: set, n_cts: int,
                   seconds: float) -> None:
    print(table([r for r in rows if r["test"] != "metadata"], [
                       ("source", "image", ""), ("channel", "ch", "d"), ("test", "test", ""),
                       ("verdict", "verdict", ""), ("statistic", "statistic", ".3f"),
                       ("recovered_fraction", "classes recovered", ".3f"),
                       ("exact_difference_fraction", "exact diffs", ".3f"), ("seconds", "s", ".1f")]))
    leaking = sorted({r["test"] for r in rows if r["verdict"] == Verdict.LEAKS and r["test"] != "metadata"})
    meta_leaks = sorted(r["detail"].split(":", 1)[0] for r in rows
                        if r["test"] == "metadata" and r["verdict"] == Verdict.LEAKS)
    if leaking:
        print(f"LEAKS: {', '.join(leaking)} distinguish these ciphertexts without the key "
              f"(table labelled security={parent.security}); pictures in {args.out}/images/")
    else:
        print("no test distinguished these ciphertexts from fresh encryptions")
    if meta_leaks:
        print(f"METADATA LEAKS: columns {', '.join(meta_leaks)} give images away besides the ciphertexts")
    else:
        n_cols = sum(r["test"] == "metadata" for r in rows)
        print(f"metadata: none of the {n_cols} columns is a function of the images the test could find"
              + ("" if args.images else " (give candidate images with --images to try guesses)"))
    if rejects:
        print(f"{len(bad)} images were not audited: {len(rejects)} rows or files failed their checks "
              f"(listed in {args.out}/rejects/)")
    print(f"audited {n_cts} ciphertexts in {seconds:.1f} s; table in {args.out}/audit/")


def check_rows(dataset, parent, run_id: str, rejects: list[dict]) -> tuple[set[str], dict, set]:
    """Every row's checks (keyless), then every image's: the ids of the bad images (their rejects rows are
    appended to ``rejects``), each good image's distinct values per metadata column, and every id seen."""
    from hecore.schemes import scheme_for_preset

    expect = RowExpect.from_manifest(parent)
    checker = scheme_for_preset(parent.preset).keyless_checker(parent.preset)
    bad: set[str] = set()
    seen: set = set()
    stats: dict[str, dict] = {}
    per_image: dict[str, dict[str, list]] = {}
    meta_cols = [n for n in dataset.schema.names if n != "ct"]
    for rb in dataset.to_batches(batch_size=256):
        problems = check_batch(rb, expect, checker)
        meta = rb.select(meta_cols).to_pylist()
        for r, p in zip(meta, problems):
            iid = r.get("image_id")
            seen.add(iid)
            if p is not None:
                rejects.append(reject_row(run_id, "audit", "", p[0], p[1],
                                          {k: r.get(k) for k in ("image_id", "channel", "tile_y", "tile_x", "index")}))
                if iid is not None:
                    bad.add(iid)
                continue
            s = stats.setdefault(iid, {"rows": 0, "keys": set(), "H": set(), "W": set(), "C": set(), "th": set(),
                                       "tw": set(), "layout": r["layout"]})
            s["rows"] += 1
            s["keys"].add((r["channel"], r["tile_y"], r["tile_x"], r["index"]))
            for k, c in (("H", "image_height"), ("W", "image_width"), ("C", "image_channels"), ("th", "tile_h"),
                         ("tw", "tile_w")):
                s[k].add(r[c])
            cols = per_image.setdefault(iid, {})
            for c in meta_cols:
                vals = cols.setdefault(c, [])
                if len(vals) < 4 and r[c] not in vals:
                    vals.append(r[c])
    for iid, s in stats.items():
        if iid in bad:
            continue
        summary = ImageSummary(iid, s["rows"], len(s["keys"]), s["layout"], (min(s["H"]), max(s["H"])),
                               (min(s["W"]), max(s["W"])), (min(s["C"]), max(s["C"])),
                               (min(s["th"]), max(s["th"]), min(s["tw"]), max(s["tw"])))
        p = image_problems(summary)
        if p is not None:
            bad.add(iid)
            rejects.append(reject_row(run_id, "audit", "", p[0], p[1], {"image_id": iid}))
    return bad, per_image, {i for i in seen if i is not None}
