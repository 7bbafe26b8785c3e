"""`hepix encrypt`: images -> ciphertexts/, rejects/ and _manifest.json.

Thin: open the keys (hecore.schemes.open_keys) and check the settings against them -> session -> resume what
an earlier run into ``--out`` left -> per batch of images: decode tiles on the executors, (scan), broadcast
the encryptor's state once, encrypt with the key set's encryptor, write, commit (jobs/runtime/batches.py) -> mark the
run complete.  Encryption needs only the public key; the secret key file is never opened -- except where
the owner's secret encrypts: ``--encryption symmetric``, the key owner's fast path (hecore.encrypt.symmetric),
and TFHE keys, whose encryption is the client key's.  Such a run reads the secret and ships it to its own
executors: a secret-holding job (jobs.runtime.session.secret_session: a local master unless the cluster is trusted,
Spark authentication and encryption on, a private local dir).

``--out`` is what the cluster gets: the ciphertext table (random image ids, no file names, no hashes of
plaintext) and a manifest naming no owner path.  Which id is which file, the rejects and the settings go
to the owner map (``--owner``, jobs/runtime/owner.py), which a resumed run, decrypt and audit read.

Runs are resumable.  Images go in batches (``--batch-images``); each batch is
written under ``_staging/<run_id>/``, its files are moved into the tables, and
then ``_manifest.json`` is rewritten to list them (status ``partial``) -- the
batch's commit.  The last step removes files no manifest lists and marks the
manifest ``complete``; process and decrypt accept nothing else.  A rerun with
the same key, parameters, strategy and options skips the images the listed
files already hold (encrypted or rejected); ``--overwrite`` redoes them all.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from hecore.encrypt.strategies import strategy_class, strategy_names
from hecore.encrypt.symmetric import COMPRESSIONS, ENCRYPTIONS
from hecore.errors import HepixError, InvalidParameters
from hecore.images import CONVERSIONS, DEFAULT_MAX_PIXELS
from hecore.layouts import Layout
from hecore.layouts.packed import DEFAULT_HALO, chain_tile, check_tile_fits, default_tile
from hecore.layouts.tiling import parse_tile_spec
from hecore.schemes import scheme_of
from hecore.seal.atrest import STORES

from .runtime import runinfo
from .runtime.batches import EncryptRun
from .runtime.owner import default_dir, owner_fingerprints
from .runtime.places import check_encrypt_outputs
from .runtime.progress import Progress
from .runtime.remote import remote_keys
from .runtime.runs import add_spark_arguments
from .runtime.session import add_trust_argument, plain_session, secret_session, trusted_cluster
from .runtime.storage import Output, Storage

log = logging.getLogger(__name__)

DEFAULT_TILE = "16x16"
#: SEAL's serialization of the packed layouts' ciphertexts unless --compression says otherwise (the pixel
#: layout's byte-level ops need the uncompressed bytes; TFHE's encodings are compact already)
PACKED_COMPRESSION = "zstd"
DEFAULT_BATCH_IMAGES = 256  # a crashed run loses at most one batch of work


def add_arguments(p) -> None:
    p.add_argument("--keys", required=True, help="key directory: the public key encrypts (--encryption "
                        "symmetric: secret.key, or TFHE's client.key); where the directory holds the secret, the "
                        "secret proves the public key is its own; a public-only directory must be vouched for by "
                        "the owner's key records (keygen writes them), the owner map of the run, or "
                        "--key-fingerprint")
    p.add_argument("--key-fingerprint", metavar="HEX",
                   help="the fingerprint `hepix keygen` printed for the key set (16 to 64 hex digits): a public-only "
                        "--keys directory is used only if its public keys have it")
    p.add_argument("--input", required=True, help="directory, glob or URI (file://, hdfs://) of images")
    p.add_argument("--out", required=True, help="output directory, the one to hand to the cluster: ciphertexts/ "
                        "(random image ids; no file names, no hashes of images) and _manifest.json")
    p.add_argument("--owner", metavar="DIR",
                   help="the owner map: which image id is which file, the rejects, the settings (a local "
                        "directory kept by the owner, never handed to the cluster; default: <--out>.owner beside "
                        "a local --out). decrypt --owner and audit --owner read it")
    p.add_argument("--skip-encrypted", action="append", default=[], metavar="OWNER_MAP",
                   help="an incremental run (repeatable): leave out the images that earlier runs' owner maps hold "
                        "(by source path, encrypted or rejected); an owner map directory, or a directory of them "
                        "(OWNER_ROOT with night=YYYY-MM-DD/ maps).  Nothing new: an empty complete run")
    p.add_argument("--layout", choices=Layout.names(), default=None,
                   help="packed: one fresh ciphertext per tile channel, a pixel per slot (default; with --for-op: "
                        "packed-complex where the chain allows it; TFHE keys: pixel, their only layout); "
                        "packed-complex: the same with two pixels per slot (CKKS only, twice the pixels per "
                        "ciphertext; no matching); pixel: one ciphertext per pixel value (iCHEETAH, with its "
                        "caching strategies)")
    p.add_argument("--halo", type=int, default=None, metavar="R",
                   help=f"packed layout: pixels of the neighbouring tiles each ciphertext also holds, for filters "
                        f"reaching R pixels (meanfilter:K needs K//2; default {DEFAULT_HALO}, with --for-op what "
                        "its mean filter needs)")
    p.add_argument("--strategy", default="fresh", choices=strategy_names(),
                   help="pixel-layout strategy (default fresh; others leak and need --allow-leaky)")
    p.add_argument("--allow-leaky", action="store_true",
                   help="permit the paper's caching strategies, which are not IND-CPA secure")
    p.add_argument("--encryption", choices=ENCRYPTIONS, default="public",
                   help="packed layouts: public (default; needs only the public key) or symmetric: the key owner's "
                        "seeded secret-key encryption, about 2x faster and half the bytes (reads secret.key, which "
                        "must be mode 0600, and ships it to its executors: a local master only unless "
                        "--trusted-cluster; needs the native extension make setup builds)")
    p.add_argument("--compression", choices=COMPRESSIONS, default=None,
                   help=f"--store seal: SEAL's compression of the serialized ciphertexts (default {PACKED_COMPRESSION} "
                        "for the packed layouts: SEAL and Pyfhel read it as any serialization, about a quarter to "
                        "a third fewer bytes; none: SEAL's uncompressed bytes, the pixel layout's only mode)")
    p.add_argument("--store", choices=STORES, default="seal",
                   help="how the ciphertexts are stored: seal (default; SEAL's own serialization, which Pyfhel "
                        "reads alone: at the level the --for-op chain needs, compressed as --compression says) or "
                        "compact (hepix's at-rest format: also low bits below the noise dropped, residues "
                        "bit-packed, c1 as its seed; the fewest bytes; CKKS, packed layouts; every hepix job "
                        "reads it, with the native extension make setup builds)")
    p.add_argument("--spot-positions", type=int, default=None, metavar="K",
                   help="secret spot checks: the owner map keeps K random positions of each image with the pixels "
                        "around them (as far as the --for-op chain reaches; else 1), or with --for-op the chain's "
                        "results there (unless it is the DFT filter), and decrypt --owner checks the "
                        "cluster's result there (default: enough to catch 1%% wrong pixels with probability "
                        "1 - 2^-20; 0: keep none, the images are not checked)")
    p.add_argument("--bind", action="store_true",
                   help="tie every ciphertext to its place: keyed +-1 check values in the imaginary parts (CKKS, "
                        "--layout packed), from a key the owner map keeps; decrypt --owner rejects as integrity an "
                        "image holding a ciphertext of another place, image or run (each passes with probability "
                        "2^-24 at most); process then runs only ops that add real constants and combine slots with "
                        "real weights (brightness, contrast, watermark, meanfilter, conv, grey); with --for-op a "
                        "chain of 8-bit tables on BFV keys: keyed check slots among the pixels (the default tile "
                        "shrinks to leave 128 slots free at lut-16384: more ciphertexts where an image's sides are "
                        "multiples of 128), each ciphertext of another place passing with probability "
                        "(outputs of the table)^-checks; with --for-op a chain with dftfilter: check values uniform in "
                        "[-16, 16], compared at every place of the tile, whatever the cutoff")
    p.add_argument("--no-bind", action="store_true",
                   help="with --for-op: do not bind the ciphertexts to their places (by default a chain that is "
                        "linear in the pixels and whose results have a grid -- brightness, contrast, watermark, "
                        "meanfilter, conv, grey, downsample with no window before it -- gets keyed offsets of a "
                        "quarter pixel or less under the encryption (BFV/BGV: offsets uniform mod t; a chain of "
                        "8-bit tables on BFV, where the --tile leaves slots free: keyed check slots among the "
                        "pixels; a chain with dftfilter whose cutoff keeps a dozen frequencies or more: check "
                        "values in the imaginary parts, compared at every place of the tile), from a key the owner "
                        "map keeps, and decrypt --owner rejects as integrity an image holding a ciphertext of another "
                        "place, image or run; decrypt then needs the owner map)")
    p.add_argument("--ringers", type=float, default=0.0, metavar="P",
                   help="each image becomes, with probability P drawn in secret, a ringer: the owner map keeps it "
                        "whole and decrypt --owner compares every value of its result, whatever the chain (a DFT "
                        "filter's too, which the positions do not reach); a cluster that gets m images wrong "
                        "escapes with probability (1 - P)^m (default 0)")
    p.add_argument("--for-op", action="append", default=[], metavar="SPEC",
                   help="an op the stored ciphertexts must serve (as for `hepix process --op`; repeat for a chain, "
                        "match:QUERY last): encrypt stores what the chain needs and no more -- packed-complex "
                        "where the chain allows it (unless --layout), the halo its mean filter reaches (unless "
                        "--halo), CKKS ciphertexts at the lowest level that affords the chain, at the scale its "
                        "values need -- and `hepix process` refuses chains the storage cannot run exactly.  "
                        "Without it: the packed layout at the first level, and any chain the keys allow runs")
    p.add_argument("--pool-size", type=int, help="randomness pool size for scan/full (default 64)")
    p.add_argument("--top-k", type=int, help="values cached by scan (default: all values found)")
    p.add_argument("--radix", type=int, help="base of radix/radix-rand (default 2)")
    p.add_argument("--tile", help=f"tile size HxW (default: {DEFAULT_TILE} for the pixel layout; for the packed "
                                  "layouts the largest that fills a ciphertext's slots: 30x62 at N=4096 with the default halo, "
                                  "60x62 complex-packed)")
    p.add_argument("--resize", type=int, metavar="S",
                   help="centre-crop to a square and resize to SxS first (the paper's preprocessing)")
    p.add_argument("--convert", action="append", default=[], choices=sorted(CONVERSIONS),
                   help="accept and convert images of this kind (repeatable); otherwise they are rejected")
    p.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                   help="refuse images with more pixels (decompression bombs; default %(default)s)")
    p.add_argument("--recursive", action="store_true", help="descend into subdirectories of --input")
    p.add_argument("--writer", choices=("auto", "spark", "workers"), default="auto",
                   help="who writes the ciphertext files: the Python workers (the JVM never touches ciphertext "
                        "bytes) or Spark's Parquet writer; auto (default) picks workers for every --out they "
                        "reach -- a local or file:// path (on a cluster: a mount the driver and every worker "
                        "share, which the driver checks) or hdfs:// -- and Spark's writer for other schemes")
    p.add_argument("--overwrite", action="store_true",
                   help="redo every image; by default a rerun into the same --out (same key, parameters, strategy "
                        "and options) skips the images finished before, and other settings are refused")
    p.add_argument("--batch-images", type=int, default=DEFAULT_BATCH_IMAGES, metavar="N",
                   help="images per committed batch: a crashed run loses at most one batch (default %(default)s)")
    p.add_argument("--partitions", type=int, help="encryption tasks (default: 4 per core, at most one per tile channel)")
    add_spark_arguments(p)
    add_trust_argument(p)


def strategy_options(args) -> dict:
    opts = {}
    if args.pool_size is not None:
        opts["pool_size"] = args.pool_size
    if args.top_k is not None:
        opts["top_k"] = args.top_k
    if args.radix is not None:
        opts["radix"] = args.radix
    return opts


def parse_tile(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    try:
        return parse_tile_spec(spec)
    except ValueError as e:
        raise HepixError(f"--tile {spec}: {e}") from None


def secret_encryption(args, keys, layout: Layout) -> bool:
    """Whether this run encrypts with the owner's secret: ``--encryption symmetric`` (SEAL's packed layouts, each
    tile channel fresh, or TFHE's client key; the secret proven to belong to the public key), or keys whose
    scheme encrypts with its secret alone.  Public encryption is checked to be possible with these keys."""
    if args.encryption != "symmetric":
        use_secret = not keys.scheme.public_encryption
        try:
            keys.check_encryption(use_secret=use_secret)
        except ValueError as e:
            raise HepixError(str(e)) from None
        return use_secret
    if layout not in keys.scheme.symmetric_layouts or args.strategy != "fresh":
        names = " or ".join(f"--layout {lay}" for lay in keys.scheme.symmetric_layouts)
        raise HepixError(f"--encryption symmetric encrypts {keys.scheme.title} values fresh in {names}: use it "
                         "without --strategy")
    # refuses another key set's secret
    keys.encryptor(layout=layout, use_secret=True, compression=compression_for(args, keys.scheme, layout))
    return True


@dataclass(frozen=True)
class EncryptSettings:
    """What a run encrypts with, checked against the keys before Spark starts."""

    keys: object                # hecore.schemes.KeySet (with the secret when use_secret)
    layout: Layout
    tile: tuple[int, int]
    halo: int
    strategy: str
    strategy_options: dict
    use_secret: bool            # the owner's secret encrypts (--encryption symmetric, or TFHE's client key)
    compression: str            # SEAL's serialization of the ciphertexts (none for the pixel layout and TFHE)
    store: object = None        # hecore.seal.atrest.AtRest: the compact format, or SEAL's bytes at a planned level
                                # (--for-op); None: the library's own bytes at the first level
    spots: tuple | None = None    # the owner's spot samples: (positions, radius, ringer probability); None: none
    bind: bool = False          # check values under the encryption (hecore.binding: --bind)
    bind_unit: float | None = None   # keyed offsets under the pixels (hecore.binding.offset_unit); None: none
    bind_modulus: int | None = None  # keyed offsets uniform mod t (BFV/BGV: hecore.binding.modular_offsets_of)
    bind_table: bytes | None = None  # keyed check slots for this declared table chain (hecore.slotchecks)
    bind_spread: float | None = None  # check values uniform in [-spread, spread] (block_binding)
    bind_bound: float | None = None   # log2 of what a ciphertext of another place passes them with (block_binding;
                                      # keyed offsets: hecore.binding.offset_pass_log2)
    spot_results: tuple | None = None   # the declared chain the samples keep the results of (spot_results)

    @property
    def params(self):
        return self.keys.params

    @property
    def offsets(self) -> bool:
        """Whether keyed offsets bind the run's ciphertexts (real ones under CKKS, modular under BFV/BGV)."""
        return bool(self.bind_unit or self.bind_modulus)

    @property
    def bound(self) -> bool:
        """Whether the run's ciphertexts are bound to their places at all (and the owner map keeps a key)."""
        return bool(self.bind or self.offsets or self.bind_table)

    @property
    def binding_label(self) -> str:
        """What ties the run's ciphertexts to their places, in a few words for encrypt's first line."""
        if self.bind_table:
            return "bound by keyed check slots"
        if self.offsets:
            return "bound by keyed offsets" + passes(self.bind_bound)
        if self.bind:
            return "bound by check values" + (f" over whole tiles{passes(self.bind_bound)}" if self.bind_spread else "")
        return "not bound to their places" + (" (the spot checks only)" if self.spots else ", not spot-checked")

    @property
    def label(self) -> str:
        """The ``strategy`` column of the rows: the pixel strategy, ``symmetric``, or TFHE's encoding."""
        return self.keys.encryption_label(use_secret=self.use_secret, strategy=self.strategy)

    def resumable(self, args, fingerprint: str) -> dict:
        """What must match for a rerun to add to an existing output instead of starting over."""
        p = self.params
        return {"key_fingerprint": fingerprint, "preset": p.name, "params": p.to_json(), "layout": self.layout.value,
                "strategy": self.strategy, "strategy_options": self.strategy_options, "tile": list(self.tile),
                "encryption": args.encryption, "compression": self.compression, "halo": self.halo,
                "store": self.store.to_json() if self.store is not None else "seal",
                "resize": args.resize, "conversions": sorted(args.convert), "max_pixels": args.max_pixels,
                **({"bind": True} if self.bind else {}),
                **({"bind_unit": self.bind_unit} if self.bind_unit else {}),
                **({"bind_modulus": self.bind_modulus} if self.bind_modulus else {}),
                **({"bind_table": self.bind_table.hex()} if self.bind_table else {}),
                **({"bind_spread": self.bind_spread} if self.bind_spread else {})}


