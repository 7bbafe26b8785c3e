"""JSON documents read back from disk (manifests, owner maps): bytes with a cap, nesting bounded.

Python's JSON parser recurses once per nesting level: a document of a million ``[`` ends in a
RecursionError, and a few thousand levels make every later walk over the value deep and slow.  hepix
writes no document nested more than a few levels, so :func:`parse` refuses anything deeper than
:data:`MAX_DEPTH` with a one-line :class:`ValueError`, and anything larger than the caller's cap before
decoding it.
"""
from __future__ import annotations

import json

#: The deepest nesting a hepix document has is about six levels (a manifest's options.settings.store.chain).
MAX_DEPTH = 32


def parse(data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH):
    """The JSON value of ``data``, or a one-line :class:`ValueError` (too large, not UTF-8, not JSON, too deep)."""
    if len(data) > max_bytes:
        raise ValueError(f"{len(data)} bytes is more than the {max_bytes} such a document may hold")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"is not UTF-8 text (byte {e.start})") from None
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nests deeper than {max_depth} levels") from None
    except ValueError as e:
        raise ValueError(f"is not JSON: {str(e).splitlines()[0][:160]}") from None
    if depth(value, max_depth) > max_depth:
        raise ValueError(f"nests deeper than {max_depth} levels")
    return value


def depth(value, limit: int) -> int:
    """How deep ``value`` nests (a scalar: 0), counted without recursion and stopped past ``limit``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            d += 1
            deepest = max(deepest, d)
            if d > limit:
                return d
            stack.extend((x, d) for x in (v.values() if isinstance(v, dict) else v))
    return deepest
