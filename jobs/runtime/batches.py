"""The resumable encrypt run: images in committed batches, each a step an interrupted run restarts after.

A batch is decoded into tile channels on the executors, encrypted (the encryptor's state -- a pixel
strategy's cache, the public key, or the owner's secret key -- broadcast once per run), staged under
``_staging/<run_id>/``, and committed in three steps: its ciphertext files are moved into the table,
the owner map (jobs/runtime/owner.py) records the batch -- its images' ids, sources, content hashes and sizes,
its rejects, the files it added -- and ``_manifest.json`` is rewritten (status ``partial``) to list
them.  :meth:`EncryptRun.finish` removes what no batch lists and marks the run ``complete``.

The owner map is the owner's copy of the run: a rerun into the same ``--out`` with the same settings
resumes from it (the batches whose files are all in place are done; their images, encrypted or
rejected, are skipped).  The output handed to the cluster holds only the ciphertext table and a
manifest naming no owner path; the rejects (which name the owner's files) stay in the owner map.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import time
from dataclasses import asdict

import numpy as np

from hecore.errors import HepixError
from schemas.manifest import Counts, RunManifest
from schemas.stages import TILES, WRITTEN
from schemas.tables import CIPHERTEXTS, PARQUET_OPTIONS, spark_schema
from tasks.decode import DecodeOptions, decode_partition, histogram_partition
from tasks.encrypt import EncryptPayload, encrypt_partition, encrypt_to_files
from tasks.files import keep_reported
from tasks.rowchecks import expected_rows
from tasks.rows import RowMeta
from tasks.worker import ListAccumulator

from . import runinfo
from .frames import driver_frame
from .owner import OwnerMap, encrypted_before
from .runs import worker_report
from .session import spark_info
from .sources import read_image_list
from .sparktask import task_attempt
from .storage import MANIFEST, join, read_manifest
from .tablefiles import describe_table, table_checksums

log = logging.getLogger(__name__)

#: Test switch: the driver dies after committing this many batches.
CRASH_ENV = "HEPIX_TEST_CRASH_AFTER_BATCHES"
#: What Spark's binaryFile source gives (an empty batch is decoded from an empty frame of it).
BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


def settings_differ(old: dict, new: dict) -> str | None:
    """The first setting that differs between an output's run and this one, described, or None."""
    for k, v in new.items():
        if json.dumps(old.get(k), sort_keys=True) != json.dumps(v, sort_keys=True):
            shown = (lambda x: (x[:16] if isinstance(x, str) and k == "key_fingerprint" else x))
            return f"{k} {shown(old.get(k))!r} there, {shown(v)!r} now"
    return None


def write_from_workers(units, directory: str, access, **task_args) -> list[dict]:
    """Encrypt with :func:`encrypt_to_files`: the table's entries (name, rows, bytes, xxh3_xor, ct_bytes) as
    the tasks reported them, once the driver has checked that it sees each of them, at the reported size,
    in ``directory`` (reached through ``access``, :class:`tasks.filesystem.FileAccess`); every other
    file there removed (:func:`tasks.files.keep_reported`)."""
    fs, base = access.open(directory)
    fs.create_dir(base, recursive=True)
    written = units.mapInArrow(functools.partial(encrypt_to_files, directory=directory, access=access,
                                                 attempt=task_attempt, **task_args),
                               spark_schema(WRITTEN)).collect()
    return keep_reported(directory, written, access)


def workers_access(storage, staged: str, args):
    """How the Python workers reach ``staged`` (:meth:`jobs.runtime.storage.Storage.access`), or None for
    Spark's writer: ``--writer auto`` on a scheme the workers cannot reach; ``--writer workers`` there is an
    error."""
    try:
        return storage.access(staged)
    except HepixError as e:
        if args.writer == "workers":
            raise HepixError(f"--writer workers: {e}; use --writer spark or auto") from None
        return None


