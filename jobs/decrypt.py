"""`hepix decrypt`: ciphertexts -> images and a metrics table (the data owner's job).

Decrypts every ciphertext, reassembles the images (applying the public
post-scale of the ops), and scores them against the original images given
with ``--images`` -- or, when ops were applied, against the originals with
the same ops applied in plaintext and the same single clipping at the end.

What it reads came back from the cluster, so nothing of it is believed: it reads exactly the files the
manifest lists, checks every row (tasks/rowchecks.py) against this key, the owner's settings (from the
owner map, ``--owner``: layout, tile, halo, pixel limit, and each image's id and size) and the run's
ops, and rejects what fails -- a row SEAL refuses, of another key or size, an id the owner never made,
values no image could decrypt to -- leaving its image out whole.  ``images_in = decrypted + rejected``.
It runs in a secret-holding session (jobs.runtime.session.secret_session).

The originals of ``--images`` are found through the owner map (by the SHA-256 of each file's bytes, which
the owner recorded); without one, by what decrypts: each decrypted image, rounded, is matched to the
original whose plaintext processing by the run's ops rounds to exactly the same pixels (so only where the
encrypted pipeline is exact, and never by a name the cluster could have given).

Each image is read, checked, decrypted, judged, assembled and scored in one task, planned by the row
groups that hold it (jobs/imagedecrypt.py); an input whose row groups do not allow that goes through
Spark's shuffle of the decrypted blocks instead (:func:`through_spark`).
"""
from __future__ import annotations

import functools
import logging
import math
import os
import time

import pyarrow as pa

from hecore.errors import HepixError, KeyMismatch
from hecore.images import DEFAULT_MAX_PIXELS
from schemas.manifest import Counts
from schemas.stages import DECRYPTED, IMAGES, ORIGINALS, OWNER_NAMES, REFERENCES
from schemas.tables import METRICS, spark_schema
from tasks.contactsheet import DIFF_GAIN, MAX_IMAGES, MAX_SIDE
from tasks.decode import originals_partition
from tasks.decrypt import assemble_group, decrypt_partition
from tasks.metrics import SCORED, assemble_and_score, metrics_partition

from .runtime.console import table
from .runtime.decryptinput import decode_options, expectation, owner_spots, sheet_ids, spot_checked
from .runtime.frames import driver_frame
from .runtime.inputcheck import reject_row
from .runtime.owner import OwnerMap
from .runtime.progress import Progress
from .runtime.runs import (
    add_reject_arguments,
    add_spark_arguments,
    cogroup_function,
    exit_status,
    rejects_place,
    table_function,
    table_place,
)
from .runtime.session import add_trust_argument
from .runtime.sources import read_images

