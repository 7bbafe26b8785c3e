"""Where the data owner's jobs may write: never into what the cluster reads, the keys or the owner map, and
never over what the user already has.

The owner's jobs (``decrypt``, ``audit``, ``encrypt-digits``, ``verify --rejects``) write an output
directory and, beside it, side outputs (``decrypt --contact-sheet``).  Before they read a key or start
Spark, every path they will write is checked:

* **an output directory** (``--out``) is a new directory or an empty one; an existing directory with
  anything in it, or a file, is refused (:func:`check_new_out`): a job never deletes or replaces what
  the user keeps there.  ``encrypt``'s ``--out`` is the exception, a documented resume: a directory that
  holds an encrypt run (its ``_manifest.json``) is added to (``resume_job``);
* **every path written** -- the output directory and each side output -- lies outside the job's
  ``--input`` (what the cluster reads), its ``--keys``, its owner map (``--owner``; ``<input>.owner``
  beside a local input) and outside any directory that is one of those by its contents: a key directory
  (holding ``hepix-keys.json``), an owner map (``owner.json``) or a hepix run (``_manifest.json``) other
  than the job's own output (:func:`check_location`);
* **a side output file** is written only where nothing is, or over a file of the same kind the same
  option wrote before (``replaceable``: for ``--contact-sheet``, a PNG holding the sheet's panel layout,
  :func:`tasks.contactsheet.is_contact_sheet`); a directory, a symbolic link or any other file is refused
  (:func:`check_side_file`).

Paths are compared after :func:`os.path.realpath` (symbolic links and ``..`` resolved, relative paths made
absolute); ``hdfs://`` and other remote paths are compared as text, normalised.  Every refusal is one
:class:`OutputRefused` line naming the path and what to do.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Callable, Iterable

from hecore.errors import HepixError

#: What makes a directory one the owner's jobs never write into, by what it holds.
KEY_MARKER = "hepix-keys.json"
OWNER_MARKER = "owner.json"
RUN_MARKER = "_manifest.json"
MARKERS = ((KEY_MARKER, "a key directory"), (OWNER_MARKER, "an owner map"), (RUN_MARKER, "a hepix run"))
#: What a hepix job killed before its commit leaves in its output directory (jobs/runtime/storage.py).
LEFTOVERS = frozenset({"_staging", "_trash"})


class OutputRefused(HepixError):
    """A path an owner's job would write that lies where it must not, or over what the user has."""


@dataclass(frozen=True)
class Guarded:
    """A directory nothing is written into, and what it is (for the message)."""

    path: str
    what: str


def is_remote(path: str) -> bool:
    """Whether ``path`` has a scheme other than ``file:`` (``hdfs://``, ``s3a://``)."""
    return "://" in path and not path.startswith("file:")


def local_form(path: str) -> str:
    """A local path without its ``file://`` or ``file:`` prefix."""
    return path.removeprefix("file://").removeprefix("file:")


def canonical(path: str) -> str:
    """``path`` as the paths are compared: a local one resolved (:func:`os.path.realpath`: links, ``..``,
    relative to the working directory), a remote one as normalised text (scheme and authority in lower
    case, the path part normalised)."""
    if is_remote(path):
        scheme, _, rest = path.partition("://")
        authority, _, part = rest.partition("/")
        return f"{scheme.lower()}://{authority.lower()}{posixpath.normpath('/' + part)}"
    return os.path.realpath(local_form(path) or ".")


