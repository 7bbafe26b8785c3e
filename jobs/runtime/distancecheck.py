"""The checks every encrypted distance of a match run passes before and after the owner decrypts it: they
live with the workers that decrypt the distances (:mod:`tasks.distances`), and the driver runs the same
ones over what those report (jobs/match.py)."""
from __future__ import annotations

from tasks.distances import MARGIN, MAX_PARTS, DistanceExpect, KnownImages, row_problem, value_problem  # noqa: F401 -- the checks, for the driver's side
