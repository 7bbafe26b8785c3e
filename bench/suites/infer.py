"""``hepix bench --suite infer``: encrypted logistic regression and TinyCNN on the digits
(:mod:`hecore.infer`) against Deonise et al., "Homomorphic encryption for privacy-preserving machine
learning inference" (Tables 1-2).

Each configuration trains its model (fixed seeds) and measures two things, in this one process
pinned to one core:

* **a batch**: the task's whole test set encrypted in the layout :func:`hecore.infer.layouts.choose`
  picks for its size (``auto``; or the layout the configuration names), the model run twice on
  it -- cold (the weights encoded on the way) and warm (reused, as for every further batch) -- and
  decrypted.  ``samples_per_second`` is the warm inference (the server's rate),
  ``end_to_end_samples_per_second`` encrypt + cold inference + decrypt over the batch; the latter
  is set against the paper's throughput (``throughput_vs_seed``).
* **one sample alone**: a batch of ONE sample in the layout chosen for one sample, encrypted,
  inferred (the weights already encoded, as a serving model keeps them) and decrypted, the median
  of several runs: ``single_sample_ms``.  The paper's figures are per-sample latencies, so this is
  the figure set against its latency (``latency_vs_seed``), not the batch's amortised
  ``ms_per_sample``.  The same sample in the batch's own layout (``single_sample_baseline_*``, a
  batch of one) is measured beside it, and ``single_sample_speedup`` is their ratio.

Also reported: ciphertext bytes per sample, and the accuracy of the encrypted predictions next to
the plaintext model's.  The paper measured the 0-vs-1 task; the ``all`` task has no paper figure.
Writes ``OUT/bench_infer/<run_id>.parquet`` (``bench.schemas.BENCH_INFER``).
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bench import seeds
from bench.contexts import Keys
from bench.rows import run_columns, write_rows
from bench.schemas import BENCH_INFER
from bench.timing import load_1m, median, pin_one_core
from hecore.infer import layouts
from hecore.infer import models as infer
from hecore.infer.arithmetic import arithmetic
from jobs.runtime import runinfo
from jobs.runtime.console import table

#: The options of ``hepix bench`` this suite reads besides --out and --quick: none (fixed configurations).
OPTIONS = frozenset()

AUTO = "auto"
PIXEL = layouts.PIXEL
#: (model, task, preset, layout): ``auto`` lets the chooser pick, for the batch and for one sample;
#: a layout's name forces it for both.
DEFAULT = (
    ("logreg", "01", "paper-4096", AUTO), ("logreg", "01", "paper-4096", PIXEL), ("logreg", "01", "bfv-4096", AUTO),
    ("logreg", "all", "paper-4096", AUTO), ("logreg", "all", "paper-4096", PIXEL), ("logreg", "all", "bfv-4096", AUTO),
    ("tinycnn", "01", "match-8192", AUTO), ("tinycnn", "01", "bfv-8192", AUTO),
    ("tinycnn", "all", "match-8192", AUTO),
)
QUICK = (("logreg", "01", "paper-4096", AUTO), ("logreg", "01", "bfv-4096", AUTO), ("tinycnn", "01", "match-8192", AUTO))
#: Timed runs of one sample alone (median reported), after one untimed run: at least this many, more
#: while they take less than SINGLE_BUDGET_S together, at most SINGLE_MAX.
SINGLE_REPEATS = 5
QUICK_SINGLE_REPEATS = 3
SINGLE_BUDGET_S = 1.0
SINGLE_MAX = 51


@dataclass
class InferMeasurement:
    model: str
    task: str
    classes: int
    scheme: str
    preset: str
    ring: int
    layout: str                     # the batch's: pixel-per-ciphertext | block-B | coefficients | windows
    layout_requested: str           # auto (the chooser's) | the layout the configuration forces
    samples: int
    ciphertexts: int
    ciphertext_bytes: int
    bytes_per_sample: float
    train_seconds: float
    keygen_seconds: float
    encrypt_seconds: float
    infer_seconds: float            # cold: weights encoded on the way
    infer_warm_seconds: float
    decrypt_seconds: float
    samples_per_second: float       # warm inference (the server's rate)
    end_to_end_samples_per_second: float   # encrypt + cold inference + decrypt
    ms_per_sample: float            # end to end, amortised over the batch
    single_sample_ms: float         # one sample alone: encrypt + inference + decrypt (median)
    single_sample_infer_ms: float   # its inference (median)
    single_sample_layout: str
    single_sample_repeats: int
    single_sample_baseline_layout: str    # the batch's layout with one sample
    single_sample_baseline_ms: float
    single_sample_speedup: float          # single_sample_baseline_ms / single_sample_ms
    accuracy_plain: float
    accuracy_encrypted: float
    agreement: float                # encrypted predictions equal to the plaintext model's
    max_abs_err: float              # decrypted head outputs vs the plaintext model's
    seed_samples_per_second: float | None
    seed_ms_per_sample: float | None
    seed_accuracy: float | None
    seed_bytes_per_sample: float | None
    latency_vs_seed: float | None = None        # seed_ms_per_sample / single_sample_ms
    throughput_vs_seed: float | None = None     # end_to_end_samples_per_second / seed_samples_per_second

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SingleSample:
    """One sample alone, end to end: milliseconds (median) and its layout."""

    ms: float
    infer_ms: float
    layout: str
    repeats: int


def single_sample(ctx, ev, model, x1: np.ndarray, layout, quantised, repeats: int,
                  budget_s: float = SINGLE_BUDGET_S) -> SingleSample:
    """A batch of one sample in ``layout``: encrypt, infer, decrypt; one untimed run (the weights get
    encoded for this layout, as a serving model keeps them), then at least ``repeats`` timed runs, more
    while they fit ``budget_s`` (at most SINGLE_MAX)."""
    totals, infers = [], []
    classes = (model.w if isinstance(model, infer.LogReg) else model.head_w).shape[0]
    spent, i = 0.0, 0
    while i <= repeats or (spent < budget_s and i <= SINGLE_MAX):
        t0 = time.perf_counter()
        cts = [ev.load(c) for c in layouts.encrypt(ctx, layout, x1, model)]
        t1 = time.perf_counter()
        outs = layouts.infer(ev, model, layout, cts, quantised=quantised)
        t2 = time.perf_counter()
        layouts.decrypt(ctx, layout, outs, 1, classes=classes, binary=model.binary, quantised=quantised)
        t3 = time.perf_counter()
        if i:
            totals.append(t3 - t0)
            infers.append(t2 - t1)
            spent += t3 - t0
        i += 1
    return SingleSample(1000 * median(totals), 1000 * median(infers), str(layout), len(totals))


def _layouts(model, params, n: int, requested: str):
    """(the batch's layout, one sample's layout, one sample's baseline: the batch's layout with one sample)."""
    if requested == AUTO:
        batch = layouts.choose(model, params, n).layout
        one = layouts.choose(model, params, 1).layout
    else:
        batch = one = layouts.parse_layout(requested)
    base = layouts.Layout(layouts.BLOCK, 1) if batch.name == layouts.BLOCK else batch
    if base.per_sample:
        base = layouts.Layout(PIXEL)
    if one.name == layouts.BLOCK:
        one = layouts.Layout(layouts.BLOCK, 1)
    return batch, one, base


def run_infer_bench(configs=DEFAULT, *, single_repeats: int = SINGLE_REPEATS,
                    progress: Callable[[InferMeasurement], None] | None = None) -> list[InferMeasurement]:
    """Every configuration of ``configs`` in order; see the module docstring."""
    rows = []
    tasks, models = {}, {}
    keys = Keys()
    for model_name, task_name, name, requested in configs:
        task = tasks.setdefault(task_name, infer.digits_task(task_name))
        if (model_name, task_name) not in models:
            t0 = time.perf_counter()
            models[(model_name, task_name)] = (infer.train(model_name, task), time.perf_counter() - t0)
        trained, train_s = models[(model_name, task_name)]
        model = copy.deepcopy(trained)          # cold: this copy has no encoded weights yet
        ctx, ev = keys.get(name)
        x, y = task.x_test, task.y_test
        n = len(y)
        classes = (model.w if isinstance(model, infer.LogReg) else model.head_w).shape[0]
        layout, one_layout, base_layout = _layouts(model, ctx.params, n, requested)
        layouts.check(layout, model, ctx.params, n)
        t0 = time.perf_counter()
        data = layouts.encrypt(ctx, layout, x, model)
        cts = [ev.load(c) for c in data]
        enc = time.perf_counter() - t0
        q = arithmetic(ctx.params).prepared(model)
        t0 = time.perf_counter()
        outs = layouts.infer(ev, model, layout, cts, quantised=q)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        outs = layouts.infer(ev, model, layout, cts, quantised=q)
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        s = layouts.decrypt(ctx, layout, outs, n, classes=classes, binary=model.binary, quantised=q)
        dec = time.perf_counter() - t0
        one = single_sample(ctx, ev, model, x[:1], one_layout, q, single_repeats)
        base = one if base_layout == one_layout else single_sample(ctx, ev, model, x[:1], base_layout, q,
                                                                   single_repeats)
        ref = layouts.plain_outputs(model, x)
        plain_pred = infer.predictions(ref, model.binary)
        pred = infer.predictions(s, model.binary)
        total = enc + cold + dec
        paper = seeds.INFERENCE.get((model_name, ctx.params.scheme)) if task_name == "01" else None
        nbytes = sum(len(c) for c in data)
        m = InferMeasurement(
            model=model_name, task=task_name, classes=task.n_classes, scheme=ctx.params.scheme, preset=name,
            ring=ctx.params.n, layout=str(layout), layout_requested=requested, samples=n, ciphertexts=len(data),
            ciphertext_bytes=nbytes, bytes_per_sample=nbytes / n, train_seconds=train_s,
            keygen_seconds=keys.keygen_seconds[name], encrypt_seconds=enc, infer_seconds=cold,
            infer_warm_seconds=warm, decrypt_seconds=dec, samples_per_second=n / warm,
            end_to_end_samples_per_second=n / total, ms_per_sample=1000 * total / n,
            single_sample_ms=one.ms, single_sample_infer_ms=one.infer_ms, single_sample_layout=one.layout,
            single_sample_repeats=one.repeats, single_sample_baseline_layout=base.layout,
            single_sample_baseline_ms=base.ms, single_sample_speedup=base.ms / one.ms,
            accuracy_plain=float((plain_pred == y).mean()), accuracy_encrypted=float((pred == y).mean()),
            agreement=float((pred == plain_pred).mean()), max_abs_err=float(np.abs(s - ref).max()),
            seed_samples_per_second=paper.samples_per_second.value if paper else None,
            seed_ms_per_sample=paper.latency_ms.value if paper else None,
            seed_accuracy=paper.accuracy.value if paper else None,
            seed_bytes_per_sample=float(paper.ciphertext_bytes.value) if paper else None,
        )
        if paper:
            m.latency_vs_seed = paper.latency_ms.value / m.single_sample_ms
            m.throughput_vs_seed = m.end_to_end_samples_per_second / paper.samples_per_second.value
        rows.append(m)
        if progress:
            progress(m)
    return rows


# --- the command line ------------------------------------------------------------------------------

def run(args) -> int:
    """``hepix bench --suite infer``: measure on one core, write ``OUT/bench_infer/<run_id>.parquet``, print."""
    cores = pin_one_core()
    run_id, started = runinfo.new_run_id(), runinfo.now()
    configs = QUICK if args.quick else DEFAULT
    print(f"hepix bench {run_id}: encrypted inference on scikit-learn's digits against {seeds.ML_PAPER.short}, "
          f"{cores} core{'s' if cores != 1 else ''}{' (quick)' if args.quick else ''}; load average {load_1m() or 0:.1f} "
          "(others' work on a shared machine slows every figure alike: compare ratios within a run)")

    def progress(m):
        print(f"  {m.model:<8} {m.task:<3} {m.preset:<10} {m.layout:<20} {m.samples:>4} samples "
              f"({'chosen' if m.layout_requested == AUTO else 'forced'}; one sample: {m.single_sample_layout})  "
              f"infer {m.samples_per_second:10,.0f}/s  end-to-end {m.end_to_end_samples_per_second:8,.0f}/s  "
              f"one sample {m.single_sample_ms:9.2f} ms  acc {m.accuracy_encrypted:.3f} (plain {m.accuracy_plain:.3f})",
              flush=True)

    measured = run_infer_bench(configs, single_repeats=QUICK_SINGLE_REPEATS if args.quick else SINGLE_REPEATS,
                               progress=progress)
    path = write_rows(measured, BENCH_INFER, Path(args.out) / "bench_infer", run_id, run_columns(run_id, started))
    rows = [m.as_dict() for m in measured]
    print()
    print("one sample alone (encrypt + infer + decrypt, median of the runs) in the layout chosen for one sample, "
          "against the paper's per-sample latency and the batch's layout with one sample:")
    print(table(rows, [
        ("model", "model", ""), ("task", "task", ""), ("preset", "preset", ""),
        ("single_sample_layout", "layout", ""), ("single_sample_ms", "ms", ",.2f"),
        ("single_sample_infer_ms", "infer ms", ",.2f"), ("single_sample_repeats", "runs", "d"),
        ("seed_ms_per_sample", "paper ms", ",.2f"), ("latency_vs_seed", "paper / ours", ".3g"),
        ("single_sample_baseline_layout", "batch's layout", ""), ("single_sample_baseline_ms", "its ms", ",.2f"),
        ("single_sample_speedup", "speed-up", ".3g"),
    ]))
    print()
    print("a batch (the test set) against the paper's throughput:")
    print(table(rows, [
        ("model", "model", ""), ("task", "task", ""), ("preset", "preset", ""), ("layout", "layout", ""),
        ("layout_requested", "by", ""), ("samples", "n", "d"), ("samples_per_second", "infer/s", ",.0f"),
        ("end_to_end_samples_per_second", "e2e/s", ",.0f"), ("seed_samples_per_second", "paper/s", ",.2f"),
        ("throughput_vs_seed", "ours / paper", ".3g"), ("ms_per_sample", "e2e ms/sample", ".3f"),
        ("accuracy_encrypted", "acc", ".3f"), ("accuracy_plain", "plain", ".3f"), ("seed_accuracy", "paper acc", ".2f"),
        ("bytes_per_sample", "B/sample", ",.0f"), ("seed_bytes_per_sample", "paper B", ",.0f"),
    ]))
    print(f"paper: {seeds.ML_PAPER.cite()}, Tables 1-2 (digits 0 vs 1, N=8192); load average at the end "
          f"{load_1m() or 0:.1f}")
    print(f"\nwrote {path}")
    return 0
