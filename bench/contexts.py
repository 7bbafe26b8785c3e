"""Throwaway keys for the benchmarks: one key set per preset, made on first use, never written.

The suites measure encryption and operations, not key generation; :class:`Keys` makes each
preset's keys once per run and hands out the context (which can decrypt) with its evaluator.
"""
from __future__ import annotations

import time

from hecore.seal.context import HEContext
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import Params, preset


class Keys:
    """One throwaway key set per preset (never written anywhere), made on first use.

    ``keygen_seconds[name]`` is how long the preset's keys took (rotation keys included)."""

    def __init__(self, *, rotations: bool = True):
        self.rotations = rotations
        self.keygen_seconds: dict[str, float] = {}
        self._made: dict[str, tuple[HEContext, Evaluator]] = {}

    def get(self, name: str | Params) -> tuple[HEContext, Evaluator]:
        """The context and evaluator of preset ``name`` (a name or its :class:`Params`)."""
        params = preset(name) if isinstance(name, str) else name
        if params.name not in self._made:
            t = time.perf_counter()
            ctx, _secret = HEContext.generate(params, rotations=self.rotations)
            self.keygen_seconds[params.name] = time.perf_counter() - t
            self._made[params.name] = (ctx, Evaluator(ctx))
        return self._made[params.name]

    def drop(self, name: str) -> None:
        """Forget preset ``name``'s keys (at N=16384 they hold some 200 MB)."""
        self._made.pop(name, None)
