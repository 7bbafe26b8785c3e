"""What the row checks hand the job's work in the same task: each good row's metadata as the checks
converted it to Python, and its ciphertext as the checker loaded it.

The checks of a row (tasks.rowchecks) convert its metadata to Python values and load its ciphertext with
SEAL to validate it; the work that follows (tasks.process, tasks.decrypt) needs the same values and the
same loaded ciphertext.  Converting and loading twice cost the workers more than the work itself, so the
checking pass hands them over: :func:`give` records them for the batch of good rows it passes to the work,
and the work's :func:`take` of that very batch gets them (the batch object is the key, and only the work
given that batch takes them).  A work that does not ask, or a batch the pass did not give, simply converts
and loads for itself (:func:`take` gives None).

At most :data:`KEPT` batches are held: a work that never takes them costs no memory beyond those, and the
pass drops them all when it ends (:func:`clear`).  The checker's ciphertexts belong to the SEAL context of
the checker; the work takes them only where its own context is that one (the check and the work built from
the same broadcast key set, whose context is built once per worker: hecore.schemes.SealKeys.context).
"""
from __future__ import annotations

from collections import OrderedDict

#: Batches given and not taken yet that are kept (the oldest dropped first).
KEPT = 4

#: id(batch) -> (batch, rows, loaded); the batch is held so that its id names it while it is here.
_given: OrderedDict = OrderedDict()


def give(batch, rows: list[dict], loaded: list | None, context=None) -> None:
    """Hand over the good ``batch``'s row metadata ``rows`` (dicts, one per row, without ``ct``) and ``loaded``
    (its ciphertexts as the checker loaded them, None where it did not), loaded on ``context`` (the checker's
    Pyfhel object, or None)."""
    _given[id(batch)] = (batch, rows, loaded, context)
    while len(_given) > KEPT:
        _given.popitem(last=False)


def take(batch, context=None) -> tuple[list[dict], list | None] | None:
    """``(rows, loaded)`` given for exactly this ``batch``, or None.  ``loaded`` is None unless the ciphertexts
    were loaded on ``context`` (the taker's own Pyfhel object): ciphertexts of another context are not
    the taker's to use."""
    entry = _given.pop(id(batch), None)
    if entry is None or entry[0] is not batch:
        return None
    _, rows, loaded, given_on = entry
    if loaded is not None and (context is None or given_on is not context):
        loaded = None
    return rows, loaded


def clear() -> None:
    """Drop everything given and not taken (the end of a checking pass)."""
    _given.clear()
