"""Schemes as types: one key-set interface for SEAL's CKKS/BFV/BGV and for TFHE.

:func:`open_keys` opens a key directory as the :class:`~.base.KeySet` of its scheme, which knows its
fingerprint, how to encrypt, decrypt, check a row and evaluate, and which ops it runs
(:attr:`KeySet.scheme <.base.KeySet.scheme>`).  :func:`scheme_of` answers from a directory's manifest
alone (no key read), :func:`scheme_for_preset` from a run's or a row's preset, :func:`scheme_named`
from a command line's ``--scheme``.

:data:`SCHEMES` routes a key directory, a preset and a secret file to their family, and
:data:`SCHEME_NAMES` each ``--scheme`` name.  A new scheme is a module beside :mod:`.seal` and
:mod:`.tfhe` implementing :mod:`.base`, its entries in both tables here, and what names the schemes
outside this package: its op vocabulary (:mod:`hecore.ops.spec`) and what the planner knows of it
(:data:`hecore.planner.ALL_SCHEMES`, the ``--scheme`` choices, and which ops it runs), how the
process stage runs a chain of it (:data:`tasks.process.CHAINS`), its presets, parameters, strategy
labels and ops in the manifest checks (:mod:`schemas.manifest`), its preset names among
``hepix keygen --preset``'s choices (:mod:`jobs.keygen`), and its public key files among those a
key directory on HDFS is copied with (:func:`jobs.runtime.remote.key_file_names`).
"""
from __future__ import annotations

import os
from pathlib import Path

from hecore.errors import KeyDirectoryError

from .base import KeySet, Scheme
from .seal import SEAL
from .tfhe import TFHE

#: Every scheme family, in the order a lookup tries them.
SCHEMES: tuple[Scheme, ...] = (SEAL, TFHE)

#: The scheme of keys made without ``--scheme`` (CKKS's presets by default).
DEFAULT_SCHEME = SEAL

#: Every file that holds the data owner's secret, whatever the scheme: a processing job refuses a
#: key directory holding any of them, without opening it.
SECRET_FILES = tuple(s.secret_file for s in SCHEMES)

#: The scheme names of the parameters each family covers (``--scheme``).
SCHEME_NAMES = {"ckks": SEAL, "bfv": SEAL, "bgv": SEAL, "tfhe": TFHE}


def scheme_of(keys: str | os.PathLike) -> Scheme:
    """The scheme of key directory ``keys``, from its manifest alone (reads no key)."""
    from hecore.seal.keys import MANIFEST, manifest_doc

    doc = manifest_doc(keys)
    for scheme in SCHEMES:
        if scheme.owns_manifest(doc):
            return scheme
    raise KeyDirectoryError(f"{Path(keys) / MANIFEST} is malformed: it names no scheme hepix knows")


def scheme_for_preset(preset) -> Scheme:
    """The scheme whose parameter set ``preset`` names (SEAL's when none claims it: the SEAL
    presets' own lookup then names the known ones)."""
    for scheme in SCHEMES:
        if isinstance(preset, str) and scheme.owns_preset(preset):
            return scheme
    return SEAL


def scheme_named(name: str | None) -> Scheme:
    """The family of ``--scheme NAME`` (``ckks``, ``bfv``, ``bgv``, ``tfhe``); SEAL's when None."""
    if name is None:
        return DEFAULT_SCHEME
    try:
        return SCHEME_NAMES[name]
    except KeyError:
        raise ValueError(f"unknown scheme {name!r}; expected one of {', '.join(SCHEME_NAMES)}") from None


def open_keys(keys: str | os.PathLike, *, secret: bool = False, eval_keys: bool = True) -> KeySet:
    """The key set of directory ``keys`` in its scheme: the public material (the secret file never
    opened), or with ``secret`` the owner's secret too (0600, owned by this user, proven to belong).
    ``eval_keys=False``: without SEAL's relinearisation and rotation keys (encryption needs none)."""
    return scheme_of(keys).open(keys, secret=secret, eval_keys=eval_keys)


__all__ = ["DEFAULT_SCHEME", "SCHEMES", "SCHEME_NAMES", "SECRET_FILES", "KeySet", "Scheme", "open_keys", "scheme_for_preset",
           "scheme_named", "scheme_of"]
