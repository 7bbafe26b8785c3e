"""What a TFHE key set is, described the way hepix describes CKKS/BFV/BGV presets.

A :class:`TfheParams` plays the part :class:`hecore.seal.params.Params` plays for the SEAL schemes: a
named, checked parameter set that key directories, run manifests and tables record
(:meth:`TfheParams.to_json`), with a one-line :meth:`~TfheParams.describe`.  There is one, the
tfhe-rs defaults for 8-bit integers (``tfhe-default``): every pixel value is one ``FheUint8``,
four radix blocks of two message bits and two carry bits, each block an LWE ciphertext, at 128-bit
security with a bootstrapping failure probability below 2^-128, with tfhe-rs's ciphertext-list
compression enabled, and with tfhe-rs's dedicated compact public-key parameters: a compact public
key encrypts pixels without the client key, and the server key holds the key-switching key that
casts those ciphertexts to the computation parameters.

:class:`TfhePublicMaterial` is what a party without the client key holds (the server key and the
compact public key), as bytes: picklable and broadcastable like :class:`hecore.seal.context.PublicMaterial`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from ..errors import InvalidParameters

SCHEME = "tfhe"


def names_scheme(name) -> bool:
    """Whether ``--scheme NAME`` is TFHE."""
    return name == SCHEME

#: The tfhe-rs parameter set of the keys (computation) and of the list compression.
PARAMETERS = "PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128"
COMPRESSION = "COMP_PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128"
#: The public-key encryption parameters of the compact public key (and of its key switch to the
#: computation parameters, PARAM_KEYSWITCH_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128).
PUBLIC_KEY = "PARAM_PKE_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128"
LIBRARY = "tfhe-rs 1.8.2"

#: The encodings of encrypted pixel values (see :mod:`hecore.tfhe.encryptor`): ``seeded`` and
#: ``full`` are one ciphertext per value under the client key, ``compact`` one per value under the
#: compact public key; ``list`` is one compressed list per batch.
ENCODINGS = ("seeded", "full", "compact", "list")


@dataclass(frozen=True)
class TfheParams:
    """A TFHE parameter set: the tfhe-rs parameters, the plaintext width and the security it gives."""

    name: str = "tfhe-default"
    scheme: str = SCHEME
    parameters: str = PARAMETERS
    compression: str = COMPRESSION
    #: The compact public key's parameters; "" for key sets made before hepix made one.
    public_key: str = field(default=PUBLIC_KEY, compare=False)
    library: str = LIBRARY
    bits: int = 8                   # plaintext bits per ciphertext: one pixel value
    blocks: int = 4                 # radix blocks of 2 message bits (and 2 carry bits) each
    security_bits: int = 128
    failure_log2: int = -128        # bootstrapping failure probability, log2
    layouts: tuple = field(default=("pixel",), compare=False)
    #: Serialized size of one pixel ciphertext in each per-value encoding (tfhe-rs 1.8.2's
    #: serialization of these parameters; test_tfhe.py checks them against the extension).
    ct_bytes: tuple = field(default=(("seeded", 871), ("full", 66101), ("compact", 16627)), compare=False)

    @property
    def slots(self) -> int:
        """Values per ciphertext: one (so an :class:`~hecore.encrypt.base.Encryptor` over these
        parameters has ``max_row`` 1, like the pixel layout's strategies)."""
        return 1

    def validate(self) -> TfheParams:
        if self.scheme != SCHEME:
            raise InvalidParameters(f"TFHE parameters must have scheme {SCHEME!r}, got {self.scheme!r}")
        known = TFHE_PRESETS.get(self.name)
        if known is None or known != self:
            raise InvalidParameters(
                f"TFHE parameter set {self.name!r} ({self.parameters}, {self.library}) is not one hepix builds; "
                f"choose one of: {', '.join(TFHE_PRESETS)}")
        return self

    def describe(self) -> str:
        return (f"TFHE FheUint{self.bits} ({self.blocks} radix blocks of 2 bits, {self.library} "
                f"{self.parameters}, {self.security_bits}-bit, failure 2^{self.failure_log2})")

    def to_json(self) -> dict:
        d = asdict(self)
        d["layouts"] = list(self.layouts)
        d.pop("ct_bytes")
        return d

    @classmethod
    def from_json(cls, d: dict) -> TfheParams:
        """The parameter set a table or manifest recorded, checked to be one hepix builds."""
        try:
            p = cls(name=str(d["name"]), scheme=str(d["scheme"]), parameters=str(d["parameters"]),
                    compression=str(d.get("compression", COMPRESSION)), public_key=str(d.get("public_key", "")),
                    library=str(d["library"]),
                    bits=int(d.get("bits", 8)), blocks=int(d.get("blocks", 4)),
                    security_bits=int(d.get("security_bits", 128)), failure_log2=int(d.get("failure_log2", -128)),
                    layouts=tuple(d.get("layouts", ("pixel",))))
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidParameters(f"malformed TFHE parameter record {d!r}: {e}") from e
        return p.validate()


#: The TFHE parameter sets by name (one: tfhe-rs's default for 8-bit integers).
TFHE_PRESETS: dict[str, TfheParams] = {"tfhe-default": TfheParams()}
TFHE_DEFAULT = TFHE_PRESETS["tfhe-default"]


@dataclass(frozen=True)
class TfhePublicMaterial:
    """Everything a party without the client key needs: the parameters, the server key and the
    compact public key (bytes; None for key sets made without one).

    The server key evaluates every op, decompresses lists and casts public-key ciphertexts; the
    compact public key encrypts.  Neither can decrypt.
    """

    params: TfheParams
    server_key: bytes
    public_key: bytes | None = None
    #: The sha256 of the key set's public files, ``((file name, hex), ...)`` sorted by name, as its key
    #: directory records them: what the fingerprint covers.  None for key directories of format 1, whose
    #: fingerprint is the server key's sha256 alone.
    digests: tuple[tuple[str, str], ...] | None = None

    @property
    def scheme(self) -> str:
        return SCHEME

    def fingerprint(self) -> str:
        """The key set's identity in manifests and tables, hex: sha256 over the parameters and the digests
        of the server key and the compact public key (so that neither of another key set passes under this
        one's name); for key sets of format 1, the server key's sha256."""
        if self.digests is None:
            return hashlib.sha256(self.server_key).hexdigest()
        h = hashlib.sha256(b"hepix-tfhe-key-fingerprint-v2\0")
        h.update(json.dumps(self.params.to_json(), sort_keys=True, separators=(",", ":")).encode())
        for name, digest in self.digests:
            h.update(b"\0" + name.encode() + b"\0" + bytes.fromhex(digest))
        return h.hexdigest()

    def __repr__(self) -> str:
        cpk = f"compact public key {len(self.public_key):,} bytes" if self.public_key else "no compact public key"
        return (f"TfhePublicMaterial({self.params.name}, server key {len(self.server_key):,} bytes, {cpk}, "
                f"{self.fingerprint()[:16]})")
