"""The owner's ringers of an inference run (:mod:`hecore.infer.ringers`): kept by encrypt-digits in an owner
map, compared by decrypt.

encrypt-digits draws its ringers in secret and keeps, in the owner map (``--owner``, by default
``<--out>.owner``; never in the output), one record per batch: the batch id, what it holds (an images row:
8x8, one channel, its ciphertext count, the SHA-256 of its pixels) and its ringers' sample numbers and
pixels (a spots row).  Decrypt with ``--owner`` runs the model the run names on each ringer's kept pixels,
compares every head output of it, and rejects a batch whose ringer differs as ``integrity``; a batch the
owner map holds that the run does not is a ``missing-image`` reject.
"""
from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from hecore.errors import HepixError, OwnerMapError

from .owner import OwnerMap, default_dir

#: What an owner map of encrypt-digits says it is (its settings' layout).
DIGITS = "digits"


def owner_dir(args) -> str | None:
    """Where encrypt-digits keeps its ringers: ``--owner``, or ``<--out>.owner`` beside a local output; None with
    ``--ringers 0``.  A remote output without ``--owner`` is refused (the map is local, the owner's)."""
    if not args.ringers:
        return None
    d = args.owner or default_dir(args.out)
    if d is None:
        raise HepixError(f"--out {args.out} is not a local path: name the owner map's local directory with "
                         "--owner DIR (it keeps the ringers, and stays with you), or give --ringers 0")
    return d


def check_owner_dir(directory: str, *, out: str, keys: str) -> None:
    """The owner map's directory: outside the output, the keys and any other run or key directory, and new --
    or an owner map an earlier encrypt-digits into this same ``out`` left (that run's output is gone: the
    directory ``out`` is new, which the caller checked first)."""
    from . import places
    from .owner import OWNER_JSON

    places.check_location(directory, "--owner", places.guarded(keys=keys) + [
        places.Guarded(out, "--out (the directory handed to the cluster)")], own_out=directory)
    d = Path(directory)
    if (d / OWNER_JSON).is_file():
        old = OwnerMap.load(directory)
        if old.settings.get("layout") != DIGITS or old.doc.get("output") != out:
            raise HepixError(f"--owner {directory} holds the owner map of another run ({old.doc.get('output')}); "
                             "choose a new directory")
    elif d.exists() and (not d.is_dir() or any(p for p in d.iterdir() if not p.name.startswith("."))):
        raise HepixError(f"--owner {directory} exists and is not an owner map; choose a new directory")


def keep(directory: str, *, out: str, run_id: str, fingerprint: str, preset: str, task: str, probability: float,
         batches: list[dict]) -> int:
    """Write the owner map of an encrypt-digits run: ``batches`` -- each ``{"id", "start", "x", "ciphertexts"}``
    (its samples' pixels from sample ``start``) -- recorded, its ringers drawn (:func:`hecore.infer.ringers.draw`
    over all samples) and kept by batch.  Returns how many ringers were drawn."""
    from hecore.infer import ringers

    n = sum(len(b["x"]) for b in batches)
    chosen = set(ringers.draw(n, probability).tolist())
    images, spots = [], []
    for b in batches:
        x = np.asarray(b["x"])
        mine = [s for s in range(b["start"], b["start"] + len(x)) if s in chosen]
        images.append({"image_id": b["id"], "source": f"sklearn-digits:{task}:test:{b['start']}+{len(x)}",
                       "content_sha256": hashlib.sha256(x.astype(np.uint8).tobytes()).hexdigest(),
                       "image_height": 8, "image_width": 8, "image_channels": 1, "ciphertexts": b["ciphertexts"],
                       "run_id": run_id, "batch": f"{run_id}-b00000"})
        if mine:
            spots.append({"image_id": b["id"], "spots": ringers.pack(mine, x[[s - b["start"] for s in mine]])})
    settings = {"key_fingerprint": fingerprint, "preset": preset, "layout": DIGITS, "task": task, "samples": n,
                "ringers": float(probability)}
    from schemas.tables import OWNER_IMAGES

    new = not Path(directory).exists()
    try:
        owner = OwnerMap.for_encrypt(directory, out=out, input_=f"sklearn-digits:{task}:test",
                                     fingerprint=fingerprint, settings=settings, overwrite=True)
        owner.commit_batch(f"{run_id}-b00000", run_id, pa.Table.from_pylist(images, schema=OWNER_IMAGES), [], {},
                           {"images_in": len(batches)}, spots)
        owner.save("complete")
    except BaseException:
        if new:                                 # nothing half-written left to block a retry
            shutil.rmtree(directory, ignore_errors=True)
        raise
    return len(chosen)


