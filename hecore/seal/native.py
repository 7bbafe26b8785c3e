"""SEAL underneath hepix: a Pyfhel context for a parameter set, the ``hepix_seal`` extension, and the
SEAL parameter bytes inside Pyfhel's serialized context.

The lowest floor of the SEAL side of ``hecore``: the context, the symmetric encryptor, the compact
at-rest format and the ciphertext checks all stand on it, and it stands on the parameters alone.
"""
from __future__ import annotations

import struct
import warnings

from Pyfhel import Pyfhel

from ..errors import HepixError
from .params import Params


def pyfhel_for(params: Params) -> Pyfhel:
    """A Pyfhel holding the SEAL context of ``params`` (validated first), without keys."""
    params.validate()
    he = Pyfhel()
    with warnings.catch_warnings():
        # A single-prime (add-only) preset cannot rescale; Pyfhel warns about it on every
        # context.  That is the documented nature of the preset, not news to the user.
        if len(params.qi_sizes) == 1:
            warnings.filterwarnings("ignore", message=".*do not support rescaling.*")
        he.contextGen(scheme=params.scheme, n=params.n, qi_sizes=list(params.qi_sizes), sec=params.security_bits,
                      **params.encoding_args())
    if params.plain_modulus and int(he.t) != params.plain_modulus:      # integer_slots and the planner rely on it
        raise HepixError(f"SEAL chose t = {int(he.t)} for {params.describe()}, not the expected "
                         f"{params.plain_modulus}")
    return he


class NativeExtensionMissing(HepixError):
    """The ``hepix_seal`` extension is not installed (``make setup`` builds it)."""


def native_module():
    """The ``hepix_seal`` extension module, or :class:`NativeExtensionMissing` saying how to build it."""
    try:
        import hepix_seal
    except ImportError as e:
        raise NativeExtensionMissing(
            f"symmetric encryption and compact storage need hepix's native extension hepix_seal, which cannot be "
            f"imported ({e}); "
            "build and install it with `make setup` (tools/build_native.sh), or encrypt with the public key "
            "(--encryption public)"
        ) from None
    return hepix_seal


def seal_context_bytes(context: bytes) -> tuple[int, float, bytes]:
    """Split Pyfhel's ``to_bytes_context`` into (security bits, scale, SEAL's EncryptionParameters bytes).

    Pyfhel 3.5 writes its own prefix before SEAL's serialization: the security level (int32),
    the number of prime sizes (uint64), the sizes (int32 each) and the scale (float64).
    """
    head = struct.Struct("<iQ")
    if len(context) < head.size:
        raise HepixError(f"the context is {len(context)} bytes, too short to be a Pyfhel context")
    sec, count = head.unpack_from(context)
    if not 0 <= count <= 64:
        raise HepixError(f"the context bytes do not start with a Pyfhel context prefix ({count} prime sizes)")
    offset = head.size + 4 * count
    if len(context) < offset + 8:
        raise HepixError("the context bytes end inside Pyfhel's prefix")
    (scale,) = struct.unpack_from("<d", context, offset)
    return sec, scale, bytes(context[offset + 8:])
