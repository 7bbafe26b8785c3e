"""The red team: lying clusters against the owner's secret spot checks (``hepix bench --suite integrity``).

Each lie is computed on real ciphertexts, as a cluster holding the public keys would compute it, in the packed
layout on two colour images: the op skipped, another constant, the right chain on tiles swapped within an image
and between images, an older run's result with another chain, an encrypted error added to 1 % (and 0.1 %) of one
image's values, one ciphertext corrupted, and -- where the keys allow a ciphertext product -- a selector that corrupts
only the values above 128 (a polynomial sign of the data, evaluated homomorphically); a dropped ciphertext, which
the jobs' completeness rule catches whatever the sample.  The owner decrypts each
result as decrypt does and checks it against a fresh spot sample (:mod:`hecore.integrity`) ``trials`` times,
of each kind the owner keeps (:data:`SAMPLES`: the pixels around each place, or the declared chain's results):
the measured rate of detection is set beside the formula's ``1 - (1 - f)^k`` for the fraction ``f`` of pixels
the lie got wrong and ``k`` sampled positions.  The honest result is checked the same way (false alarms).
With evaluation keys that hold no relinearisation key the selector cannot be built: the row says it was refused.
An inference is judged by its ringers instead (:func:`inference_rows`): digits whose answers the owner knows.
A chain of 8-bit tables on packed BFV is bound by keyed check slots (:func:`slot_rows`), a chain with the DFT filter
by check values compared over whole blocks (:func:`block_rows`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from hecore import integrity
from hecore.layouts.packed import decrypt_tiles, default_tile, encrypt_tiles
from hecore.ops.packed import PackedGeometry, apply_ops
from hecore.ops.spec import finish_for, parse_ops, recorded_reference, recorded_reference_known
from hecore.quality import round_to_uint8

OPTIONS = frozenset({"repeats", "preset"})
#: The chain the cluster is asked for: a constant and a 3x3 window (the spot sample's radius 1).
CHAIN = ("brightness:20", "meanfilter:3")
DEFAULT_PRESET = "paper-4096"
#: Keys deep enough for the selector: a sign polynomial (three levels), a plaintext product and a product.
SELECTOR_PRESET = "dft-16384"
#: Trials per lie (fresh secret positions each).
DEFAULT_TRIALS = 200
#: Positions per sample: few, so that the formula's probability is informative, and the default of every run.
POSITIONS = (32, integrity.DEFAULT_POSITIONS)
SIZE = 64


@dataclass
class Image:
    name: str
    pixels: np.ndarray


@dataclass
class Lie:
    """What the owner decrypts of one image: ``result`` (finished, uint8) under the name of an attack."""

    attack: str
    image: int
    result: np.ndarray | None
    refused: str | None = None


def images() -> list[Image]:
    """Two 64x64 colour crops (scikit-image's astronaut and coffee)."""
    from bench.datasets import sample
    from hecore.images import center_crop, resize

    return [Image(n, resize(center_crop(sample(n)), SIZE)) for n in ("astronaut", "coffee")]


class Cluster:
    """The packed chain on each image's tiles, and the lies a cluster can tell with the same keys."""

    def __init__(self, ctx, ev, imgs: list[Image], chain=CHAIN):
        self.ctx, self.ev, self.chain = ctx, ev, list(chain)
        self.ops = parse_ops(self.chain)
        self.halo = max((op.halo for op in self.ops), default=0)
        self.th, self.tw = (min(v, SIZE // 2) for v in default_tile(ctx.params, self.halo))
        self.finish = finish_for(self.ops)
        self.encrypted = []
        for img in imgs:
            grid, tiles = encrypt_tiles(img.pixels, ctx, self.th, self.tw, self.halo)
            self.encrypted.append((grid, list(tiles)))

    def run(self, i: int, ops=None, tiles=None, each=None):
        """Image ``i``'s tiles through ``ops`` (default the chain; ``each(index, ciphertext)`` after it):
        decrypted and finished as decrypt finishes the chain the cluster claims."""
        grid, mine = self.encrypted[i]
        tiles = tiles if tiles is not None else mine
        ops = self.ops if ops is None else ops
        out = []
        for n, t in enumerate(tiles):
            geom = PackedGeometry(self.th, self.tw, self.halo, t.y, t.x, grid.height, grid.width)
            c = self.ev.load(t.ct)
            if ops:
                c, _ = apply_ops(self.ev, c, ops, geom)
            if each is not None:
                c = each(n, c)
            out.append(t.with_ct(self.ev.dump(c)))
        return round_to_uint8(self.finish.apply(decrypt_tiles(self.ctx, grid, out)))

    def lies(self) -> list[Lie]:
        grid, a = self.encrypted[0]
        _, b = self.encrypted[1]
        rng = np.random.default_rng(7)
        swapped = list(a)
        swapped[0], swapped[-1] = (swapped[0].with_ct(a[-1].ct), swapped[-1].with_ct(a[0].ct))
        foreign = [t.with_ct(b[n].ct) if n == 0 else t for n, t in enumerate(a)]

        def error_on(per_thousand):
            def add(n, c):              # +9 raw (one level after the mean filter's /9) on that share of the slots
                values = np.zeros(self.ev.slots)
                values[rng.choice(self.ev.slots, size=max(1, self.ev.slots * per_thousand // 1000),
                                  replace=False)] = 9.0
                return self.ev.add_values(c, values)
            return add

        def one_corrupted(n, c):
            return self.ev.add_values(c, 45.0) if n == 1 else c

        return [
            Lie("honest", 0, self.run(0)),
            Lie("skip the op", 0, self.run(0, ops=[])),
            Lie("another constant", 0, self.run(0, ops=parse_ops(["brightness:21", "meanfilter:3"]))),
            Lie("tiles swapped within an image", 0, self.run(0, tiles=swapped)),
            Lie("a tile of another image", 0, self.run(0, tiles=foreign)),
            Lie("another run's result (brightness:20 alone)", 0, self.run(0, ops=parse_ops(["brightness:20"]))),
            Lie("an error on 1 % of the values", 0, self.run(0, each=error_on(10))),
            Lie("an error on 0.1 % of the values", 0, self.run(0, each=error_on(1))),
            Lie("one ciphertext corrupted", 0, self.run(0, each=one_corrupted)),
        ]


def selector_lie(ctx, ev, img: Image, *, linear: bool = False) -> Lie:
    """brightness:20, then every value above 148 (an original above 128) made 2 % larger: a sign polynomial of
    the data times the data.  ``linear``: keys without a relinearisation key, which refuse the product."""
    from hecore.ops.sign import approx_sign_mask
    from hecore.seal.evaluator import MissingEvaluationKeys

    name = "selector: values above 128 corrupted" + (" (linear keys)" if linear else "")
    cluster = Cluster(ctx, ev, [img], ["brightness:20"])

    def select(n, c):
        mask = approx_sign_mask(ev, c, 148, steps=("f3",))              # ~255 where the value is >= 148
        small = ev.encode(0.02 / 255, level=ev.level(mask), scale=float(ev.level_prime(mask)))
        factor = ev.add_values(ev.rescale(ev.multiply_plain(mask, small)), 1.0)   # ~1.02 there, ~1 elsewhere
        return ev.multiply(ev.match_level(c, factor), factor, any_scales=True)

    try:
        return Lie(name, 0, cluster.run(0, each=select))
    except MissingEvaluationKeys as e:
        return Lie(name, 0, None, refused=str(e).splitlines()[0][:160])


#: What the owner keeps: the pixels within radius 1 of each place (encrypt without ``--for-op``), or the
#: declared chain's results there (encrypt ``--for-op``, :func:`hecore.integrity.keep_results`).
SAMPLES = ("pixels", "results")


def detection(sample_of, result: np.ndarray, truth: np.ndarray, chain, preset: str, positions: int,
              trials: int, seed: int, kept: str = "pixels") -> dict:
    """``trials`` fresh samples of the original (``kept``: one of :data:`SAMPLES`) checked against ``result``:
    the measured rate of detection, and the formula's for the fraction of pixels ``result`` gets wrong."""
    from hecore.ops.spec import op_chain_text, patch_local_chain

    wrong_pixels = np.any(np.atleast_3d(result) != np.atleast_3d(truth), axis=-1)
    f = float(wrong_pixels.mean())
    rng = np.random.default_rng(seed)
    caught, checked = 0, 0
    expected = (lambda p: recorded_reference_known(p, chain, preset))
    text, patches = "|".join(op_chain_text(list(chain), preset)), patch_local_chain(list(chain), preset)
    t = time.perf_counter()
    for _ in range(trials):
        sample = integrity.draw(sample_of, positions=positions, radius=1, rng=rng)
        if kept == "results":
            found = integrity.check_results(integrity.keep_results(sample, expected, text, patches=patches),
                                            result, text)
        else:
            found = integrity.check(sample, result, expected)
        caught += not found.ok
        checked += found.positions
    k = min(positions, wrong_pixels.size)
    return {"wrong_fraction": f, "positions": k, "trials": trials, "detected": caught / trials,
            "formula": 1.0 - integrity.escape_probability(f, k), "checked_positions": checked / trials,
            "check_ms": 1e3 * (time.perf_counter() - t) / trials}


def measure(trials: int = DEFAULT_TRIALS, preset_name: str = DEFAULT_PRESET) -> list[dict]:
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset

    imgs = images()
    ctx, _ = HEContext.generate(preset(preset_name))
    cluster = Cluster(ctx, Evaluator(ctx), imgs)
    deep, secret = HEContext.generate(preset(SELECTOR_PRESET), rotations=False)     # the lie needs no rotation
    linear = _without_relinearisation(deep, secret)
    lies = [(lie, cluster.chain, preset_name) for lie in cluster.lies()]
    lies += [(selector_lie(deep, Evaluator(deep), imgs[0]), ["brightness:20"], SELECTOR_PRESET),
             (selector_lie(linear, Evaluator(linear), imgs[0], linear=True), ["brightness:20"], SELECTOR_PRESET)]
    rows = []
    for lie, chain, name in lies:
        reference = round_to_uint8(recorded_reference(imgs[lie.image].pixels, chain, name))
        for kept in SAMPLES:
            for positions in POSITIONS:
                row = {"attack": lie.attack, "preset": name, "chain": "|".join(chain),
                       "image": imgs[lie.image].name, "refused": lie.refused, "sample": kept}
                if lie.result is not None:
                    row.update(detection(imgs[lie.image].pixels, lie.result, reference, chain, name, positions,
                                         trials, seed=positions, kept=kept))
                else:
                    row.update(positions=positions, trials=0)
                rows.append(row)
    rows += [dict(dropped(cluster, imgs[0], trials, seed=positions), positions=positions, sample="none")
             for positions in POSITIONS]
    return rows + inference_rows(trials) + slot_rows(trials)


#: The table the check slots are measured on (two outputs: the fewest any table that changes a value gives).
SLOT_TABLE = "threshold:128"
SLOT_PRESET = "lut-16384"


def slot_rows(trials: int) -> list[dict]:
    """Keyed check slots (:mod:`hecore.slotchecks`) against a tile of another place (the same image's next tile,
    and a flat tile's twin, which holds the same pixels) and one slot changed, each judged against ``trials``
    fresh binding keys -- so fresh slot orders and check inputs -- at lut-16384's 16,384 slots with ``--bind``'s
    127x128 tile (128 checks).  A BFV table is exact, so the cluster's honest work on a ciphertext decrypts to
    the table of every slot; the lies are computed on those slots (the jobs' test runs them through SEAL)."""
    import os

    from hecore.ops.lut import chain_of
    from hecore.slotchecks import gather, spread, swap_escape

    table = np.asarray(chain_of([SLOT_TABLE]), dtype=np.int64)
    raw = bytes(int(v) for v in table)
    slots, block = 16384, (127, 128)
    checks = slots - block[0] * block[1]
    img = images()[0]
    crop = np.resize(img.pixels[..., 0], (2 * block[0], block[1]))
    tile, flat = [crop[:block[0]], crop[block[0]:]], [np.full(block, 200)] * 2
    # (attack, image, the two places' blocks, whether one slot of the first is changed instead of a swap)
    cases = [("a tile of another place (check slots)", img.name, tile, False),
             ("a flat tile's twin swapped (check slots)", "flat 200", flat, False),
             ("one slot changed (check slots)", img.name, tile, True)]
    rng = np.random.default_rng(13)
    rows = []
    for attack, name, blocks, changed in cases:
        truth = table[np.asarray(blocks[0])]
        caught, wrong = 0, 0.0
        t = time.perf_counter()
        for n in range(trials):
            key, places = os.urandom(32), [("i", 0, 0, 0), ("i", 0, 1, 0)]
            if changed:
                row = table[np.rint(spread(key, places[:1], blocks[:1], slots, raw)[0]).astype(np.int64)]
                where = int(rng.integers(slots))
                row[where] = 255 - row[where]
            else:
                row = table[np.rint(spread(key, places, blocks, slots, raw)[1]).astype(np.int64)]
            values, (missed,) = gather(key, places[:1], [row], block, raw, table)
            wrong += np.count_nonzero(values[0] != truth) / values[0].size
            caught += missed > 0
        rows.append({"attack": attack, "preset": SLOT_PRESET, "chain": SLOT_TABLE, "image": name, "refused": None,
                     "sample": "slots", "positions": checks, "trials": trials, "wrong_fraction": wrong / trials,
                     "formula": checks / slots if changed else 1.0 - swap_escape(raw, checks),
                     "detected": caught / trials, "checked_positions": float(checks),
                     "check_ms": 1e3 * (time.perf_counter() - t) / trials})
    return rows


#: The preset the DFT filter's binding is measured at, and its cutoffs: 797, 37 and 9 frequencies of a 64x64 tile.
BLOCK_PRESET = "dft-8192"
BLOCK_CUTOFFS = (0.5, 0.1, 0.05)


def block_rows(trials: int) -> list[dict]:
    """Check values over whole blocks (a chain with the DFT filter, :func:`hecore.binding.expected_blocks`)
    against a tile of another image and a flat tile's twin (the same pixels), each judged against ``trials``
    fresh binding keys: the other place's filtered check values plus CKKS's error, as one honest ciphertext through
    the filter at dft-8192 measured it, against this place's.  The formula is ``1 - 2^bound``
    (:func:`hecore.binding.block_pass_log2`)."""
    import os

    from hecore import binding
    from hecore.layouts.packed import encrypt_blocks
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset

    ctx, _ = HEContext.generate(preset(BLOCK_PRESET))
    ev, tile = Evaluator(ctx), (SIZE, SIZE)
    imgs = images()
    cases = [("a tile of another image (check values over blocks)", imgs[0].name,
              [imgs[0].pixels[..., 0], imgs[1].pixels[..., 0]]),
             ("a flat tile's twin swapped (check values over blocks)", "flat 200", [np.full(tile, 200, np.uint8)] * 2)]
    places = [("i", 0, 0, 0), ("i", 0, 0, 1)]
    rows = []
    for cutoff in BLOCK_CUTOFFS:
        specs = [f"dftfilter:lowpass={cutoff},tile={SIZE}x{SIZE}"]
        ops = parse_ops(specs)

        def reference(x, specs=specs):
            return recorded_reference_known(x, specs, BLOCK_PRESET)

        def expected(key, count=2):
            return binding.expected_blocks(key, places[:count], tile=tile, in_channels=1, reference=reference,
                                           post_scales=[1.0] * count, spread=binding.SPREAD)

        key = os.urandom(32)
        checks = binding.check_values(key, *places[0], tile, binding.SPREAD)
        c, _ = apply_ops(ev, ev.load(bytes(encrypt_blocks(ctx, [imgs[0].pixels[..., 0]], 0, checks=[checks])[0])),
                         ops, PackedGeometry(SIZE, SIZE, 0, 0, 0, SIZE, SIZE))
        noise = ctx.decrypt_complex(ev.dump(c), SIZE * SIZE).reshape(tile).imag - expected(key, 1)[0]
        bound = binding.block_pass_log2(ops, tile)
        for attack, name, blocks in [("honest", imgs[0].name, None)] + cases:
            finished = ([round_to_uint8(reference(b.astype(np.float64))) for b in blocks] if blocks else [0, 0])
            caught = 0
            t = time.perf_counter()
            for _ in range(trials):
                want, other = expected(os.urandom(32))
                seen = (want if blocks is None else other) + noise
                caught += int(np.any(np.abs(seen - want) > binding.BLOCK_TOLERANCE))
            rows.append({"attack": attack, "preset": BLOCK_PRESET, "chain": specs[0], "image": name, "refused": None,
                         "sample": "blocks", "positions": SIZE * SIZE, "trials": trials,
                         "wrong_fraction": float(np.mean(finished[0] != finished[1])),
                         "formula": 0.0 if blocks is None else 1.0 - 2.0 ** bound, "detected": caught / trials,
                         "checked_positions": float(SIZE * SIZE),
                         "check_ms": 1e3 * (time.perf_counter() - t) / trials})
    return rows


#: The inference the ringers are measured on: the paper's task, logistic regression on exact integers.
INFER_PRESET = "bfv-4096"
INFER_OP = "infer:logreg,task=01"


def inference_rows(trials: int) -> list[dict]:
    """Lies about an inference, computed on real ciphertexts with the public keys (:mod:`hecore.infer.ringers`):
    a pixel returned for the scores (the op skipped), one quantisation unit added to every score (another
    constant), to ten digits' scores and to one digit's; and the honest answer.  Each is decrypted once and
    judged against ``trials`` fresh secret draws of ringers (the default probability, at least one a run), as
    decrypt --owner judges it; the formula is ``1 - (1 - P)^m`` for ``m`` wrong digits (1 when all are)."""
    from hecore.infer import encrypted, ringers
    from hecore.infer import models as infer
    from hecore.infer.arithmetic import arithmetic
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset
    from jobs.runtime.inferringers import RingerCheck

    ctx, _ = HEContext.generate(preset(INFER_PRESET), rotations=False)
    ev, ar = Evaluator(ctx), arithmetic(ctx.params)
    task = infer.digits_task("01")
    model = infer.train("logreg", task)
    q = ar.prepared(model)
    x, n, p = task.x_test, len(task.x_test), ringers.DEFAULT_PROBABILITY
    cts = [ev.load(c) for c in encrypted.encrypt_batch(ctx, x)]
    honest = encrypted.infer_encrypted(ev, model, cts, quantised=q)
    rng = np.random.default_rng(11)

    def plus_one_at(samples):
        v = np.zeros(ev.slots)
        v[samples] = 1.0
        return [ev.add_plain(c, ctx.encode_vector(v)) for c in honest]

    lies = [("honest", honest), ("skip the op (a pixel for the scores)", [cts[27]]),
            ("another constant (+1 unit, every score)", plus_one_at(np.arange(n))),
            ("an error on 10 digits' scores", plus_one_at(rng.choice(n, 10, replace=False))),
            ("an error on one digit's score", plus_one_at(rng.choice(n, 1)))]
    truth = ringers.reference(model, x, q)
    rows = []
    for attack, outs in lies:
        s = np.stack([ctx.decrypt_slots(ev.dump(c), n) for c in outs], axis=1) / q.divisor
        finished = ar.finished(s, model.binary)
        wrong = len(ringers.differences(finished, np.arange(n), truth, exact=True))
        caught, kept = 0, 0
        t = time.perf_counter()
        for _ in range(trials):
            chosen = ringers.draw(n, p)
            check = RingerCheck({"b": (chosen, x[chosen])}, {"b"}, p, model, q)
            caught += check.problem("b", 0, n, finished) is not None
            kept += len(chosen)
        rows.append({"attack": attack, "preset": INFER_PRESET, "chain": INFER_OP, "image": f"digits 01 ({n})",
                     "refused": None, "sample": "ringers", "positions": round(kept / trials), "trials": trials,
                     "wrong_fraction": wrong / n, "formula": 1.0 if wrong == n else 1.0 - ringers.escape(p, wrong),
                     "detected": caught / trials, "checked_positions": kept / trials,
                     "check_ms": 1e3 * (time.perf_counter() - t) / trials})
    return rows


def dropped(cluster: Cluster, img: Image, trials: int, seed: int) -> dict:
    """A ciphertext left out of the image's rows (a different one each trial): judged by the rule every job
    applies to an image's checked rows (tasks.summaries.image_problems: all its ciphertexts, none twice),
    which needs no sample -- the formula is certainty."""
    from tasks.summaries import ImageSummary, image_problems

    grid, tiles = cluster.encrypted[0]
    h, w, c = img.pixels.shape
    rng = np.random.default_rng(seed)
    caught, lost = 0, 0
    t = time.perf_counter()
    for _ in range(trials):
        gone = tiles[int(rng.integers(len(tiles)))]
        rows = len(tiles) - 1
        summary = ImageSummary("x", rows, rows, "packed", (h, h), (w, w), (c, c),
                               (grid.tile_h, grid.tile_h, grid.tile_w, grid.tile_w))
        problem = image_problems(summary)
        caught += problem is not None and problem[0] == "incomplete-image"
        lost += gone.h * gone.w
    return {"attack": "a dropped ciphertext", "preset": cluster.ctx.params.name, "chain": "|".join(cluster.chain),
            "image": img.name, "refused": None, "wrong_fraction": lost / trials / (h * w), "trials": trials,
            "detected": caught / trials, "formula": 1.0, "checked_positions": 0.0,
            "check_ms": 1e3 * (time.perf_counter() - t) / trials}


def _without_relinearisation(ctx, secret: bytes):
    """The same keys with the relinearisation key left out (what a chain without a product is given)."""
    from dataclasses import replace

    from hecore.seal.context import HEContext

    return HEContext.from_public(replace(ctx.public, relin_key=None), secret_key=secret)


def margin(rate: float, trials: int) -> float:
    """Three binomial standard deviations of a rate measured over ``trials``."""
    return 3.0 * math.sqrt(max(rate * (1.0 - rate), 1.0 / trials) / trials)


def run(args) -> int:
    from pathlib import Path

    from bench.rows import write_rows
    from bench.schemas import BENCH_INTEGRITY
    from bench.timing import load_1m
    from jobs.runtime import runinfo

    trials = args.repeats or (50 if args.quick else DEFAULT_TRIALS)
    run_id, started = runinfo.new_run_id(), runinfo.now()
    print(f"hepix bench {run_id}: lying clusters against the owner's spot checks, {trials} trials each")
    rows = measure(trials, args.preset or DEFAULT_PRESET) + block_rows(trials)
    common = {"run_id": run_id, "started": started, "machine": runinfo.machine(), "cores": runinfo.cores(),
              "git_commit": runinfo.git_commit(), "load_1m": load_1m()}
    path = write_rows(rows, BENCH_INTEGRITY, Path(args.out) / "bench_integrity", run_id, common)
    print(f"{'attack':46s} {'sample':>7s} {'k':>5s} {'wrong px':>9s} {'formula':>9s} {'measured':>9s}")
    for r in rows:
        if r.get("refused"):
            print(f"{r['attack']:46s} {r['sample']:>7s} {r['positions']:>5d}  refused: {r['refused']}")
            continue
        print(f"{r['attack']:46s} {r['sample']:>7s} {r['positions']:>5d} {r['wrong_fraction']:>9.4f} "
              f"{r['formula']:>9.4f} {r['detected']:>9.4f}")
    print(f"\nwrote {path}")
    return 0
