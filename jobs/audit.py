"""`hepix audit`: distinguishers over a ciphertext table, run WITHOUT any key.

Thin: read the input run's manifest (its public parameters) -> for each image
channel, read its ciphertexts -> :func:`hecore.audit.audit_group` -> write the
``audit`` table, the pictures the attacker sees (pixel layout) and a manifest,
and print a short summary.  It plays the untrusted cluster: it is given no key
directory at all, only the table and the parameters recorded next to it.

The audit runs on one machine with pyarrow (no Spark session): the attacks
compare every ciphertext of an image channel with every other, which is one
process's work.  Local paths (or file://) only.
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
from hecore.audit.sealbytes import plain_layout
from hecore.context import PlainCodec, chain_primes
from hecore.errors import HepixError, ImageError
from hecore.layouts import Layout
from hecore.params import Params
from schemas.manifest import Counts, RunManifest
from schemas.tables import AUDIT

from . import runinfo
from .console import table

log = logging.getLogger(__name__)

DEFAULT_MAX_CTS = 4096
META_COLUMNS = ["image_id", "source", "content_sha256", "channel", "layout", "preset", "strategy", "security"]


def add_arguments(p) -> None:
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` or `hepix process` (local)")
    p.add_argument("--out", required=True, help="new directory: audit/ (Parquet), images/ (PNG), _manifest.json")
    p.add_argument("--images", help="the original images, to score how much of them the attacks recovered")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --images")
    p.add_argument("--seed", type=int, help="seed of the samples the tests draw (default: random)")
    p.add_argument("--max-ciphertexts", type=int, default=DEFAULT_MAX_CTS, metavar="N",
                   help="audit at most the first N ciphertexts of each image channel (whole tiles in table "
                        "order; default %(default)s: a 64x64 image in the pixel layout, ~0.5 GB at N=4096)")


def _local(path: str) -> Path:
    if "://" in path and not path.startswith("file://"):
        raise HepixError(f"hepix audit reads local paths; {path} is not one (copy the table locally first)")
    return Path(path.removeprefix("file://"))


def _originals(images: str, recursive: bool, manifest: RunManifest) -> dict[str, np.ndarray]:
    """The original images' pixels (preprocessed as encrypt did), by the file's sha256."""
    from hecore.images import ImagePolicy, load_image, preprocess

    opts = manifest.options or {}
    policy = ImagePolicy(conversions=frozenset(opts.get("conversions", [])))
    root = _local(images)
    files = [root] if root.is_file() else sorted(root.rglob("*") if recursive else root.glob("*"))
    out = {}
    for f in files:
        if not f.is_file():
            continue
        content = f.read_bytes()
        try:
            img = load_image(memoryview(content), source=str(f), policy=policy)
        except ImageError:
            continue
        if opts.get("resize"):
            img = preprocess(img, opts["resize"])
        out[hashlib.sha256(content).hexdigest()] = img.pixels
    return out


def run(args) -> int:
    src, dst = _local(args.input), _local(args.out)
    if not (src / "_manifest.json").is_file():
        raise HepixError(f"{args.input} holds no complete hepix run (no _manifest.json); audit the output "
                         "directory of `hepix encrypt` or `hepix process`")
    parent = RunManifest.from_json((src / "_manifest.json").read_text())
    if parent.job not in ("encrypt", "process"):
        raise HepixError(f"{args.input} holds a '{parent.job}' run; audit the output of encrypt or process")
    if dst.exists() and any(dst.iterdir()):
        raise HepixError(f"{args.out} exists and is not empty; choose a new directory")
    params = Params.from_json(parent.params)
    primes = chain_primes(params)                       # public: SEAL regenerates them from the parameters
    codec = None if params.is_integer else PlainCodec(params)
    truth_images = _originals(args.images, args.recursive, parent) if args.images else {}
    rng = np.random.default_rng(args.seed)
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix audit {run_id}: {args.input} ({parent.layout} layout, strategy {parent.strategy} labelled "
          f"{parent.security}, {params.name}) -> {args.out}; no key used")

    dataset = ds.dataset(str(src / "ciphertexts"), format="parquet")
    groups = dataset.to_table(columns=["image_id", "channel"]).group_by(["image_id", "channel"]).aggregate([])
    (dst / "images").mkdir(parents=True, exist_ok=True)
    rows, t_all = [], time.perf_counter()
    n_cts = 0
    for image_id, channel in sorted(zip(groups["image_id"].to_pylist(), groups["channel"].to_pylist())):
        flt = (pc.field("image_id") == image_id) & (pc.field("channel") == channel)
        if args.max_ciphertexts < 2:
            raise HepixError(f"--max-ciphertexts {args.max_ciphertexts}: the tests compare ciphertexts, give 2 or more")
        t = dataset.head(args.max_ciphertexts, filter=flt, columns=META_COLUMNS + ["y", "x", "w", "index", "ct"])
        t = t.combine_chunks()          # the tests need one buffer; row order does not matter to them
        n_cts += t.num_rows
        meta = {c: t[c][0].as_py() for c in META_COLUMNS}
        geom = truth = None
        if not Layout.parse(meta["layout"]).packed:
            idx, w = t["index"].to_numpy(), t["w"].to_numpy()
            geom = Geometry(t["y"].to_numpy() + idx // w, t["x"].to_numpy() + idx % w)
            pixels = truth_images.get(meta["content_sha256"])
            if pixels is not None:
                plane = pixels if pixels.ndim == 2 else pixels[:, :, channel]
                truth = plane[geom.rows, geom.cols]
        ct = t["ct"]
        arr = ct.chunk(0) if isinstance(ct, pa.ChunkedArray) else ct
        _, off_buf, data_buf = arr.buffers()
        off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        offsets = np.frombuffer(off_buf, dtype=off_type)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
        data, offsets = plain_layout(np.frombuffer(data_buf, dtype=np.uint8), offsets, params)
        for v in audit_group(data, offsets, primes, codec, geom, truth, rng):
            picture = None
            if v.picture is not None:
                picture = f"images/{image_id}-c{channel}-{v.test}.png"
                from hecore.images import array_to_image_bytes
                (dst / picture).write_bytes(array_to_image_bytes(v.picture, "PNG"))
            rows.append({"run_id": run_id, "input_run_id": parent.run_id, **{k: meta[k] for k in (
                "image_id", "source", "layout", "preset", "strategy", "security")}, "channel": int(channel),
                "ciphertexts": t.num_rows, "test": v.test, "verdict": v.verdict, "statistic": v.statistic,
                "detail": v.detail, "classes_found": v.classes_found, "classes_true": v.classes_true,
                "recovered_fraction": v.recovered_fraction,
                "exact_difference_fraction": v.exact_difference_fraction, "picture": picture,
                "seconds": v.seconds})
    seconds = time.perf_counter() - t_all
    (dst / "audit").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=AUDIT), dst / "audit" / "part-00000.parquet",
                   compression="zstd")
    manifest = RunManifest(
        job="audit", run_id=run_id, status="complete", created=started.isoformat(),
        finished=runinfo.now().isoformat(), input=args.input, output=args.out, layout=parent.layout,
        strategy=parent.strategy, security=parent.security, preset=parent.preset, params=parent.params,
        key_fingerprint=parent.key_fingerprint, ops=parent.ops, options={"images": args.images, "seed": args.seed},
        counts=Counts(images_in=len({r["image_id"] for r in rows}), ciphertexts=n_cts),
        timings={"audit_seconds": seconds}, versions=runinfo.versions(),
        parent={"job": parent.job, "run_id": parent.run_id, "output": parent.output})
    (dst / "_manifest.json").write_text(manifest.to_json())

    print(table(rows, [("source", "image", ""), ("channel", "ch", "d"), ("test", "test", ""),
                       ("verdict", "verdict", ""), ("statistic", "statistic", ".3f"),
                       ("recovered_fraction", "classes recovered", ".3f"),
                       ("exact_difference_fraction", "exact diffs", ".3f"), ("seconds", "s", ".1f")]))
    leaking = sorted({r["test"] for r in rows if r["verdict"] == Verdict.LEAKS})
    if leaking:
        print(f"LEAKS: {', '.join(leaking)} distinguish these ciphertexts without the key "
              f"(table labelled security={parent.security}); pictures in {args.out}/images/")
    else:
        print("no test distinguished these ciphertexts from fresh encryptions")
    print(f"audited {n_cts} ciphertexts in {seconds:.1f} s; table in {args.out}/audit/")
    return 0
