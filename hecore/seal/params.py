"""Encryption parameters: presets at 128-bit security and their validation.

The bounds are the HomomorphicEncryption.org security standard's largest
total coefficient-modulus sizes (bits) for a ternary secret at 128-bit
classical security, the same table SEAL's ``CoeffModulus::MaxBitCount`` uses.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from ..errors import InvalidParameters, WeakParameters

#: HE standard (2018), Table 1, uniform ternary secret, classical 128-bit security:
#: ring degree N -> largest log2(Q) in bits.
HE_STANDARD_128 = {1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}

STANDARD_NAME = "HomomorphicEncryption.org standard, 128-bit classical, ternary secret"

SCHEMES = ("ckks", "bfv", "bgv")

#: Schemes whose slots hold integers modulo the plaintext modulus ``t`` (exact arithmetic).
INTEGER_SCHEMES = ("bfv", "bgv")


def names_scheme(name) -> bool:
    """Whether ``--scheme NAME`` is one of SEAL's schemes (CKKS, BFV, BGV)."""
    return name in SCHEMES


@dataclass(frozen=True)
class Params:
    """Scheme parameters: ring degree ``n``, prime sizes ``qi_sizes``, and the encoding.

    CKKS encodes real values at scale 2^``scale_bits`` (``plain_modulus_bits`` is 0);
    BFV and BGV encode integers modulo a batching prime ``t`` of
    ``plain_modulus_bits`` bits (``scale_bits`` is 0), which makes their
    arithmetic exact as long as values stay within ``±t/2``.

    The last prime of ``qi_sizes`` is SEAL's special (key-switching) prime and
    is not stored in ciphertexts; the others are the data primes.  With a
    single prime there is no key switching (no relinearisation, no rotation):
    enough for pixel additions and plaintext multiplication, nothing more.

    ``Params("ckks", ...)`` is a :class:`CkksParams`, ``Params("bfv" | "bgv", ...)`` an
    :class:`IntegerParams`: where the two encodings behave differently, the type answers.
    """

    scheme: str
    n: int
    qi_sizes: tuple[int, ...]
    scale_bits: int
    security_bits: int = 128
    name: str = field(default="custom", compare=False)
    plain_modulus_bits: int = 0
    rotations: bool = True      # False: no Galois keys, pointwise ops only; BFV/BGV then fill all N slots

    #: True for BFV/BGV (exact integers mod t), False for CKKS (approximate reals).
    is_integer: ClassVar[bool] = False
    #: CKKS: a fresh ciphertext carries levels that rescales spend (BFV/BGV spend noise budget instead).
    spends_levels: ClassVar[bool] = False
    #: CKKS slots are complex: two pixels per slot (complex packing), the DFT, polynomial approximations.
    complex_slots: ClassVar[bool] = False
    #: The pixel layout (iCHEETAH's: each value its own ciphertext, CKKS-encoded) is CKKS's.
    pixel_layout: ClassVar[bool] = False

    def __new__(cls, *args, **kwargs):
        if cls is Params:       # the scheme picks the type; unpickling and subclasses pass through
            scheme = args[0] if args else kwargs.get("scheme")
            cls = IntegerParams if scheme in INTEGER_SCHEMES else CkksParams
        return super().__new__(cls)

    def __post_init__(self):
        object.__setattr__(self, "qi_sizes", tuple(int(q) for q in self.qi_sizes))

    @property
    def total_bits(self) -> int:
        return sum(self.qi_sizes)

    @property
    def slots(self) -> int:
        """Values per ciphertext: N/2 (CKKS; BFV/BGV with rotations, which turn each row of N/2), or all N
        for BFV/BGV keys made without rotations (every op then works slot by slot)."""
        return self.n // 2

    @property
    def data_primes(self) -> int:
        """Primes a fresh ciphertext carries (all but the special prime)."""
        return max(1, len(self.qi_sizes) - 1)

    @property
    def supports_keyswitching(self) -> bool:
        return len(self.qi_sizes) > 1

    @property
    def is_bfv(self) -> bool:
        """BFV: exact integers, scale-invariant (no modulus switching between ops; 8-bit tables)."""
        return self.scheme == "bfv"

    @property
    def is_bgv(self) -> bool:
        """BGV: exact integers with modulus switching (Pyfhel's ``encodeBGV``/``encryptBGV`` calls)."""
        return self.scheme == "bgv"

    @property
    def plain_modulus(self) -> int:
        """BFV/BGV: the plaintext prime ``t`` SEAL picks (0 for CKKS)."""
        return 0

    @property
    def depth(self) -> int:
        """CKKS: how many rescales a fresh ciphertext affords (data primes - 1).

        BFV/BGV have no levels to spend; their multiplications cost noise
        budget instead, and :mod:`hecore.planner` holds what each preset affords.
        """
        return 0

    def ckks_only(self, message: str, error: type[Exception] = InvalidParameters) -> None:
        """Raise ``error(message)`` unless these are CKKS parameters (what needs complex slots, a scale or
        levels says so in ``message``)."""

    def partial_share(self, parts: int) -> int:
        """What each of ``parts`` partial sums is divided by before they are added: CKKS keeps the sum
        within its scale's room, integers mod t need no such care (1)."""
        return 1

    def validate(self) -> "Params":
        """Raise :class:`InvalidParameters` or :class:`WeakParameters`; return self."""
        if self.scheme not in SCHEMES:
            raise InvalidParameters(f"scheme {self.scheme!r} is not supported; use one of {SCHEMES}")
        if self.n not in HE_STANDARD_128:
            raise InvalidParameters(
                f"ring degree n={self.n} is not one of {sorted(HE_STANDARD_128)}"
            )
        if not self.qi_sizes or any(not 20 <= q <= 60 for q in self.qi_sizes):
            raise InvalidParameters(
                f"prime sizes {list(self.qi_sizes)} must be 1 or more values between 20 and 60 bits"
            )
        if self.security_bits != 128:
            raise InvalidParameters(
                f"security level {self.security_bits} bits is not supported; hepix only builds 128-bit contexts"
            )
        self._validate_encoding()
        bound = HE_STANDARD_128[self.n]
        if self.total_bits > bound:
            raise WeakParameters(
                f"parameters {self.describe()} give less than 128-bit security: log2(Q) = "
                f"{self.total_bits} bits exceeds the bound of {bound} bits for N={self.n} "
                f"({STANDARD_NAME}); use fewer or smaller primes, or N={2 * self.n}"
            )
        self._validate_room()
        return self

    def _validate_encoding(self) -> None:
        """The encoding's own fields (the plaintext modulus, or the scale and rotations)."""

    def _validate_room(self) -> None:
        """What the encoding needs of the primes."""

    def _encoding(self) -> str:
        return ""

    def encoding_args(self) -> dict:
        """The encoding's arguments to ``Pyfhel.contextGen`` (the scale, or the plaintext modulus's size)."""
        return {}

    def describe(self) -> str:
        return f"{self.scheme.upper()} N={self.n} qi={list(self.qi_sizes)} {self._encoding()}"

    def to_json(self) -> dict:
        d = asdict(self)
        d["qi_sizes"] = list(self.qi_sizes)
        if d["rotations"]:
            d.pop("rotations")      # the default: records of presets with rotations read as before
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Params":
        try:
            return Params(
                scheme=d["scheme"], n=int(d["n"]), qi_sizes=tuple(d["qi_sizes"]),
                scale_bits=int(d["scale_bits"]), security_bits=int(d.get("security_bits", 128)),
                name=d.get("name", "custom"), plain_modulus_bits=int(d.get("plain_modulus_bits", 0)),
                rotations=bool(d.get("rotations", True)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidParameters(f"malformed parameter record {d!r}: {e}") from e

    def canonical_bytes(self) -> bytes:
        """Bytes that identify the parameters (the name is a label and is left out)."""
        d = self.to_json()
        d.pop("name")
        if not d["plain_modulus_bits"]:
            d.pop("plain_modulus_bits")      # CKKS keys made before BFV existed keep their fingerprint
        # (to_json leaves rotations=True out: keys made before pointwise-only presets keep theirs)
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()

    def digest(self) -> str:
        return hashlib.sha256(self.canonical_bytes()).hexdigest()


@dataclass(frozen=True)
class CkksParams(Params):
    """CKKS: real (complex) values at a scale, levels spent by rescales."""

    spends_levels: ClassVar[bool] = True
    complex_slots: ClassVar[bool] = True
    pixel_layout: ClassVar[bool] = True

    @property
    def depth(self) -> int:
        return self.data_primes - 1

    def ckks_only(self, message: str, error: type[Exception] = InvalidParameters) -> None:
        return None

    def partial_share(self, parts: int) -> int:
        return max(1, parts)

    def _validate_encoding(self) -> None:
        if not self.rotations:
            raise InvalidParameters("rotations=False (pointwise ops over all N slots) is for BFV/BGV presets; "
                                    "CKKS fills N/2 slots")

    def _validate_room(self) -> None:
        if self.plain_modulus_bits:
            raise InvalidParameters("CKKS has no plaintext modulus; plain_modulus_bits must be 0")
        top = max(self.qi_sizes[: self.data_primes])
        if self.scale_bits >= top:
            raise InvalidParameters(
                f"scale 2^{self.scale_bits} does not fit under the first data prime of {top} bits"
            )

    def _encoding(self) -> str:
        return f"scale=2^{self.scale_bits}"

    def encoding_args(self) -> dict:
        return {"scale": 2.0 ** self.scale_bits}


@dataclass(frozen=True)
class IntegerParams(Params):
    """BFV and BGV: integers modulo the batching prime ``t``, exact while values stay within ``±t/2``."""

    is_integer: ClassVar[bool] = True

    @property
    def slots(self) -> int:
        return self.n // 2 if self.rotations else self.n

    @property
    def plain_modulus(self) -> int:
        """``Pyfhel.contextGen(t_bits=b)`` takes SEAL's ``PlainModulus::Batching(n, b)``: the
        largest ``b``-bit prime with ``t = 1 mod 2n``.  It lies *below* ``2^b``, so values must
        stay within ``(t - 1) / 2``, a little less than ``2^(b - 1)``.
        """
        return _batching_prime(self.n, self.plain_modulus_bits)

    def ckks_only(self, message: str, error: type[Exception] = InvalidParameters) -> None:
        raise error(message)

    def _validate_room(self) -> None:
        if not 17 <= self.plain_modulus_bits <= 60:
            raise InvalidParameters(
                f"{self.scheme.upper()} needs a plaintext modulus of 17..60 bits (plain_modulus_bits), "
                f"got {self.plain_modulus_bits}"
            )
        if self.scale_bits:
            raise InvalidParameters(f"{self.scheme.upper()} has no scale; scale_bits must be 0, got {self.scale_bits}")

    def _encoding(self) -> str:
        return f"t={self.plain_modulus_bits} bits"

    def encoding_args(self) -> dict:
        return {"t_bits": self.plain_modulus_bits}


def _is_prime(m: int) -> bool:
    """Deterministic Miller-Rabin for m < 3.3e24 (these bases suffice)."""
    if m < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for b in bases:
        if m % b == 0:
            return m == b
    d, r = m - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for b in bases:
        x = pow(b, d, m)
        if x in (1, m - 1):
            continue
        for _ in range(r - 1):
            x = x * x % m
            if x == m - 1:
                break
        else:
            return False
    return True


@functools.lru_cache(maxsize=None)
def _batching_prime(n: int, bits: int) -> int:
    """SEAL's ``PlainModulus::Batching(n, bits)``: the largest ``bits``-bit prime = 1 mod 2n."""
    step = 2 * n
    t = ((1 << bits) - 1) // step * step + 1
    while t >= 1 << (bits - 1):
        if _is_prime(t):
            return t
        t -= step
    raise InvalidParameters(f"no {bits}-bit prime = 1 mod {step} (plain_modulus_bits={bits}, n={n})")


#: The presets.  Every one is checked against the bound at import time.
PRESETS: dict[str, Params] = {
    p.name: p.validate()
    for p in (
        # iCHEETAH §4.2: N = 2^12, Q = 2^109.  Data primes 40 and 30 bits, special prime 39;
        # scale 2^30 leaves one rescale for a plaintext multiplication (mean filter).
        Params("ckks", 4096, (40, 30, 39), 30, name="paper-4096"),
        # The TenSEAL study (Saker et al.): N = 8192, [60, 40, 40, 60], scale 2^40.
        Params("ckks", 8192, (60, 40, 40, 60), 40, name="tenseal-8192"),
        # Matching with L1 (an approximation of |x|, see hecore.ops.matching): four data primes,
        # the 218-bit maximum.  The special prime (54 bits) is at least as large as every data
        # prime: key-switching noise grows with max(data prime) / special prime, and with a
        # special prime 22 bits smaller than a data prime every rotation added an error of
        # ~0.1..1.5 at scale 2^40 (packed mean filters came out inexact).  Scale 2^30 and
        # two 30-bit rescaling primes leave 104 bits after L1's two rescales for the scale
        # the free division by D grows (2^(30 + 4 log2 D)).
        Params("ckks", 8192, (52, 52, 30, 30, 54), 30, name="match-8192"),
        # The smallest ring that serves add-only pixel work: N = 2048, one 54-bit prime
        # (exactly the 128-bit bound).  No key switching, so no rotations/relinearisation.
        Params("ckks", 2048, (54,), 30, name="addonly-2048"),
        # The DFT pipeline (hecore.ops.dft) and encrypted inference (hecore.infer.models): four levels at
        # N = 8192 (218 bits exactly), scale 2^32 with 32-bit rescaling primes, a 44-bit first
        # prime (results up to 2^11) and a special prime at least as large as every data prime.
        Params("ckks", 8192, (44, 32, 32, 32, 32, 46), 32, name="dft-8192"),
        # N = 16384 for DFTs of up to 8192 values (8192 slots): six levels of 40 bits, 360 of the
        # 438 bits the standard allows; the three-stage pipeline with two groups per transform.
        Params("ckks", 16384, (60, 40, 40, 40, 40, 40, 40, 60), 40, name="dft-16384"),
        # Exact integer arithmetic (the TenSEAL and ML studies compare it with CKKS).  N = 4096 with
        # SEAL's default 109-bit modulus and t of 20 bits: brightness, watermark and the
        # mean filter's sums (|values| < t/2 = 2^19); one multiplication leaves ~13 bits of
        # noise budget, too little for a distance, so matching takes N = 8192 below.
        Params("bfv", 4096, (36, 36, 37), 0, name="bfv-4096", plain_modulus_bits=20),
        # N = 8192, SEAL's default 218-bit modulus, t of 40 bits: a squared difference
        # summed over a whole image (L2^2) stays below t/2, with ~64 bits of noise budget left.
        Params("bfv", 8192, (43, 43, 44, 44, 44), 0, name="bfv-8192", plain_modulus_bits=40),
        # Exact 8-bit tables (hecore.ops.lut): t = 65537 and N = 16384 (SEAL's default 438-bit modulus,
        # the 128-bit maximum, which Pyfhel builds for BFV whatever the sizes asked), the noise budget
        # (365 bits fresh) of the depth-8 interpolation polynomial of any table with ~20 bits to spare.
        # Pointwise only: no Galois keys (hundreds of MB at this N), so a tile fills all 16384 slots.
        Params("bfv", 16384, (48, 48, 48, 49, 49, 49, 49, 49, 49), 0, name="lut-16384", plain_modulus_bits=17,
               rotations=False),
        Params("bgv", 4096, (36, 36, 37), 0, name="bgv-4096", plain_modulus_bits=20),
        Params("bgv", 8192, (43, 43, 44, 44, 44), 0, name="bgv-8192", plain_modulus_bits=40),
    )
}

DEFAULT_PRESET = "paper-4096"


def preset(name: str) -> Params:
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidParameters(
            f"unknown preset {name!r}; choose one of: {', '.join(sorted(PRESETS))}"
        ) from None
