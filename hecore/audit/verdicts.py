"""Run the four distinguishers over one group of ciphertexts and score what they recover.

A group is the ciphertexts of one image channel (one table, one key, one level).
No key is used anywhere: only the parameters' primes and, for decoding, a
:class:`hecore.seal.context.PlainCodec` built from the parameters.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .identical import identical_classes
from .linear import linear_dependence
from .recurring import recurring_differences, spatial_coherence
from .sealbytes import coefficient_rows, parse_shape
from .smalldiff import small_differences


class Verdict(str, Enum):
    """What a distinguisher concluded about a group of ciphertexts."""

    PASS = "pass"
    LEAKS = "leaks"
    SKIPPED = "skipped"

    def __str__(self) -> str:
        return self.value


TESTS = ("identical", "recurring-differences", "linear-dependence", "small-difference")


@dataclass
class TestVerdict:
    """The outcome of one distinguisher on one group."""

    test: str
    verdict: str                              # pass | leaks | skipped
    statistic: float | None                   # the test's measure (see detail)
    detail: str
    classes_found: int | None = None          # equal-value classes (or linked groups) the attack found
    classes_true: int | None = None           # values occurring at least twice (with the originals)
    recovered_fraction: float | None = None   # of those, recovered exactly as one class
    exact_difference_fraction: float | None = None   # Zinc: pixels whose difference to the anchor is exact
    seconds: float = 0.0
    picture: np.ndarray | None = None         # uint8 (h, w): what the attacker sees (pixel layout)


@dataclass
class Geometry:
    """Where each ciphertext of a pixel-layout group sits in its image channel."""

    rows: np.ndarray
    cols: np.ndarray


def class_recovery(classes: np.ndarray, truth: np.ndarray) -> tuple[int, float]:
    """(values occurring at least twice, fraction of them whose pixels form exactly one class)."""
    pairs = np.unique(np.stack([truth.astype(np.int64), classes.astype(np.int64)], axis=1), axis=0)
    per_value = np.bincount(pairs[:, 0], minlength=256)          # classes touched per value
    per_class = np.bincount(pairs[:, 1])                          # values touched per class
    counts = np.bincount(truth.astype(np.int64), minlength=256)
    values = np.flatnonzero(counts >= 2)
    if values.size == 0:
        return 0, 1.0
    clean = {int(v) for v, c in pairs if per_value[v] == 1 and per_class[c] == 1}
    return int(values.size), float(np.mean([int(v) in clean for v in values]))


def picture_of(classes: np.ndarray, geom: Geometry) -> np.ndarray:
    """Classes painted as grey levels on the pixel grid, the way an attacker would.

    The attacker does not know the classes' values but sees which classes touch:
    neighbouring pixels have close values, so ordering the classes along the
    Fiedler vector of their adjacency graph (spectral seriation) puts them in
    value order up to direction, which renders the image (or its negative)."""
    h, w = int(geom.rows.max()) + 1, int(geom.cols.max()) + 1
    ids = np.unique(classes, return_inverse=True)[1]
    k = int(ids.max()) + 1
    grid = np.full((h, w), -1, dtype=np.int64)
    grid[geom.rows, geom.cols] = ids
    order = np.arange(k, dtype=np.float64)
    if 2 < k <= 600:             # eigh is cubic; beyond that, classes keep arbitrary greys
        adj = np.zeros((k, k))
        for a, b in ((grid[:, :-1], grid[:, 1:]), (grid[:-1, :], grid[1:, :])):
            ok = (a >= 0) & (b >= 0) & (a != b)
            np.add.at(adj, (a[ok], b[ok]), 1.0)
        adj += adj.T
        lap = np.diag(adj.sum(axis=1)) - adj
        order = np.argsort(np.argsort(np.linalg.eigh(lap)[1][:, 1])).astype(np.float64)
    grey = np.rint(order / max(k - 1, 1) * 255).astype(np.uint8)
    img = np.zeros((h, w), dtype=np.uint8)
    img[geom.rows, geom.cols] = grey[ids]
    return img


def audit_group(data: np.ndarray, offsets: np.ndarray, primes: tuple[int, ...], codec=None,
                geom: Geometry | None = None, truth: np.ndarray | None = None,
                rng: np.random.Generator | None = None) -> list[TestVerdict]:
    """All four tests on the ciphertexts ``data[offsets[i]:offsets[i+1]]`` (an Arrow binary
    column's buffers).  ``codec`` (CKKS) enables decoding; ``geom`` (pixel layout) the pictures
    and the choice of the value family; ``truth`` (one pixel value per ciphertext, pixel layout)
    the scores."""
    rng = rng if rng is not None else np.random.default_rng()
    count = len(offsets) - 1
    shape = parse_shape(data[int(offsets[0]):int(offsets[1])])
    rows = coefficient_rows(data, offsets, shape)
    chain = primes[: shape.primes]
    out: list[TestVerdict] = []

    # 1. byte-identical ciphertexts
    t0 = time.perf_counter()
    ids = identical_classes(rows.reshape(count, -1))
    reps = np.unique(ids, return_index=True)[1]
    distinct = len(reps)
    v = TestVerdict("identical", Verdict.LEAKS if distinct < count else Verdict.PASS, distinct / count,
                    f"{distinct} distinct of {count} ciphertexts", classes_found=distinct)
    if truth is not None:
        v.classes_true, v.recovered_fraction = class_recovery(ids, truth)
    if geom is not None and distinct < count:
        v.picture = picture_of(ids, geom)
    v.seconds = time.perf_counter() - t0
    out.append(v)
    uniq = rows if distinct == count else rows[reps]

    # 2. recurring differences (the randomness-pool attack)
    t0 = time.perf_counter()
    if distinct < 3:
        out.append(TestVerdict("recurring-differences", Verdict.SKIPPED, None, f"only {distinct} distinct ciphertexts"))
    else:
        from .recurring import MAX_UNIQUE
        sub = np.arange(distinct) if distinct <= MAX_UNIQUE else np.sort(rng.choice(distinct, MAX_UNIQUE, replace=False))
        r = recurring_differences(np.ascontiguousarray(uniq[sub, 0, 0, 0]),
                                  np.ascontiguousarray(uniq[sub, 1 % shape.size, 0, 1]), chain[0])
        v = TestVerdict("recurring-differences", Verdict.LEAKS if r.recurring else Verdict.PASS, r.linked / r.unique,
                        f"{r.recurring} differences recur among {r.pairs} pairs of {r.unique} distinct "
                        f"ciphertexts; {r.linked} ciphertexts linked; {len(r.families)} families")
        if r.families and distinct <= MAX_UNIQUE:
            fam = _value_family(r.families, ids, reps, geom)
            classes = fam[ids]
            v.classes_found = int(np.unique(classes).size)
            if truth is not None:
                v.classes_true, v.recovered_fraction = class_recovery(classes, truth)
            if geom is not None:
                v.picture = picture_of(classes, geom)
        v.seconds = time.perf_counter() - t0
        out.append(v)

    # 3. linear dependence modulo the first prime
    t0 = time.perf_counter()
    lin = linear_dependence(uniq, chain[0], rng)
    if lin.sample < 2:
        out.append(TestVerdict("linear-dependence", Verdict.SKIPPED, None, f"only {lin.sample} distinct ciphertexts"))
    else:
        out.append(TestVerdict("linear-dependence", Verdict.LEAKS if lin.dependent else Verdict.PASS, lin.rank / lin.sample,
                               f"rank {lin.rank} of a sample of {lin.sample} distinct ciphertexts mod "
                               f"q0 = {chain[0]}", seconds=time.perf_counter() - t0))

    # 4. small-difference decoding (Zinc)
    t0 = time.perf_counter()
    if codec is None or shape.size != 2:
        out.append(TestVerdict("small-difference", Verdict.SKIPPED, None,
                               "needs a CKKS codec and two-component ciphertexts"))
    else:
        def decode(poly):
            return codec.decode(poly, shape.parms_id, shape.scale)
        try:
            sd = small_differences(uniq, chain, decode, shape.scale)
        except Exception as e:  # noqa: BLE001 -- a lower level: say so in the verdict, run the others
            out.append(TestVerdict("small-difference", Verdict.SKIPPED, None, str(e)))
        else:
            v = TestVerdict("small-difference", Verdict.LEAKS if sd.confirmed else Verdict.PASS, sd.confirmed / distinct,
                            f"{sd.confirmed} of {distinct} distinct ciphertexts share a second component up "
                            f"to a small polynomial ({len(sd.groups)} groups; {sd.candidates} candidates)",
                            classes_found=len(sd.groups))
            if sd.groups:
                anchor, members, diffs = max(sd.groups, key=lambda g: len(g[1]))
                diff_u = np.full(distinct, np.nan)
                diff_u[anchor] = 0.0
                diff_u[members] = diffs[:, 0].real
                diff = diff_u[ids]
                if truth is not None:
                    ref = truth[reps[anchor]].astype(np.float64)
                    v.exact_difference_fraction = float(np.mean(np.rint(diff) == truth - ref))
                if geom is not None:
                    known = np.isfinite(diff)
                    whole = np.rint(diff[known])
                    pic = np.zeros(count)
                    pic[known] = whole - whole.min()
                    img = np.zeros((int(geom.rows.max()) + 1, int(geom.cols.max()) + 1), dtype=np.uint8)
                    img[geom.rows, geom.cols] = np.clip(pic, 0, 255).astype(np.uint8)
                    v.picture = img
            v.seconds = time.perf_counter() - t0
            out.append(v)
    return out


def _value_family(families: list[np.ndarray], ids: np.ndarray, reps: np.ndarray, geom: Geometry | None) -> np.ndarray:
    """Of the (up to two) families of recurring differences, the one whose classes are pixel
    values: the most spatially coherent one (pool indices are drawn independently of position)."""
    if len(families) == 1 or geom is None:
        return families[0]
    scores = [spatial_coherence(f[ids], geom.rows, geom.cols) for f in families]
    return families[int(np.argmax(scores))]
