"""Checks of serialized ciphertexts that come back from a party hepix does not trust.

A cluster can return any bytes in a ``ct`` cell.  Before a job hands a ciphertext to SEAL, or to the
byte-level kernels of the pixel layout, :class:`CiphertextChecker` says whether it is one this context
can take, and if not, why (a short reason for the ``rejects`` table and a detail):

* ``empty-ciphertext``: no bytes;
* ``ciphertext-size``: more bytes than any ciphertext of these parameters has (so nothing sized by the
  cell is ever allocated), or, where the fixed uncompressed format is needed (the pixel layout's
  byte-level arithmetic), not exactly its size;
* ``decompression-bomb``: a compressed ciphertext that would inflate past that size (SEAL would
  allocate whatever the stream inflates to before looking at it);
* ``parameters-mismatch``: a header of other parameters, scale or level where the fixed format is needed;
* ``scale-mismatch``: a CKKS ciphertext of a run no op has touched whose scale is not exactly
  ``2^scale_bits`` or whose level is not the top one (a changed scale decrypts to silently wrong values);
* ``compact-refused``: a ciphertext in hepix's compact at-rest format (:mod:`hecore.seal.atrest`) whose header,
  size or residues are not those of these parameters (checked before it is expanded for SEAL);
* ``seal-refused``: SEAL's own load refuses it (truncated data, a coefficient not below its prime, a
  ``parms_id`` outside the context, a size or scale out of bounds).

What no check can tell is whether a well-formed ciphertext holds the right value: a cluster can
return an encryption of anything under the public key (see docs/threat-model.md).
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from ..errors import Problem
from .atrest import Compactor, MalformedCiphertext, is_compact

#: SEAL 4.1's serialization header: magic 0xA15E, header size, version, compression mode, total size.
_MAGIC = 0xA15E
_SEAL_HEADER = 16
_COMPR_NONE, _COMPR_ZLIB, _COMPR_ZSTD = 0, 1, 2
#: The largest ciphertext the byte bound lets SEAL parse: 2 components and a third (an unrelinearised product,
#: then refused by name).
_MAX_COMPONENTS = 3
_PREFIX_ALLOWANCE = 256
#: Bytes before the coefficients of an uncompressed SEAL 4.1 ciphertext (hecore.audit.sealbytes.DATA_OFFSET).
_UNCOMPRESSED_PREFIX = 113


class CiphertextChecker:
    """Checks serialized ciphertexts against one context (public material, or parameters alone: no key)."""

    def __init__(self, he, params, fixed_format=None, exact_scale: tuple[int, int] | None = None):
        self._he = he
        self.params = params
        self.fixed = fixed_format           # hecore.ciphertexts.CiphertextFormat, or None
        # CKKS ciphertexts no multiplication has touched: scale exactly 2^bits, over exactly this many primes
        self.exact_scale = None if not params.spends_levels or exact_scale is None else (float(2 ** exact_scale[0]),
                                                                                   int(exact_scale[1]))
        self.max_bytes = _PREFIX_ALLOWANCE + _MAX_COMPONENTS * params.data_primes * params.n * 8

    @property
    def context(self):
        """The Pyfhel object the checker loads ciphertexts on (what :meth:`checked`'s ciphertexts belong to)."""
        return self._he

    @classmethod
    def for_context(cls, ctx, *, fixed_format: bool = False,
                    exact_scale: tuple[int, int] | None = None) -> "CiphertextChecker":
        """A checker on ``ctx`` (an :class:`hecore.seal.context.HEContext`); ``fixed_format``: also demand the
        exact fresh format (needs the public key, which measures it); ``exact_scale``: ``(bits, primes)`` of
        CKKS ciphertexts no multiplication has touched (fresh, or after additions and rotations only), whose
        scale must be exactly ``2^bits`` over exactly ``primes`` primes."""
        return cls(ctx._he, ctx.params, ctx.ct_format if fixed_format else None, exact_scale)

    @classmethod
    def for_params(cls, params) -> "CiphertextChecker":
        """A keyless checker: SEAL's context for ``params`` (it regenerates the primes from them)."""
        from .native import pyfhel_for

        return cls(pyfhel_for(params), params)

    def problem(self, ct) -> Problem | None:
        """None when ``ct`` is a ciphertext this context takes, else what is wrong with it."""
        return self.checked(ct)[0]

    def checked(self, ct) -> tuple[Problem | None, object | None]:
        """What :meth:`problem` says of ``ct``, and the ciphertext SEAL loaded to say it (a Pyfhel ``PyCtxt`` of
        this checker's context, its level set as :meth:`hecore.seal.context.HEContext.load_ciphertext` sets it), or
        None where nothing was loaded (a refused ciphertext; the fixed format, checked on its bytes).  The
        job's work on the same context takes the loaded ciphertext as it is: each ciphertext is loaded once."""
        if ct is None or len(ct) == 0:
            return Problem("empty-ciphertext", "the ct value is empty"), None
        n = len(ct)
        if n > self.max_bytes:
            return Problem("ciphertext-size", f"ct has {n} bytes; no ciphertext of {self.params.name} has more "
                                              f"than {self.max_bytes}"), None
        if self.fixed is not None:
            return self._fixed_problem(ct), None
        compact = is_compact(ct)
        if compact:                         # hepix's at-rest format: checked and expanded to SEAL's bytes first
            try:
                ct = Compactor.for_params(self.params).expand_one(ct)
            except MalformedCiphertext as e:
                return Problem("compact-refused", f"the compact ciphertext ({n} bytes) is malformed: {e}"), None
        inflated = self._inflated(ct)
        if isinstance(inflated, Problem):
            return inflated, None
        try:
            from Pyfhel import PyCtxt

            loaded = PyCtxt(pyfhel=self._he, bytestring=inflated)
        except Exception as e:  # noqa: BLE001 -- SEAL's refusals arrive as RuntimeError, ValueError, ...
            return Problem("seal-refused", f"SEAL refuses the ciphertext ({n} bytes): "
                                           f"{str(e).splitlines()[0][:160]}"), None
        if int(loaded.size()) != 2:
            # hepix stores two polynomials (products relinearised); a third would be a product the cluster made
            # without the relinearisation key, which keys exported for a linear chain leave out
            return Problem("ciphertext-size", f"the ciphertext has {int(loaded.size())} polynomials; hepix's have "
                                              "two (an unrelinearised product is not decrypted)"), None
        primes = None
        if self.params.spends_levels:
            # Pyfhel counts levels in Python (0 on load): a ciphertext stored below the first level says so
            primes = self._primes(loaded)
            loaded.mod_level = self.params.data_primes - primes
        if self.exact_scale is not None:
            scale, want = self.exact_scale
            if float(loaded.scale) != scale or primes != want:
                return Problem("scale-mismatch", f"the ciphertext's scale is {float(loaded.scale):.6g} over "
                                                 f"{primes} primes; the run's ciphertexts have "
                                                 f"{scale:.6g} over {want}"), None
        return None, loaded

    def _primes(self, loaded) -> int:
        """The primes a loaded ciphertext is over (its level), from the size of its uncompressed form:
        SEAL's prefix, then ``components x primes x N`` words."""
        words = (int(loaded.sizeof_ciphertext("none")) - _UNCOMPRESSED_PREFIX) // 8
        return words // max(1, int(loaded.size()) * self.params.n)

    def problems(self, cts) -> list[Problem | None]:
        """:meth:`problem` of every ciphertext of ``cts`` (the interface the row checks call per batch)."""
        return [self.problem(ct) for ct in cts]

    def checked_all(self, cts) -> list[tuple[Problem | None, object | None]]:
        """:meth:`checked` of every ciphertext of ``cts``: the row checks' per-batch call when the job's work
        takes the loaded ciphertexts (tasks.handoff)."""
        return [self.checked(ct) for ct in cts]

    # --- the fixed, uncompressed format of fresh ciphertexts (pixel layout) ---------------------------
    def _fixed_problem(self, ct) -> Problem | None:
        fmt = self.fixed
        raw = np.frombuffer(ct, dtype=np.uint8)
        if raw.size != fmt.stride:
            return Problem("ciphertext-size", f"ct has {raw.size} bytes; this layout's ciphertexts have exactly "
                                              f"{fmt.stride}")
        if raw[: fmt.header_len].tobytes() != fmt.header:
            return Problem("parameters-mismatch", "the ciphertext's header (parameters, scale or level) is not "
                                                  "the one of this key's fresh ciphertexts")
        words = raw[fmt.header_len:].view("<u8").reshape(2, len(fmt.primes), fmt.n)
        q = np.asarray(fmt.primes, dtype=np.uint64)[None, :, None]
        bad = np.argwhere(words >= q)
        if bad.size:
            c, p, i = (int(v) for v in bad[0])
            return Problem("seal-refused", f"coefficient {i} of component {c} is not below prime {p} "
                                           f"({int(words[c, p, i])} >= {int(q[0, p, 0])}): SEAL would refuse it")
        return None

    # --- compressed serializations ------------------------------------------------------------------
    def _inflated(self, ct) -> bytes | Problem:
        """The uncompressed SEAL serialization of ``ct`` -- what SEAL itself would inflate a compressed one to,
        after a bounded decompression (SEAL would inflate the whole stream before looking at it) -- or the
        ``decompression-bomb`` problem of a stream that inflates past :attr:`max_bytes`.  Bytes that are not
        SEAL's, and corrupt streams, pass unchanged: SEAL refuses them itself."""
        head = bytes(memoryview(ct)[:_SEAL_HEADER])
        if len(head) < _SEAL_HEADER or struct.unpack_from("<H", head, 0)[0] != _MAGIC:
            return bytes(ct)                                # not SEAL's: SEAL refuses it itself
        mode = head[5]
        if mode == _COMPR_NONE:
            return bytes(ct)
        payload = memoryview(ct)[_SEAL_HEADER:]
        limit = self.max_bytes
        if mode == _COMPR_ZLIB:
            d = zlib.decompressobj()
            try:
                body = d.decompress(payload, limit + 1)
            except zlib.error:
                return bytes(ct)                            # corrupt: SEAL refuses it
            if d.unconsumed_tail:
                return Problem("decompression-bomb", f"the zlib-compressed ciphertext inflates past {limit} bytes")
            if not d.eof:
                return bytes(ct)                            # truncated: SEAL refuses it
        elif mode == _COMPR_ZSTD:
            import pyarrow as pa

            try:
                with pa.CompressedInputStream(pa.BufferReader(pa.py_buffer(payload)), "zstd") as stream:
                    body = stream.read(limit + 1)
            except (OSError, pa.ArrowException):
                return bytes(ct)                            # corrupt or truncated: SEAL refuses it
            if len(body) > limit:
                return Problem("decompression-bomb", f"the zstd-compressed ciphertext inflates past {limit} bytes")
        else:
            return Problem("seal-refused", f"unknown SEAL compression mode {mode}")
        # SEAL's compressed serialization is its uncompressed one with the body compressed: the same header,
        # the mode and total size aside
        header = bytearray(head)
        header[5] = _COMPR_NONE
        header[8:16] = struct.pack("<Q", _SEAL_HEADER + len(body))
        return bytes(header) + body

    def _inflates_too_far(self, ct) -> Problem | None:
        """A compressed serialization that inflates past :attr:`max_bytes` (:meth:`_inflated`), or None."""
        inflated = self._inflated(ct)
        return inflated if isinstance(inflated, Problem) else None
