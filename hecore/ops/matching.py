"""Encrypted image matching (iCHEETAH §4.4.3): distances between a query and other images.

For two images encrypted under the same key and processed by the same ops,
the server computes, without the secret key, one ciphertext per pair whose
slot 0 decrypts to their distance (times a public factor); only the key
holder can read it.

* **L2²** ``sum (a - b)^2``: subtract, square (one multiplication), then sum.
  Exact in BFV/BGV (integers mod t); in CKKS within the error reported.
* **L1** ``sum |a - b|`` (the paper's metric): ``|d|`` is not a polynomial, so
  it is approximated by ``p(u) = c0 + c1 u + c2 u^2`` in ``u = (d / D)^2``,
  where ``D`` bounds ``|d|`` (from :func:`hecore.ops.spec.raw_range`).  The
  coefficients are a least-squares fit of ``|t|`` on [-1, 1] (Chebyshev
  nodes, close to the minimax fit); :data:`L1_POLY` and
  :func:`l1_poly_error` give them and their error.  Evaluated as
  ``c2 (u + c1 / 2c2)^2 + (c0 - c1^2 / 4c2)`` -- completing the square
  turns the two products into one -- it costs two multiplications (depth 2):
  CKKS only (BFV/BGV would need ``|d|`` as a polynomial mod t).  The
  division by ``D`` is folded into the scale (free), which makes the scales
  grow: the two squarings need a modulus chain with room for a scale of
  ``2^(2 scale_bits + 2 log2 D)`` after the first rescale -- the
  ``match-8192`` preset (four data primes) has it, ``tenseal-8192`` does not.

Sums: within a packed tile, the tile's valid ``h x w`` region is summed into
slot 0 by window sums over slots (rotations, :meth:`Evaluator.window_sum`);
the tiles' partial sums are then added.  In the pixel layout each ciphertext
holds one value in slot 0 and the partials are simply added.  In CKKS every
partial is first divided by the number of partials through its scale (free,
:meth:`Evaluator.scale_value`), so the sum never outgrows the last prime; the
factor goes into the pair's public ``post_scale``.
"""
from __future__ import annotations

import numpy as np

from hecore.errors import InvalidParameters
from hecore.seal.evaluator import Evaluator

from .packed import PackedGeometry
from .spec import METRICS, Match

__all__ = ["L1_POLY", "l1_poly_error", "plain_distances",
           "plain_l1_approx", "pair_partial", "distance_scale"]


def _fit_l1() -> tuple[float, float, float]:
    nodes = np.cos(np.pi * (np.arange(2000) + 0.5) / 2000)           # Chebyshev nodes on [-1, 1]
    u = nodes ** 2
    design = np.stack([np.ones_like(u), u, u ** 2], axis=1)
    coef, *_ = np.linalg.lstsq(design, np.abs(nodes), rcond=None)
    return tuple(float(c) for c in coef)


#: ``(c0, c1, c2)``: ``|t| ~ c0 + c1 t^2 + c2 t^4`` on [-1, 1].
L1_POLY = _fit_l1()


def l1_poly(t) -> np.ndarray:
    """The polynomial stand-in for ``|t|``, in plaintext (the reference of the encrypted L1)."""
    u = np.asarray(t, dtype=np.float64) ** 2
    c0, c1, c2 = L1_POLY
    return c0 + c1 * u + c2 * u * u


def l1_poly_error() -> float:
    """Largest ``| |t| - p(t) |`` on [-1, 1] (sampled finely): the per-pixel error, in units of ``D``."""
    t = np.linspace(-1, 1, 200001)
    return float(np.max(np.abs(np.abs(t) - l1_poly(t))))


def plain_distances(a: np.ndarray, b: np.ndarray, bound: float | None = None) -> dict[str, float]:
    """The exact L2² and L1 between two float images of the same shape, and, given the bound ``D``,
    the L1 that the polynomial computes (what the encrypted L1 approximates exactly)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"images of shapes {a.shape} and {b.shape} cannot be compared")
    d = a - b
    out = {"l2": float(np.sum(d * d)), "l1": float(np.sum(np.abs(d)))}
    if bound:
        out["l1_poly"] = plain_l1_approx(d, bound)
    return out


def plain_l1_approx(d: np.ndarray, bound: float) -> float:
    return float(np.sum(l1_poly(np.asarray(d, dtype=np.float64) / bound)) * bound)


def check_match_params(ev: Evaluator, match: Match) -> None:
    p = ev.params
    if "l1" in match.metrics:
        p.ckks_only(f"match L1 needs an approximation of |x| that {p.name} ({p.scheme.upper()}, integers mod t) "
                    "cannot evaluate; use `match:QUERY,l2` with BFV/BGV, or the CKKS preset match-8192 for L1")
    if not p.supports_keyswitching or ev.ctx.public.relin_key is None:
        raise InvalidParameters(f"matching multiplies ciphertexts; {p.name} has no relinearisation key. "
                                "Use tenseal-8192 (CKKS) or bfv-8192")
    if p.spends_levels and p.depth < match.depth:
        raise InvalidParameters(
            f"{match.spec} needs {match.depth} levels but {p.name} affords {p.depth}; "
            "use match-8192 (or `match:QUERY,l2` with tenseal-8192)")


def _region_sum(ev: Evaluator, c, geom: PackedGeometry | None):
    """Slot 0 := the sum of the tile's valid region (packed), or ``c`` itself (pixel layout)."""
    if geom is None:
        return c
    if geom.complex_packing:
        raise InvalidParameters(
            "matching squares differences, which mixes the two pixels of a complex-packed slot; encrypt the "
            "images with --layout packed (one pixel per slot) to match them")
    c = ev.rotate(c, geom.core_slot)
    c = ev.window_sum(c, geom.w, 1)
    return ev.window_sum(c, geom.h, geom.cols)


def pair_partial(ev: Evaluator, a, b, metric: str, geom: PackedGeometry | None, bound: float,
                 parts: int):
    """One tile channel's (or pixel's) share of a pair's distance, ready to be added to the others.

    ``a``, ``b``: loaded ciphertexts of the same tile channel (or pixel) of
    the two images, at the same level and post-scale.  ``bound`` is ``D``
    (L1), ``parts`` the number of partials that will be added (CKKS divides
    each by it).  Slot 0 of the sum, times :func:`distance_scale`, is the distance.
    """
    d = ev.sub(a, b)
    if metric == "l2":
        out = _region_sum(ev, ev.square(d), geom)          # d^2
    elif metric == "l1":
        c0, c1, c2 = L1_POLY
        # d / D through the scale, at level 0 where the modulus has room for the grown scale;
        # a plaintext multiplication would cost a level instead.
        t = ev.scale_value(d, 1.0 / bound)
        u = ev.square(t)                                    # u = (d / D)^2
        w = ev.add_values(u, c1 / (2 * c2))
        w2 = ev.square(w)                                   # (u + c1/2c2)^2
        if c2 < 0:
            w2 = ev.negate(w2)
        w2 = ev.scale_value(w2, abs(c2))
        p = ev.add_values(w2, c0 - c1 * c1 / (4 * c2))      # p(u) ~ |d| / D
        out = _region_sum(ev, p, geom)
    else:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    share = ev.params.partial_share(parts)
    if share > 1:
        out = ev.scale_value(out, 1.0 / share)
    return out


def distance_scale(metric: str, post_scale: float, bound: float, parts: int, integer: bool) -> float:
    """The public factor that turns slot 0 of a pair's summed ciphertext into its distance."""
    f = post_scale * post_scale if metric == "l2" else bound * post_scale
    return f * (parts if not integer else 1)