log = logging.getLogger(__name__)


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="key directory WITH the secret key (decrypt reads secret.key and "
                        "ships it to its own executors: a local master only, unless --trusted-cluster)")
    p.add_argument("--input", required=True, help="output directory of `hepix encrypt` or `hepix process`")
    p.add_argument("--out", required=True, help="output directory: metrics/, rejects/, _manifest.json (and images/)")
    p.add_argument("--owner", metavar="DIR",
                   help="the owner map encrypt wrote (its --owner; by default <its --out>.owner): names the "
                        "results by their files, finds the originals, and rejects ids and sizes the owner never "
                        "made")
    p.add_argument("--images", help="the original images (as given to encrypt) to score against: found through "
                        "--owner, or without it by their exact processed pixels (exact op chains only); for a "
                        "match run, where the query's original is read to check the ringers' distances")
    p.add_argument("--png", action="store_true", help="also write the decrypted images as PNG (local --out only)")
    p.add_argument("--contact-sheet", metavar="FILE",
                   help="also draw a PNG contact sheet at FILE (local): for each image its original, the same ops "
                        f"done in plaintext, the decrypted image and their difference (x{DIFF_GAIN}), captioned with "
                        f"its MSE/PSNR/SSIM and ciphertext bytes; the first {MAX_IMAGES} images by name, drawn "
                        f"downscaled when larger than {MAX_SIDE} px on a side. Needs --images")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --images")
    p.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                   help="without --owner: the largest image (pixels) the rows may claim (default %(default)s); with "
                        "--owner, the limit encrypt was given")
    p.add_argument("--flood-std", type=float, default=0.0, metavar="S",
                   help="noise flooding before anything leaves the key owner (Li-Micciancio 2021): add Gaussian "
                        "noise of standard deviation S (pixel levels; distance units for match runs; score units "
                        "for inference runs) to every decrypted value; 0 = off (default). See docs/security.md, "
                        "'Noise flooding'")
    p.add_argument("--no-integrity", action="store_true",
                   help="skip the owner's spot checks (with --owner, every image is otherwise compared at the "
                        "secret positions encrypt kept with the op chain's result, and rejected as 'integrity' "
                        "when a value differs)")
    p.add_argument("--spots-only", action="store_true",
                   help="with --owner: decrypt only the ciphertexts that hold values the spot checks compare and "
                        "check them, so a run can be accepted (or not) before a full decrypt; the metrics say "
                        "per image how many positions passed and how many ciphertexts were decrypted, and carry "
                        "no image quality (`hepix verify --owner` runs it)")
    p.add_argument("--expect-ops", action="append", metavar="SPEC",
                   help="the op chain the cluster was asked to run (repeat per op, in order; --expect-ops '' for "
                        "none; a match's or an inference's one op, infer:MODEL[,task=T]): decrypt refuses an input "
                        "run that records another, before decrypting anything")
    add_spark_arguments(p)
    add_trust_argument(p)
    add_reject_arguments(p)


def check_arguments(args) -> None:
    """Refuse bad decrypt arguments before any key is read."""
    if not (args.flood_std >= 0 and args.flood_std != float("inf")):
        raise HepixError(f"--flood-std {args.flood_std}: give a finite standard deviation >= 0")
    if args.png and "://" in args.out and not args.out.startswith("file://"):
        raise HepixError("--png writes image files with plain file I/O; give a local --out")
    if args.max_pixels < 1:
        raise HepixError(f"--max-pixels {args.max_pixels}: must be 1 or more")
    if args.spots_only:
        given = [flag for flag, on in (("--images", args.images), ("--png", args.png),
                                       ("--contact-sheet", args.contact_sheet), ("--no-integrity", args.no_integrity),
                                       ("--flood-std", args.flood_std)) if on]
        if not args.owner or given:
            raise HepixError("--spots-only decrypts only what the owner's spot checks compare: give --owner, "
                             + (f"and drop {', '.join(given)}" if given else "the owner map encrypt wrote"))
    if args.contact_sheet is not None:
        if not args.images:
            raise HepixError(f"--contact-sheet {args.contact_sheet}: the sheet shows each image beside its original "
                             "and the plaintext-processed reference; give the originals with --images")
        if "://" in args.contact_sheet or os.path.isdir(args.contact_sheet):
            raise HepixError(f"--contact-sheet {args.contact_sheet}: give the path of a local PNG file to write")
    check_outputs(args)


def check_outputs(args) -> None:
    """Refuse, before any key is read, an ``--out`` that exists and is not empty, and an ``--out`` or
    ``--contact-sheet`` inside the input, the keys, the owner map or any key directory, owner map or run;
    a contact sheet over anything but an earlier contact sheet (jobs/runtime/places.py)."""
    from .runtime import places

    where = places.guarded(input=args.input, keys=args.keys, owner=args.owner)
    places.check_new_out(args.out)
    places.check_location(args.out, "--out", where)
    if args.contact_sheet is not None:
        check_sheet_path(args, where)


