"""The owner map: which image id of an encrypt run is which of the owner's files, kept by the owner.

The ciphertext table handed to the cluster names images by random ids only.  What the owner needs to
find the originals and name the results stays in a directory of its own, never inside the output
handed to the cluster (``hepix encrypt --owner DIR``; by default ``<--out>.owner`` next to a local
output)::

    OWNER/                      mode 0700
      owner.json                0600: the encrypt runs, the key fingerprint, the owner's input and
                                output, the settings, and every committed batch: its tag, the files
                                it added to the output (names, rows, bytes, checksums) and its counts
      images/<batch>.parquet    0600: schemas.tables.OWNER_IMAGES -- id, source, content SHA-256, size
      spots/<batch>.parquet     0600: schemas.tables.OWNER_SPOTS -- each image's secret spot sample
                                (hecore/integrity.py), what decrypt checks the cluster's result against
      rejects/<batch>.parquet   0600: encrypt's rejects (they name the owner's files)

``encrypt-digits`` writes one of the same shape (jobs/runtime/inferringers.py): its settings' layout
``digits``, an images row per batch of digits, and in ``spots/`` each batch's ringers (hecore/infer/ringers.py).

It is the owner's copy of the run: a resumed encrypt reads which images are done from here (and
rebuilds the output's manifest from the batches recorded here); ``decrypt --owner`` and ``audit
--owner`` read the ids, sources, content hashes and sizes from here, and check what comes back from
the cluster against them (an id the owner never made, a size it never encrypted).

Local paths only: the map is written with plain file I/O on the machine that runs the driver.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hecore import binding, integrity
from hecore.errors import OwnerMapError
from schemas.tables import IMAGE_ID, OWNER_IMAGES, OWNER_SPOTS, REJECTS

log = logging.getLogger(__name__)

OWNER_JSON = "owner.json"
#: The largest owner.json read (a batch record per committed batch).
MAX_OWNER_JSON = 256 * 2**20
FORMAT = 1
#: The codecs the map's tables are written with (zstd; older maps: pyarrow's default, snappy).
OWNER_CODECS = frozenset({"ZSTD", "SNAPPY", "UNCOMPRESSED"})
#: The most images one batch of an encrypt run reads (far above --batch-images' default of 256).
MAX_BATCH_ROWS = 10_000_000
#: The binding key of a run encrypted with --bind (hecore.binding), in the map's directory, 0600.
BINDING_KEY = "binding.key"
#: The most bytes one image's spot sample takes in the map (hecore.integrity: the default takes ~10-110 KB, a
#: ringer one byte per pixel value).
SPOT_ROW_BYTES = integrity.MAX_SAMPLE_BYTES
_TAG = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}-b[0-9]{5}$")
_ID = re.compile(IMAGE_ID)


def local_path(path: str) -> Path | None:
    """``path`` as a local path, or None when it has another scheme (hdfs://, s3a://)."""
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(path.removeprefix("file://").removeprefix("file:"))


def default_dir(out: str) -> str | None:
    """Where encrypt keeps the owner map of ``--out`` when ``--owner`` is not given: ``<out>.owner``
    beside a local output; None for a remote output (it must be named)."""
    p = local_path(out)
    return None if p is None else str(p.parent / (p.name.rstrip("/") + ".owner"))


def _private_dir(p: Path) -> None:
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(p, 0o700)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` 0600 through a temporary file and a rename (readers never see half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _write_table(path: Path, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    _write_private(path, sink.getvalue().to_pybytes())


@dataclass(frozen=True)
class OwnerImage:
    image_id: str
    source: str
    content_sha256: str
    image_height: int
    image_width: int
    image_channels: int
    ciphertexts: int


class OwnerMap:
    """An owner map directory: read it (decrypt, audit), or build it batch by batch (encrypt)."""

    def __init__(self, directory: Path, doc: dict, shape=None):
        self.directory = directory
        self.doc = doc
        self._images: dict[str, OwnerImage] | None = None
        self._shape = shape             # (h, w, c) -> the size a processed run holds (processed_by)

    def processed_by(self, specs, preset) -> "OwnerMap":
        """This map as a run that applied the ops ``specs`` holds its images: every size through the chain
        (:func:`hecore.ops.spec.recorded_shape`: ``grey`` leaves one channel); the rest as recorded."""
        from hecore.ops.spec import recorded_shape

        return OwnerMap(self.directory, self.doc, lambda h, w, c: recorded_shape(list(specs), preset, h, w, c))

    # --- reading ---------------------------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str) -> "OwnerMap":
        d = local_path(directory)
        if d is None:
            raise OwnerMapError(f"--owner {directory}: the owner map is a local directory of the owner's machine")
        path = d / OWNER_JSON
        if not path.is_file():
            raise OwnerMapError(f"{directory} holds no owner map ({OWNER_JSON}): give the --owner directory the "
                                "encrypt run wrote (by default <its --out>.owner)")
        from schemas.jsondoc import parse

        try:
            size = path.stat().st_size
            if size > MAX_OWNER_JSON:
                raise ValueError(f"{size} bytes is more than an owner map holds")
            with open(path, "rb") as f:           # its size, plus a byte to see a file that grew since
                doc = parse(f.read(size + 1), max_bytes=MAX_OWNER_JSON)
            _check_doc(doc)
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise OwnerMapError(f"{path} is not an owner map hepix can read ({str(e).splitlines()[0][:200]})") from None
        return cls(d, doc)

    @property
    def settings(self) -> dict:
        return self.doc["settings"]

    @property
    def fingerprint(self) -> str:
        return self.doc["key_fingerprint"]

    def images(self) -> dict[str, OwnerImage]:
        """Every image the committed batches encrypted, by id."""
        if self._images is None:
            out = {}
            tables = self._read_all([(b["images"], _batch_rows(b)) for b in self.doc["batches"]], OWNER_IMAGES)
            for batch, table in zip(self.doc["batches"], tables):
                for r in table.to_pylist():
                    image = OwnerImage(**{k: r[k] for k in OwnerImage.__dataclass_fields__})
                    if not _plausible(image):
                        raise OwnerMapError(f"{self.directory / batch['images']}: image "
                                            f"{str(image.image_id)[:80]!r} is not a record encrypt writes "
                                            "(its id, size or ciphertext count); the owner map was changed")
                    if self._shape is not None:
                        h, w, c = self._shape(image.image_height, image.image_width, image.image_channels)
                        image = dataclasses.replace(image, image_height=h, image_width=w, image_channels=c)
                    out[image.image_id] = image
            self._images = out
        return self._images

    def get(self, image_id: str) -> OwnerImage | None:
        return self.images().get(image_id)


    def spots(self) -> dict[str, bytes]:
        """The spot samples the committed batches kept (hecore.integrity), by image id: bytes, checked when used."""
        files = [(b["spots"], _batch_rows(b)) for b in self.doc["batches"] if b.get("spots")]
        out = {}
        for table in self._read_all(files, OWNER_SPOTS, row_bytes=SPOT_ROW_BYTES):
            for image_id, data in zip(table.column("image_id").to_pylist(), table.column("spots").to_pylist()):
                out[image_id] = data
        return out

    def binding_key(self, create: bool = False) -> bytes | None:
        """The run's binding key (:mod:`hecore.binding`, ``encrypt --bind``): ``binding.key``, 0600, read only
        if safe to trust; made with ``create`` when there is none; None when the run is not bound."""
        from hecore.secretfile import read_owner_only, write_private

        path = self.directory / BINDING_KEY
        if not path.exists() and not path.is_symlink():
            if not create:
                return None
            _private_dir(self.directory)
            write_private(path, binding.new_key(), 0o600)
            if not (self.directory / OWNER_JSON).is_file():     # a map from now on: a retry finds it, and the key
                self.save()
        data = read_owner_only(path, what="the owner map's binding key", missing=f"{path} is missing")
        if len(data) != binding.KEY_BYTES:
            raise OwnerMapError(f"{path} holds {len(data)} bytes, not a binding key of {binding.KEY_BYTES}")
        return data

    def rejects_table(self) -> pa.Table:
        parts = self._read_all([(b["rejects"], _batch_rows(b)) for b in self.doc["batches"] if b.get("rejects")],
                               REJECTS)
        return pa.concat_tables(parts) if parts else REJECTS.empty_table()

    def _read_all(self, files: list[tuple[str, int]], schema: pa.Schema, row_bytes: int | None = None
                  ) -> list[pa.Table]:
        """The map's tables ``files`` (name, the most rows it may hold), each through :meth:`_read`, their
        footers checked by one child process."""
        from schemas.footers import FooterChecker

        if not files:
            return []
        with FooterChecker(schema) as checker:
            return [self._read(name, schema, rows, checker, row_bytes) for name, rows in files]

    def _read(self, name: str, schema: pa.Schema, rows: int, checker, row_bytes: int | None = None) -> pa.Table:
        """One of the map's tables, read through the door the cluster's tables go through: the file no larger
        than ``rows`` rows of metadata can be, its footer checked in ``checker``'s child process under a
        memory limit (row counts, chunk sizes, codecs, dictionary pages: :mod:`schemas.footers`), then read;
        any problem is one :class:`OwnerMapError` naming the file."""
        from schemas.footers import ROW_METADATA_BYTES, FooterLimits, local_reader

        path = (self.directory / name).resolve()
        if not path.is_relative_to(self.directory.resolve()):
            raise OwnerMapError(f"{self.directory / OWNER_JSON} names {name!r}, outside the owner map")
        row_bytes = row_bytes or ROW_METADATA_BYTES
        limits = FooterLimits(rows=rows, row_bytes=row_bytes, codecs=OWNER_CODECS)
        try:
            size = path.stat().st_size
            if not path.is_file() or size > (rows + 1) * row_bytes:
                raise OwnerMapError(f"{path}: {size:,} bytes is not a table of the {rows} rows its batch records; "
                                    "the owner map was changed")
            problem = checker.problem(size, local_reader(str(path)), limits)
            if problem is not None:
                raise OwnerMapError(f"{path}: {problem[1]}; the owner map was changed")
            return pq.read_table(path, schema=schema)
        except (OSError, pa.ArrowException) as e:
            raise OwnerMapError(f"{path}: {(str(e).splitlines() or [type(e).__name__])[0][:200]}") from None

    # --- building (encrypt) --------------------------------------------------------------------------
    @classmethod
    def for_encrypt(cls, directory: str, *, out: str, input_: str, fingerprint: str, settings: dict,
                    overwrite: bool) -> "OwnerMap":
        """The owner map an encrypt run into ``out`` adds to: the one there (same settings), or a new one."""
        d = local_path(directory)
        if d is None:
            raise OwnerMapError(f"--owner {directory}: the owner map is a local directory of the owner's machine")
        o = local_path(out)
        if o is not None and (d.resolve() == o.resolve() or d.resolve().is_relative_to(o.resolve())):
            raise OwnerMapError(f"--owner {directory} lies inside --out {out}, the directory handed to the "
                                "cluster; keep the owner map elsewhere")
        if overwrite and (d / OWNER_JSON).is_file():          # only ever an owner map's own files
            for sub in ("images", "rejects", "spots"):
                shutil.rmtree(d / sub, ignore_errors=True)
            (d / BINDING_KEY).unlink(missing_ok=True)
            (d / OWNER_JSON).unlink()
        if (d / OWNER_JSON).is_file():
            m = cls.load(str(d))
            m.doc["input"], m.doc["output"] = input_, out
            return m
        if d.exists() and any(p for p in d.iterdir() if not p.name.startswith(".")):
            raise OwnerMapError(f"--owner {directory} exists and is not an owner map; choose a new directory")
        _private_dir(d)
        doc = {"format": FORMAT, "job": "encrypt", "status": "partial", "runs": [], "input": input_,
               "output": out, "key_fingerprint": fingerprint, "settings": settings, "batches": []}
        return cls(d, doc)

    def commit_batch(self, tag: str, run_id: str, images: pa.Table, rejects: list[dict], files: dict,
                     counts: dict, spots: list[dict] = ()) -> None:
        """Record one batch: its images, spot samples and rejects, then owner.json listing it (the owner's
        commit)."""
        if not _TAG.match(tag):
            raise OwnerMapError(f"internal error: batch tag {tag!r}")
        _private_dir(self.directory / "images")
        _write_table(self.directory / "images" / f"{tag}.parquet", images.cast(OWNER_IMAGES))
        entry = {"tag": tag, "run_id": run_id, "images": f"images/{tag}.parquet", "rejects": None,
                 "files": files, "counts": counts}
        if spots:
            _private_dir(self.directory / "spots")
            _write_table(self.directory / "spots" / f"{tag}.parquet", pa.Table.from_pylist(list(spots),
                                                                                          schema=OWNER_SPOTS))
            entry["spots"] = f"spots/{tag}.parquet"
        if rejects:
            _private_dir(self.directory / "rejects")
            rows = [{n: r.get(n) for n in REJECTS.names} for r in rejects]
            _write_table(self.directory / "rejects" / f"{tag}.parquet", pa.Table.from_pylist(rows, schema=REJECTS))
            entry["rejects"] = f"rejects/{tag}.parquet"
        self.doc["batches"].append(entry)
        if run_id not in self.doc["runs"]:
            self.doc["runs"].append(run_id)
        self.save()
        self._images = None

    def keep_batches(self, keep) -> list[dict]:
        """Keep only the batches ``keep(batch)`` accepts (the others' files are removed); returns those kept."""
        kept = []
        for b in self.doc["batches"]:
            if keep(b):
                kept.append(b)
            else:
                for name in (b["images"], b.get("rejects"), b.get("spots")):
                    if name:
                        (self.directory / name).unlink(missing_ok=True)
        self.doc["batches"] = kept
        self.doc["runs"] = [r for r in self.doc["runs"] if any(b["run_id"] == r for b in kept)]
        self._images = None
        return kept

    def save(self, status: str | None = None) -> None:
        if status is not None:
            self.doc["status"] = status
        _private_dir(self.directory)
        _write_private(self.directory / OWNER_JSON, (json.dumps(self.doc, indent=2, sort_keys=True) + "\n").encode())

    def sources(self) -> set[str]:
        """The sources the committed batches hold (encrypted or rejected): what a resumed run skips."""
        done = {r.source for r in self.images().values()}
        done |= set(self.rejects_table().column("source").to_pylist())
        return done


def _check_doc(doc) -> None:
    """The shape of owner.json (the owner's own file; still read defensively)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format') if isinstance(doc, dict) else doc!r} is not {FORMAT}")
    for k, t in (("runs", list), ("batches", list), ("settings", dict), ("key_fingerprint", str), ("input", str),
                 ("output", str), ("status", str)):
        if not isinstance(doc.get(k), t):
            raise ValueError(f"field {k!r} must be a {t.__name__}")
    from schemas.manifest import SETTINGS

    SETTINGS(doc["settings"], "settings")
    for b in doc["batches"]:
        if not isinstance(b, dict) or not _TAG.match(str(b.get("tag"))) or not isinstance(b.get("files"), dict) \
                or not isinstance(b.get("counts"), dict):
            raise ValueError(f"batch record {str(b)[:80]} is malformed")
        for name in (b.get("images"), b.get("rejects"), b.get("spots")):
            if name is not None and not re.match(r"^(images|rejects|spots)/[0-9A-Za-z_-]+\.parquet$", str(name)):
                raise ValueError(f"batch file {name!r} is not one the owner map writes")


def _batch_rows(batch: dict) -> int:
    """The most rows a batch's images or rejects table can hold: the images its run read (its counts)."""
    try:
        n = int(batch["counts"].get("images_in", 0))
    except (TypeError, ValueError, AttributeError):
        n = 0
    return max(0, min(n, MAX_BATCH_ROWS))


def _plausible(image: OwnerImage) -> bool:
    """An owner map's image record as encrypt writes it: a valid id, a positive size, a ciphertext count."""
    sizes = (image.image_height, image.image_width, image.image_channels, image.ciphertexts)
    return valid_id(image.image_id) and all(isinstance(v, int) and v >= 0 for v in sizes) \
        and image.image_height > 0 and image.image_width > 0 and image.image_channels in (1, 3)


def valid_id(image_id) -> bool:
    return isinstance(image_id, str) and bool(_ID.fullmatch(image_id))


def _maps_in(d: Path) -> list[Path]:
    """The owner maps a directory given as one stands for: itself, or its subdirectories that are maps."""
    if (d / OWNER_JSON).is_file():
        return [d]
    return sorted(p for p in d.iterdir() if p.is_dir() and (p / OWNER_JSON).is_file())


def owner_fingerprints(directories: list[str]) -> set[str]:
    """The key fingerprints the owner maps in ``directories`` record (each an owner map or a directory of
    them, as :func:`encrypted_before` reads them): the key sets the owner has encrypted under before.  A
    directory that is not there or holds no readable map adds nothing."""
    found: set[str] = set()
    for given in directories:
        d = local_path(given) if given else None
        if d is None or not d.is_dir():
            continue
        for m in _maps_in(d):
            try:
                found.add(OwnerMap.load(str(m)).fingerprint)
            except OwnerMapError:
                continue
    return found


def encrypted_before(directories: list[str], own: Path) -> tuple[set[str], int]:
    """The sources that the owner maps in ``directories`` hold (encrypted or rejected, committed batches of
    complete and partial runs alike), and how many maps were read: ``encrypt --skip-encrypted``.

    Each directory is an owner map, or a directory whose subdirectories are owner maps (a nightly
    layout, ``OWNER_ROOT/night=YYYY-MM-DD/``; subdirectories without ``owner.json``, such as tonight's
    map before its first batch, are passed over).  ``own``, this run's map, is left out: what it holds is
    a resume's business.  Only the owner's own maps decide; nothing the cluster can read is consulted."""
    sources: set[str] = set()
    maps = 0
    own = own.resolve()
    for given in directories:
        d = local_path(given)
        if d is None or not d.is_dir():
            raise OwnerMapError(f"--skip-encrypted {given}: not a local directory; give an owner map (the --owner "
                                "directory of an earlier encrypt) or a directory of them")
        for m in _maps_in(d):
            if m.resolve() == own:
                continue
            sources |= OwnerMap.load(str(m)).sources()
            maps += 1
    return sources, maps
