"""TFHE for hepix: 8-bit encrypted pixels over tfhe-rs (the ``hepix_tfhe`` extension).

Each pixel value is one ``FheUint8`` (the pixel layout).  The data owner holds the client key
(secret: encrypts and decrypts); the cluster gets the server key (evaluation only).  Unlike CKKS
and BFV/BGV, TFHE evaluates comparisons and arbitrary 8-bit functions exactly, so brightness
with saturation, thresholds, min/max with a constant and lookup tables (gamma, contrast stretch,
any 8-bit function) give exactly the plaintext result (:mod:`hecore.tfhe.ops`).

Behind hepix's interfaces: :class:`~hecore.tfhe.params.TfheParams` describes the key set as a
preset does (``tfhe-default``); :class:`~hecore.tfhe.encryptor.TfheEncryptor` is an
:class:`hecore.encrypt.base.Encryptor` of the pixel layout, which :func:`hecore.encrypt.encryptor_for`
returns for TFHE public material and a client key; :class:`~hecore.tfhe.decryptor.TfheDecryptor`
decrypts pixel batches as :meth:`hecore.seal.context.HEContext.decrypt_pixels` does;
:func:`hecore.ops.spec.parse_chain` parses TFHE op chains given ``scheme="tfhe"``; and
:mod:`hecore.planner` knows which ops each scheme runs.

Modules: :mod:`~hecore.tfhe.params`, :mod:`~hecore.tfhe.keys` (key directories),
:mod:`~hecore.tfhe.ops` (operations and their plaintext references), :mod:`~hecore.tfhe.encryptor`,
:mod:`~hecore.tfhe.decryptor`, :mod:`~hecore.tfhe.evaluator`, :mod:`~hecore.tfhe.native` (the
extension, with a clear error when it is not built).  Nothing here needs Spark, and nothing imports
the extension until a key is used.
"""
from .native import TfheExtensionMissing, available
from .ops import Brightness, BrightnessWrap, Lut, Max, Min, TfheOp, Threshold, parse_op
from .params import TFHE_DEFAULT, TFHE_PRESETS, TfheParams, TfhePublicMaterial

__all__ = [
           "TFHE_DEFAULT",
           "TFHE_PRESETS",
           "Brightness",
           "BrightnessWrap",
           "Lut",
           "Max",
           "Min",
           "TfheExtensionMissing",
           "TfheOp",
           "TfheParams",
           "TfhePublicMaterial",
           "Threshold",
           "available",
           "parse_op",
]