def check_sheet_path(args, where=None) -> None:
    """``--contact-sheet``'s path checked (jobs/runtime/places.py): again just before the sheet is written."""
    from tasks.contactsheet import is_contact_sheet

    from .runtime import places

    where = where if where is not None else places.guarded(input=args.input, keys=args.keys, owner=args.owner)
    tables = [places.Guarded(f"{args.out.rstrip('/')}/{t}", "a table of --out (its readers would take the "
                             "sheet in)") for t in OUT_TABLES]
    places.check_side_file(args.contact_sheet, "--contact-sheet", list(where) + tables, own_out=args.out,
                           replaceable=is_contact_sheet)


#: The directories a decrypt writes in its ``--out`` that readers take whole (a contact sheet stays out).
OUT_TABLES = ("metrics", "rejects", "distances", "predictions", "inference_metrics", "_staging", "_trash")


def load_owner(args, fingerprint: str) -> OwnerMap | None:
    """The owner map of ``--owner``, made under this key, or None without ``--owner``."""
    if not args.owner:
        return None
    owner = OwnerMap.load(args.owner)
    if owner.fingerprint != fingerprint:
        raise KeyMismatch(f"the owner map {args.owner} was written for key {owner.fingerprint[:16]}, the key "
                          f"directory holds {fingerprint[:16]}; use the owner map of this key's encrypt run")
    return owner


def originals(run, owner: OwnerMap | None):
    """The reference images of ``--images``, decoded and preprocessed as encrypt did -- with the owner's
    settings; without an owner map, the manifest's resize and conversions (checked against ``--max-pixels``)
    -- keyed by content and by their processed result."""
    dopts = decode_options(run, owner)
    return read_images(run.spark, run.args.images, run.args.recursive).mapInArrow(
        functools.partial(originals_partition, opts=dopts, ops=tuple(run.parent.ops), preset=run.parent.preset,
                          match_key=owner is None),
        spark_schema(ORIGINALS))


def owner_names(run, owner: OwnerMap | None, ids: list[str]):
    """(image_id, source, content_sha256) of the decrypted images: the owner map's, or the id alone."""
    if owner is None:
        rows = [{"image_id": i, "source": i, "content_sha256": ""} for i in ids]
    else:
        known = owner.images()
        rows = [{"image_id": i, "source": known[i].source if i in known else i,
                 "content_sha256": known[i].content_sha256 if i in known else ""} for i in ids]
    return driver_frame(run.spark, OWNER_NAMES, rows)


def references(run, owner: OwnerMap, ids: list[str]):
    """The originals of ``--images`` by image id (REFERENCES): each file found by the SHA-256 of its bytes
    that the owner map recorded for the id; an id without one has no row."""
    from pyspark.sql import functions as F

    known = owner.images()
    pairs = [(i, known[i].content_sha256) for i in ids if i in known and known[i].content_sha256]
    if not run.args.images or not pairs:
        return driver_frame(run.spark, REFERENCES)
    by_id = driver_frame(run.spark, pa.schema([("image_id", pa.string()), ("content_sha256", pa.string())]), pairs)
    found = originals(run, owner).dropDuplicates(["content_sha256"])
    return found.join(F.broadcast(by_id), "content_sha256").select(*REFERENCES.names)


def decrypt_work(run, keys=None, spots_only=None):
    """The partition function that decrypts ciphertext rows into DECRYPTED blocks (the secret key goes to
    the owner's own executors in a broadcast of ``keys``, by default :meth:`for_decryption`): run in the row
    checks' task (tasks/rowchecks.py).  ``spots_only``: the owner's spot samples, when only what they check
    is decrypted (``--spots-only``)."""
    bc, token = run.broadcast(keys if keys is not None else run.keys.for_decryption())
    return functools.partial(decrypt_partition, token=token, broadcast=bc, rebuilds=run.rebuilds, tasks=run.tasks,
                             flood_std=run.args.flood_std, spots_only=spots_only,
                             binding=getattr(run, "binding", None))


