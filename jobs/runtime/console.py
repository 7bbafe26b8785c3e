"""Plain-text tables for the terminal (the CLI owns what the user sees)."""
from __future__ import annotations

import math


def fmt(v, spec: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        if math.isnan(v):
            return "-"
    return format(v, spec)


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """``columns``: (key, header, format spec).  Right-aligned, one line per row."""
    cells = [[h for _, h, _ in columns]] + [[fmt(r.get(k), spec) for k, _, spec in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
