"""hecore: the homomorphic-encryption core of hepix (Pyfhel + NumPy, no Spark).

The safe API is what this package exports.  The paper's leaking caching
strategies live in :mod:`hecore.hazmat` and are reached only through
``make_strategy(name, ctx, allow_leaky=True)``.
"""
from .ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS, CiphertextBatch
from .context import HEContext, PublicMaterial
from .errors import HepixError
from .images import ImagePolicy, LoadedImage, load_image
from .keys import export_public, keygen, load_public, load_secret
from .params import DEFAULT_PRESET, PRESETS, Params, preset
from .pixel import decrypt_tiles, encrypt_tiles
from .quality import Quality, compare
from .strategies import Fresh, make_strategy, strategy_from_state, strategy_names

__all__ = [
    "CiphertextBatch", "DEFAULT_PRESET", "Fresh", "HEContext", "HepixError", "ImagePolicy",
    "LoadedImage", "PRESETS", "Params", "PublicMaterial", "Quality", "SECURITY_IND_CPA",
    "SECURITY_LEAKS", "compare", "decrypt_tiles", "encrypt_tiles", "export_public", "keygen",
    "load_image", "load_public", "load_secret", "make_strategy", "preset", "strategy_from_state",
    "strategy_names",
]
