"""Test 2: recurring differences -- the attack on a randomness pool (iCHEETAH §3.3).

With full or scanning caching every output is ``C_p + Z_i``: the cached
encryption of its value p plus pool zero i.  Ciphertext addition works
coefficient by coefficient modulo each prime, so any coefficient is a linear
functional: differences of single coefficients are differences of ciphertexts.
Differences ``Z_i - Z_j`` (same value, other pool zero) recur once per value that
drew both zeros, ``C_p - C_p'`` (same zero, other value) once per zero both values
drew; a difference between two fresh ciphertexts never recurs.

Recovering the classes: the links with a recurring difference form two families.
Around any ciphertext, the neighbours reached by links of one family are linked to
each other (``Z_j - Z_k`` recurs too) but not to those of the other family
(``C_p - C_p' + Z_i - Z_j`` does not recur).  That types every recurring
difference; the connected components of one family are the value classes, of the
other the pool classes.  Which is which the attacker tells from the image: pool
indices are drawn independently of the position, values are not -- the value
classes are the partition whose neighbouring pixels agree more often than chance.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Unique ciphertexts compared pairwise at most (pairs grow quadratically).
MAX_UNIQUE = 4096


@dataclass
class RecurringResult:
    unique: int                    # distinct ciphertexts compared
    pairs: int                     # pairs compared
    recurring: int                 # distinct differences seen at least twice
    linked: int                    # ciphertexts on at least one link with a recurring difference
    families: list[np.ndarray]     # per family of recurring differences: component id per unique ciphertext


def _keys(x0: np.ndarray, x1: np.ndarray, q: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 64-bit key of the difference ``ct[a] - ct[b]`` up to sign, from two coefficients mod q."""
    qq = np.uint64(q)
    d0 = (x0[a] + (qq - x0[b])) % qq
    d1 = (x1[a] + (qq - x1[b])) % qq
    flip = d0 > qq // np.uint64(2)
    d0 = np.where(flip, (qq - d0) % qq, d0)
    d1 = np.where(flip, (qq - d1) % qq, d1)
    with np.errstate(over="ignore"):
        return d0 * np.uint64(0x9E3779B97F4A7C15) ^ d1


def recurring_differences(x0: np.ndarray, x1: np.ndarray, q: int) -> RecurringResult:
    """Run the attack on the unique ciphertexts whose coefficients ``x0``, ``x1`` (one each,
    two different positions, modulo the prime ``q``) are given."""
    # SciPy imported here: `hepix`'s parser imports every command's module, also where SciPy is not
    # installed (a cluster's packed environment without scikit-image and scikit-learn)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    u = len(x0)
    if u < 3:
        return RecurringResult(u, 0, 0, 0, [])
    a, b = np.triu_indices(u, k=1)
    keys = _keys(x0, x1, q, a, b)
    # the differences seen at least twice (sorted, for searchsorted membership tests), and per pair
    # whether its difference is one of them and which: a label numbering the recurring differences only
    ordered = np.sort(keys)
    rec_keys = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    del ordered
    if rec_keys.size == 0:
        return RecurringResult(u, len(a), 0, 0, [])
    pos = np.minimum(np.searchsorted(rec_keys, keys), len(rec_keys) - 1)
    rec = rec_keys[pos] == keys
    la, lb, lab = a[rec], b[rec], pos[rec]
    result = RecurringResult(u, len(a), int(rec_keys.size), int(np.unique(np.r_[la, lb]).size), [])
    # Both orientations: every link seen from each end.
    src = np.r_[la, lb]
    dst = np.r_[lb, la]
    lbl = np.r_[lab, lab]
    order = np.argsort(src, kind="stable")
    src, dst, lbl = src[order], dst[order], lbl[order]
    first = np.r_[0, np.flatnonzero(np.diff(src)) + 1]
    starts = np.repeat(first, np.diff(np.r_[first, len(src)]))

    def same_family(ref_pos: np.ndarray) -> np.ndarray:
        """Per link (x, z): does ``ct[ref] - ct[z]`` recur, ref being x's neighbour at ``ref_pos``?"""
        k = _keys(x0, x1, q, dst[ref_pos], dst)
        pos = np.clip(np.searchsorted(rec_keys, k), 0, len(rec_keys) - 1)
        return (rec_keys[pos] == k) | (dst[ref_pos] == dst)

    same1 = same_family(starts)
    # the first neighbour of the other family, per source (if any)
    other_idx = np.where(~same1, np.arange(len(src)), len(src))
    other_first = np.minimum.reduceat(other_idx, first)
    ref2 = np.repeat(other_first, np.diff(np.r_[first, len(src)]))
    has2 = ref2 < len(src)
    same2 = np.zeros(len(src), dtype=bool)
    if has2.any():
        same2[has2] = same_family(np.where(has2, ref2, 0))[has2]
    # label graph: same-family edges
    e_a = np.r_[lbl[starts][same1], lbl[np.where(has2, ref2, 0)][same2]]
    e_b = np.r_[lbl[same1], lbl[same2]]
    n_labels = len(rec_keys)
    g = coo_matrix((np.ones(len(e_a), dtype=np.int8), (e_a, e_b)), shape=(n_labels, n_labels))
    _, fam = connected_components(g, directed=False)
    link_fam = fam[lab]
    sizes = np.bincount(link_fam)
    for f in np.argsort(-sizes, kind="stable")[:2]:
        if sizes[f] == 0:
            break
        sel = link_fam == f
        cg = coo_matrix((np.ones(int(sel.sum()), dtype=np.int8), (la[sel], lb[sel])), shape=(u, u))
        _, comp = connected_components(cg, directed=False)
        result.families.append(comp)
    return result


def spatial_coherence(classes: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> float:
    """How much more often 4-neighbouring pixels share a class than chance (1.0: no more)."""
    h, w = int(rows.max()) + 1, int(cols.max()) + 1
    grid = np.full((h, w), -1, dtype=np.int64)
    grid[rows, cols] = classes
    pairs = [(grid[:, :-1], grid[:, 1:]), (grid[:-1, :], grid[1:, :])]
    same = total = 0
    for l, r in pairs:
        ok = (l >= 0) & (r >= 0)
        same += int((l[ok] == r[ok]).sum())
        total += int(ok.sum())
    if total == 0:
        return 1.0
    share = np.bincount(classes) / len(classes)
    chance = float((share ** 2).sum())
    return (same / total) / chance if chance > 0 else 1.0
