"""hecore: the homomorphic-encryption core of hepix (Pyfhel + NumPy, no Spark, no benchmarks).

The safe API is what this package exports: parameters and keys (:func:`open_keys`: a key directory of any
scheme as one :class:`~hecore.schemes.KeySet`, :mod:`hecore.schemes`), the context, one encryptor interface
over a public key, a secret key or a pixel strategy (:mod:`hecore.encrypt`), the layouts
(:mod:`hecore.layouts`), the image ops (:mod:`hecore.ops`), inference (:mod:`hecore.infer`), quality
metrics, and the keyless audit (:mod:`hecore.audit`).  The paper's leaking caching strategies live in
:mod:`hecore.encrypt.hazmat` and are reached only through ``make_strategy(name, ctx, allow_leaky=True)``.
"""
from hecore.encrypt.strategies import Fresh, make_strategy, strategy_from_state, strategy_names

from .ciphertexts import SECURITY_IND_CPA, SECURITY_LEAKS, CiphertextBatch
from .encrypt import Encryptor, PublicKeyEncryptor, encryptor_for
from .errors import HepixError
from .images import ImagePolicy, LoadedImage, load_image
from .layouts import Layout
from .quality import Quality, compare
from .schemes import KeySet, open_keys
from .seal.context import HEContext, PublicMaterial
from .seal.keys import export_public, keygen, load_public, load_secret
from .seal.params import DEFAULT_PRESET, PRESETS, Params, preset

__all__ = [
    "CiphertextBatch", "DEFAULT_PRESET", "Encryptor", "Fresh", "HEContext", "HepixError", "ImagePolicy", "KeySet", "Layout",
    "LoadedImage", "PRESETS", "Params", "PublicKeyEncryptor", "PublicMaterial", "Quality", "SECURITY_IND_CPA",
    "SECURITY_LEAKS", "compare", "encryptor_for", "export_public", "keygen", "load_image", "load_public",
    "load_secret", "make_strategy", "open_keys", "preset", "strategy_from_state", "strategy_names",
]
