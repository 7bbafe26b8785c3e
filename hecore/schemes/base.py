"""What every scheme and every key set is: one interface in front of SEAL's and TFHE's.

A :class:`Scheme` is a family of keys hepix can hold -- SEAL's CKKS/BFV/BGV (:mod:`.seal`), TFHE
through tfhe-rs (:mod:`.tfhe`) -- and says what its keys can do before any key is read: its
layouts and encryptions, its op vocabulary, which presets are its own, what a refused ciphertext
is called, what values a decrypted run may hold.  A :class:`KeySet` is one key directory opened
(:func:`hecore.schemes.open_keys`): its scheme, parameters and fingerprint, and the encryptor,
decryptor, row checker and evaluator built from its bytes.

The jobs hold a key set (or, before any key is read, a scheme) and ask it rather than compare
scheme names; what is decided from names and presets alone -- the op vocabularies
(:mod:`hecore.ops.spec`), the planner and ``hepix plan``, ``hepix keygen``'s choices, the manifest
checks (:mod:`schemas.manifest`) -- and the process stage's table of chain runners
(:data:`tasks.process.CHAINS`) name the schemes themselves (:mod:`hecore.schemes` lists what a new
one needs).  As Lattigo keeps one ``rlwe`` core with ``hefloat``/``heint``/``hebin`` beside it,
and TenSEAL a ``SCHEME_TYPE``, the jobs hold these two interfaces and the schemes live behind them.

A key set holds its parameters and bytes only (public material, and the secret on the owner's
side), so it pickles and broadcasts; what it builds (a SEAL context, a tfhe-rs key) is built where
it is used, once per Python worker.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence


class Scheme(ABC):
    """A scheme family: what its keys can do, known from its name alone (no key read)."""

    #: ``seal`` or ``tfhe``: the family's name (TFHE's is also how :mod:`hecore.ops.spec` and the planner
    #: name its op vocabulary); :mod:`hecore.schemes` routes by :meth:`owns_manifest`, :meth:`owns_preset`
    #: and its ``--scheme`` table, not by this name.
    name: str
    #: How the docs and messages name its schemes (``CKKS/BFV/BGV``, ``TFHE``).
    title: str
    #: The file of a key directory that holds its secret (never opened on the processing side).
    secret_file: str
    #: The rejects reason when the scheme's library refuses a ciphertext while it is used.
    refused_reason: str
    #: The layouts its ciphertexts come in (:class:`hecore.layouts.Layout`), the default first.
    layouts: tuple
    #: Whether its keys are planned over presets (``hepix plan`` lists them); else one parameter set.
    plans_presets: bool = False
    #: Whether :meth:`export_public` gives a copy for one chain alone (``for_ops``); else every op's keys are one.
    divides_keys: bool = False
    #: What the processing side holds of its keys, for messages (``public``, ``TFHE server key``).
    public_keys: str
    #: How ``hepix encrypt`` can encrypt under its keys (``--encryption``), the default first:
    #: ``public`` with the public keys, ``symmetric`` with the owner's secret (an owner's job).
    encryptions: tuple[str, ...]
    #: How its ciphertexts can be stored (``--store``), the default first.
    stores: tuple[str, ...]
    #: How its keys encrypt, in a phrase for the messages that refuse other encryptions' flags.
    encrypts: str

    @property
    def strategies(self) -> tuple[str, ...]:
        """The pixel-layout strategies (``--strategy``) its keys encrypt with."""
        return ("fresh",)

    def __repr__(self) -> str:
        return f"<scheme {self.name}>"

    @property
    def symmetric_layouts(self) -> tuple:
        """The layouts ``--encryption symmetric`` encrypts in (SEAL's: the packed ones, tile channels)."""
        return tuple(lay for lay in self.layouts if lay.packed)

    @property
    def public_encryption(self) -> bool:
        """Whether anyone with the public keys can encrypt (else only the owner, with the secret)."""
        return "public" in self.encryptions

    @abstractmethod
    def owns_manifest(self, doc: dict) -> bool:
        """Whether a key directory's ``hepix-keys.json`` (parsed) is one of this scheme's."""

    @abstractmethod
    def owns_preset(self, preset: str) -> bool:
        """Whether ``preset`` (a run's or a row's) names one of this scheme's parameter sets."""

    @abstractmethod
    def preset(self, name: str):
        """The parameters of preset ``name`` (a ValueError naming the known ones otherwise)."""

    @abstractmethod
    def open(self, keys: str | os.PathLike, *, secret: bool = False, eval_keys: bool = True) -> KeySet:
        """The key set of directory ``keys``: public material only (the secret file is never opened),
        or with ``secret`` the owner's secret too (owner-only file discipline, proven to belong)."""

    @abstractmethod
    def plan_keys(self, specs: Sequence[str], layout: str | None, *, only: str | None = None):
        """The parameters of new keys that run the ``--op`` chain ``specs`` (in ``layout``, of scheme
        ``only`` where given), or a ValueError saying why none can; ``specs`` empty: the default."""

    @abstractmethod
    def keygen(self, out: str | os.PathLike, params, *, overwrite: bool = False, rotations: bool = True,
               compressed_server_key: bool = False):
        """Generate a key directory ``out`` for ``params`` (the secret in its own 0600 file); options the
        scheme's keys do not have are refused by name.  The key info written."""

    @abstractmethod
    def export_public(self, keys: str | os.PathLike, out: str | os.PathLike, for_ops: Sequence[str] = (), **tiles):
        """Copy the public part of ``keys`` into a new directory ``out``; the key info written.  ``for_ops``: a
        chain the copy must serve and no more (the evaluation keys it does not need left out; ``tiles``:
        ``tile`` and ``halo``, the packed tiles it runs on), or a ValueError when the scheme's keys cannot be
        divided so."""

    @abstractmethod
    def parse_chain(self, specs: Sequence[str]):
        """``--op`` specs in this scheme's vocabulary (:class:`hecore.ops.spec.Chain`), or a ValueError
        saying why an op cannot run here and which keys run it."""

    @abstractmethod
    def check_chain(self, params, done: Sequence[str], ops: list, *, layout: str, options: dict,
                    preset: str) -> list:
        """``ops`` checked against a run that did ``done`` (its recorded specs) in ``layout`` with
        ``options`` at ``preset``, and the keys' ``params``: the ops ready to run, or a ValueError."""

    @abstractmethod
    def plausible_range(self, specs: Sequence[str]) -> tuple[float, float]:
        """The raw decrypted values a run that did ``specs`` can hold (before its post-scale), widened
        by a margin far above the decryption error: a value outside was not made by these ops."""

    @abstractmethod
    def keyless_checker(self, preset: str):
        """A row checker for ciphertexts of ``preset`` that needs no key (``problems(cts)``)."""

    def processed_strategy(self, strategy: str) -> str:
        """The ``strategy`` label of rows after processing (most schemes keep the input's)."""
        return strategy


class KeySet(ABC):
    """One key directory's keys: public material, and on the owner's side the secret, as bytes."""

    scheme: Scheme

    @property
    @abstractmethod
    def params(self):
        """The parameters (:class:`hecore.seal.params.Params` or :class:`hecore.tfhe.params.TfheParams`)."""

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        """The key set's identity, recorded with every ciphertext (hex)."""

    @property
    @abstractmethod
    def has_secret(self) -> bool:
        """Whether this key set holds the owner's secret (TenSEAL's ``is_private``)."""

    @property
    def public_key_bound(self) -> bool:
        """Whether the fingerprint covers the key public-key encryption uses, so that the owner's record of
        the fingerprint proves it (TFHE key directories of format 1 do not: only the client key can)."""
        return True

    @property
    def layouts(self) -> tuple:
        """The layouts these parameters can fill (the scheme's, or fewer)."""
        return self.scheme.layouts

    @property
    def scheme_name(self) -> str:
        """The scheme of the parameters: ``ckks``, ``bfv``, ``bgv`` or ``tfhe``."""
        return self.params.scheme

    @abstractmethod
    def secret_bytes(self) -> bytes:
        """The secret, for the owner's own executors only (an error on a public key set)."""

    @abstractmethod
    def public(self) -> KeySet:
        """The same keys without the secret (what the cluster may hold)."""

    def lacks_for(self, ops: Sequence, layout: str, options: dict | None = None) -> str | None:
        """Why these keys cannot run ``ops`` (checked by :meth:`Scheme.check_chain`) in ``layout`` on the
        input run's tiles (``options``: its manifest's) for want of an evaluation key a copy left out, or
        None."""
        return None

    @abstractmethod
    def for_checks(self) -> KeySet:
        """The least of these keys that the row checks need: public, without evaluation keys (the bulk
        of a SEAL directory, TFHE's server key)."""

    @abstractmethod
    def for_encryption(self, *, use_secret: bool) -> KeySet:
        """The least of these keys that an encryptor needs (what an encrypt job broadcasts): no evaluation
        keys; the secret only with ``use_secret`` (the owner's encryption)."""

    def check_encryption(self, *, use_secret: bool) -> None:
        """A ValueError saying what to do when these keys cannot encrypt this way (public encryption
        with keys made without a public key); before Spark starts."""

    @abstractmethod
    def for_decryption(self) -> KeySet:
        """The least of these keys that the decryptor needs: :meth:`for_checks` and the secret (for the
        owner's own executors only)."""

    @abstractmethod
    def encryptor(self, *, layout, strategy: str = "fresh", strategy_state: bytes | None = None,
                  allow_leaky: bool = False, use_secret: bool = False, compression: str = "none",
                  check_key: bool = True):
        """The :class:`hecore.encrypt.base.Encryptor` for ``layout``: fresh public-key encryption, the
        owner's secret-key encryption (``use_secret``), or a pixel ``strategy`` (rebuilt from
        ``strategy_state`` when given); ``check_key`` proves a secret belongs (do it once, on the driver)."""

    @abstractmethod
    def strategy(self, name: str, *, allow_leaky: bool = False, options: dict | None = None):
        """The driver's view of how values are encrypted before the workers build the encryptor: a
        :class:`hecore.encrypt.base.PixelStrategy` to prepare (``needs_scan``, ``prepare``, ``state``,
        ``options``, ``security``, ``label``)."""

    @abstractmethod
    def encryption_label(self, *, use_secret: bool, strategy: str) -> str:
        """The ``strategy`` column of the rows an encryption writes."""

    @abstractmethod
    def encryption_options(self, *, use_secret: bool, compression: str) -> dict:
        """What a run's manifest records of how it encrypted (``options``)."""

    @abstractmethod
    def ciphertext_bytes(self) -> int | None:
        """The size of every fresh public-key ciphertext when it is fixed, else None."""

    @abstractmethod
    def decryptor(self):
        """What decrypts this key set's ciphertexts (``decrypt_pixels``, and for SEAL the packed
        blocks): needs the secret."""

    @abstractmethod
    def checker(self, *, fixed_format: bool = False, exact_scale: tuple[int, int] | None = None):
        """The row checker of this key set's ciphertexts (``problem(ct)``, ``problems(cts)``);
        ``fixed_format``: demand the exact fresh format (the pixel layout's byte-level ops);
        ``exact_scale``: ``(bits, primes)`` every ciphertext is at (schemes with a scale check it)."""

    @abstractmethod
    def evaluator(self):
        """What evaluates ops on this key set's ciphertexts with its public (server) keys."""

    def context(self):
        """The SEAL context of CKKS/BFV/BGV keys (matching, inference and the pixel layout's byte
        format run on it); other schemes have none."""
        raise ValueError(f"{self.scheme.title} keys have no SEAL context: this needs CKKS, BFV or BGV keys")