class EncryptRun:
    """One ``hepix encrypt`` run into ``out``: resume, batches, finish (see the module doc)."""

    def __init__(self, args, setup, spark, out, run_id: str, started, owner_dir: str):
        self.args, self.setup, self.spark, self.out = args, setup, spark, out
        self.storage = out.storage
        self.run_id, self.started = run_id, started
        self.owner_dir = owner_dir
        self.fingerprint = setup.keys.fingerprint
        self.settings = setup.resumable(args, self.fingerprint)
        self.strategy = setup.keys.strategy(setup.strategy, allow_leaky=args.allow_leaky,
                                            options=setup.strategy_options)
        sc = spark.sparkContext
        self.rebuilds = sc.accumulator([], ListAccumulator())
        self.tasks = sc.accumulator([], ListAccumulator())
        self.meta = RowMeta(run_id=run_id, layout=setup.layout.value, preset=setup.params.name,
                            key_fingerprint=self.fingerprint)
        self.id_key = secrets.token_bytes(32)        # this run's image ids; never written anywhere
        self.timings: dict[str, float] = {}
        self.owner: OwnerMap | None = None
        self.created = started.isoformat()
        self.files = {"ciphertexts": []}
        self.counts = Counts()
        self.runs = [run_id]
        self.unread: list[tuple[str, int, str, str]] = []     # (source, bytes, reason, detail): no decoding
        self.skipped = 0
        self.skipped_earlier = self.earlier_maps = 0     # --skip-encrypted: held by earlier runs' owner maps
        self.complete_before = False
        self.broadcast = self.token = None
        value = os.environ.get(CRASH_ENV)
        self.crash_after = int(value) if value else None

    # --- what is already there: resume, or start over (--overwrite) -------------------------------
    def _check_output(self, owner: OwnerMap) -> None:
        """The output directory holds nothing, or the run this owner map belongs to."""
        args, dst = self.args, self.out.out
        try:
            before = read_manifest(self.storage, dst)
        except HepixError:
            if args.overwrite:
                return
            raise
        if before is None or args.overwrite:
            return
        if before.job != "encrypt":
            raise HepixError(f"{dst} holds the output of `hepix {before.job}`; encrypt into another --out")
        if not owner.doc["runs"] or before.runs[:1] != owner.doc["runs"][:1]:
            raise HepixError(f"{dst} holds an encrypt run whose owner map is not in {self.owner_dir}: give the "
                             "--owner directory that run wrote, or --overwrite to redo everything")

    def resume(self) -> list[list[str]]:
        """The batches of images still to encrypt (paths), after what earlier runs committed."""
        args, dst = self.args, self.out.out
        listing = self.storage.input_files(args.input, args.recursive)   # a missing input fails before any output
        owner = OwnerMap.for_encrypt(self.owner_dir, out=args.out, input_=args.input, fingerprint=self.fingerprint,
                                     settings=self.settings, overwrite=args.overwrite)
        self.owner = owner
        self._check_output(owner)
        if owner.doc["batches"]:
            diff = settings_differ(owner.settings, self.settings)
            if diff:
                raise HepixError(f"{dst} holds encrypted images made with other settings ({diff}); a rerun adds "
                                 "to an output only with the same key, parameters, strategy and options: add "
                                 "--overwrite to redo everything, or choose another --out")
        present = self.storage.list_files(join(dst, "ciphertexts"))
        kept = owner.keep_batches(lambda b: all(present.get(e["name"]) == e["bytes"]
                                                for e in b["files"].get("ciphertexts", [])))
        self.complete_before = bool(kept) and owner.doc.get("status") == "complete"
        done = owner.sources()
        earlier, self.earlier_maps = encrypted_before(getattr(args, "skip_encrypted", None) or [], owner.directory)
        self.skipped_earlier = sum(1 for f in listing if f.path in earlier and f.path not in done)
        done |= earlier
        todo = [f.path for f in listing if not f.hidden and f.size > 0 and f.path not in done]
        self.unread = [(f.path, f.size, "hidden-name",
                        f"{f.path}: Spark's file sources skip names starting with '_' or '.' (or under such a "
                        "directory); rename it to encrypt it") for f in listing if f.hidden and f.path not in done]
        self.unread += [(f.path, 0, "empty-file", f"{f.path}: the file is empty (0 bytes)")
                        for f in listing if not f.hidden and f.size == 0 and f.path not in done]
        self.skipped = len(listing) - len(todo) - len(self.unread) - self.skipped_earlier
        if kept:
            self.files = {"ciphertexts": [e for b in kept for e in b["files"].get("ciphertexts", [])]}
            total = Counts()
            for b in kept:
                total = Counts(**{k: getattr(total, k) + int(b["counts"].get(k, 0)) for k in asdict(total)})
            self.counts = total
            self.runs = list(owner.doc["runs"]) + [self.run_id]
            self.timings = {k: float(v) for k, v in owner.doc.get("timings", {}).items()}
            self.created = owner.doc.get("created", self.created)
        if self.skipped_earlier:
            print(f"skipping {self.skipped_earlier} images that {self.earlier_maps} earlier owner maps hold "
                  "(--skip-encrypted)")
        if self.skipped:
            print(f"resuming: {self.skipped} images already done in {dst} ({len(kept)} batches of "
                  f"{len(owner.doc['runs'])} earlier runs); {len(todo) + len(self.unread)} to go "
                  "(--overwrite redoes them all)")
        # A scanning strategy builds its cache from the values of all the images it encrypts: one batch.
        size = len(todo) if self.strategy.needs_scan else args.batch_images
        return [todo[i:i + size] for i in range(0, len(todo), max(1, size))] or ([[]] if self.unread else [])

    def already_complete(self) -> bool:
        return self.complete_before

    # --- one batch ---------------------------------------------------------------------------------
    def _time(self, key: str, t0: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0

    def _decode(self, paths: list[str]):
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        a, s = self.args, self.setup
        opts = DecodeOptions(*s.tile, a.resize, tuple(a.convert), a.max_pixels, s.halo, id_key=self.id_key,
                             spots=s.spots, spot_results=s.spot_results)
        source = read_image_list(self.spark, paths) if paths else self.spark.createDataFrame([], BINARY_FILE_SCHEMA)
        decoded = source.mapInArrow(functools.partial(decode_partition, opts=opts), spark_schema(TILES))
        decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
        is_ok = F.col("reject_reason").isNull()
        # Plain sums, no countDistinct (which costs extra shuffle stages): every decoded image
        # has exactly one unit (tile 0, 0, channel 0), every rejected file exactly one reject row.
        first_unit = is_ok & (F.col("tile_y") == 0) & (F.col("tile_x") == 0) & (F.col("channel") == 0)
        stats = decoded.agg(
            F.sum(F.when(first_unit, 1).otherwise(0)).alias("images_ok"),
            F.sum(F.when(is_ok, 1).otherwise(0)).alias("units"),
            F.sum(F.when(is_ok & (F.col("channel") == 0), 1).otherwise(0)).alias("tiles"),
            F.sum(F.when(is_ok, F.col("h") * F.col("w")).otherwise(0)).alias("pixels"),
            F.sum(F.when(is_ok, 0).otherwise(1)).alias("rejected"),
        ).collect()[0]
        return decoded, decoded.where(is_ok), decoded.where(~is_ok), decoded.where(first_unit), stats

    def _broadcast_encryptor(self, ok, progress) -> None:
        """Prepare the strategy (a scan looks at every value first) and broadcast the encryptor's state once."""
        from pyspark.sql import functions as F

        if self.broadcast is not None:
            return
        strategy = self.strategy
        if strategy.needs_scan:
            progress.stage("scanning pixel values")
            hist = (ok.mapInArrow(histogram_partition, "value int, count long")
                    .groupBy("value").agg(F.sum("count").alias("count")).collect())
            values = np.zeros(256, dtype=np.int64)
            for r in hist:
                values[r["value"]] = r["count"]
            strategy.prepare(counts=values)
        else:
            strategy.prepare()
        s = self.setup
        self.broadcast = self.spark.sparkContext.broadcast(EncryptPayload(
            keys=s.keys.for_encryption(use_secret=s.use_secret), layout=s.layout, strategy=strategy.name,
            strategy_state=strategy.state() if strategy.name != "fresh" else None,
            allow_leaky=self.args.allow_leaky, use_secret=s.use_secret, compression=s.compression, store=s.store,
            binding=self.owner.binding_key(create=True) if s.bound else None, bind_unit=s.bind_unit,
            bind_modulus=s.bind_modulus, bind_table=s.bind_table, bind_spread=s.bind_spread))
        self.token = f"{self.run_id}/{self.broadcast._jbroadcast.id()}"

    def _encrypt(self, ok, n_units: int, staged: str) -> list[dict] | None:
        """Encrypt the batch's units into ``staged``; the files' entries when the Python workers wrote them."""
        sc, args = self.spark.sparkContext, self.args
        if not n_units:
            return None
        units = ok.repartition(args.partitions or max(1, min(n_units, sc.defaultParallelism * 4)))
        task_args = dict(token=self.token, broadcast=self.broadcast, meta=self.meta, rebuilds=self.rebuilds,
                         tasks=self.tasks)
        if args.writer != "spark":
            access = workers_access(self.storage, staged, args)
            if access is not None:
                return write_from_workers(units, staged, access, **task_args)
        cts = units.mapInArrow(functools.partial(encrypt_partition, **task_args), spark_schema(CIPHERTEXTS))
        cts.write.options(**PARQUET_OPTIONS["ciphertexts"]).mode("overwrite").parquet(staged)
        return None

    def encrypt_batch(self, b: int, paths: list[str], total: int, progress) -> None:
        """Decode, encrypt and commit batch ``b`` of ``total``: its files into the table, the owner map, the manifest."""
        import pyarrow as pa
        from pyspark.sql import functions as F

        stage_dir = join(self.out.staging, f"batch-{b:05d}")
        tag = f"{self.run_id}-b{b:05d}"
        label = f"batch {b + 1}/{total}: " if total > 1 else ""
        t0 = time.perf_counter()
        progress.stage(f"{label}decoding {len(paths)} images")
        decoded, ok, bad, firsts, stats = self._decode(paths)
        self._time("decode_seconds", t0)

        t0 = time.perf_counter()
        self._broadcast_encryptor(ok, progress)
        self._time("cache_build_seconds", t0)

        n_tiles, n_units = int(stats["tiles"] or 0), int(stats["units"] or 0)   # tile channels: the unit of work
        t0 = time.perf_counter()
        progress.stage(f"{label}encrypting {n_tiles} tiles ({int(stats['pixels'] or 0)} pixel values)")
        staged_cts = join(stage_dir, "ciphertexts")
        reported = self._encrypt(ok, n_units, staged_cts)
        self._time("encrypt_seconds", t0)

        progress.stage(f"{label}recording the batch")
        rejects = [{**r.asDict(), "run_id": self.run_id} for r in bad.select(
            "source", F.col("reject_stage").alias("stage"), F.col("reject_reason").alias("reason"),
            F.col("reject_detail").alias("detail"), "bytes").collect()]
        unread = self.unread if b == 0 else []
        rejects += [{"run_id": self.run_id, "source": src, "stage": "read", "reason": reason, "detail": detail,
                     "bytes": size} for src, size, reason, detail in unread]
        images = [r.asDict() for r in firsts.select("image_id", "source", "content_sha256", "image_height",
                                                      "image_width", "image_channels", "bytes", "spots").collect()]
        spots = [{"image_id": r["image_id"], "spots": r.pop("spots")} for r in images]
        decoded.unpersist()
        layout, (th, tw) = self.setup.layout.value, self.setup.tile
        for r in images:
            r.update(ciphertexts=expected_rows(layout, r["image_height"], r["image_width"], r["image_channels"],
                                               th, tw), run_id=self.run_id, batch=tag)

        # The workers' own reports of their files (checked against what the driver sees), or a pass over them.
        new_cts = ([{k: e[k] for k in ("name", "rows", "bytes", "xxh3_xor")} for e in reported]
                   if reported is not None else describe_table(self.spark, self.storage, staged_cts, checksums=True))
        rejected = int(stats["rejected"] or 0) + len(unread)
        encrypted = int(stats["images_ok"] or 0)
        if encrypted + rejected != len(paths) + len(unread) or len(images) != encrypted:
            raise HepixError(f"internal error: {len(paths) + len(unread)} input files in batch {b}, "
                             f"but {encrypted} encrypted + {rejected} rejected; the batch was not committed")
        n_cts = sum(e["rows"] for e in new_cts)
        s = self.setup
        fixed = s.keys.ciphertext_bytes() if not (s.use_secret or s.store or s.compression != "none") else None
        if fixed is not None or not n_cts:
            ct_bytes = n_cts * (fixed or 0)
        elif reported is not None:      # seeded, compressed, compact or planned ciphertexts: their sizes vary
            ct_bytes = sum(e["ct_bytes"] for e in reported)
        else:
            ct_bytes = int(self.spark.read.parquet(staged_cts).agg(F.sum(F.length("ct"))).collect()[0][0] or 0)
        moved = self._move_in("ciphertexts", new_cts, staged_cts, f"{tag}-")
        added = Counts(images_in=encrypted + rejected, images_encrypted=encrypted, images_rejected=rejected,
                       tiles=n_tiles, ciphertexts=n_cts, ciphertext_bytes=ct_bytes, rejects=rejected)
        self.counts = Counts(**{k: getattr(self.counts, k) + getattr(added, k) for k in asdict(added)})
        from schemas.tables import OWNER_IMAGES
        self.owner.doc["timings"] = self.timings
        self.owner.doc.setdefault("created", self.created)
        self.owner.commit_batch(tag, self.run_id, pa.Table.from_pylist(images, schema=OWNER_IMAGES), rejects,
                                {"ciphertexts": moved}, asdict(added),
                                spots=[r for r in spots if r["spots"] is not None])
        self.storage.write_text(join(self.out.out, MANIFEST), self.manifest("partial").to_json())
        log.info("committed batch %d of %s (%d images)", b, self.run_id, len(paths) + len(unread))
        if self.crash_after is not None and b + 1 >= self.crash_after:
            raise RuntimeError(f"{CRASH_ENV}={self.crash_after}: the driver stops here")

    def _move_in(self, table: str, entries: list[dict], staged: str, prefix: str) -> list[dict]:
        dst = self.out.out
        self.storage.mkdirs(join(dst, table))
        moved = []
        for e in entries:
            final = prefix + e["name"]
            self.storage.rename(join(staged, e["name"]), join(dst, table, final))
            moved.append({**e, "name": final})
        self.files[table].extend(moved)
        return moved

    # --- the manifest, and the end of the run ------------------------------------------------------
    def manifest(self, status: str) -> RunManifest:
        """The output's manifest: what the cluster is handed, so no owner path (``input``, ``output`` empty)."""
        s, a = self.setup, self.args
        return RunManifest(
            job="encrypt", run_id=self.run_id, status=status, created=self.created,
            finished=runinfo.now().isoformat(), input="", output="", layout=s.layout.value, strategy=s.label,
            security=self.strategy.security, preset=s.params.name, params=s.params.to_json(),
            key_fingerprint=self.fingerprint,
            options={"tile": list(s.tile), "halo": s.halo, "resize": a.resize, "conversions": list(a.convert),
                     **self.strategy.options(), "settings": self.settings,
                     **s.keys.encryption_options(use_secret=s.use_secret, compression=s.compression),
                     **({"store": s.store.to_json()} if s.store is not None else {}),
                     **({"bound": True} if s.bound else {}),
                     **({"bound_offsets": True} if s.offsets else {}),
                     **({"bound_slots": True} if s.bind_table else {})},
            counts=self.counts, timings=self.timings, workers=worker_report(self.rebuilds, self.tasks),
            versions=runinfo.versions(), spark=spark_info(self.spark), files=self.files,
            checksums=table_checksums(self.files), runs=self.runs)

    def finish(self) -> RunManifest:
        """The table has a file, nothing unlisted remains, the owner map and the manifest say ``complete``."""
        dst = self.out.out
        if not self.files["ciphertexts"]:
            staged = join(self.out.staging, "empty", "ciphertexts")
            driver_frame(self.spark, CIPHERTEXTS).coalesce(1).write.parquet(staged)
            entries = describe_table(self.spark, self.storage, staged, checksums=True)
            self._move_in("ciphertexts", entries, staged, f"{self.run_id}-empty-")
        listed = {e["name"] for e in self.files["ciphertexts"]}
        for name in self.storage.list_files(join(dst, "ciphertexts")):
            if name not in listed:      # a crashed run's batch, or the output --overwrite replaced
                self.storage.delete(join(dst, "ciphertexts", name))
        if self.storage.exists(join(dst, "rejects")):
            self.storage.delete(join(dst, "rejects"))        # an older layout's rejects named the owner's files
        manifest = self.manifest("complete")
        self.owner.doc["timings"] = self.timings
        self.owner.save(status="complete")
        self.storage.write_text(join(dst, MANIFEST), manifest.to_json())
        self.out.abort()                    # the staging area, now empty of anything committed
        return manifest