def decrypt_states(run, keys) -> tuple:
    """What :func:`decrypt_work` builds in each worker from ``keys`` (for the warm-up)."""
    from tasks.decrypt import build_decryptor

    bc, token = run.broadcast(keys)
    return ((token, bc, build_decryptor),)


def write_contact_sheet(run, rows: list[dict], drawn: dict[str, bytes]) -> None:
    """Draw the contact sheet of ``--contact-sheet`` (tasks/contactsheet.py) from the committed metrics
    ``rows`` and the panels of the images ``drawn``, and say where it is."""
    from tasks.contactsheet import draw, legend, sheet_rows

    path = run.args.contact_sheet
    sheet = sheet_rows(rows, drawn)
    if not sheet:
        print(f"no contact sheet: none of the decrypted images was found among --images {run.args.images}")
        return
    first = (f"hepix decrypt {run.run_id}: {run.args.input}, key {run.fingerprint[:16]}, "
             f"{run.parent.layout} layout, preset {run.parent.preset}")
    header = [first, legend()]
    try:
        check_sheet_path(run.args)
    except HepixError as e:
        raise type(e)(f"{e}; the run itself is committed in {run.args.out}") from None
    try:
        draw(sheet, path, header)
    except OSError as e:
        raise HepixError(f"--contact-sheet {path}: cannot write it ({e.strerror or e}); the run itself is "
                         f"committed in {run.args.out}") from None
    print(f"contact sheet: {path} ({len(sheet)} of {len(rows)} images: original | plaintext-processed | "
          f"decrypted | difference x{DIFF_GAIN})")


def metrics_plan(run, values, png_dir: str | None, owner: OwnerMap | None, ids: list[str]):
    """Reassemble each image from its decrypted blocks ``values`` (DECRYPTED), join its names and reference
    and score it: SCORED rows.

    Each ciphertext was decrypted in the task that read and checked it, into one block of values
    (:func:`decrypt_work`); the blocks of an image are grouped by its id.  With an owner map the
    original's id is known before anything is decrypted, so each image is assembled and scored in one task
    (its blocks cogrouped with its original): the image itself never goes through Spark.  Without one, the
    assembled image is matched to its original by what it decrypts to, then scored."""
    from pyspark.sql import functions as F

    limit = 3 * int(expectation(run, owner).max_pixels)
    drawn = sheet_ids(run.args, owner, ids)
    if owner is not None:
        known = owner.images()
        names = {i: (known[i].source, known[i].content_sha256) if i in known else (i, "") for i in ids}
        score = cogroup_function(assemble_and_score, names=names, run_id=run.run_id, png_dir=png_dir,
                                 max_values=limit, sheet_ids=drawn, spots=owner_spots(run, owner, ids),
                                 spots_only=run.args.spots_only)
        return (values.groupBy("image_id").cogroup(references(run, owner, ids).groupBy("image_id"))
                .applyInArrow(score, spark_schema(SCORED)))
    images = values.groupBy("image_id").applyInArrow(table_function(assemble_group, max_values=limit),
                                                     spark_schema(IMAGES))
    images = images.join(F.broadcast(owner_names(run, None, ids)), "image_id", "left")
    if run.args.images:
        found = originals(run, None).dropDuplicates(["result_sha256"]).withColumnRenamed(
            "content_sha256", "orig_sha256")
        images = (images.join(found, "result_sha256", "left")
                  .withColumn("source", F.coalesce("orig_source", "source"))
                  .withColumn("content_sha256", F.coalesce("orig_sha256", "content_sha256"))
                  .drop("orig_source", "orig_sha256"))
    else:
        for name, type_ in (("original", "binary"), ("orig_height", "int"), ("orig_width", "int"),
                            ("orig_channels", "int")):
            images = images.withColumn(name, F.lit(None).cast(type_))
    return images.mapInArrow(functools.partial(metrics_partition, run_id=run.run_id, png_dir=png_dir,
                                               sheet_ids=drawn), spark_schema(SCORED))


