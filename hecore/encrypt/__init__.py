"""Encryption: one :class:`~hecore.encrypt.base.Encryptor` interface over a public key, a secret key or a
pixel strategy, and :func:`encryptor_for`, which picks one from what the caller holds.

The leaking strategies of the iCHEETAH paper live in :mod:`hecore.encrypt.hazmat` and are reached only
through the gate, :func:`hecore.encrypt.strategies.make_strategy`, with ``allow_leaky=True``.

TFHE (:mod:`hecore.tfhe`) comes through the same door: given a TFHE key directory's public material
(:class:`hecore.tfhe.params.TfhePublicMaterial`) and its client key, :func:`encryptor_for` returns a
:class:`hecore.tfhe.encryptor.TfheEncryptor` (pixel layout, one ciphertext per value).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hecore.context import HEContext, PublicMaterial

from .base import Encryptor
from .public import PublicKeyEncryptor

if TYPE_CHECKING:
    from hecore.tfhe.params import TfhePublicMaterial


def as_encryptor(encryptor: Encryptor | HEContext) -> Encryptor:
    """``encryptor`` itself (anything with an ``encrypt`` method), or for an
    :class:`~hecore.context.HEContext` its public-key encryptor."""
    if isinstance(encryptor, HEContext):
        return PublicKeyEncryptor(encryptor)
    if callable(getattr(encryptor, "encrypt", None)):
        return encryptor
    raise TypeError(f"expected an Encryptor or an HEContext, got {type(encryptor).__name__}")


def encryptor_for(public: PublicMaterial | TfhePublicMaterial, *, secret_key: bytes | None = None, packed: bool = True,
                  strategy: str = "fresh", strategy_state: bytes | None = None, allow_leaky: bool = False,
                  compression: str = "none", check_key: bool = True, encoding: str = "seeded",
                  threads: int = 1) -> Encryptor:
    """The encryptor for what the caller holds and the layout it fills.

    * TFHE public material (:class:`hecore.tfhe.params.TfhePublicMaterial`): the client key as
      ``secret_key`` is required (tfhe-rs encrypts with it), the layout is the pixel layout
      (``packed=False``), and the result is a :class:`hecore.tfhe.encryptor.TfheEncryptor` of
      ``encoding`` (``seeded`` or ``full``) on ``threads`` threads; ``check_key`` first proves the
      client key belongs to the server key (a few bootstraps: do it once, on the driver);
    * ``secret_key`` given: seeded secret-key encryption (:class:`~.symmetric.SymmetricEncryptor`,
      the packed layouts; ``check_key`` first proves the key belongs to ``public``);
    * packed layouts otherwise: fresh public-key encryption of each tile channel;
    * the pixel layout: the pixel strategy ``strategy`` (leaking ones only with ``allow_leaky``),
      rebuilt from ``strategy_state`` (its prepared cache as bytes) when given, else prepared here.
    """
    if getattr(public, "scheme", None) == "tfhe":
        return _tfhe_encryptor(public, secret_key, packed=packed, strategy=strategy, check_key=check_key,
                               encoding=encoding, threads=threads)
    if secret_key is not None:
        if not packed or strategy != "fresh":
            raise ValueError("secret-key encryption fills whole tile channels (the packed layouts), each fresh")
        from .symmetric import SymmetricEncryptor

        return SymmetricEncryptor(public, secret_key, compression=compression, check_key=check_key)
    ctx = HEContext.from_public(public)
    if packed:
        if strategy != "fresh":
            raise ValueError(f"strategy {strategy!r} is a pixel-layout mode; the packed layouts encrypt each tile "
                             "channel fresh")
        return PublicKeyEncryptor(ctx)
    from .strategies import make_strategy, strategy_from_state

    if strategy_state is not None:
        return strategy_from_state(ctx, strategy_state, allow_leaky=allow_leaky)
    return make_strategy(strategy, ctx, allow_leaky=allow_leaky).prepare()


def _tfhe_encryptor(public, client_key: bytes | None, *, packed: bool, strategy: str, check_key: bool,
                    encoding: str, threads: int) -> Encryptor:
    from hecore.tfhe.encryptor import TfheEncryptor
    from hecore.tfhe.keys import check_key_pair

    if client_key is None:
        raise ValueError("TFHE encrypts with the client key (tfhe-rs's public-key encryption needs parameters "
                         "these keys were not made with): encryption is the data owner's job, with the key "
                         "directory that holds client.key")
    if packed:
        raise ValueError("TFHE encrypts one pixel value per ciphertext: the pixel layout (packed=False)")
    if strategy != "fresh":
        raise ValueError(f"strategy {strategy!r} is a CKKS pixel-layout mode; TFHE encrypts every value fresh")
    if check_key:
        check_key_pair(client_key, public.server_key, threads=threads)
    return TfheEncryptor(client_key, params=public.params, encoding=encoding, threads=threads,
                         fingerprint=public.fingerprint())


__all__ = ["Encryptor", "PublicKeyEncryptor", "as_encryptor", "encryptor_for"]
