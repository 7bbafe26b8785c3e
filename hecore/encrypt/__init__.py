"""Encryption: one :class:`~hecore.encrypt.base.Encryptor` interface over a public key, a secret key or a
pixel strategy, and :func:`encryptor_for`, which picks one from what the caller holds.

The leaking strategies of the iCHEETAH paper live in :mod:`hecore.encrypt.hazmat` and are reached only
through the gate, :func:`hecore.encrypt.strategies.make_strategy`, with ``allow_leaky=True``.

These are SEAL's (CKKS, BFV, BGV).  A key set of any scheme gives its own encryptor
(:meth:`hecore.schemes.KeySet.encryptor`): TFHE's is :class:`hecore.tfhe.encryptor.TfheEncryptor`.
"""
from __future__ import annotations

from hecore.seal.context import HEContext, PublicMaterial

from .base import Encryptor
from .public import PublicKeyEncryptor


def as_encryptor(encryptor: Encryptor | HEContext) -> Encryptor:
    """``encryptor`` itself (anything with an ``encrypt`` method), or for an
    :class:`~hecore.seal.context.HEContext` its public-key encryptor."""
    if isinstance(encryptor, HEContext):
        return PublicKeyEncryptor(encryptor)
    if callable(getattr(encryptor, "encrypt", None)):
        return encryptor
    raise TypeError(f"expected an Encryptor or an HEContext, got {type(encryptor).__name__}")


def encryptor_for(public: PublicMaterial, *, secret_key: bytes | None = None, packed: bool = True,
                  strategy: str = "fresh", strategy_state: bytes | None = None, allow_leaky: bool = False,
                  compression: str = "none", check_key: bool = True) -> Encryptor:
    """The encryptor for what the caller holds and the layout it fills.

    * ``secret_key`` given: seeded secret-key encryption (:class:`~.symmetric.SymmetricEncryptor`,
      the packed layouts; ``check_key`` first proves the key belongs to ``public``);
    * packed layouts otherwise: fresh public-key encryption of each tile channel;
    * the pixel layout: the pixel strategy ``strategy`` (leaking ones only with ``allow_leaky``),
      rebuilt from ``strategy_state`` (its prepared cache as bytes) when given, else prepared here.
    """
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


__all__ = ["Encryptor", "PublicKeyEncryptor", "as_encryptor", "encryptor_for"]
