"""Encrypted inference on scikit-learn's bundled digits (Deonise et al., "Homomorphic encryption for privacy-preserving machine learning
inference"): logistic regression and TinyCNN,
in CKKS and in BFV (quantised), many samples per ciphertext.

Layout: SIMD across samples
---------------------------
A batch of up to ``N/2`` images of 8x8 pixels (values 0..16, integers) is encrypted as 64
ciphertexts, one per pixel position: slot ``j`` of ciphertext ``f`` is pixel ``f`` of sample ``j``.
Every layer of both models is then a per-slot computation:

* a linear layer (logistic regression, the convolution, the head) is a sum of ciphertexts times
  public scalars -- plaintext products, no rotation at all;
* the square activation is one ciphertext product per feature;
* the 2x2 average pool is additions (its 1/4 goes into the head's weights).

So the cost of a batch does not depend on how many samples it holds, and the per-sample cost
falls with the batch size (``N/2`` samples fill it).

Models (trained here with scikit-learn / NumPy, fixed seeds, nothing downloaded)
-------------------------------------------------------------------------------
``logreg``   :class:`sklearn.linear_model.LogisticRegression`.  Two classes (the paper's 0 vs 1):
             the probability by the paper's degree-1 sigmoid polynomial ``0.5 + 0.125 z``, folded
             into the weights (depth 1); ten classes: the ten scores, argmax after decryption
             (the sigmoid is monotone, it does not change the argmax).
``tinycnn``  3x3 valid convolution (``K`` kernels, 8x8 -> 6x6), square activation, 2x2 average
             pool (-> 3x3), linear head (logistic for two classes), trained by full-batch Adam
             in NumPy (scikit-learn has no convolution layer).  Depth 3 in CKKS.

BFV: inputs are integers already; weights are quantised to integers by a power of two chosen
so that the largest possible intermediate value stays below ``t/2`` (checked, never wrapped),
and the scores are divided back after decryption.  The sigmoid is applied after decryption
(BFV has no fractions); it does not change the decision.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hecore.errors import InvalidParameters

__all__ = ["MODELS", "TASKS", "DigitsTask", "digits_task", "LogReg", "TinyCNN", "train", "predictions",
           "sigmoid_poly", "model_depth", "quantise", "Quantised", "parse_infer", "InferOp"]

MODELS = ("logreg", "tinycnn")
TASKS = ("01", "all")
PIXELS = 64
PIXEL_MAX = 16          # sklearn digits: 0..16


def sigmoid_poly(z):
    """The paper's degree-1 sigmoid: ``0.5 + 0.125 z`` (the Taylor line at 0)."""
    return 0.5 + 0.125 * np.asarray(z)


@dataclass
class DigitsTask:
    classes: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def n_classes(self) -> int:
        return len(np.unique(self.y_train))


