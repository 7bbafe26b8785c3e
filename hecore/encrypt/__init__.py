"""Encryption: one :class:`~hecore.encrypt.base.Encryptor` interface over a public key, a secret key or a
pixel strategy.  The leaking strategies of the iCHEETAH paper live in :mod:`hecore.encrypt.hazmat` and are
reached only through the gate, :func:`hecore.encrypt.strategies.make_strategy`, with ``allow_leaky=True``."""
