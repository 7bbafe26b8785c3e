"""hecore: the homomorphic-encryption core of hepix (Pyfhel + NumPy, no Spark).

The safe API is what this package exports.  The paper's leaking caching
strategies live in :mod:`hecore.encrypt.hazmat` and are reached only through
``make_strategy(name, ctx, allow_leaky=True)``.
"""
from hecore.encrypt.strategies import (
    Fresh,
    make_strategy,
    strategy_from_state,
    strategy_names,
)
from hecore.layouts.pixel import decrypt_tiles, encrypt_tiles

from .ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS, CiphertextBatch
from .context import HEContext, PublicMaterial
from .errors import HepixError
from .images import ImagePolicy, LoadedImage, load_image
from .keys import export_public, keygen, load_public, load_secret
from .params import DEFAULT_PRESET, PRESETS, Params, preset
from .quality import Quality, compare

__all__ = [
    "CiphertextBatch", "DEFAULT_PRESET", "Fresh", "HEContext", "HepixError", "ImagePolicy",
    "LoadedImage", "PRESETS", "Params", "PublicMaterial", "Quality", "SECURITY_IND_CPA",
    "SECURITY_LEAKS", "compare", "decrypt_tiles", "encrypt_tiles", "export_public", "keygen",
    "load_image", "load_public", "load_secret", "make_strategy", "preset", "strategy_from_state",
    "strategy_names",
]
