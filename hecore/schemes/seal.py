"""CKKS, BFV and BGV through SEAL (Pyfhel): one scheme family behind :class:`~hecore.schemes.base.Scheme`.

The keys are those of :mod:`hecore.seal.keys` (a context, public, relinearisation and rotation keys, and
the owner's ``secret.key``); the encryptors those of :mod:`hecore.encrypt` (public key, seeded
secret key, the pixel strategies); the decryptor and row checks a :class:`hecore.seal.context.HEContext`
and :class:`hecore.seal.checks.CiphertextChecker`; the evaluator :class:`hecore.seal.evaluator.Evaluator`.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from hecore.layouts import Layout
from hecore.seal import keys as seal_keys
from hecore.seal.context import HEContext, PublicMaterial

from .base import KeySet, Scheme


class SealScheme(Scheme):
    """CKKS, BFV and BGV keys (SEAL): packed and pixel layouts, public-key or the owner's seeded
    secret-key encryption, SEAL's bytes or hepix's compact at-rest format."""

    name = "seal"
    title = "CKKS/BFV/BGV"
    secret_file = seal_keys.SECRET
    refused_reason = "seal-refused"
    public_keys = "public"
    layouts = (Layout.PACKED, Layout.PACKED_COMPLEX, Layout.PIXEL)
    plans_presets = True
    divides_keys = True
    encryptions = ("public", "symmetric")
    stores = ("seal", "compact")
    encrypts = "packed or pixel layouts, with the public key or the owner's secret key"

    @property
    def strategies(self) -> tuple[str, ...]:
        from hecore.encrypt.strategies import strategy_names

        return tuple(strategy_names())

    def owns_manifest(self, doc: dict) -> bool:
        return "scheme" not in doc           # hecore.seal.keys.read_info then says what else is wrong

    def owns_preset(self, preset: str) -> bool:
        from hecore.seal.params import PRESETS

        return preset in PRESETS

    def preset(self, name: str):
        from hecore.seal.params import preset

        return preset(name)

    def open(self, keys: str | os.PathLike, *, secret: bool = False, eval_keys: bool = True) -> SealKeys:
        public = seal_keys.read_public(keys, eval_keys=eval_keys)
        if not secret:
            return SealKeys(public)
        secret_key = seal_keys.read_secret_key(keys)
        seal_keys.check_owner_directory(keys, public, secret_key)
        return SealKeys(public, secret_key)

    def plan_keys(self, specs: Sequence[str], layout: str | None, *, only: str | None = None):
        """The smallest preset that runs the chain (the planner's first), or the default preset."""
        from hecore.planner import plan
        from hecore.seal.params import DEFAULT_PRESET, preset

        if not specs:
            return preset(DEFAULT_PRESET)
        ops, match = _chain_and_match(specs)
        lay = layout or Layout.PACKED.value
        fits = plan(ops, lay, scheme=only, match=match)
        if not fits:
            raise ValueError(f"no preset runs {' | '.join(specs)} in the {lay} layout; see `hepix plan` for the "
                             "reasons")
        return fits[0]

    def keygen(self, out, params, *, overwrite: bool = False, rotations: bool = True,
               compressed_server_key: bool = False):
        from hecore.errors import InvalidParameters

        if compressed_server_key:
            raise InvalidParameters("--compressed-server-key is for TFHE keys (--scheme tfhe)")
        # a pointwise-only preset (lut-16384) has no rotation keys: its tiles fill all N slots
        return seal_keys.keygen(params, out, overwrite=overwrite, rotations=rotations and params.rotations)

    def export_public(self, keys, out, for_ops=(), *, tile: tuple[int, int] | None = None,
                      halo: int | None = None):
        """The public copy; for a chain (``for_ops``), without the evaluation keys it does not use, and with
        the Galois keys of the steps it takes (:meth:`rotation_steps`) instead of the whole set."""
        if not for_ops:
            if tile is not None or halo is not None:
                raise ValueError("--tile and --halo say which tiles the --for-op chain's rotation keys are for; "
                                 "give the chain with --for-op")
            return seal_keys.export_public(keys, out)
        withhold = self.unneeded_keys(for_ops)
        steps = None
        if seal_keys.ROTATE not in withhold:
            steps = self.rotation_steps(seal_keys.read_public(keys), for_ops, tile=tile, halo=halo)
            if steps == ():
                withhold, steps = withhold + (seal_keys.ROTATE,), None
        return seal_keys.export_public(keys, out, withhold=withhold, rotation_steps=steps)

    def rotation_steps(self, public: PublicMaterial, specs: Sequence[str], *, tile: tuple[int, int] | None = None,
                       halo: int | None = None) -> tuple[int, ...] | None:
        """The rotation steps the chain ``specs`` takes on the tiles ``hepix encrypt`` makes of it -- in each
        packed layout the keys have, with the halo the chain needs and the default one (encrypt without
        ``--for-op``), or with ``tile`` and ``halo`` as given (:mod:`hecore.seal.steps`); None (the whole
        set) for a chain with a match, whose rotations depend on each run's image sizes, and for one whose steps
        are more keys than the whole set (:func:`hecore.seal.steps.whole_set_keys`)."""
        from hecore.errors import InvalidParameters
        from hecore.layouts.packed import DEFAULT_HALO, chain_tile, default_tile
        from hecore.ops.spec import is_table_chain, ops_and_match
        from hecore.planner import storage_layout
        from hecore.seal.steps import whole_set_keys

        ops, match = ops_and_match(list(specs))
        if match is not None or is_table_chain(list(specs)):
            return None
        params = public.params
        halos = sorted({halo} if halo is not None else {storage_layout(params, ops)[1], DEFAULT_HALO})
        steps: set[int] = set()
        for layout in (lay for lay in SEAL.layouts if lay.packed and (params.complex_slots or not lay.complex_packing)):
            for h in halos:
                try:
                    t = tuple(tile) if tile is not None else chain_tile(ops, default_tile(params, h,
                                                                                          layout.complex_packing))
                    planned = _with_tiles(ops, layout, {"tile": t, "halo": h}, params)
                    check_packed_chain_fits(params, planned, t, h, layout)
                except (ValueError, InvalidParameters):
                    continue                    # tiles this chain cannot run on: no run will ask for their steps
                steps |= packed_steps(public, planned, probe_geometry(t, h, layout.complex_packing))
        steps = tuple(sorted(steps))        # none: no packed tile runs the chain, the pixel layout rotates nothing
        return steps if len(steps) < whole_set_keys(params.slots) else None

    @staticmethod
    def unneeded_keys(specs: Sequence[str]) -> tuple[str, ...]:
        """The evaluation key files a chain does not use, in any packed layout: the relinearisation key
        without a ciphertext product, the rotation keys without a rotation (the pixel layout rotates
        nothing)."""
        from hecore.ops.spec import ops_and_match
        from hecore.planner import requirements

        ops, match = ops_and_match(list(specs))
        needs = [requirements(ops, lay, match) for lay in SEAL.layouts if lay.packed]
        unneeded = []
        if not any(r.multiplies for r in needs):
            unneeded.append(seal_keys.RELIN)
        if not any(r.rotations for r in needs):
            unneeded.append(seal_keys.ROTATE)
        return tuple(unneeded)

    def parse_chain(self, specs: Sequence[str]):
        from hecore.ops.spec import parse_chain

        return parse_chain(specs)

    def check_chain(self, params, done: Sequence[str], ops: list, *, layout: str, options: dict,
                    preset: str) -> list:
        """The keys' parameters run the whole chain (the planner names a preset that can when they
        cannot), a compact storage allows it, a packed chain fits the tiles' halo, and a
        frequency-domain filter gets the run's tile (decrypt's reference filters the same tiles)."""
        from hecore.ops.packed import check_packed_chain
        from hecore.ops.spec import is_table_chain, parse_ops
        from hecore.planner import check as check_params

        if is_table_chain(list(done) + [op.spec for op in ops]):
            return _table_chain(params, done, ops, layout)
        before = parse_ops(list(done))
        ops = _with_tiles(ops, layout, options, params)
        check_params(params, before + ops, layout)
        if isinstance(options.get("store"), dict):
            from hecore.planner import check_at_rest
            from hecore.seal.atrest import AtRest

            check_at_rest(params, AtRest.from_json(options["store"]), before + ops, layout)
        if Layout.parse(layout).packed:
            check_packed_chain(before, ops, int(options.get("halo", 0)))
        return ops

    def plausible_range(self, specs: Sequence[str]) -> tuple[float, float]:
        from hecore.ops.spec import is_table_chain, parse_ops, raw_range

        if is_table_chain(specs):           # a BFV table's values are exact bytes
            return -0.5, 255.5
        lo, hi = raw_range(parse_ops(list(specs)))
        margin = 0.5 + 1e-3 * (hi - lo)
        return lo - margin, hi + margin

    def keyless_checker(self, preset: str):
        from hecore.seal.checks import CiphertextChecker

        return CiphertextChecker.for_params(self.preset(preset))


#: The image side the probe's tile is taken from: larger than any image, so that an op placed at a pixel (a
#: watermark) finds it inside; where in the image the tile lies changes no rotation.
PROBE_SIDE = 1 << 20


def probe_geometry(tile: tuple[int, int], halo: int, complex_packing: bool = False):
    """The geometry of a tile of ``tile`` (rows, columns) with ``halo`` at the top left of a very large image."""
    from hecore.ops.packed import PackedGeometry

    return PackedGeometry(int(tile[0]), int(tile[1]), int(halo), 0, 0, PROBE_SIDE, PROBE_SIDE, complex_packing)


def packed_steps(public: PublicMaterial, ops: list, geometry) -> frozenset[int]:
    """The rotation steps ``ops`` (planned for the tiles) take on one packed ciphertext of ``geometry``
    (:func:`hecore.seal.steps.chain_steps`); ops that bring several rows together (``grey``) rotate nothing
    and are left out."""
    from hecore.ops.packed import apply_ops
    from hecore.seal.steps import chain_steps

    local = [op for op in ops if op.regroup(True) is None]
    return chain_steps(public, lambda ev, c: apply_ops(ev, c, local, geometry), geometry.complex_packing)


def check_packed_chain_fits(params, ops: list, tile: tuple[int, int], halo: int, layout) -> None:
    """ValueError or InvalidParameters unless ``ops`` run on packed tiles ``tile`` with ``halo`` in ``layout``."""
    from hecore.layouts.packed import check_tile_fits
    from hecore.ops.packed import check_packed_chain

    problem = next((p for p in (op.layout_problem(layout) for op in ops) if p), "")
    if problem:
        raise ValueError(problem)
    check_tile_fits(params, *tile, halo, layout.complex_packing)
    check_packed_chain([], ops, halo)


def _chain_and_match(specs: Sequence[str]):
    """The image ops of a chain and its match (last, when there is one)."""
    from hecore.ops.spec import ops_and_match

    return ops_and_match(specs)


def _table_chain(params, done: Sequence[str], ops: list, layout: str) -> list:
    """A chain of 8-bit ops (hecore.ops.lut) on a run that did ``done``: the ops in TFHE's vocabulary (one
    table, brightness saturating), on ciphertexts that hold 8-bit pixels, with parameters that afford it."""
    from hecore.ops.lut import check_table_input
    from hecore.ops.spec import parse_table_chain
    from hecore.planner import check as check_params

    check_table_input(list(done), layout)
    table_ops = parse_table_chain([op.spec for op in ops])
    check_params(params, table_ops, layout)
    return table_ops


def _with_tiles(ops: list, layout: str, options: dict, params) -> list:
    """Each op as planned for the input's tiles (:meth:`hecore.ops.base.ImageOp.for_tiles`): a
    frequency-domain filter works tile by tile, its spec records the run's tile, and the tiles must suit it."""
    th, tw = (int(v) for v in options.get("tile", (0, 0)))
    return [op.for_tiles(Layout.parse(layout), (th, tw), int(options.get("halo", 0)), params.slots) for op in ops]


SEAL = SealScheme()


@dataclass(frozen=True)
class SealKeys(KeySet):
    """A SEAL key directory's public material, and the owner's secret key when held."""

    material: PublicMaterial
    secret_key: bytes | None = field(default=None, repr=False)    # never in a log line or an error message

    scheme = SEAL

    @property
    def params(self):
        return self.material.params

    @property
    def fingerprint(self) -> str:
        return self.material.fingerprint()

    def lacks_for(self, ops, layout: str, options: dict | None = None) -> str | None:
        from hecore.planner import requirements

        req = requirements(list(ops), layout)
        chain = "|".join(op.spec for op in ops)
        for needed, data, name, what in ((req.multiplies, self.material.relin_key, seal_keys.RELIN,
                                          "multiplies ciphertexts"),
                                         (req.rotations, self.material.rotate_key, seal_keys.ROTATE, "rotates")):
            if needed and data is None and self.params.supports_keyswitching:
                return (f"{chain} {what} in the {layout} layout, and these keys were "
                        f"exported without {name} (export-public --for-op another chain): export them again "
                        "for this chain")
        held = self.material.rotation_steps
        if req.rotations and held is not None and Layout.parse(layout).packed and options and "tile" in options:
            (th, tw), halo = (int(v) for v in options["tile"]), int(options.get("halo", 0))
            geometry = probe_geometry((th, tw), halo, Layout.parse(layout).complex_packing)
            missing = sorted(packed_steps(self.material, ops, geometry) - set(held))
            if missing:
                shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
                return (f"{chain} rotates by {shown} slots on this run's {th}x{tw} tiles (halo {halo}), and these "
                        f"keys hold the rotation keys of {len(held)} other steps only (export-public --for-op "
                        f"for other tiles): export them again with --for-op for this chain and --tile {th}x{tw} "
                        f"--halo {halo}")
        return None

    @property
    def layouts(self) -> tuple:
        """BFV and BGV keys fill the packed layouts only (the pixel layout is CKKS's, iCHEETAH)."""
        return SEAL.layouts if self.params.pixel_layout else tuple(lay for lay in SEAL.layouts if lay.packed)

    @property
    def has_secret(self) -> bool:
        return self.secret_key is not None

    def secret_bytes(self) -> bytes:
        if self.secret_key is None:
            raise ValueError("these are public keys: only the owner's key set holds the secret key")
        return self.secret_key

    def public(self) -> SealKeys:
        return SealKeys(self.material)

    def for_checks(self) -> SealKeys:
        return SealKeys(dataclasses.replace(self.material, relin_key=None, rotate_key=None))

    def for_encryption(self, *, use_secret: bool) -> SealKeys:
        return SealKeys(self.for_checks().material, self.secret_bytes() if use_secret else None)

    def for_decryption(self) -> SealKeys:
        return SealKeys(self.for_checks().material, self.secret_bytes())

    def encryptor(self, *, layout, strategy: str = "fresh", strategy_state: bytes | None = None,
                  allow_leaky: bool = False, use_secret: bool = False, compression: str = "none",
                  check_key: bool = True):
        from hecore.encrypt import encryptor_for

        return encryptor_for(self.material, secret_key=self.secret_bytes() if use_secret else None,
                             packed=Layout.parse(layout).packed, strategy=strategy, strategy_state=strategy_state,
                             allow_leaky=allow_leaky, compression=compression, check_key=check_key)

    def strategy(self, name: str, *, allow_leaky: bool = False, options: dict | None = None):
        from hecore.encrypt.strategies import strategy_class

        return strategy_class(name, allow_leaky=allow_leaky)(self.context(), **(options or {}))

    def encryption_label(self, *, use_secret: bool, strategy: str) -> str:
        return "symmetric" if use_secret else strategy

    def encryption_options(self, *, use_secret: bool, compression: str) -> dict:
        return {"encryption": "symmetric", "compression": compression} if use_secret else {}

    def ciphertext_bytes(self) -> int | None:
        return self.context().ct_format.stride

    def decryptor(self) -> HEContext:
        self.secret_bytes()                 # refuses public keys, saying so
        return self.context()

    def checker(self, *, fixed_format: bool = False, exact_scale: tuple[int, int] | None = None):
        from hecore.seal.checks import CiphertextChecker

        return CiphertextChecker.for_context(self.context(), fixed_format=fixed_format, exact_scale=exact_scale)

    def evaluator(self):
        from hecore.seal.evaluator import Evaluator

        return Evaluator(self.context())

    def context(self) -> HEContext:
        """The SEAL context of these keys (with the secret key when held), built on first use."""
        ctx = self.__dict__.get("_context")
        if ctx is None:
            ctx = HEContext.from_public(self.material, secret_key=self.secret_key)
            object.__setattr__(self, "_context", ctx)
        return ctx

    def __getstate__(self) -> dict:
        """Bytes only cross a process boundary: the built context stays behind."""
        return {k: v for k, v in self.__dict__.items() if k != "_context"}
