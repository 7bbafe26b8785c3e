"""The text of an op spec, checked before any parser reads a number from it.

Shared by every op vocabulary (:mod:`hecore.ops.spec`, :mod:`hecore.tfhe.ops`), and importing neither.
"""
from __future__ import annotations

import unicodedata


def op_name(spec) -> str:
    """The name part of a spec (``threshold`` of ``threshold:128``), lower case; "" for a non-string."""
    return spec.strip().partition(":")[0].strip().lower() if isinstance(spec, str) else ""


def check_ascii_digits(spec) -> None:
    """Refuse an op spec that holds a digit other than ASCII ``0``-``9`` (``threshold:١٢٨``, fullwidth
    ``５０``, superscripts): Python's number parsers would read many of them as numbers, and the run would
    record a spec other than the one given.  A ``match:`` spec names an image and is not checked."""
    if not isinstance(spec, str) or spec.isascii() or spec.strip().partition(":")[0].strip().lower() == "match":
        return
    for c in spec:
        if not c.isascii() and (c.isdigit() or c.isnumeric() or unicodedata.category(c) == "Nd"):
            ascii_form = "".join(str(unicodedata.decimal(x)) if not x.isascii() and unicodedata.decimal(x, None)
                                 is not None else x for x in spec.strip())
            hint = f" ({ascii_form})" if ascii_form.isascii() else ""
            raise ValueError(f"op spec {spec.strip()!r} holds the digit {c!r} (U+{ord(c):04X}); write its numbers "
                             f"in ASCII digits 0-9{hint}")