def through_spark(run, png_dir: str | None, progress):
    """Decrypt through Spark's shuffle, where the input's row groups do not allow a task per image
    (jobs/imagedecrypt.py): one pass reads every ciphertext, checks it and decrypts it if it passes
    (tasks/rowchecks.py) into a block of its tile's values; the blocks of each good image are then grouped
    by image, assembled and scored (:func:`metrics_plan`).  ``check_seconds`` covers the pass and the
    per-image decisions, ``scored_seconds`` assembling and scoring."""

    from .imagedecrypt import Decrypted

    owner, t0 = run.owner, time.perf_counter()
    keys = run.keys.for_decryption()
    only = owner_spots(run, owner, list(owner.spots())) if run.args.spots_only else None
    checked = run.checked_input("decrypt", expectation(run, owner), keys=keys, owner=owner,
                                work=decrypt_work(run, keys, only), work_schema=DECRYPTED, broadcast=run.broadcast(keys),
                                states=decrypt_states(run, keys))
    timings = {"check_seconds": time.perf_counter() - t0}
    progress.stage("assembling and scoring")
    scored_dir = run.out.table("_scored")
    try:
        run.write(metrics_plan(run, checked.df, png_dir, owner, checked.good_ids), "_scored", "metrics")
    finally:
        checked.release()
    timings["scored_seconds"] = time.perf_counter() - t0 - timings["check_seconds"]
    # the scored rows (one per image and reference) read once: the metrics rows, the images rejected while
    # they were assembled and scored, and the panels of the contact sheet
    every = [r.asDict() for r in run.spark.read.parquet(scored_dir).collect()]
    drawn = {} if run.args.contact_sheet is None else {
        r["image_id"]: r["sheet_panels"] for r in every if r["sheet_panels"] is not None}
    return Decrypted(checked, every, drawn, timings)


def binding_of(run, owner: OwnerMap | None):
    """What ties a run's ciphertexts to their places (:class:`hecore.binding.Binding`: the owner map's key and
    each image's channels at encrypt): the check values of ``--bind`` when decrypt checks the images; the keyed
    offsets of a chain declared at encrypt always (decrypt removes them; it compares only when it checks).
    None for a run bound by neither.  A run whose manifest says it holds keyed offsets needs its owner map."""
    from hecore.binding import Binding

    unit = offset_unit_of(owner) if owner is not None else None
    modulus = offset_modulus_of(owner, run.keys.params) if owner is not None else None
    table = table_of(owner) if owner is not None else None
    if table is None and run.parent.options.get("bound_slots"):
        raise HepixError(f"{run.args.input} holds its pixels among keyed check slots that bind its ciphertexts to "
                         "their places (encrypt --for-op binds a chain of 8-bit tables by default): decrypt puts "
                         "them back in order with the key its owner map keeps; give --owner DIR, the owner map "
                         "encrypt wrote")
    if unit is None and modulus is None and run.parent.options.get("bound_offsets"):
        raise HepixError(f"{run.args.input} holds keyed offsets that bind its ciphertexts to their places (encrypt "
                         "--for-op binds by default): decrypt removes them with the key its owner map keeps; give "
                         "--owner DIR, the owner map encrypt wrote")
    checked = spot_checked(run, owner)
    key = (owner.binding_key() if owner is not None and (checked or unit is not None or table is not None)
           else None)
    if key is None:
        if unit is not None or modulus is not None or table is not None:
            raise HepixError(f"the owner map {owner.directory} records keyed "
                             f"{'check slots' if table is not None else 'offsets'} but holds no binding key "
                             f"({owner.directory}/binding.key): the run cannot be decrypted exactly without it")
        return None
    return Binding(key, {i: k.image_channels for i, k in owner.images().items()}, unit=unit, check=checked,
                   modulus=modulus, table=table, spread=owner.settings.get("bind_spread"))   # range: SETTINGS


