"""``hepix bench --suite infer``: encrypted logistic regression and TinyCNN on the digits (hecore.infer.models)
against seed 004.

Each configuration trains its model (fixed seeds), encrypts the task's whole test set as one
batch (SIMD across samples; ``block`` < N/2: logistic regression with several pixel positions per
ciphertext), runs the model twice on it -- cold (the weights encoded on the way) and warm (reused,
as for every further batch) -- and decrypts.  Reported per configuration: samples/s of the
server's inference (warm) and end to end (encrypt + cold inference + decrypt, the seed's
per-sample measure), ms per sample amortised, ciphertext bytes per sample, and the accuracy of
the encrypted predictions next to the plaintext model's.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from hecore.context import HEContext
from hecore.evaluator import Evaluator
from hecore.infer import encrypted
from hecore.infer import models as infer
from hecore.params import preset

#: Seed 004, Tables 1-2 (0 vs 1, 108 test samples, N=8192): per-sample latency and throughput.
SEED = {
    ("logreg", "ckks"): {"samples_per_second": 80.87, "ms_per_sample": 12.37, "accuracy": 1.00, "bytes": 432469},
    ("logreg", "bfv"): {"samples_per_second": 391.64, "ms_per_sample": 2.55, "accuracy": 1.00, "bytes": 432468},
    ("tinycnn", "ckks"): {"samples_per_second": 0.49, "ms_per_sample": 2055.09, "accuracy": 0.49, "bytes": 432526},
}

#: (model, task, preset, packed)
DEFAULT = (
    ("logreg", "01", "paper-4096", True), ("logreg", "01", "paper-4096", False), ("logreg", "01", "bfv-4096", False),
    ("logreg", "all", "paper-4096", True), ("logreg", "all", "paper-4096", False), ("logreg", "all", "bfv-4096", False),
    ("tinycnn", "01", "match-8192", False), ("tinycnn", "01", "bfv-8192", False),
    ("tinycnn", "all", "match-8192", False),
)
QUICK = (("logreg", "01", "paper-4096", True), ("logreg", "01", "bfv-4096", False), ("tinycnn", "01", "match-8192", False))


@dataclass
class InferMeasurement:
    model: str
    task: str
    classes: int
    scheme: str
    preset: str
    ring: int
    layout: str                     # pixel-per-ciphertext | block-B
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
    accuracy_plain: float
    accuracy_encrypted: float
    agreement: float                # encrypted predictions equal to the plaintext model's
    max_abs_err: float              # decrypted head outputs vs the plaintext model's
    seed_samples_per_second: float | None
    seed_ms_per_sample: float | None
    seed_accuracy: float | None
    seed_bytes_per_sample: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def run_infer_bench(configs=DEFAULT, *, progress: Callable[[InferMeasurement], None] | None = None
                    ) -> list[InferMeasurement]:
    rows = []
    tasks, models, contexts = {}, {}, {}
    for model_name, task_name, name, packed in configs:
        task = tasks.setdefault(task_name, infer.digits_task(task_name))
        if (model_name, task_name) not in models:
            t0 = time.perf_counter()
            models[(model_name, task_name)] = (infer.train(model_name, task), time.perf_counter() - t0)
        model, train_s = models[(model_name, task_name)]
        if name not in contexts:
            t0 = time.perf_counter()
            ctx, _ = HEContext.generate(preset(name))
            contexts[name] = (ctx, Evaluator(ctx), time.perf_counter() - t0)
        ctx, ev, keygen = contexts[name]
        x, y = task.x_test, task.y_test
        n = len(y)
        block = encrypted.block_for(n, ev.slots, packed)
        t0 = time.perf_counter()
        data = encrypted.encrypt_batch(ctx, x, block=block)
        cts = [ev.load(c) for c in data]
        enc = time.perf_counter() - t0
        q = infer.quantise(model, ctx.params.plain_modulus) if ctx.params.is_integer else None
        model.__dict__.pop("_encoded", None)                     # cold: no encoded weights yet
        t0 = time.perf_counter()
        outs = encrypted.infer_encrypted(ev, model, cts, quantised=q, block=block)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        outs = encrypted.infer_encrypted(ev, model, cts, quantised=q, block=block)
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        s = encrypted.decrypt_scores(ctx, outs, n, binary=model.binary, quantised=q)
        dec = time.perf_counter() - t0
        ref = model.scores(x)
        ref = infer.sigmoid_poly(ref) if model.binary else ref
        plain_pred = infer.predictions(ref, model.binary)
        pred = infer.predictions(s, model.binary)
        total = enc + cold + dec
        seed = SEED.get((model_name, ctx.params.scheme)) if task_name == "01" else None
        nbytes = encrypted.batch_bytes(data)
        m = InferMeasurement(
            model=model_name, task=task_name, classes=task.n_classes, scheme=ctx.params.scheme, preset=name,
            ring=ctx.params.n, layout=("pixel-per-ciphertext" if block == ev.slots else f"block-{block}"),
            samples=n, ciphertexts=len(data), ciphertext_bytes=nbytes, bytes_per_sample=nbytes / n,
            train_seconds=train_s, keygen_seconds=keygen, encrypt_seconds=enc, infer_seconds=cold,
            infer_warm_seconds=warm, decrypt_seconds=dec, samples_per_second=n / warm,
            end_to_end_samples_per_second=n / total, ms_per_sample=1000 * total / n,
            accuracy_plain=float((plain_pred == y).mean()), accuracy_encrypted=float((pred == y).mean()),
            agreement=float((pred == plain_pred).mean()), max_abs_err=float(np.abs(s - ref).max()),
            seed_samples_per_second=seed and seed["samples_per_second"], seed_ms_per_sample=seed and seed["ms_per_sample"],
            seed_accuracy=seed and seed["accuracy"], seed_bytes_per_sample=seed and float(seed["bytes"]),
        )
        rows.append(m)
        if progress:
            progress(m)
    return rows