#: The largest --resize side (a 65536 x 65536 image is 2^32 pixels, far above any --max-pixels).
MAX_RESIZE = 65536


def check_numbers(args) -> None:
    """The numeric options, each in its range, or a one-line error naming the option and the range."""
    if args.batch_images < 1:
        raise HepixError(f"--batch-images {args.batch_images}: must be 1 or more")
    if args.resize is not None and not 1 <= args.resize <= MAX_RESIZE:
        raise HepixError(f"--resize {args.resize}: give the side of the square to resize to, 1 to {MAX_RESIZE} pixels")
    if args.max_pixels < 1:
        raise HepixError(f"--max-pixels {args.max_pixels}: must be 1 or more")
    if args.partitions is not None and args.partitions < 1:
        raise HepixError(f"--partitions {args.partitions}: must be 1 or more")
    for name in ("pool_size", "top_k", "radix"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise HepixError(f"--{name.replace('_', '-')} {v}: must be 1 or more")


def settings_from(args, keys) -> EncryptSettings:
    """The run's settings from ``args`` and the keys (a :class:`hecore.schemes.KeySet`), or a clear error naming
    what to change."""
    check_numbers(args)
    chain = declared_chain(args) if "compact" in keys.scheme.stores else None    # TFHE's keys: no plan
    layout = scheme_layout(args, keys.scheme, keys.params, chain)
    refuse_foreign_flags(args, keys.scheme)
    use_secret = secret_encryption(args, keys, layout)
    tile, halo = tile_and_halo(args, keys, layout, chain)
    compression = compression_for(args, keys.scheme, layout)
    store = storage(args, keys.params, layout, use_secret, chain)
    spread, bound = block_binding(args, keys, layout, chain, store, tile, halo) or (None, None)
    bind = bind_settings(args, keys, layout, chain, blocks=spread is not None) or spread is not None
    offsets = None if bind else offset_binding(args, keys, layout, chain, store, halo)
    table = None if bind or offsets else table_binding(args, keys, layout, chain, store, tile, halo)
    if offsets:
        from hecore.binding import offset_pass_log2

        bound = offset_pass_log2(chain[0], tile, modulus=offsets if isinstance(offsets, int) else None)
    return EncryptSettings(keys=keys, layout=layout, tile=tile, halo=halo, strategy=args.strategy,
                           strategy_options=strategy_options(args), use_secret=use_secret, compression=compression,
                           store=store, spots=spot_settings(args, keys.params.name), bind=bind,
                           bind_unit=offsets if isinstance(offsets, float) else None,
                           bind_modulus=offsets if isinstance(offsets, int) else None, bind_table=table,
                           bind_spread=spread, bind_bound=bound,
                           spot_results=spot_results(args, keys.params.name))


def bind_settings(args, keys, layout: Layout, chain, *, blocks: bool = False) -> bool:
    """``--bind``, checked: CKKS keys, one pixel per slot (``--layout packed``), and a declared chain (if
    any) whose ops the check values survive (:func:`hecore.binding.why_not`; ``blocks``: checked over whole
    blocks, :func:`block_binding`, which the DFT filter's also survive)."""
    if not getattr(args, "bind", False):
        return False
    if check_slot_chain(args, keys, layout, chain, 0):     # a chain of 8-bit tables: keyed check slots instead
        return False
    if not getattr(keys.params, "complex_slots", False) or layout != Layout.PACKED:
        raise HepixError(f"--bind puts check values in the imaginary parts of CKKS's packed layout: it needs CKKS "
                         f"keys and --layout packed, not {keys.params.name} in the {layout} layout")
    if chain is not None:
        from hecore.binding import why_not

        why = (why_not(chain[0], blocks=blocks)
               or (f"{chain[1].spec} squares differences" if chain[1] is not None else None))
        if why:
            raise HepixError(f"--bind with --for-op: {why}; drop --bind for this chain")
    return True


def block_binding(args, keys, layout: Layout, chain, store, tile: tuple[int, int],
                  halo: int) -> tuple[float, float | None] | None:
    """``(spread, bound)``: the spread of the check values that bind a ``--for-op`` chain with the DFT filter,
    checked over whole blocks (:func:`hecore.binding.expected_blocks`), and log2 of what a ciphertext of another
    place passes them with (:func:`hecore.binding.block_pass_log2`; None for tiles the filter cannot run on).
    CKKS keys, ``--layout packed`` without a halo, SEAL's bytes; by default when the bound is 2^-20 or less on
    these tiles (a low-pass cutoff that keeps a dozen frequencies or more), with ``--bind`` always; None with
    ``--no-bind`` or otherwise."""
    if (getattr(args, "no_bind", False) or chain is None or chain[1] is not None or layout != Layout.PACKED
            or halo):
        return None
    from hecore.binding import BLOCK_BOUND_LOG2, SPREAD, block_pass_log2, on_blocks, why_not

    ops = chain[0]
    if (not on_blocks(ops) or why_not(ops, blocks=True) is not None
            or not getattr(keys.params, "complex_slots", False) or (store is not None and store.format != "seal")):
        return None
    try:
        bound = block_pass_log2([op.for_tiles(layout, tile, 0, keys.params.slots) for op in ops], tile)
    except (ValueError, HepixError):
        bound = None            # tiles the filter cannot run on: process refuses them, naming what to encrypt
    if getattr(args, "bind", False) or (bound is not None and bound <= BLOCK_BOUND_LOG2):
        return SPREAD, bound
    return None


def passes(bound: float | None) -> str:
    """`` (...)``: what a ciphertext of another place passes a run's checks with, for encrypt's first line."""
    if bound is None:
        return ""
    return (" (a ciphertext of another place passes with probability "
            + ("2^-64 or less)" if bound <= -64 else f"2^{bound:.1f})"))


def offset_binding(args, keys, layout: Layout, chain, store, halo: int = 0) -> float | int | None:
    """The keyed offsets that bind every ciphertext to its place by default, for a chain declared with
    ``--for-op`` whose ops are linear in the pixels, on a packed layout, in SEAL's bytes or the compact store
    (whose dropped bits the planner keeps within half of the check's margin off the grid: :func:`compact_fits`):
    under CKKS their size u (a float, :func:`hecore.binding.offset_unit`; the chain's results must have a grid),
    under BFV/BGV the plaintext modulus t they are drawn mod (an int, :func:`hecore.binding.modular_offsets_of`);
    None with ``--no-bind`` or where they do not apply (a downsample after a window, which the packed layouts
    refuse to run: its blocks would not line up with the tiles' halos, :func:`hecore.binding.strides`)."""
    if getattr(args, "no_bind", False) or chain is None or chain[1] is not None or not layout.packed:
        return None
    from hecore.binding import MAX_MODULUS_BITS, offset_unit, strides, why_not

    if halo and strides(chain[0]) > 1:
        return None
    if store is not None and store.format != "seal" and not compact_fits(store):
        return None
    p = keys.params
    if getattr(p, "complex_slots", False):
        return offset_unit(chain[0], strided=True)
    t = getattr(p, "plain_modulus", None) if getattr(p, "is_integer", False) else None
    if (not t or not chain[0] or why_not(chain[0], strided=True) is not None
            or int(t).bit_length() > MAX_MODULUS_BITS):
        return None
    return int(t)


def compact_fits(store) -> bool:
    """Whether the compact store's rounding error (:attr:`hecore.seal.atrest.AtRest.error_bound`, exceeded with
    probability 2^-40 per value; none where levels are left and nothing is dropped) leaves the keyed offsets'
    check its margin: at most half of :data:`hecore.binding.OFF_GRID` of a grid step (the tolerance is half a
    step), so that an honest result stays well inside the quarter step the check allows and a misplaced one,
    half a step off, well outside."""
    from hecore.binding import OFF_GRID

    return store.error_bound == 0 or (store.tolerance > 0 and store.error_bound <= OFF_GRID * store.tolerance)


def check_slot_chain(args, keys, layout: Layout, chain, halo: int) -> bool:
    """Whether keyed check slots can bind the run (:mod:`hecore.slotchecks`): a ``--for-op`` chain of 8-bit
    tables (no match) on BFV/BGV keys, one pixel per slot, no halo."""
    if chain is None or chain[1] is not None or layout != Layout.PACKED or halo:
        return False
    from hecore.ops.spec import is_table_chain

    return bool(getattr(keys.params, "is_integer", False)) and is_table_chain(args.for_op)


def table_binding(args, keys, layout: Layout, chain, store, tile: tuple[int, int], halo: int) -> bytes | None:
    """The declared table chain's 256 outputs when keyed check slots bind every ciphertext to its place
    (:func:`check_slot_chain`, in SEAL's bytes): by default when the tile leaves at least
    :data:`hecore.slotchecks.MIN_CHECKS` slots free (they cost nothing there), with ``--bind`` always (the
    default tile then shrinks to leave them: :func:`check_slot_tile`); None with ``--no-bind`` or otherwise."""
    if (getattr(args, "no_bind", False) or not check_slot_chain(args, keys, layout, chain, halo)
            or (store is not None and store.format != "seal")):
        return None
    from hecore.ops.lut import chain_of
    from hecore.slotchecks import MIN_CHECKS, room

    if room(keys.params.slots, tile) < MIN_CHECKS:
        if getattr(args, "bind", False):
            raise HepixError(f"--bind: a chain of 8-bit tables is bound by {MIN_CHECKS} or more keyed check slots "
                             f"among the pixels; a {tile[0]}x{tile[1]} tile leaves {room(keys.params.slots, tile)} "
                             f"of {keys.params.name}'s {keys.params.slots} slots: give a smaller --tile, or drop it")
        return None
    return bytes(int(v) for v in chain_of(args.for_op))


def spot_settings(args, preset: str) -> tuple | None:
    """``(positions, radius, ringers)`` of the owner's spot samples: ``--spot-positions`` (default
    :data:`hecore.integrity.DEFAULT_POSITIONS`), the radius the ``--for-op`` chain reaches (else
    :data:`hecore.integrity.DEFAULT_RADIUS`), ``--ringers`` (the probability that an image is sampled
    whole); None with ``--spot-positions 0`` and no ringers."""
    from hecore import integrity

    given = getattr(args, "spot_positions", None)
    positions = integrity.DEFAULT_POSITIONS if given is None else given
    if not 0 <= positions <= integrity.MAX_POSITIONS:
        raise HepixError(f"--spot-positions {positions}: give 0 (no spot checks) to {integrity.MAX_POSITIONS}")
    ringers = getattr(args, "ringers", 0.0) or 0.0
    if not 0.0 <= ringers <= 1.0:
        raise HepixError(f"--ringers {ringers}: give the probability that an image is a ringer, 0 to 1")
    if positions == 0 and not ringers:
        return None
    radius = integrity.DEFAULT_RADIUS
    if args.for_op:
        from hecore.ops.spec import recorded_reference_known, run_kind

        specs = [s for s in args.for_op if run_kind(s) != "match"]
        radius = integrity.reach(lambda partial: recorded_reference_known(partial, specs, preset)) or 0
    return positions, radius, ringers


def spot_results(args, preset: str) -> tuple | None:
    """``(specs, preset, patches, chain)`` when each spot sample keeps the declared chain's finished results at
    its positions instead of the pixels (tasks/decode.py, :func:`hecore.integrity.keep_results`): a ``--for-op``
    chain whose results have an exact grid and are decided by the pixels near them (``patches``: by the
    windows around each place alone; ``chain``: its text as runs record it); None otherwise (the samples keep
    pixels, checked for any chain)."""
    if not args.for_op:
        return None
    from hecore import integrity
    from hecore.ops.spec import op_chain_text, patch_local_chain, recorded_finish, recorded_reference_known, run_kind

    specs = tuple(s for s in args.for_op if run_kind(s) != "match")
    if not specs or not recorded_finish(specs, preset).snaps:
        return None
    if integrity.reach(lambda partial: recorded_reference_known(partial, specs, preset)) is None:
        return None
    return specs, preset, patch_local_chain(specs, preset), "|".join(op_chain_text(specs, preset))


def declared_chain(args):
    """``--for-op``'s chain: ``(ops, match)``, or None when no chain is declared."""
    if not args.for_op:
        return None
    from hecore.ops.spec import ops_and_match

    try:
        return ops_and_match(args.for_op)
    except ValueError as e:
        raise HepixError(f"--for-op: {e}") from None


def scheme_layout(args, scheme, params=None, chain=None) -> Layout:
    """``--layout``, or the default: with a declared chain the packed layout that stores it in the fewest
    ciphertexts (:func:`hecore.planner.storage_layout`), else the default of the keys' scheme; one its
    ciphertexts come in."""
    if args.layout is None:
        if getattr(args, "bind", False) and Layout.PACKED in scheme.layouts:   # check values in the imaginary parts
            return Layout.PACKED
        if chain is not None and params is not None and Layout.PACKED_COMPLEX in scheme.layouts:
            from hecore.planner import storage_layout

            return storage_layout(params, *chain)[0]
        return scheme.layouts[0]
    layout = Layout.parse(args.layout)
    if layout not in scheme.layouts:
        names = " or ".join(f"--layout {lay}" for lay in scheme.layouts)
        raise HepixError(f"--layout {layout}: {scheme.title} keys encrypt in {names} ({scheme.layouts[0]}, the "
                         f"default for {scheme.title} keys)")
    return layout


def refuse_foreign_flags(args, scheme) -> None:
    """Refuse, by name, the flags of encryptions the keys' scheme does not have."""
    for flag, given in (("--strategy", args.strategy not in scheme.strategies),
                        ("--halo", bool(args.halo) and not any(lay.packed for lay in scheme.layouts)),
                        ("--encryption symmetric", args.encryption == "symmetric" and "symmetric" not in scheme.encryptions),
                        ("--compression", args.compression not in (None, "none")
                         and not any(lay.packed for lay in scheme.symmetric_layouts)),
                        ("--store compact", args.store == "compact" and "compact" not in scheme.stores),
                        ("--for-op", bool(args.for_op) and "compact" not in scheme.stores)):
        if given:
            raise HepixError(f"{flag} does not apply to {scheme.title} keys: {scheme.encrypts}; drop it")


def tile_and_halo(args, keys, layout: Layout, chain=None) -> tuple[tuple[int, int], int]:
    """The tile and halo: for the packed layouts the largest tile that fills a ciphertext (or ``--tile``,
    checked to fit) and the halo filters need (with a declared chain, what its mean filter reaches); for the
    pixel layout ``--tile`` or the default, no halo."""
    params, tile_spec = keys.params, parse_tile(args.tile)
    if layout.packed:
        if args.strategy != "fresh":
            raise HepixError(f"--strategy {args.strategy} is a pixel-layout mode (iCHEETAH); the packed layout "
                             "encrypts each tile channel fresh with the public key: drop --strategy or use "
                             "--layout pixel")
        halo = chain_halo(params, chain) if args.halo is None else args.halo
        if halo < 0:
            raise HepixError(f"--halo {halo}: must be 0 or more")
        if chain is not None and chain_halo(params, chain) > halo:
            raise HepixError(f"--halo {halo}: the --for-op chain's mean filter reaches {chain_halo(params, chain)} "
                             f"pixels beyond each tile; give --halo {chain_halo(params, chain)} (or drop --halo)")
        try:
            tile = tile_spec or chain_tile(chain[0] if chain is not None else (),
                                             default_tile(params, halo, layout.complex_packing))
            if tile_spec is None and getattr(args, "bind", False) and check_slot_chain(args, keys, layout, chain,
                                                                                       halo):
                tile = check_slot_tile(tile, params.slots)
            check_tile_fits(params, *tile, halo, layout.complex_packing)
        except ValueError as e:
            raise HepixError(str(e)) from None
        return tuple(tile), halo
    if args.halo:
        raise HepixError("--halo is for the packed layout; the pixel layout's mean filter fetches neighbours itself")
    if layout not in keys.layouts:
        raise HepixError(f"the pixel layout (iCHEETAH) is CKKS-only; {params.name} is {params.scheme.upper()}: use "
                         "--layout packed, or keys of a CKKS preset")
    return tuple(tile_spec or parse_tile_spec(DEFAULT_TILE)), 0


def check_slot_tile(tile: tuple[int, int], slots: int) -> tuple[int, int]:
    """``tile`` less the rows that leave :data:`hecore.slotchecks.MIN_CHECKS` slots free for check slots (``--bind``
    on a chain of 8-bit tables: the default tile fills every slot, so 127x128 instead of 128x128 at N = 16384,
    128 check slots)."""
    from hecore.slotchecks import MIN_CHECKS, room

    h, w = tile
    while h > 1 and room(slots, (h, w)) < MIN_CHECKS:
        h -= 1
    return h, w


def chain_halo(params, chain) -> int:
    """The halo of a run without ``--halo``: :data:`DEFAULT_HALO`, or what the declared chain's mean filter
    reaches (:func:`hecore.planner.storage_layout`)."""
    if chain is None:
        return DEFAULT_HALO
    from hecore.planner import storage_layout

    return storage_layout(params, *chain)[1]


def compression_for(args, scheme, layout: Layout) -> str:
    """SEAL's serialization of the run's ciphertexts: ``--compression``, or by default
    :data:`PACKED_COMPRESSION` for SEAL's packed layouts and none otherwise (the pixel layout's byte-level
    ops need SEAL's uncompressed bytes; TFHE's encodings are compact already; the compact format packs
    itself)."""
    packed_seal = layout.packed and "compact" in scheme.stores
    if args.compression is None:
        return PACKED_COMPRESSION if packed_seal and args.store == "seal" else "none"
    if args.compression != "none":
        if args.store == "compact":
            raise HepixError("--store compact packs the ciphertexts itself; drop --compression")
        if not layout.packed:
            raise HepixError(f"--compression {args.compression}: the pixel layout's byte-level ops read SEAL's "
                             "uncompressed bytes; drop --compression (or use a packed layout)")
    return args.compression


def storage(args, params, layout, use_secret: bool, chain=None):
    """The planner's storage (hecore.planner.at_rest): ``--store compact``, for the ``--for-op`` chain or none;
    ``--store seal`` with ``--for-op``, SEAL's bytes at the level and scale the chain needs (CKKS; BFV and BGV
    stay at the first level).  None: SEAL's bytes at the first level."""
    if args.store != "compact" and chain is None:
        return None
    if not layout.packed:
        what = "--store compact stores" if args.store == "compact" else "--for-op plans the storage of"
        raise HepixError(f"{what} whole tile channels (the packed layouts); the pixel layout's byte-level ops read "
                         "fresh SEAL bytes: drop it, or use a packed layout")
    from hecore.planner import at_rest, check

    ops, match = chain if chain is not None else ([], None)
    try:
        if args.store == "compact":
            return at_rest(params, ops, layout, match, seeded=use_secret, declared=chain is not None)
        check(params, ops, layout.value, match)
        if not params.spends_levels:    # no levels to plan: the chain is checked, the bytes stay at the first level
            return None
        return at_rest(params, ops, layout, match, seeded=use_secret, store="seal")
    except (ValueError, InvalidParameters) as e:
        if chain is None:
            raise
        raise HepixError(f"--for-op: {e}") from None


def owner_dir(args) -> str:
    d = args.owner or default_dir(args.out)
    if d is None:
        raise HepixError(f"--out {args.out} is not a local path: name the owner map's local directory with --owner DIR "
                         "(it records which image id is which of your files, and stays with you)")
    return d


def trusted_keys(args, keys: str, scheme, secret: bool, owner: str):
    """The key set this run encrypts under, once the owner's side trusts it: a directory that holds the secret
    proves its public key with it (read, checked, and dropped unless the run encrypts with it); a public-only
    directory's fingerprint must be vouched for by ``--key-fingerprint``, the owner map this run adds to or
    the earlier ones it skips, or the owner's key records (:func:`hecore.keyring.vouch_for`).  Its own
    manifest vouches for nothing: it sits beside the keys it describes."""
    from hecore.keyring import vouch, vouch_for
    from hecore.schemes import open_keys

    holds = secret or os.path.exists(os.path.join(keys, scheme.secret_file))
    keyset = open_keys(keys, secret=holds, eval_keys=False)
    if holds:
        if args.key_fingerprint is not None:
            vouch(keyset.fingerprint, directory=args.keys, given=args.key_fingerprint)
        return keyset if secret else keyset.public()
    try:
        keyset.check_encryption(use_secret=False)       # keys made without a public key: what to do instead
    except ValueError as e:
        raise HepixError(str(e)) from None
    why = vouch_for(keyset, directory=args.keys, given=args.key_fingerprint,
                    owner=owner_fingerprints([owner, *args.skip_encrypted]))
    log.info("public keys %s of %s vouched for by %s", keyset.fingerprint[:16], args.keys, why)
    return keyset


def run(args) -> int:
    strategy_class(args.strategy, allow_leaky=args.allow_leaky)    # a leaking strategy: refused, saying what leaks
    check_numbers(args)
    owner = owner_dir(args)
    with remote_keys(args.keys) as keys:
        scheme = scheme_of(keys)
    # the owner's secret is read only where it encrypts: --encryption symmetric, or a scheme that encrypts with
    # its secret alone (TFHE's client key); then the run is the owner's job, in a secret-holding session
    secret = args.encryption == "symmetric" or not scheme.public_encryption
    with remote_keys(args.keys, secret=secret) as keys:
        setup = settings_from(args, trusted_keys(args, keys, scheme, secret, owner))
    check_encrypt_outputs(args.out, owner, keys=args.keys, images=args.input)   # before anything is written
    run_id, started = runinfo.new_run_id(), runinfo.now()
    session = (secret_session("encrypt", args.master, args.conf, trusted=trusted_cluster(args)) if setup.use_secret
               else plain_session("encrypt", args.master, args.conf))
    with session as spark:
        out = Output(Storage(spark), args.out, run_id)
        job = EncryptRun(args, setup, spark, out, run_id, started, owner)
        print(f"hepix encrypt {run_id}: {args.input} -> {args.out} (owner map {owner}); {setup.layout} layout, "
              f"{'encryption' if setup.use_secret else 'strategy'} {setup.label} "
              f"({job.strategy.security}), {setup.params.name}, key {job.fingerprint[:16]}; {setup.binding_label}")
        try:
            batches = job.resume()
            if not batches and job.already_complete():
                print(f"nothing to encrypt: all {job.skipped} images of {args.input} are in {out.out} already")
                return 0
            if not batches and job.skipped_earlier:
                print(f"nothing new: all {job.skipped_earlier} images of {args.input} are in earlier runs' owner "
                      f"maps; {out.out} gets an empty complete run")
            with Progress(spark, "encrypt", enabled=not args.quiet) as progress:
                for b, paths in enumerate(batches):
                    job.encrypt_batch(b, paths, len(batches), progress)
            manifest = job.finish()
        except BaseException:
            out.abort()
            raise
    counts = manifest.counts
    secs = max(manifest.timings.get("encrypt_seconds", 0.0), 1e-9)
    mb = counts.ciphertext_bytes / 1e6
    print(f"encrypted {counts.images_encrypted} of {counts.images_in} images ({counts.images_rejected} rejected) "
          f"into {counts.ciphertexts} ciphertexts, {mb:,.1f} MB, in {secs:.1f} s "
          f"({counts.ciphertexts / secs:,.0f} ciphertexts/s, {mb / secs:,.1f} MB/s); "
          f"cache rebuilds {manifest.workers['cache_rebuilds']} for {manifest.workers['tasks']} tasks"
          + (f"; {len(manifest.runs)} runs" if len(manifest.runs) > 1 else "")
          + (f"; {counts.ciphertext_bytes / counts.ciphertexts:,.0f} bytes per pixel value"
             if setup.params.slots == 1 and counts.ciphertexts else ""))
    if counts.images_rejected:
        print(f"rejected files are listed in the owner map, {owner}/rejects/, with the reason")
    return 0