def table_of(owner: OwnerMap) -> bytes | None:
    """The table whose keyed check slots the owner map records (a chain of 8-bit tables declared at encrypt:
    :mod:`hecore.slotchecks`); None when the run has none.  The settings' schema checked its form."""
    given = owner.settings.get("bind_table")
    return None if given is None else bytes.fromhex(given)


def offset_modulus_of(owner: OwnerMap, params) -> int | None:
    """The plaintext modulus the owner map records modular offsets under (BFV/BGV ``encrypt --for-op``:
    :func:`hecore.binding.modular_offsets_of`), checked against the keys' own t; None when the run has none."""
    t = owner.settings.get("bind_modulus")
    if t is None:
        return None
    if t != getattr(params, "plain_modulus", None):
        raise HepixError(f"the owner map {owner.directory} records keyed offsets mod {t!r}, the keys' plaintext "
                         f"modulus is {getattr(params, 'plain_modulus', None)}: the map was changed, or is another "
                         "key's")
    return int(t)


def offset_unit_of(owner: OwnerMap) -> float | None:
    """The keyed offsets' size the owner map records (``encrypt --for-op``: :func:`hecore.binding.offset_unit`),
    checked: a power of two from 2^-40 to 1/4; None when the run has none."""
    unit = owner.settings.get("bind_unit")
    if unit is None:
        return None
    if not isinstance(unit, float) or not 2.0 ** -40 <= unit <= 0.25 or math.frexp(unit)[0] != 0.5:
        raise HepixError(f"the owner map {owner.directory} records keyed offsets of {unit!r}; a power of two from "
                         "2^-40 to 1/4 was written: the map was changed")
    return unit


def spots_report(run, rows: list[dict], late: list[dict], rejected: set, decrypted: int) -> int:
    """What ``--spots-only`` found, printed: each image's positions checked and ciphertexts decrypted, the
    images that failed, and the verdict; 0 when every image was checked and passed, else 1."""
    print(table(rows, [("source", "image", ""), ("ops", "ops", ""), ("spot_positions", "positions", "d"),
                       ("spot_values", "values", "d"), ("ciphertexts", "cts decrypted", "d")]))
    unchecked = [r["source"] for r in rows if not r["spot_positions"]]
    whole = sum(1 for r in rows if r["spot_positions"] == r["width"] * r["height"])
    failed = [r for r in late if r["reject_reason"] == "integrity"]
    total = sum(k.ciphertexts for k in run.owner.images().values())
    for r in failed[:20]:
        print(f"  {r['source']}: integrity: {r['reject_detail']}")
    print(f"spot-checked {len(rows) - len(unchecked)} images ({whole} at every pixel: ringers), decrypting "
          f"{decrypted} of the owner's {total} ciphertexts: {len(failed)} failed (integrity), "
          f"{len(rejected) - len(failed)} rejected otherwise, "
          f"{len(unchecked)} with nothing to check (no sample kept, or a chain no sample reaches)")
    accepted = not rejected and not unchecked and rows
    print("verdict: " + ("every image passed its spot checks" if accepted
                         else "not accepted: decrypt in full only what you trust, or run the chain again"))
    return 0 if accepted else 1


