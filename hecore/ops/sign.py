"""CKKS's arithmetic stand-in for TFHE's exact ``threshold:T``: a composite polynomial of the sign.

TFHE evaluates ``255 if p >= T else 0`` exactly (:class:`hecore.tfhe.ops.Threshold`); CKKS can only
add and multiply, so it approximates the comparison by a polynomial.  Following Cheon, Kim, Kim and
Lee, "Efficient homomorphic comparison methods with optimal complexity" (its composite
polynomials ``f_n``), the sign of ``x`` on ``[-1, 1]`` is approximated by iterating small odd
polynomials that push every ``x`` towards ``-1`` or ``+1``:

* ``f1(x) = (3x - x^3) / 2``            (degree 3, two levels, slope 1.5 at 0)
* ``f3(x) = (35x - 35x^3 + 21x^5 - 5x^7) / 16``  (degree 7, three levels, slope 35/16 at 0)

:func:`approx_sign_mask` evaluates, slot by slot on a packed ciphertext of pixel values ``p``,
``x = (p - T + 1/2) / D`` with ``D = max(T, 255 - T) + 1/2`` (so ``x`` lies in ``[-1, 1]`` and the
integers ``T - 1`` and ``T`` fall symmetrically at ``-1/2D`` and ``+1/2D``; one level, a plaintext
product), then the composite ``steps`` (e.g. ``("f3", "f1")``), then ``255 (s + 1) / 2`` (free).
Far from ``T`` the result is close to the exact mask; near ``T`` it is not: the composite's slope at 0
is the product of the steps' slopes, so a pixel one step from ``T`` comes out near 127.5.  That is the
price of comparison by arithmetic within a few levels, and what ``hepix bench --suite tfhe`` measures.

Integer coefficients are applied by additions (no level); each step's denominator goes into the
scale (free, :meth:`Evaluator.scale_value`), so the scale a step hands on is that many times larger
than the value needs.  Products do not mind (``Evaluator.multiply(..., any_scales=True)``: the
product's scale is the product of scales), and ``f1`` only multiplies; ``f3`` also adds two of its
products, which agree in scale only when its input's scale is the preset's (up to rescaling drift),
so ``f3`` may only come first.  That drift: rescaling divides by primes close to, not equal to,
``2^scale_bits``, so two paths to one level differ in scale slightly (a relative ~1e-3 with the 32-bit
primes of ``dft-8192``, less with 40-bit ones); the scale of one is then set to the other's (as SEAL's
own CKKS examples do), changing its value by that relative amount -- part of the error measured
against the plaintext polynomial (:func:`plain_sign_mask`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..seal.evaluator import Evaluator
from .windows import times

__all__ = ["MaskErrors", "STEPS", "SignStep", "approx_sign_mask", "levels_needed", "mask_errors", "normalise",
           "parse_steps", "plain_sign_mask", "steps_name"]


@dataclass(frozen=True)
class SignStep:
    """One odd polynomial of the composite: its integer numerators (of x, x^3, x^5, ...), denominator,
    and the levels it spends."""

    name: str
    numerators: tuple[int, ...]
    denominator: int
    levels: int

    def plain(self, x: np.ndarray) -> np.ndarray:
        y = x * x
        acc = np.zeros_like(x)
        power = x.copy()
        for c in self.numerators:
            acc = acc + c * power
            power = power * y
        return acc / self.denominator


STEPS = {
    "f1": SignStep("f1", (3, -1), 2, 2),
    "f3": SignStep("f3", (35, -35, 21, -5), 16, 3),
}


def parse_steps(spec: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``"f3.f1"`` (or a sequence of names) as a tuple of step names; the first is applied first."""
    names = tuple(spec.split(".")) if isinstance(spec, str) else tuple(spec)
    bad = [n for n in names if n not in STEPS]
    if not names or bad:
        raise ValueError(f"sign polynomial steps {spec!r}: expected names from {sorted(STEPS)} joined by '.', "
                         f"e.g. 'f3.f1'")
    return names


def steps_name(steps) -> str:
    return ".".join(parse_steps(steps))


def levels_needed(steps) -> int:
    """Levels :func:`approx_sign_mask` spends: one for the normalisation, then each step's."""
    return 1 + sum(STEPS[s].levels for s in parse_steps(steps))


def _check_threshold(threshold) -> int:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, np.integer)) or not 0 <= threshold <= 255:
        raise ValueError(f"threshold T must be an integer in 0..255, got {threshold!r}")
    return int(threshold)


def _bound(t: int) -> float:
    return max(t, 255 - t) + 0.5


def plain_sign_mask(pixels, threshold: int, steps) -> np.ndarray:
    """The same composite on plaintext pixel values, in float64 (what the encrypted one approximates
    up to CKKS noise): the mask the polynomial itself gives, before any rounding."""
    t = _check_threshold(threshold)
    x = (np.asarray(pixels, dtype=np.float64) - t + 0.5) / _bound(t)
    for name in parse_steps(steps):
        x = STEPS[name].plain(x)
    return 127.5 * (x + 1.0)


