"""One sample per ciphertext (hecore.infer.coefficients, hecore.infer.windows) against the plaintext models,
and the layout chooser (hecore.infer.layouts)."""
from __future__ import annotations

import numpy as np
import pytest

from hecore.errors import InvalidParameters
from hecore.infer import coefficients, layouts, windows
from hecore.infer import models as infer
from hecore.seal.context import HEContext
from hecore.seal.embedding import coefficients as embedded_coefficients
from hecore.seal.embedding import evaluations
from hecore.seal.evaluator import Evaluator
from hecore.seal.params import preset

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def tasks():
    return {name: infer.digits_task(name) for name in infer.TASKS}


@pytest.fixture(scope="module")
def logregs(tasks):
    return {name: infer.train("logreg", t) for name, t in tasks.items()}


@pytest.fixture(scope="module")
def keys():
    made = {}

    def get(name, rotations=False):
        if name not in made:
            ctx, _ = HEContext.generate(preset(name), rotations=rotations)
            made[name] = (ctx, Evaluator(ctx))
        return made[name]
    return get


def _negacyclic(a, b, n):
    out = np.zeros(n)
    for i, ai in enumerate(a):
        for j, bj in enumerate(b):
            k = i + j
            out[k % n] += ai * bj * (-1 if k >= n else 1)
    return out


def test_embedding_is_evaluation_at_the_negacyclic_roots():
    rng = np.random.default_rng(1)
    n = 64
    a, b = rng.normal(size=20), rng.normal(size=50)
    # slot-wise products are products of polynomials modulo X^n + 1, wrap-around included
    assert np.allclose(evaluations(a, n) * evaluations(b, n), evaluations(_negacyclic(a, b, n), n))
    c = rng.normal(size=n)
    assert np.allclose(embedded_coefficients(evaluations(c, n), n, np.arange(n)), c)
    with pytest.raises(ValueError, match="positions"):
        embedded_coefficients(evaluations(c, n), n, [n])


@pytest.mark.parametrize("task_name", ["01", "all"])
def test_bfv_coefficients_give_the_quantised_model_exactly(tasks, logregs, keys, task_name):
    task, model = tasks[task_name], logregs[task_name]
    ctx, ev = keys("bfv-4096")
    x = task.x_test if task_name == "01" else task.x_test[:60]
    q = infer.quantise(model, ctx.params.plain_modulus)
    cts = [ev.load(c) for c in coefficients.encrypt_samples(ctx, x)]
    assert len(cts) == len(x)
    outs = coefficients.infer(ev, model, cts, quantised=q)
    raw = coefficients.decrypt_scores(ctx, outs, classes=model.w.shape[0], binary=False, quantised=None)
    w, b = q.layers[0]
    assert np.array_equal(raw, x @ w.T + b)            # integer arithmetic: exact
    s = coefficients.decrypt_scores(ctx, outs, classes=model.w.shape[0], binary=model.binary, quantised=q)
    plain = layouts.plain_outputs(model, x)
    assert np.array_equal(infer.predictions(s, model.binary), infer.predictions(plain, model.binary))


@pytest.mark.parametrize("task_name", ["01", "all"])
def test_ckks_coefficients_give_the_plaintext_scores(tasks, logregs, keys, task_name):
    task, model = tasks[task_name], logregs[task_name]
    ctx, ev = keys("paper-4096")
    x = task.x_test[:40]
    lay = layouts.Layout(layouts.COEFFICIENTS)
    outs = layouts.infer(ev, model, lay, [ev.load(c) for c in layouts.encrypt(ctx, lay, x, model)])
    s = layouts.decrypt(ctx, lay, outs, len(x), classes=model.w.shape[0], binary=model.binary)
    plain = layouts.plain_outputs(model, x)
    assert np.abs(s - plain).max() < 1e-4
    assert np.array_equal(infer.predictions(s, model.binary), infer.predictions(plain, model.binary))