def run(run) -> int:
    """``hepix decrypt`` of images (the key owner's job): ``metrics`` (and PNGs) from an encrypt or process run:
    by image (jobs/imagedecrypt.py) where the input's row groups allow it, else through Spark's shuffle
    (:func:`through_spark`)."""
    from .imagedecrypt import by_image

    if run.args.no_integrity:
        log.warning("decrypt --no-integrity: the results are not spot-checked against the owner's samples")
    run.binding = binding_of(run, run.owner)
    if run.owner is not None:           # the owner's images as the input holds them (grey: one channel)
        run.owner = run.owner.processed_by(run.parent.ops, run.parent.preset)
    args, parent, owner = run.args, run.parent, run.owner
    png_dir = None
    if args.png:
        png_dir = os.path.join(args.out.removeprefix("file://"), "_staging", run.run_id, "images")
        os.makedirs(png_dir, exist_ok=True)
    with Progress(run.spark, "decrypt", enabled=not args.quiet) as progress:
        t0 = time.perf_counter()
        progress.stage("checking, decrypting and scoring the images")
        done = by_image(run, png_dir)
        if done is None:
            progress.stage("checking and decrypting the input rows")
            done = through_spark(run, png_dir, progress)
        checked, every, drawn = done.checked, done.every, done.drawn
        run.timings.update(done.timings)
        run.timings["decrypt_seconds"] = time.perf_counter() - t0
        rows = sorted(({n: r[n] for n in METRICS.names} for r in every if r["reject_reason"] is None),
                      key=lambda r: r["source"])
        run.write_rows("metrics", rows, METRICS)
        late = [r for r in every if r["reject_reason"] is not None]
        rejects = list(checked.rejects)
        rejects += [reject_row(run.run_id, "decrypt", "", r["reject_reason"], r["reject_detail"],
                               {"image_id": r["image_id"]}) for r in late]
        seen = checked.bad_images | set(checked.good_ids)
        missing = sorted(set(owner.images()) - seen) if owner is not None else []
        rejects += [reject_row(run.run_id, "decrypt", "", "missing-image",
                               "the owner encrypted this image, the input has none of its ciphertexts",
                               {"image_id": i}) for i in missing]
        known = owner.images() if owner is not None else {}
        for r in rejects:                              # the owner's names for what it recognises, else the id
            if r.get("image_id") in known:
                r["source"] = known[r["image_id"]].source
            elif not r["source"]:
                r["source"] = r.get("image_id") or ""
        run.write_rejects(rejects)
        files, checksums = run.describe({"metrics": False, "rejects": False})
    n_cts = sum(r["ciphertexts"] for r in rows)
    rejected = checked.bad_images | {r["image_id"] for r in late} | set(missing)
    images_in = checked.images + len(missing)
    counts = Counts(images_in=images_in, images_decrypted=len(rows), ciphertexts=n_cts,
                    ciphertext_bytes=sum(r["ciphertext_bytes"] for r in rows),
                    images_rejected=len(rejected), rejects=len(rejects))
    if counts.images_decrypted + counts.images_rejected != counts.images_in:
        raise HepixError(f"internal error: {images_in} images in, {len(rows)} decrypted and {len(rejected)} "
                         "rejected; nothing was committed")
    options = {**parent.options, "images": args.images, "flood_std": args.flood_std, "owner": owner is not None,
               "integrity": spot_checked(run, owner), "spots_only": args.spots_only}
    manifest = run.manifest(options=options, counts=counts, files=files, checksums=checksums)
    run.commit(manifest, ["metrics", "rejects"] + (["images"] if png_dir else []))
    if args.spots_only:
        return spots_report(run, rows, late, rejected, n_cts)
    print(table(rows, [("source", "image", ""), ("ops", "ops", ""), ("reference", "reference", ""),
                       ("mse", "MSE", ".3f"), ("psnr", "PSNR dB", ".2f"), ("ssim", "SSIM", ".4f"),
                       ("max_abs_err", "max err", ".1e"), ("exact_fraction", "exact", ".4f"),
                       ("ciphertexts", "cts", "d"), ("spot_positions", "spot-checked", "d"),
                       ("decrypt_seconds", "decrypt s", ".2f")]))
    print(f"decrypted {counts.images_decrypted} images ({n_cts} ciphertexts) in {run.timings['decrypt_seconds']:.1f} s"
          f"{table_place(args, 'metrics')}")
    if args.contact_sheet is not None:
        write_contact_sheet(run, rows, drawn)
    if rejects:
        print(f"{len(rejected)} images were not decrypted ({len(rejects)} rejects rows: rows or images that failed "
              f"their checks); the reasons are listed in {rejects_place(args)}")
    return exit_status(args, len(rejects))
