"""Typed errors of hecore.

Every error says what was wrong, with which value, and what to do about it.
The CLI turns them into one-line messages; the Spark jobs turn the image
errors into rows of the ``rejects`` table.
"""
from __future__ import annotations

from dataclasses import dataclass


class HepixError(Exception):
    """Base class of every error hepix raises on purpose."""


# --- parameters and keys -------------------------------------------------------------

class WeakParameters(HepixError):
    """The parameters give less than the requested security level."""


class InvalidParameters(HepixError):
    """The parameters are malformed or unknown (bad preset name, bad prime sizes, ...)."""


class KeyDirectoryError(HepixError):
    """A key directory is missing, incomplete, or has unsafe permissions."""


class SecretKeyMissing(KeyDirectoryError):
    """An operation that needs the secret key was given a public-only key directory."""


class KeyMismatch(HepixError):
    """Ciphertexts were made under a different key than the one supplied."""


class UntrustedSession(HepixError):
    """A job that holds the secret key was asked to run where the key could leave the owner's machine."""


# --- what comes back from the cluster ----------------------------------------------------------

class ManifestError(HepixError):
    """A run manifest (read from a directory the cluster held) fails its schema or names a file outside
    its directory."""


class OwnerMapError(HepixError):
    """The owner map (the owner's record of which image id is which file) is missing or does not fit."""


# --- strategies ---------------------------------------------------------------------

class LeakyStrategyRefused(HepixError):
    """A strategy that leaks information was requested without ``allow_leaky=True``."""


class UnknownStrategy(HepixError):
    """No strategy of that name exists."""


# --- images -----------------------------------------------------------------------------

class ImageError(HepixError):
    """A file could not be turned into an 8-bit L or RGB image.

    ``source`` names the file; ``reason`` is a short machine-readable tag that
    goes into the ``rejects`` table.
    """

    reason = "image-error"

    def __init__(self, source: str, message: str):
        self.source = source
        self.detail = message
        super().__init__(f"{source}: {message}")


class EmptyImage(ImageError):
    reason = "empty-file"


class UnreadableImage(ImageError):
    reason = "not-an-image"


class TruncatedImage(ImageError):
    reason = "truncated"


class UnsupportedImageMode(ImageError):
    reason = "unsupported-mode"


class DecompressionBomb(ImageError):
    reason = "decompression-bomb"


@dataclass(frozen=True)
class Problem:
    """Why a ciphertext was refused, whatever the scheme: ``reason`` (a rejects tag) and ``detail`` (the
    message)."""

    reason: str
    detail: str