def _align(ev: Evaluator, a, b, *, scales: bool = True):
    """``a`` and ``b`` at the deeper of their levels and (with ``scales``) at one scale (module doc)."""
    la, lb = ev.level(a), ev.level(b)
    if la < lb:
        a = ev.mod_switch(a, lb - la)
    elif lb < la:
        b = ev.mod_switch(b, la - lb)
    if not scales:
        return a, b
    ratio = ev.scale(b) / ev.scale(a)
    if abs(ratio - 1.0) > 1e-2:        # a coding error here, not drift: refuse rather than corrupt values
        raise ValueError(f"operands differ in scale by a factor {ratio:.6g}; only rescaling drift may be aligned")
    return a, ev.scale_value(b, ratio) if ratio != 1.0 else b


def _odd_poly_times_int(ev: Evaluator, y, first: int, second: int):
    """``first + second y`` with integer coefficients (``second`` may be negative)."""
    term = times(ev, y, second)
    return ev.add_values(term, float(first))


def _apply_step(ev: Evaluator, x, step: SignStep):
    y = ev.square(x)                                               # x^2
    if step.name == "f1":
        z = _odd_poly_times_int(ev, y, 3, -1)                      # 3 - x^2
        out = ev.multiply(*_align(ev, x, z, scales=False), any_scales=True)   # 3x - x^3
    elif step.name == "f3":
        pair = dict(scales=False)
        a = ev.multiply(*_align(ev, x, _odd_poly_times_int(ev, y, 35, -35), **pair), any_scales=True)
        b = ev.multiply(*_align(ev, x, _odd_poly_times_int(ev, y, 21, -5), **pair), any_scales=True)
        c = ev.multiply(*_align(ev, b, ev.square(y), **pair), any_scales=True)  # 21x^5 - 5x^7
        out = ev.add(*_align(ev, a, c))    # 35x - 35x^3 (level L+2) + 21x^5 - 5x^7 (L+3)
    else:  # pragma: no cover - STEPS and this function name the same steps
        raise ValueError(f"no circuit for sign step {step.name!r}")
    return ev.scale_value(out, 1.0 / step.denominator)


def normalise(ev: Evaluator, ct, threshold: int):
    """``(p - T + 1/2) / D`` in every slot (one level: a plaintext product encoded at the prime the
    rescale divides by, so the scale comes back unchanged)."""
    t = _check_threshold(threshold)
    shifted = ev.add_values(ct, 0.5 - t)
    inv = ev.encode(1.0 / _bound(t), level=ev.level(shifted), scale=float(ev.level_prime(shifted)))
    return ev.rescale(ev.multiply_plain(shifted, inv))


def approx_sign_mask(ev: Evaluator, ct, threshold: int, steps=("f3",)):
    """The approximate mask ``255 [p >= T]`` on a CKKS ciphertext of pixel values (0..255, any number
    of slots): ``255 (s + 1) / 2`` with ``s`` the composite ``steps`` of ``(p - T + 1/2) / D`` (module
    doc).  Spends :func:`levels_needed` levels; refuses a preset that has fewer."""
    names = parse_steps(steps)
    ev.params.ckks_only(f"the polynomial sign needs CKKS; {ev.params.name} is {ev.params.scheme.upper()} "
                        "(use TFHE's threshold:T for an exact mask)", ValueError)
    if "f3" in names[1:]:
        raise ValueError(f"sign polynomial {steps_name(names)}: f3 adds two products and needs its input at the "
                         "preset's scale, so it may only be the first step (e.g. f3.f1)")
    need = levels_needed(names) + ev.level(ct)
    if need > ev.params.depth:
        raise ValueError(f"sign polynomial {steps_name(names)} needs {need} levels, {ev.params.name} affords "
                         f"{ev.params.depth}; use fewer steps or a preset with more primes (dft-16384 has 6)")
    x = normalise(ev, ct, threshold)
    for name in names:
        x = _apply_step(ev, x, STEPS[name])
    return ev.add_values(ev.scale_value(x, 127.5), 127.5)


@dataclass(frozen=True)
class MaskErrors:
    """How an approximate mask compares with the exact ``255 [p >= T]`` (values 0..255).

    ``off_band``: every pixel with ``|p - T + 1/2|`` above it is within 0.5 of the exact mask (0.0 when
    none is off) -- the width, in pixel steps, of the band around ``T`` the approximation gets wrong."""

    max_abs_err: float
    wrong_side_fraction: float
    off_fraction: float
    near_off_fraction: float
    near_band: int
    off_band: float


def mask_errors(mask, pixels, threshold: int, near_band: int = 16) -> MaskErrors:
    """Compare a decrypted approximate ``mask`` with the exact mask of ``pixels`` (same length)."""
    t = _check_threshold(threshold)
    p = np.asarray(pixels, dtype=np.float64).reshape(-1)
    got = np.asarray(mask, dtype=np.float64).reshape(-1)
    if got.shape != p.shape:
        raise ValueError(f"mask of {got.size} values for {p.size} pixels")
    above = p >= t
    err = np.abs(got - np.where(above, 255.0, 0.0))
    off = err > 0.5
    near = np.abs(p - t) <= near_band
    dist = np.abs(p - t + 0.5)
    return MaskErrors(
        max_abs_err=float(err.max()) if err.size else 0.0,
        wrong_side_fraction=float(np.mean((got >= 127.5) != above)) if p.size else 0.0,
        off_fraction=float(np.mean(off)) if p.size else 0.0,
        near_off_fraction=float(np.mean(off[near])) if near.any() else 0.0,
        near_band=int(near_band),
        off_band=float(dist[off].max()) if off.any() else 0.0,
    )