def test_tinycnn_windows_give_the_plaintext_scores(tasks, keys):
    task = tasks["01"]
    model = infer.train("tinycnn", task, steps=200)
    ctx, ev = keys("match-8192", rotations=True)
    x = task.x_test[:6]
    lay = layouts.Layout(layouts.WINDOWS)
    cts = [ev.load(c) for c in layouts.encrypt(ctx, lay, x, model)]
    assert len(cts) == len(x)
    s = layouts.decrypt(ctx, lay, layouts.infer(ev, model, lay, cts), len(x), classes=1, binary=True)
    plain = layouts.plain_outputs(model, x)
    assert np.abs(s - plain).max() < 5e-3
    assert np.array_equal(infer.predictions(s, True), infer.predictions(plain, True))


def test_windows_layout_puts_each_window_in_the_tap_slots():
    x = np.arange(64) % 17
    v = windows.layout_sample(x, 4, 4096)
    for k in range(4):
        for p, pos in enumerate(windows.ORDER):
            for t in range(9):
                assert v[k * windows.KERNEL_STRIDE + t * windows.TAP_STRIDE + p] == x[infer.TAPS[pos][t]]
    # the four conv positions of each pool window are neighbours
    assert all(len(set(infer.POOL_OF[windows.ORDER[4 * j:4 * j + 4]])) == 1 for j in range(9))


@pytest.mark.parametrize("model_name,name,n,expected", [
    ("logreg", "bfv-4096", 1, "coefficients"), ("logreg", "paper-4096", 1, "coefficients"),
    ("logreg", "bfv-4096", 108, "pixel-per-ciphertext"), ("logreg", "paper-4096", 108, "block-128"),
    ("tinycnn", "match-8192", 1, "windows"), ("tinycnn", "match-8192", 108, "pixel-per-ciphertext"),
    ("tinycnn", "bfv-8192", 1, "pixel-per-ciphertext"),
])
def test_the_chooser_picks_the_cheapest_layout_that_runs(tasks, logregs, model_name, name, n, expected):
    model = logregs["01"] if model_name == "logreg" else infer.train("tinycnn", tasks["01"], steps=5)
    params = preset(name)
    chosen = layouts.choose(model, params, n)
    assert str(chosen.layout) == expected
    runnable = [e for e in layouts.estimates(model, params, n) if e.ms is not None]
    assert chosen.ms == min(e.ms for e in runnable)
    for e in layouts.estimates(model, params, n):
        assert (e.ms is None) == bool(e.why)


def test_one_sample_costs_grow_with_the_batch_until_the_batch_layout_wins(logregs):
    params = preset("bfv-4096")
    picks = [str(layouts.choose(logregs["01"], params, n).layout) for n in (1, 2, 8, 200, 2048)]
    assert picks[:3] == ["coefficients"] * 3 and picks[-1] == "pixel-per-ciphertext"


def test_refusals(logregs, keys, tasks):
    ctx, ev = keys("bfv-4096")
    with pytest.raises(InvalidParameters, match="windows layout serves TinyCNN"):
        layouts.check(layouts.Layout(layouts.WINDOWS), logregs["01"], ctx.params, 1)
    with pytest.raises(InvalidParameters, match="block layouts serve CKKS"):
        layouts.check(layouts.Layout(layouts.BLOCK, 1), logregs["01"], ctx.params, 1)
    with pytest.raises(ValueError, match="unknown layout 'rows'"):
        layouts.parse_layout("rows")
    assert layouts.parse_layout("block-64") == layouts.Layout(layouts.BLOCK, 64)
    with pytest.raises(ValueError, match="does not fit the plaintext modulus"):
        ctx.encode_coefficients(np.array([ctx.params.plain_modulus]))
    with pytest.raises(ValueError, match="pixels must be integers"):
        coefficients.encrypt_samples(ctx, np.full((1, 64), 17))
    cnn = infer.train("tinycnn", tasks["01"], steps=5)
    with pytest.raises(InvalidParameters, match="serves logistic regression"):
        coefficients.infer(ev, cnn, [])