def digits_task(classes: str = "01", *, seed: int = 0, test_size: float = 0.3) -> DigitsTask:
    """scikit-learn's bundled digits (8x8, 0..16): ``"01"`` the paper's 0-vs-1 task, ``"all"`` ten classes.
    A stratified split with a fixed seed (the paper's 0-vs-1 test set has 108 samples)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if classes not in TASKS:
        raise InvalidParameters(f"digits task {classes!r} is not one of {TASKS}")
    d = load_digits()
    x, y = d.data.astype(np.float64), d.target.astype(np.int64)
    if classes == "01":
        keep = y < 2
        x, y = x[keep], y[keep]
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_size, random_state=seed, stratify=y)
    return DigitsTask(classes, xtr, ytr, xte, yte)


# --- models ----------------------------------------------------------------------------------

def _patches(x: np.ndarray) -> np.ndarray:
    """(n, 64) -> (n, 36, 9): the 3x3 windows of the valid convolution, row-major."""
    img = x.reshape(-1, 8, 8)
    out = np.empty((img.shape[0], 36, 9))
    for p, (r, c) in enumerate((r, c) for r in range(6) for c in range(6)):
        out[:, p, :] = img[:, r:r + 3, c:c + 3].reshape(-1, 9)
    return out


#: conv position (6x6, row-major) -> pooled position (3x3, row-major)
POOL_OF = np.array([(r // 2) * 3 + c // 2 for r in range(6) for c in range(6)])
#: conv position -> the 9 input pixels of its window (tap order of the kernel)
TAPS = np.array([[(r + dr) * 8 + c + dc for dr in range(3) for dc in range(3)] for r in range(6) for c in range(6)])


@dataclass
class LogReg:
    """Scores ``z = W x + b`` on raw pixels (0..16); binary: ``W`` has one row (class 1)."""

    w: np.ndarray
    b: np.ndarray
    binary: bool
    name: str = "logreg"

    def scores(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) @ self.w.T + self.b

    @property
    def depth(self) -> int:
        return 1

    def head(self):
        """The encrypted head: weights and bias, with the sigmoid line folded in when binary."""
        if self.binary:
            return self.w * 0.125, self.b * 0.125 + 0.5
        return self.w, self.b


@dataclass
class TinyCNN:
    """conv3x3 (``kernels`` (K, 9), ``conv_bias`` (K,)) on raw pixels -> square -> 2x2 sum pool ->
    head (``head_w`` (C, K*9) on the pool *sums*, i.e. the 1/4 is inside, ``head_b`` (C,))."""

    kernels: np.ndarray
    conv_bias: np.ndarray
    head_w: np.ndarray
    head_b: np.ndarray
    binary: bool
    name: str = "tinycnn"

    @property
    def depth(self) -> int:
        return 3

    def conv(self, x):
        return _patches(np.asarray(x, dtype=np.float64)) @ self.kernels.T + self.conv_bias   # (n, 36, K)

    def pooled(self, x):
        a = self.conv(x) ** 2
        k = self.kernels.shape[0]
        p = np.zeros((a.shape[0], 9, k))
        np.add.at(p, (slice(None), POOL_OF), a)
        return p.reshape(a.shape[0], 9 * k)      # feature index = pos * K + k

    def scores(self, x):
        return self.pooled(x) @ self.head_w.T + self.head_b

    def head(self):
        if self.binary:
            return self.head_w * 0.125, self.head_b * 0.125 + 0.5
        return self.head_w, self.head_b


def train(model: str, task: DigitsTask, *, seed: int = 0, kernels: int = 4, steps: int = 400):
    """Train ``model`` on ``task`` (deterministic), on one BLAS thread.

    The matrices are small (at most 1,257 x 64): OpenBLAS's threads cost more than they save on them.
    Measured on 2 cores, the ten-class logistic regression took 9 s of CPU (4.5 s wall) on two threads
    and 0.13 s on one; the TinyCNN 1.7 s and 1.5 s."""
    from threadpoolctl import threadpool_limits

    binary = task.n_classes == 2
    if model == "logreg":
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(max_iter=5000, C=0.1, random_state=seed)
        with threadpool_limits(limits=1):       # after the import: sklearn's SciPy brings a BLAS of its own
            clf.fit(task.x_train, task.y_train)
        return LogReg(clf.coef_.copy(), clf.intercept_.copy(), binary)
    if model == "tinycnn":
        with threadpool_limits(limits=1):
            return _train_cnn(task, seed=seed, k=kernels, steps=steps, binary=binary)
    raise InvalidParameters(f"unknown model {model!r}; expected one of {MODELS}")


def _train_cnn(task: DigitsTask, *, seed: int, k: int, steps: int, binary: bool) -> TinyCNN:
    """Full-batch Adam on the cross-entropy, in NumPy (inputs scaled to 0..1 while training)."""
    rng = np.random.default_rng(seed)
    x = task.x_train / PIXEL_MAX
    y = task.y_train
    n, c = len(y), (1 if binary else task.n_classes)
    pt = _patches(x)                                         # (n, 36, 9)
    params = {
        "ker": rng.normal(0, 0.4, (k, 9)), "bc": np.zeros(k),
        "wh": rng.normal(0, 0.1, (c, 9 * k)), "bh": np.zeros(c),
    }
    m = {kk: np.zeros_like(v) for kk, v in params.items()}
    v2 = {kk: np.zeros_like(v) for kk, v in params.items()}
    onehot = np.eye(task.n_classes)[y]
    lr, b1, b2 = 0.02, 0.9, 0.999
    for t in range(1, steps + 1):
        a = pt @ params["ker"].T + params["bc"]             # (n, 36, k)
        h = a * a
        p = np.zeros((n, 9, k))
        np.add.at(p, (slice(None), POOL_OF), h)
        pf = p.reshape(n, 9 * k) / 4
        z = pf @ params["wh"].T + params["bh"]
        if binary:
            prob = 1 / (1 + np.exp(-z[:, 0]))
            dz = ((prob - y) / n)[:, None]
        else:
            e = np.exp(z - z.max(1, keepdims=True))
            dz = (e / e.sum(1, keepdims=True) - onehot) / n
        g = {"wh": dz.T @ pf + 1e-4 * params["wh"], "bh": dz.sum(0)}
        dp = (dz @ params["wh"]).reshape(n, 9, k) / 4
        dh = dp[:, POOL_OF, :]                               # (n, 36, k)
        da = 2 * a * dh
        g["ker"] = np.einsum("npk,npt->kt", da, pt) + 1e-4 * params["ker"]
        g["bc"] = da.sum((0, 1))
        for kk in params:
            m[kk] = b1 * m[kk] + (1 - b1) * g[kk]
            v2[kk] = b2 * v2[kk] + (1 - b2) * g[kk] ** 2
            params[kk] -= lr * (m[kk] / (1 - b1 ** t)) / (np.sqrt(v2[kk] / (1 - b2 ** t)) + 1e-8)
    # back to raw pixels (0..16) and pool sums: a = ker.(x/16) + bc; head on sums/4
    return TinyCNN(params["ker"] / PIXEL_MAX, params["bc"], params["wh"] / 4, params["bh"], binary)


def predictions(scores: np.ndarray, binary: bool) -> np.ndarray:
    """Class predictions from decrypted head outputs (binary: the sigmoid line's output vs 0.5)."""
    s = np.asarray(scores)
    if binary:
        return (s[:, 0] >= 0.5).astype(np.int64)
    return np.argmax(s, axis=1)


def model_depth(model: str) -> int:
    return {"logreg": 1, "tinycnn": 3}[model]


# --- encrypted -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantised:
    """BFV/BGV integer weights of a model and the factor its scores are divided by."""

    layers: tuple
    divisor: float


def quantise(model, t: int) -> Quantised:
    """Integer weights for a plaintext modulus ``t``: the largest power-of-two scales for which
    every intermediate of the circuit on pixels 0..16 stays strictly within ``±(t-1)/2``."""
    half = (t - 1) // 2
    if isinstance(model, LogReg):
        w, b = model.w, model.b
        for bits in range(40, 0, -1):
            s = 2.0 ** bits
            wi, bi = np.rint(w * s), np.rint(b * s)
            if np.max(np.abs(wi).sum(1) * PIXEL_MAX + np.abs(bi)) < half:
                return Quantised(((wi, bi),), s)
        raise InvalidParameters(f"t = {t} is too small to quantise the logistic regression")
    # Weights of about 8 bits (|w| < 256) each: enough precision for the decision, and BFV's noise
    # grows with the size of the scalars (a larger scale would spend budget the square needs).
    top1 = 7 - int(np.floor(np.log2(np.max(np.abs(model.kernels)))))
    top2 = 7 - int(np.floor(np.log2(np.max(np.abs(model.head_w)))))
    for b1 in range(top1, top1 - 4, -1):          # the largest weight between 2^4 and 2^8
        s1 = 2.0 ** b1
        ker, bc = np.rint(model.kernels * s1), np.rint(model.conv_bias * s1)
        amax = np.abs(ker).sum(1) * PIXEL_MAX + np.abs(bc)          # per kernel
        if np.max(amax) >= half:
            continue
        pmax = 4 * amax ** 2                                          # a pool sum of squares
        if np.max(pmax) >= half:
            continue
        for b2 in range(top2, top2 - 4, -1):
            s2 = 2.0 ** b2
            wh = np.rint(model.head_w * s2)
            bh = np.rint(model.head_b * s1 * s1 * s2)
            zmax = np.abs(wh) @ np.tile(pmax, 9) + np.abs(bh)
            if np.max(zmax) < half:
                return Quantised(((ker, bc), (wh, bh)), s1 * s1 * s2)
        # else try a smaller s1
    raise InvalidParameters(f"t = {t} is too small to quantise the TinyCNN; use a preset with a larger t (bfv-8192)")


# --- the hepix op ----------------------------------------------------------------------------

@dataclass(frozen=True)
class InferOp:
    """``infer:MODEL[,task=01|all]``: ``MODEL`` (logreg | tinycnn) on a digits batch table."""

    model: str
    task: str = "01"

    needs_rotation = False
    post_scale_factor = 1.0
    halo = 0
    pointwise = False

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r} in infer:{self.model}; expected one of {MODELS}")
        if self.task not in TASKS:
            raise ValueError(f"unknown digits task {self.task!r}; expected one of {TASKS}")

    @property
    def depth(self) -> int:
        return model_depth(self.model)

    @property
    def spec(self) -> str:
        return f"infer:{self.model},task={self.task}"


def parse_infer(args: str) -> InferOp:
    parts = [p.strip() for p in args.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"bad infer spec 'infer:{args}': expected 'infer:MODEL[,task=01|all]' with MODEL in {MODELS}")
    opts = {}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if not sep or k.strip() != "task":
            raise ValueError(f"bad infer option {p!r}: expected task=01 or task=all")
        opts["task"] = v.strip()
    return InferOp(parts[0].lower(), opts.get("task", "01"))