def within(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies inside it (both :func:`canonical`)."""
    p, d = canonical(path), canonical(directory)
    if is_remote(p) != is_remote(d):
        return False
    sep = "/" if is_remote(d) else os.sep
    return p == d or p.startswith(d.rstrip(sep) + sep)


def guarded(*, input: str | None = None, keys: str | None = None, owner: str | None = None,
            extra: Iterable[Guarded] = ()) -> list[Guarded]:
    """The directories a job's outputs stay out of: its input (and the owner map beside a local input),
    its key directory, its owner map, and ``extra``."""
    found = [Guarded(input, "--input (the run the cluster handed back, or will read)")] if input else []
    if input and not is_remote(input):
        beside = canonical(input).rstrip(os.sep) + ".owner"
        found.append(Guarded(beside, "the owner map beside --input"))
    if keys:
        found.append(Guarded(keys, "--keys (the key directory)"))
    if owner:
        found.append(Guarded(owner, "--owner (the owner map)"))
    return found + list(extra)


def marked_directory(path: str, *, skip: str | None = None) -> tuple[str, str] | None:
    """The nearest directory at or above local ``path`` that holds a key directory's, an owner map's or a
    hepix run's own file (:data:`MARKERS`), and what it is; directories at or inside ``skip`` (the job's
    own output: a decrypt run, a resumed encrypt run or owner map) are not asked.  None for a remote path,
    or when there is none."""
    if is_remote(path):
        return None
    here = canonical(path)
    while True:
        if os.path.isdir(here) and not (skip is not None and within(here, skip)):
            for marker, what in MARKERS:
                if os.path.lexists(os.path.join(here, marker)):
                    return here, what
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def check_location(path: str, what: str, places: Iterable[Guarded], *, own_out: str | None = None) -> None:
    """Refuse ``path`` (written as option ``what``) inside any of ``places`` or inside a directory that is a
    key directory, an owner map or a hepix run other than ``own_out`` (:func:`marked_directory`; encrypt
    gives its ``--out`` and its ``--owner`` as their own ``own_out``, which it resumes)."""
    for g in places:
        if within(path, g.path):
            raise OutputRefused(f"{what} {path} lies inside {g.what} {g.path}; hepix never writes there: give a "
                                "path outside it")
    marked = marked_directory(path, skip=own_out)
    if marked is not None:
        raise OutputRefused(f"{what} {path} lies inside {marked[0]}, {marked[1]}; hepix never writes there: "
                            "give a path outside it")


def check_new_out(out: str, what: str = "--out", *, resume_job: str | None = None,
                  exists: Callable[[str], bool] | None = None, entries: Callable[[str], list[str]] | None = None,
                  is_file: Callable[[str], bool] | None = None) -> None:
    """Refuse an output directory that exists and holds anything (or is a file): a job writes into a new or
    empty directory only (or one holding only the staging area a killed hepix job left), so it never
    deletes or replaces the user's files.  With ``resume_job``
    (``encrypt``), a directory holding a run of that job (its ``_manifest.json``) is accepted: the job
    resumes it.

    Local paths are asked directly; for a remote one give ``exists``, ``entries`` (the names in it) and
    ``is_file`` (a :class:`jobs.runtime.storage.Storage`'s), or it is not checked here."""
    if is_remote(out):
        if exists is None or entries is None or is_file is None:
            return
        there, names, a_file = exists(out), (lambda: entries(out)), (lambda: is_file(out))
    else:
        path = canonical(out)
        there = os.path.lexists(path)
        names = (lambda: os.listdir(path))
        a_file = (lambda: not os.path.isdir(path))
    if not there:
        return
    if a_file():
        raise OutputRefused(f"{what} {out} is a file; give a new directory")
    held = names()
    if not set(held) - LEFTOVERS:           # empty, or what a killed hepix job left of its own
        return
    if resume_job is not None and RUN_MARKER in held:
        return
    raise OutputRefused(f"{what} {out} exists and is not empty ({len(held)} entries, e.g. {sorted(held)[0]!r}); "
                        "hepix writes into a new or empty directory only: pick a new directory or remove this one")


def check_side_file(path: str, what: str, places: Iterable[Guarded], *, own_out: str | None = None,
                    replaceable: Callable[[str], bool] | None = None) -> None:
    """Refuse a side output file ``path`` (option ``what``) that is remote, lies where
    :func:`check_location` refuses, or would replace anything but a file ``replaceable`` accepts (a file
    of the same kind the option wrote before); a directory or a symbolic link is never replaced."""
    if is_remote(path):
        raise OutputRefused(f"{what} {path}: give a local file path")
    check_location(path, what, places, own_out=own_out)
    local = local_form(path)
    if os.path.islink(local):
        raise OutputRefused(f"{what} {path} is a symbolic link; give the path of a new file")
    if os.path.isdir(local):
        raise OutputRefused(f"{what} {path} is a directory; give the path of a file to write")
    if os.path.lexists(local) and not (os.path.isfile(local) and replaceable is not None and replaceable(local)):
        raise OutputRefused(f"{what} {path} exists and is not a file this option wrote; hepix never writes over "
                            "it: give a new path or remove the file")


def check_encrypt_outputs(out: str, owner: str | None, *, keys: str, images: str) -> None:
    """``encrypt``'s ``--out`` and owner map: ``--out`` new, empty or holding an encrypt run (resumed); both
    outside the key directory, the images encrypted and any other key directory, owner map or run (each
    may be its own kind: a resumed run, an owner map added to); the owner map outside ``--out``."""
    check_new_out(out, resume_job="encrypt")
    where = [Guarded(keys, "--keys (the key directory)"), Guarded(images, "--input (the images)")]
    check_location(out, "--out", where, own_out=out)
    if owner:
        check_location(owner, "--owner", where + [Guarded(out, "--out (the directory handed to the cluster)")],
                       own_out=owner)
