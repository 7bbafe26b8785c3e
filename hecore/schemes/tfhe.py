"""TFHE through tfhe-rs: the second scheme family behind :class:`~hecore.schemes.base.Scheme`.

One ciphertext per pixel value (the pixel layout), encrypted fresh with the compact public key
(``--encryption public``, the default: anyone holding the public keys) or with the owner's client key
(``--encryption symmetric``), evaluated with the server key alone, exact.  Key directories made before
hepix made a compact public key encrypt with the client key only, and public encryption with them is
refused saying so.  The keys are those of :mod:`hecore.tfhe.keys`; the encryptors, decryptor, row
checker and evaluator those of :mod:`hecore.tfhe`.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from hecore.layouts import Layout

from .base import KeySet, Scheme

#: How every value's ciphertext is serialized as it is encrypted (hecore.tfhe.encryptor): with the
#: client key (seeded), and with the compact public key.
ENCODING = "seeded"
PUBLIC_ENCODING = "compact"
#: The ``strategy`` of processed rows: one serialized ``FheUint8`` per value (a computed ciphertext
#: has no seed).
PROCESSED = "tfhe-full"


class TfheScheme(Scheme):
    """TFHE keys: the pixel layout, fresh public-key or client-key encryption, exact 8-bit ops."""

    name = "tfhe"
    title = "TFHE"
    secret_file = "client.key"
    refused_reason = "tfhe-refused"
    public_keys = "TFHE server and compact public keys"
    layouts = (Layout.PIXEL,)
    symmetric_layouts = (Layout.PIXEL,)
    encryptions = ("public", "symmetric")   # symmetric: the client key
    stores = ("seal",)              # ``--store seal``, the default, means the library's own serialization
    encrypts = ("TFHE keys encrypt every value fresh in the pixel layout, with the compact public key or "
                "(--encryption symmetric) the client key")

    def owns_manifest(self, doc: dict) -> bool:
        from hecore.tfhe.params import SCHEME

        return doc.get("scheme") == SCHEME

    def owns_preset(self, preset: str) -> bool:
        from hecore.ops.spec import is_tfhe_preset

        return is_tfhe_preset(preset)

    def preset(self, name: str):
        from hecore.errors import InvalidParameters
        from hecore.tfhe.params import TFHE_PRESETS

        if name not in TFHE_PRESETS:
            raise InvalidParameters(f"unknown TFHE parameter set {name!r}; choose one of: {', '.join(TFHE_PRESETS)}")
        return TFHE_PRESETS[name]

    def open(self, keys: str | os.PathLike, *, secret: bool = False, eval_keys: bool = True) -> TfheKeys:
        from hecore.tfhe import keys as tfhe_keys

        public = tfhe_keys.read_public(keys)
        client = None
        if secret:          # read with the owner-only discipline, proven to own the server and public keys
            client = tfhe_keys.read_client_key(keys)
            tfhe_keys.check_owner_directory(keys, public, client)
        return TfheKeys(public.params, public.fingerprint(), public.server_key, client, public.public_key,
                        public_key_bound=public.digests is not None)

    def plan_keys(self, specs: Sequence[str], layout: str | None, *, only: str | None = None):
        """The one parameter set, once TFHE is shown to run every op of the chain."""
        from hecore.planner import chain_support
        from hecore.tfhe.params import TFHE_DEFAULT

        if specs:
            verdict = chain_support(list(specs), self.name, layout)
            if not verdict.ok:
                raise ValueError(f"TFHE cannot run {verdict.spec}: {verdict.why}")
        return TFHE_DEFAULT

    def keygen(self, out, params, *, overwrite: bool = False, rotations: bool = True,
               compressed_server_key: bool = False):
        from hecore.errors import InvalidParameters
        from hecore.tfhe.keys import keygen

        if not rotations:
            raise InvalidParameters("--no-rotations is for CKKS/BFV/BGV keys; TFHE keys have no rotation keys")
        return keygen(out, overwrite=overwrite, compressed_server_key=compressed_server_key, params=params)

    def export_public(self, keys, out, for_ops=(), **tiles):
        from hecore.tfhe.keys import export_public

        if for_ops or tiles:
            raise ValueError("TFHE's server key is one key for every op: --for-op does not apply to TFHE keys")
        return export_public(keys, out)

    def parse_chain(self, specs: Sequence[str]):
        from hecore.ops.spec import parse_chain

        return parse_chain(specs, scheme=self.name)

    def check_chain(self, params, done: Sequence[str], ops: list, *, layout: str, options: dict,
                    preset: str) -> list:
        """The run's ciphertexts are pixel ciphertexts of these keys' parameters and its recorded ops
        are TFHE ops."""
        from hecore.ops.spec import recorded_chain

        if not self.owns_preset(preset) or preset != params.name:
            raise ValueError(f"the input holds {preset} ciphertexts; TFHE ops run on ciphertexts made with these "
                             "TFHE keys (`hepix encrypt --keys TFHE_KEYS`)")
        recorded_chain(list(done), preset)
        return ops

    def plausible_range(self, specs: Sequence[str]) -> tuple[float, float]:
        return 0.0, 255.0                   # the exact bytes

    def keyless_checker(self, preset: str):
        from hecore.tfhe.checks import TfheCiphertextChecker

        return TfheCiphertextChecker(self.preset(preset))

    def processed_strategy(self, strategy: str) -> str:
        return PROCESSED


TFHE = TfheScheme()


@dataclass(frozen=True)
class TfheKeys(KeySet):
    """A TFHE key set: its parameters and fingerprint, the server key (evaluation; None where only
    the checks, the decryptor and the encryptors need the keys), the owner's client key when held and
    the compact public key (None for key sets made without one, and where only the checks, the
    decryptor and the evaluator need the keys)."""

    tfhe_params: object                                           # hecore.tfhe.params.TfheParams
    key_fingerprint: str
    server_key: bytes | None = field(default=None, repr=False)
    client_key: bytes | None = field(default=None, repr=False)    # never in a log line or an error message
    public_key: bytes | None = field(default=None, repr=False)
    #: Whether the fingerprint covers the compact public key (key directories of format 2).
    public_key_bound: bool = True

    scheme = TFHE

    @property
    def params(self):
        return self.tfhe_params

    @property
    def fingerprint(self) -> str:
        return self.key_fingerprint

    @property
    def has_secret(self) -> bool:
        return self.client_key is not None

    def secret_bytes(self) -> bytes:
        if self.client_key is None:
            raise ValueError("these are the public TFHE keys: only the owner's key set holds client.key")
        return self.client_key

    def _server_key(self) -> bytes:
        if self.server_key is None:
            raise ValueError("this TFHE key set was reduced to what the checks need: it holds no server key")
        return self.server_key

    def public(self) -> TfheKeys:
        return TfheKeys(self.tfhe_params, self.key_fingerprint, self.server_key, None, self.public_key,
                        public_key_bound=self.public_key_bound)

    def for_checks(self) -> TfheKeys:
        return TfheKeys(self.tfhe_params, self.key_fingerprint)

    def for_encryption(self, *, use_secret: bool) -> TfheKeys:
        """The client key alone (``use_secret``) or the compact public key alone: each encrypts by itself
        (the server key, hundreds of MB, stays home)."""
        if use_secret:
            return TfheKeys(self.tfhe_params, self.key_fingerprint, None, self.secret_bytes())
        return TfheKeys(self.tfhe_params, self.key_fingerprint, None, None, self._public_key())

    def _public_key(self) -> bytes:
        if self.public_key is None:
            from hecore.tfhe.keys import PUBLIC

            raise ValueError(
                f"these TFHE keys hold no compact public key ({PUBLIC}): they were made before hepix encrypted TFHE "
                "with a public key; encrypt with the client key (`hepix encrypt --encryption symmetric` with the "
                "owner's key directory), or make a new key set with `hepix keygen --scheme tfhe`")
        return self.public_key

    def check_encryption(self, *, use_secret: bool) -> None:
        """Public encryption needs the compact public key: refused, saying what to do, for key sets made
        without one."""
        if not use_secret:
            self._public_key()

    def for_decryption(self) -> TfheKeys:
        return TfheKeys(self.tfhe_params, self.key_fingerprint, None, self.secret_bytes())

    def encryptor(self, *, layout, strategy: str = "fresh", strategy_state: bytes | None = None,
                  allow_leaky: bool = False, use_secret: bool = False, compression: str = "none",
                  check_key: bool = True):
        from hecore.tfhe.encryptor import TfheEncryptor
        from hecore.tfhe.keys import check_key_pair

        if Layout.parse(layout).packed:
            raise ValueError("TFHE encrypts one pixel value per ciphertext: the pixel layout")
        if strategy != "fresh":
            raise ValueError(f"strategy {strategy!r} is a CKKS pixel-layout mode; TFHE encrypts every value fresh")
        if compression != "none":
            raise ValueError(f"compression {compression!r} is for CKKS/BFV/BGV packed ciphertexts; TFHE's seeded "
                             "and compact encodings are already compact: drop --compression")
        if not use_secret:
            from hecore.tfhe.encryptor import TfhePublicEncryptor

            return TfhePublicEncryptor(self._public_key(), params=self.tfhe_params, fingerprint=self.key_fingerprint)
        if self.client_key is None:
            raise ValueError("TFHE's symmetric encryption uses the client key: the data owner's key directory that "
                             "holds client.key (public keys encrypt with --encryption public)")
        if check_key:
            check_key_pair(self.client_key, self._server_key())
        return TfheEncryptor(self.client_key, params=self.tfhe_params, encoding=ENCODING,
                             fingerprint=self.key_fingerprint)

    def strategy(self, name: str, *, allow_leaky: bool = False, options: dict | None = None):
        from hecore.tfhe.encryptor import TfheFresh

        if name != "fresh" or options:
            raise ValueError(f"strategy {name!r} is a CKKS pixel-layout mode; TFHE encrypts every value fresh")
        return TfheFresh(ENCODING)

    def encryption_label(self, *, use_secret: bool, strategy: str) -> str:
        from hecore.tfhe.encryptor import strategy_name

        return strategy_name(ENCODING if use_secret else PUBLIC_ENCODING)

    def encryption_options(self, *, use_secret: bool, compression: str) -> dict:
        if use_secret:
            return {"encryption": "symmetric", "encoding": ENCODING}
        return {"encryption": "public", "encoding": PUBLIC_ENCODING}

    def ciphertext_bytes(self) -> int | None:
        return None                         # the workers report what they wrote

    def decryptor(self):
        from hecore.tfhe.decryptor import TfheDecryptor

        return TfheDecryptor(self.secret_bytes())

    def checker(self, *, fixed_format: bool = False, exact_scale: tuple[int, int] | None = None):
        from hecore.tfhe.checks import TfheCiphertextChecker

        return TfheCiphertextChecker(self.tfhe_params)

    def evaluator(self):
        from hecore.tfhe.evaluator import TfheEvaluator

        return TfheEvaluator(self._server_key(), params=self.tfhe_params)
