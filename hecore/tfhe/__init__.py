"""TFHE for hepix: 8-bit encrypted pixels over tfhe-rs (the ``hepix_tfhe`` extension).

Each pixel value is one ``FheUint8`` (the pixel layout).  The data owner holds the client key
(secret: encrypts and decrypts); the cluster gets the server key (evaluation only).  Unlike CKKS
and BFV/BGV, TFHE evaluates comparisons and arbitrary 8-bit functions exactly, so brightness
with saturation, thresholds, min/max with a constant and lookup tables (gamma, contrast stretch)
give exactly the plaintext result (:mod:`hecore.tfhe.ops`).

Modules: :mod:`~hecore.tfhe.keys` (key directories), :mod:`~hecore.tfhe.ops` (operations and
their plaintext references), :mod:`~hecore.tfhe.encryptor`, :mod:`~hecore.tfhe.decryptor`,
:mod:`~hecore.tfhe.evaluator`, :mod:`~hecore.tfhe.native` (the extension, with a clear error
when it is not built).  Nothing here needs Spark, and nothing imports the extension until a key
is used.
"""
from .native import TfheExtensionMissing, available
from .ops import Brightness, BrightnessWrap, Lut, Max, Min, Threshold, TfheOp, parse_op

__all__ = ["Brightness", "BrightnessWrap", "Lut", "Max", "Min", "Threshold", "TfheExtensionMissing", "TfheOp",
           "available", "parse_op"]