@dataclass
class RingerCheck:
    """The ringers of one inference run, as decrypt compares them: by batch id, (sample numbers, pixels)."""

    kept: dict
    batches: set
    probability: float
    model: object
    quantised: object
    checked: int = 0
    compared: int = 0
    wrong: list = field(default_factory=list)

    @classmethod
    def load(cls, owner: OwnerMap, *, task: str, model, quantised) -> "RingerCheck":
        """The checks an owner map of encrypt-digits keeps for ``task``; OwnerMapError for a map of another
        kind of run or task, or a record it could not have written."""
        from hecore.infer import ringers

        settings = owner.settings
        if settings.get("layout") != DIGITS:
            raise HepixError(f"--owner {owner.directory} is the owner map of an image run, not of encrypted "
                             "digits; give the owner map encrypt-digits wrote (by default <its --out>.owner)")
        if settings.get("task") != task:
            raise HepixError(f"--owner {owner.directory} kept digits of task {settings.get('task')!r}; the run "
                             f"holds task {task!r}: give the owner map of this run's encrypt-digits")
        kept = {}
        for batch_id, data in owner.spots().items():
            try:
                kept[batch_id] = ringers.unpack(data)
            except ValueError as e:
                raise OwnerMapError(f"{owner.directory}: the ringers of {batch_id!r}: {e}; the owner map was "
                                    "changed") from None
        return cls(kept, set(owner.images()), float(settings.get("ringers") or 0.0), model, quantised)

    def problem(self, batch_id: str, start: int, n: int, finished: np.ndarray) -> str | None:
        """Why batch ``batch_id`` (samples ``start`` .. ``start + n - 1``, their finished head outputs
        ``finished``) fails its ringers, or None; counts what it compared."""
        from hecore.infer import ringers

        if batch_id not in self.batches:
            return f"batch {batch_id} is not one the owner's encrypt-digits made"
        if batch_id not in self.kept:
            return None
        samples, pixels = self.kept[batch_id]
        if np.any(samples < start) or np.any(samples >= start + n):
            return (f"the owner's ringers of {batch_id} are samples {samples.tolist()[:5]}, outside the "
                    f"{n} samples from {start} its rows hold")
        ref = ringers.reference(self.model, pixels, self.quantised)
        self.checked += len(samples)
        self.compared += 1
        bad = ringers.differences(np.asarray(finished)[samples - start], samples, ref,
                                  exact=self.quantised is not None)
        if not bad:
            return None
        self.wrong += bad
        s, d = bad[0]
        bound = "exactly" if self.quantised is not None else f"within {ringers.CKKS_SLACK}"
        return (f"{len(bad)} of its {len(samples)} ringer(s) decrypt to other head outputs than the model gives "
                f"(sample {s}: {d:.4g} away; they must agree {bound}): a wrong answer")

    def ringers_of(self, batch_id: str) -> int:
        return len(self.kept[batch_id][0]) if batch_id in self.kept else 0

    def summary(self) -> str:
        """One line for the console: what the ringers compared and what a wrong sample's escape costs."""
        from hecore.infer import ringers

        if not self.kept:
            return "ringers: the owner map keeps none (encrypt-digits --ringers 0): no answer was checked"
        odds = ", ".join(f"{ringers.escape(self.probability, m):.2g} for {m} wrong sample{'s' if m > 1 else ''}"
                         for m in (1, 10, 50))
        return (f"ringers: {self.checked} compared in {self.compared} batch{'es' if self.compared != 1 else ''}"
                + (f", {len(self.wrong)} wrong" if self.wrong else ", all agree with the model")
                + f"; each digit a ringer with probability {self.probability:g}, so a cluster escapes them with "
                  f"probability {odds}, and never with every sample wrong")
