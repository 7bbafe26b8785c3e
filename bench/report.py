"""`hepix report`: the tables of ``hepix bench`` as PNG plots and a Markdown report.

Reads, under a ``hepix bench --out`` directory, the ``bench`` table of the default suite (one run:
the newest, or ``--run``) and, when present, the newest runs of ``bench_dft``, ``bench_infer`` and
``bench_tfhe``.
Every number under "ours" is read from those tables; the papers' figures come from
:mod:`bench.seeds` as *reference* figures, each with its source, set next to ours with the
ratio.  A section whose rows are missing says "not measured" instead of inventing a number.
Plots keep their legends outside the data and draw one panel per family of rows.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.dataset as ds

from bench import seeds

MIB = 2**20
#: The table names under a ``hepix bench --out`` directory that the report reads.
BENCH, BENCH_DFT, BENCH_INFER, BENCH_TFHE = "bench", "bench_dft", "bench_infer", "bench_tfhe"

TFHE_WHY = (
    "TFHE (the TenSEAL study's third scheme) runs in hepix through its own tfhe-rs extension (hepix_tfhe); "
    "its figures come from `hepix bench --suite tfhe` (the bench_tfhe table): not measured in this run "
    "unless that table is beside this one.")


def add_arguments(p):
    p.add_argument("--bench", required=True,
                   help="a `hepix bench` output directory (its bench/, bench_dft/, bench_infer/ tables), "
                        "or the bench table itself")
    p.add_argument("--out", required=True, help="report directory (report.md and PNG plots)")
    p.add_argument("--run", default=None, help="run_id of the bench table to report (default: the newest)")


def bench_path(path: str | Path) -> Path:
    """The ``bench`` table under ``path`` (a bench output directory, or the table folder/file)."""
    p = Path(path)
    if (p / BENCH).is_dir():
        return p / BENCH
    if p.exists():
        return p
    raise SystemExit(f"hepix report: {p} does not exist; pass the --out directory of `hepix bench`")


def _runs(path: Path, what: str, run: str | None):
    table = ds.dataset(path, format="parquet").to_table()
    if table.num_rows == 0:
        raise SystemExit(f"hepix report: the {what} table in {path} has no rows; run `hepix bench` first")
    df = table.to_pandas()
    runs = sorted(df["run_id"].unique())
    run = run or runs[-1]
    if run not in runs:
        raise SystemExit(f"hepix report: run {run!r} is not in {path}; runs there: {', '.join(runs)}")
    return df[df["run_id"] == run].reset_index(drop=True)


def load_rows(path: str | Path, run: str | None = None):
    """The rows of one run of the ``bench`` table as a pandas DataFrame (newest run unless ``run``)."""
    df = _runs(bench_path(path), "bench", run)
    df["extrapolated"] = df["extrapolated"].astype("boolean").fillna(False).astype(bool)
    return df


def load_suite(path: str | Path, name: str):
    """The newest run of table ``name`` (``bench_dft``, ``bench_infer``) under ``path``, or None."""
    folder = Path(path) / name
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return None
    return _runs(folder, name, None)


# --- small formatting helpers ----------------------------------------------------------------

def _f(v, spec=".3g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf (exact)"
    return format(v, spec)


def _md(rows: list[list], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _ratio(ours, theirs) -> str:
    if ours is None or theirs in (None, 0) or (isinstance(ours, float) and (math.isnan(ours) or math.isinf(ours))):
        return "-"
    if isinstance(theirs, float) and math.isnan(theirs):
        return "-"
    return f"{ours / theirs:.2f}"


def _mean(series):
    s = series.dropna()
    s = s[~s.isin([math.inf, -math.inf])]
    return float(s.mean()) if len(s) else None


def _psnr_mean(series):
    """Mean PSNR over images; an exact image's PSNR is infinite: reported as such when all are."""
    s = series.dropna()
    if len(s) and (s == math.inf).all():
        return math.inf
    return _mean(s)


def _mib(v) -> float | None:
    return None if v is None or v != v else v / MIB


def _sources(*figures: seeds.Figure) -> str:
    return "Sources: " + "; ".join(dict.fromkeys(f.source for f in figures)) + "."


def _papers(*papers: seeds.Paper) -> str:
    return "Papers: " + "; ".join(f"{p.short}: {p.cite()}" for p in papers) + "."


# --- the plots -------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _legend_right(ax, **kw) -> None:
    """The legend to the right of the axes, outside the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, **kw)


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _plt().close(fig)


def plot_fig3(df, path: Path) -> None:
    """Two panels: the pixel layout's strategies, and the packed layout (Fig. 3's row and the packed suite's)."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    rows = df[df.experiment == "fig3"]

    def line(ax, g, label):
        g = g.sort_values("size")
        meas, extra = g[~g.extrapolated], g[g.extrapolated]
        drawn, = ax.plot(meas["size"], meas["seconds"], marker="o", label=label)
        if len(extra):
            ax.plot([meas["size"].iloc[-1]] + list(extra["size"]), [meas["seconds"].iloc[-1]] + list(extra["seconds"]),
                    ls="--", marker="o", mfc="none", color=drawn.get_color())

    for strategy, g in rows[rows.layout == "pixel"].groupby("strategy", sort=False):
        line(a1, g, f"{strategy} ({g.security.iloc[0]})")
    a1.set_title("pixel layout: one ciphertext per value (iCHEETAH Fig. 3; hollow, dashed: extrapolated)")
    for _layout, g in rows[rows.layout == "packed"].groupby("layout", sort=False):
        line(a2, g, f"hepix-packed public {g.preset.iloc[0]} (this experiment)")
    packed = df[(df.experiment == "packed") & df.implementation.str.startswith("hepix-packed")]
    markers = "*sPDXv^<>"
    for i, ((impl, enc, ser, pre), g) in enumerate(packed.groupby(["implementation", "encryption", "serialization",
                                                                    "preset"], dropna=False)):
        a2.plot(g["size"].median(), g["seconds"].median(), marker=markers[i % len(markers)], ms=8, ls="none",
                label=f"{impl} {enc} {pre} (packed suite)")
    a2.set_title("packed layout: a tile channel per ciphertext")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylabel("encryption time (s)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            _legend_right(ax)
    a2.set_xlabel("image side (pixels)")
    _save(fig, path)


def _fig10_table(df):
    rows = df[df.experiment == "fig10"]
    out = []
    for image, g in rows.groupby("image", sort=False):
        fresh, full = g[g.strategy == "fresh"], g[g.strategy == "full"]
        if not len(fresh) or not len(full):
            continue
        fr, fu = fresh.iloc[0], full.iloc[0]
        t_fresh = fr.pixels / fr.pixels_per_second
        t_full = fu.pixels / fu.pixels_per_second + (fu.setup_seconds or 0.0)
        out.append({"image": image, "pixels": int(fr.pixels), "measured": int(fr.pixels_measured),
                    "fresh_s": t_fresh, "full_s": t_full, "speedup": fu.speedup_vs_fresh,
                    "speedup_with_setup": t_fresh / t_full, "mse": fu.mse, "psnr": fu.psnr,
                    "fresh_mse": fr.mse})
    return out


def plot_fig10(table: list[dict], path: Path) -> None:
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    x = range(len(table))
    a1.plot(x, [r["fresh_s"] for r in table], marker="o", label="fresh")
    a1.plot(x, [r["full_s"] for r in table], marker="o", label="full (with cache set-up)")
    a1.set_yscale("log")
    a1.set_ylabel("est. time per image (s)")
    a1.set_title("iCHEETAH Fig. 10: per image (measured on a centre crop, extrapolated to the image)")
    _legend_right(a1)
    mse = [r["mse"] for r in table]
    a2.bar(list(x), mse)
    a2.set_ylabel("MSE (full)")
    if not any(mse):
        a2.text(0.5, 0.5, "MSE 0 on every image: decrypted equal to the original after rounding",
                transform=a2.transAxes, ha="center", va="center")
    a2.set_xticks(list(x), [r["image"].split("/")[-1].split("@")[0] for r in table], rotation=70, fontsize=7)
    _save(fig, path)


def plot_brightness60(df, path: Path) -> None:
    """Two panels: seconds per stage, and peak memory per stage, by scheme."""
    plt = _plt()
    rows = df[df.experiment == "brightness60"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    schemes = list(dict.fromkeys(rows.scheme))
    stages = [("encrypt_seconds", "driver_peak_rss_encrypt", "encrypt"), ("op_seconds", "driver_peak_rss_op", "+60"),
              ("decrypt_seconds", "driver_peak_rss_decrypt", "decrypt")]
    crops = rows[rows.image.str.endswith("@512")]
    base = crops if len(crops) else rows
    width = 0.8 / max(len(stages), 1)
    for i, (tcol, mcol, label) in enumerate(stages):
        xs = [j + i * width for j in range(len(schemes))]
        a1.bar(xs, [base[base.scheme == s][tcol].mean() for s in schemes], width, label=label)
        a2.bar(xs, [base[base.scheme == s][mcol].max() / MIB for s in schemes], width, label=label)
    for a, ylabel, title in ((a1, "seconds per image (mean)", "time per stage"),
                             (a2, "peak RSS of the process (MiB)", "peak memory per stage")):
        a.set_xticks([j + width for j in range(len(schemes))], [s.upper() for s in schemes])
        a.set_ylabel(ylabel)
        a.set_title(title)
    _legend_right(a2, title="stage")
    fig.suptitle("brightness +60 as in the TenSEAL study" + (", DIV2K at 512x512" if len(crops) else ""))
    _save(fig, path)


def plot_limits(df, path: Path) -> None:
    plt = _plt()
    rows = df[(df.experiment == "limits") & (df.layout == "packed")]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = list(rows.preset)
    parts = [("encode_seconds", "encoding"), ("encrypt_seconds", "encryption"), ("serialize_seconds", "serialisation")]
    bottom = [0.0] * len(labels)
    for col, label in parts:
        share = list(rows[col] / (rows.encode_seconds + rows.encrypt_seconds + rows.serialize_seconds))
        ax.bar(labels, share, bottom=bottom, label=label)
        bottom = [b + s for b, s in zip(bottom, share)]
    ax.set_ylabel("share of the packed encryption time")
    ax.set_title("packed layout: where the time goes")
    _legend_right(ax)
    _save(fig, path)


def _packed_groups(pk):
    """(label, preset, security, values/s) per implementation, encryption and serialisation."""
    out = []
    for (impl, pre, enc, ser, sec), g in pk.groupby(["implementation", "preset", "encryption", "serialization",
                                                      "security"], sort=False, dropna=False):
        ser = ser if isinstance(ser, str) else "-"
        out.append((f"{impl} {enc} {ser}", pre, sec, float(g.pixels.sum() / g.seconds.sum())))
    return out


def plot_packed(pk, path: Path) -> None:
    """One panel per preset: values/s of every implementation (log scale); leaking rows in red."""
    plt = _plt()
    groups = _packed_groups(pk)
    presets = list(dict.fromkeys(g[1] for g in groups))
    heights = [sum(1 for g in groups if g[1] == p) for p in presets]
    fig, axes = plt.subplots(len(presets), 1, figsize=(9, 0.35 * sum(heights) + 1.2 * len(presets)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False, sharex=True)
    for ax, pre in zip(axes[:, 0], presets):
        mine = [g for g in groups if g[1] == pre]
        colours = ["tab:red" if g[2] == "leaks" else ("tab:grey" if g[0].startswith("tenseal") else "tab:blue")
                   for g in mine]
        ax.barh(range(len(mine)), [g[3] for g in mine], color=colours)
        ax.set_yticks(range(len(mine)), [g[0] for g in mine], fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(f"{pre}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("values per second, one thread (blue: hepix IND-CPA, grey: TenSEAL, red: leaks)")
    fig.suptitle("packed suite: encryption rate by implementation, encryption and serialisation")
    fig.tight_layout()
    _save(fig, path)


def plot_dft(dft, path: Path) -> None:
    """Two panels by N: end to end (best configuration) against the paper, and the pipeline alone."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    best = dft.groupby("n").agg(end_to_end=("end_to_end_seconds", "min"), cold=("pipeline_seconds", "min"),
                                warm=("warm_seconds", "min")).reset_index()
    paper = sorted((n, f.value) for n, f in seeds.DFT_SECONDS.items())
    a1.plot([n for n, _ in paper], [s for _, s in paper], marker="s", color="tab:grey",
            label=f"{seeds.DFT_PAPER.short}, Table 3")
    a1.plot(best.n, best.end_to_end, marker="o", label="hepix end to end (best configuration)")
    for stages, g in dft.groupby("stages", sort=False):
        a1.plot(g.n, g.end_to_end_seconds, ls="none", marker=".", alpha=0.6, label=f"hepix end to end, {stages}")
    a1.set_title("end to end (encryption and decryption included)")
    a2.plot(best.n, best.cold, marker="o", label="pipeline, cold (encoding included)")
    a2.plot(best.n, best.warm, marker="o", label="pipeline, warm (encoded diagonals reused)")
    a2.set_title("the pipeline alone (best configuration)")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (vector length)")
        ax.grid(alpha=0.3)
        _legend_right(ax)
    a1.set_ylabel("seconds, one core")
    fig.tight_layout()
    _save(fig, path)


def plot_infer(infer, path: Path) -> None:
    """Two panels: one sample's latency against the paper's, and a batch's throughput against the paper's."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 7))
    labels = [f"{r.model} {r.task} {r.preset} {'packed' if r.layout.startswith('block') else 'pixel per ciphertext'}"
              for r in infer.itertuples()]
    y = list(range(len(labels)))
    h = 0.4
    for ax, ours, paper, title, unit in (
            (a1, infer.single_sample_ms, infer.seed_ms_per_sample, "one sample alone: encrypt + infer + decrypt",
             "milliseconds per sample (log)"),
            (a2, infer.end_to_end_samples_per_second, infer.seed_samples_per_second,
             "a batch (the test set): end-to-end throughput", "samples per second (log)")):
        ax.barh([v - h / 2 for v in y], ours, h, label="hepix")
        ax.barh([v + h / 2 for v in y], paper, h, color="tab:grey",
                label=f"{seeds.ML_PAPER.short} (0 vs 1 only)")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel(unit)
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
        _legend_right(ax)
    fig.tight_layout()
    _save(fig, path)


# --- the report --------------------------------------------------------------------------------

def _headline(df, full3, f10, bright) -> list[list]:
    sp_max = float(full3.speedup_vs_fresh.max()) if len(full3) else None
    sp_avg = sum(r["speedup"] for r in f10) / len(f10) if f10 else None
    mse = sum(r["mse"] for r in f10) / len(f10) if f10 else (_mean(full3.mse) if len(full3) else None)
    psnr_src = [r["psnr"] for r in f10] if f10 else list(full3.psnr)
    import pandas as pd
    psnr = _psnr_mean(pd.Series(psnr_src, dtype=float)) if psnr_src else None
    head = [
        ["full over fresh, best size (iCHEETAH Fig. 3)", _f(seeds.FULL_SPEEDUP_MAX.value, "g"), _f(sp_max, ".2f"),
         _ratio(sp_max, seeds.FULL_SPEEDUP_MAX.value)],
        [f"full over fresh, average over {len(f10)} USC-SIPI 256x256 images (iCHEETAH Fig. 10)",
         _f(seeds.FULL_SPEEDUP_AVG.value, "g"), _f(sp_avg, ".2f"), _ratio(sp_avg, seeds.FULL_SPEEDUP_AVG.value)],
        ["MSE decrypted vs original (full; iCHEETAH Table 2)", _f(seeds.MSE.value, "g"), _f(mse, ".4f"),
         _ratio(mse, seeds.MSE.value)],
        ["PSNR dB (full; iCHEETAH Table 2)", _f(seeds.PSNR.value, "g"), _f(psnr, ".2f"), _ratio(psnr, seeds.PSNR.value)],
    ]
    for scheme in ("ckks", "bgv"):
        g = bright[bright.scheme == scheme]
        ref = seeds.TENSEAL_QUALITY[scheme]
        ssim = _mean(g.ssim) if len(g) else None
        ps = _psnr_mean(g.psnr) if len(g) else None
        head.append([f"TenSEAL study {scheme.upper()} SSIM vs plaintext +60", _f(ref.ssim.value, "g"), _f(ssim, ".4f"),
                     _ratio(ssim, ref.ssim.value)])
        head.append([f"TenSEAL study {scheme.upper()} PSNR dB", _f(ref.psnr.value, "g"), _f(ps, ".2f"),
                     _ratio(ps, ref.psnr.value)])
    pk = df[df.experiment == "packed"]
    full_ref = pk[pk.implementation == "hepix-pixel-full"].pixels_per_second
    full_ref = float(full_ref.median()) if len(full_ref) else None
    hp = pk[pk.implementation.str.startswith("hepix-packed")]
    for (impl, pre, enc), g in hp.groupby(["implementation", "preset", "encryption"], sort=False):
        pps = float(g.pixels.sum() / g.seconds.sum())
        head.append([f"ours only: {impl}, {enc} encryption, {pre} ({g.security.iloc[0]}), values/s "
                     f"(x our pixel full, which leaks)", "-", f"{pps:,.0f} (x{_ratio(pps, full_ref)})", "-"])
    if not len(hp):
        head.append(["ours only: packed layout", "-", "not measured", "-"])
    if not len(hp[hp.encryption != "public"]):
        head.append(["ours only: packed secure symmetric fast path", "-", "not measured (not in this table)", "-"])
    return head


def _packed_section(df, meas3, out: Path) -> list[str]:
    md = ["## Packed layout and the secure (IND-CPA) figures", ""]
    pk = df[df.experiment == "packed"]
    if not len(pk):
        return md + ["Packed suite: **not measured** in this run.", ""]
    plot_packed(pk, out / "packed.png")
    full_pps = pk[pk.implementation == "hepix-pixel-full"].pixels_per_second
    full_pps = float(full_pps.median()) if len(full_pps) else None
    fresh_pps = meas3[(meas3.strategy == "fresh") & (meas3.layout == "pixel")].pixels_per_second
    fresh_pps = float(fresh_pps.iloc[-1]) if len(fresh_pps) else None
    rows = []
    for (impl, pre, enc, ser, sec), g in pk.groupby(["implementation", "preset", "encryption", "serialization",
                                                     "security"], sort=False, dropna=False):
        pps = float(g.pixels.sum() / g.seconds.sum())
        rows.append([impl, pre, enc, ser if isinstance(ser, str) else "-", sec, len(g), _f(pps, ",.0f"),
                     _f(float(g.bytes.sum() / g.pixels.sum()), ".1f"), _ratio(pps, full_pps), _ratio(pps, fresh_pps),
                     _f(g.exact_fraction.min(), ".4f")])
    md += ["![packed](packed.png)", "",
           "Every row is the median of its repeats (the pixel `full` baseline included). TenSEAL is measured "
           "serialised as it ships (zstd) and uncompressed, as hepix stores its own ciphertexts (TenSEAL's "
           "encryption followed by SEAL's uncompressed serialisation of a ciphertext of the same parameters: "
           "TenSEAL's API only serialises with zstd), so that no ratio is an artefact of compression.", "",
           _md(rows, ["implementation", "preset", "encryption", "serialization", "security", "images", "values/s",
                      "bytes/value", "x pixel full (leaks)", "x pixel fresh (Fig. 3, largest size)", "exact (worst)"]), ""]
    ts = pk[pk.implementation == "tenseal"]
    if len(ts):
        rows = []
        same = {"public": "hepix-packed", "symmetric": "hepix-packed-symmetric"}
        for (pre, enc), g in ts.groupby(["preset", "encryption"], sort=False):
            rate = {s: float(h.pixels.sum() / h.seconds.sum()) for s, h in g.groupby("serialization")}
            mine = pk[(pk.implementation == same.get(enc)) & (pk.preset == pre)]
            ours = float(mine.pixels.sum() / mine.seconds.sum()) if len(mine) else None
            rows.append([pre, enc, _f(rate.get("zstd"), ",.0f"), _f(rate.get("none"), ",.0f"), same.get(enc, "-"),
                         _f(ours, ",.0f"), _ratio(ours, rate.get("zstd")), _ratio(ours, rate.get("none"))])
        md += ["hepix against TenSEAL by serialisation, same encryption (hepix uncompressed, real packing; "
               "hepix's symmetric ciphertexts are seeded, half the bytes):", "",
               _md(rows, ["preset", "encryption", "TenSEAL zstd values/s", "TenSEAL uncompressed values/s", "hepix",
                          "hepix values/s", "x TenSEAL zstd", "x TenSEAL uncompressed"]), ""]
    variants = set(pk[pk.implementation.str.startswith("hepix-packed")].encryption)
    others = sorted(variants - {"public"})
    md.append("Packed encryption variants measured: " + ", ".join(sorted(variants)) + ". "
              + ("Secure fast path (" + ", ".join(others) + "): measured above." if others else
                 "Secure symmetric fast path of the packed layout: **not measured** (no such rows in this "
                 "table; `hepix bench --suite packed` measures it where the native extension is installed)."))
    return md + [""]


def _fig3_section(df, fig3, meas3, out: Path) -> list[str]:
    if not len(fig3):
        return ["## iCHEETAH Fig. 3 / Table 2", "", "**not measured** in this run.", ""]
    plot_fig3(df, out / "fig3.png")
    sizes = sorted(fig3["size"].unique())
    series = list(dict.fromkeys(zip(fig3.layout, fig3.strategy)))
    rows = []
    for size in sizes:
        row = [int(size)]
        for layout, strategy in series:
            g = fig3[(fig3["size"] == size) & (fig3.layout == layout) & (fig3.strategy == strategy)]
            if not len(g):
                row.append("-")
                continue
            r = g.iloc[0]
            row.append(_f(r.seconds, ".3g") + (" (extrap.)" if r.extrapolated else ""))
        rows.append(row)
    src = fig3.image.iloc[0].split("@")[0]
    md = ["## iCHEETAH Fig. 3: encryption time against image size", "",
          "![Fig. 3](fig3.png)", "",
          f"Image {src}, centre-cropped and resized; preset {fig3.preset.iloc[0]}; seconds to encrypt all "
          "values (pixel layout: one ciphertext per value; caching strategies leak and are research modes). "
          "Rows marked *extrap.* were not run: their time is the per-value rate measured at "
          f"{int(meas3['size'].max())}x{int(meas3['size'].max())} times the values of the larger image.", "",
          _md(rows, ["size"] + [f"{l} {s}" for l, s in series]), ""]
    rows = [[int(r["size"]), r.strategy, _f(r.speedup_vs_fresh, ".2f")] for _, r in
            meas3[meas3.layout == "pixel"].iterrows() if r.strategy != "fresh"]
    md += ["Speedup over fresh (measured sizes):", "", _md(rows, ["size", "strategy", "x fresh"]), ""]
    rows = []
    for _, r in meas3[(meas3.layout == "pixel") & (meas3.strategy == "full")].iterrows():
        rows.append([int(r["size"]), _f(r.mse, ".4f"), _f(r.psnr, ".2f"), _f(r.ssim, ".5f"), _f(r.max_abs_err, ".2e")])
    for _, r in meas3[meas3.layout == "packed"].iterrows():
        rows.append([f"{int(r['size'])} (packed)", _f(r.mse, ".4f"), _f(r.psnr, ".2f"), _f(r.ssim, ".5f"),
                     _f(r.max_abs_err, ".2e")])
    md += ["## iCHEETAH Table 2: MSE / PSNR per resolution (decrypted vs original)", "",
           f"Paper: average MSE {seeds.MSE.value}, PSNR {seeds.PSNR.value} dB ({seeds.MSE.where}).", "",
           _md(rows, ["size", "MSE", "PSNR dB", "SSIM", "max abs err (raw)"]), ""]
    return md


def _fig10_section(f10, out: Path) -> list[str]:
    md = ["## iCHEETAH Fig. 10: fresh vs full over USC-SIPI images at 256x256", ""]
    if not f10:
        return md + ["**not measured** (no USC-SIPI images found).", ""]
    plot_fig10(f10, out / "fig10.png")
    sp_avg = sum(r["speedup"] for r in f10) / len(f10)
    mse = sum(r["mse"] for r in f10) / len(f10)
    m = f10[0]["measured"]
    return md + [
        "![Fig. 10](fig10.png)", "",
        f"{len(f10)} images (as many as the time budget allowed), each measured on a centre crop of {m} "
        f"values of its {f10[0]['pixels']}; image times are extrapolated from the measured rate (full adds its "
        "cache set-up once). MSE/PSNR are of the measured crop.", "",
        _md([[r["image"], _f(r["fresh_s"], ".1f"), _f(r["full_s"], ".2f"), _f(r["speedup"], ".2f"),
              _f(r["speedup_with_setup"], ".2f"), _f(r["mse"], ".4f"), _f(r["psnr"], ".2f")] for r in f10],
            ["image", "fresh s (est.)", "full s (est.)", "x fresh", "x fresh incl. set-up", "MSE", "PSNR dB"]),
        "", f"Average speedup {_f(sp_avg, '.2f')} (paper {seeds.FULL_SPEEDUP_AVG.value}), average MSE "
        f"{_f(mse, '.4f')} (paper {seeds.FIG10_MSE.value}, {seeds.FIG10_MSE.where}).", ""]


def tfhe_stages(tfhe) -> dict | None:
    """From the bench_tfhe rows: seconds per 512x512 RGB image (extrapolated from the measured crop) of
    encrypt (seeded), brightness +60 (saturating) and decrypt (of full ciphertexts, as a processed image's
    are), the peak RSS (MB of 10^6 bytes), bytes per pixel value, and the crop; None without the rows (or
    without one of the three stages)."""
    if tfhe is None:
        return None

    def one(stage, op, variant):
        g = tfhe[(tfhe.stage == stage) & (tfhe.op.fillna("") == op) & (tfhe.variant == variant)]
        return g.iloc[0] if len(g) else None

    # decrypt: of full ciphertexts, what a processed image is (a computed ciphertext has no seed)
    enc, op, dec = one("encrypt", "", "seeded"), one("op", "brightness:60", "nibble"), one("decrypt", "", "full")
    if enc is None or op is None or dec is None:
        return None
    return {"seconds": tuple(float(r.extrapolated_512x512x3_seconds) for r in (enc, op, dec)),
            "mb": tuple(float(r.peak_rss_mb) * MIB / 1e6 for r in (enc, op, dec)),
            "bytes_per_pixel": float(enc.bytes_per_pixel), "image": str(enc.image), "pixels": int(op.pixels),
            "exact": bool(op.exact) and bool(dec.exact)}


def _ckks_sign_lines(tfhe) -> list[str]:
    """The ``ckks-sign`` rows (CKKS's polynomial approximation of threshold:T) set against TFHE's exact
    threshold on the same op: cost per value and how far from the exact mask."""
    if "max_abs_err" not in tfhe.columns:
        return []
    sign = tfhe[tfhe.stage == "ckks-sign"]
    if not len(sign):
        return []
    md = ["CKKS's arithmetic stand-in for the exact threshold (a composite polynomial of the sign, Cheon, Kim, "
          "Kim, Lee, \"Efficient homomorphic comparison methods with optimal complexity\"; `variant` is "
          "steps@preset; the time is the polynomial on one packed ciphertext over the values in it, "
          "encryption not counted):", ""]
    for _, r in sign.iterrows():
        exact = tfhe[(tfhe.stage == "op") & (tfhe.op == r.op) & (tfhe.variant == "nibble")]
        vs = (f"; TFHE's exact {r.op} {_f(exact.iloc[0].ms_per_pixel, ',.2f')} ms/value, "
              f"{_ratio(exact.iloc[0].ms_per_pixel, r.ms_per_pixel)}x this") if len(exact) else ""
        md.append(f"- {r.op} by {r.variant} on {r.image} ({int(r.pixels)} values): {_f(r.ms_per_pixel, '.4f')} "
                  f"ms/value{vs}; max |error| {_f(r.max_abs_err, '.1f')} of 255, wrong side "
                  f"{r.wrong_side_fraction:.2%}, off by more than 0.5 {r.off_fraction:.2%} "
                  f"({r.near_off_fraction:.2%} of the pixels within {int(r.near_band)} of T); right to 0.5 only where "
                  f"|p - T + 1/2| > {_f(r.off_band, '.1f')}.")
    return md + [""]


def _tfhe_section(tfhe) -> list[str]:
    md = ["## TFHE (tfhe-rs through hepix_tfhe): per pixel value, extrapolated to 512x512 RGB", ""]
    if tfhe is None:
        return md + ["**not measured** here (`hepix bench --suite tfhe --out DIR` writes the bench_tfhe table).", ""]
    first = tfhe.iloc[0]
    key = tfhe[tfhe.stage == "keygen"]
    rows = []
    for _, r in tfhe[tfhe.stage != "keygen"].iterrows():
        rows.append([r.stage, r.op or "", r.variant, int(r.pixels), _f(r.ms_per_pixel, ".2f"),
                     _f(r.extrapolated_512x512x3_seconds, ",.0f"), _f(r.bytes_per_pixel, ",.0f"),
                     "-" if r.exact is None or (isinstance(r.exact, float) and math.isnan(r.exact))
                     else ("yes" if r.exact else "NO"), _f(r.peak_rss_mb, ",.0f")])
    md += [f"Measured on {first.image} ({int(tfhe[tfhe.stage == 'op'].pixels.max())} pixel values at most per "
           f"row; one thread) on {first.machine}; each figure is seconds per pixel value times 786,432 values "
           "(512x512x3): **extrapolated**, nothing that size was run. `exact`: decrypted equals the plaintext "
           "reference (brightness saturates at 0 and 255 after the op).", "",
           _md(rows, ["stage", "op", "variant", "values", "ms / value", "512x512x3 s (extrapolated)",
                      "bytes / value", "exact", "peak MiB"]), ""]
    md += _ckks_sign_lines(tfhe)
    ours, paper = tfhe_stages(tfhe), seeds.TENSEAL_STAGES["tfhe"]
    if ours is not None:
        rows = [[stage, _f(paper.seconds[i]), _f(ours["seconds"][i], ",.1f"), _ratio(ours["seconds"][i], paper.seconds[i]),
                 _f(paper.mb[i]), _f(ours["mb"][i], ",.0f"), _ratio(ours["mb"][i], paper.mb[i])]
                for i, stage in enumerate(("encrypt", "+60 (saturating)", "decrypt"))]
        md += ["Against the TenSEAL study's TFHE figures for brightness +60 on a 512x512 RGB image (ours "
               "extrapolated from the crop, one thread; memory: the peak RSS of the measuring process, keys "
               "included, MB of 10^6 bytes):", "",
               _md(rows, ["stage", "paper s", "ours s (extrapolated)", "ours / paper", "paper MB", "ours MB (peak)",
                          "ours / paper"]),
               "", f"Source: {seeds.TENSEAL_STUDY.short}, Table 2 (seconds per stage) and Table 3 (MB per stage).", ""]
    if len(key):
        k = key.iloc[0]
        md += [f"Keys: {_f(k.keygen_seconds, '.1f')} s; server key {_f(_mib(k.server_key_bytes), ',.0f')} MiB "
               f"({_f(_mib(k.compressed_server_key_bytes), ',.0f')} MiB seeded, "
               f"{_f(k.compressed_server_key_load_seconds, '.1f')} s to load against "
               f"{_f(k.server_key_load_seconds, '.1f')} s), client key {_f(k.client_key_bytes / 1e3, ',.0f')} kB.", ""]
    return md


def _brightness60_section(df, bright, out: Path, tfhe=None) -> list[str]:
    md = ["## The TenSEAL study: brightness +60 on DIV2K (CKKS vs BFV/BGV, packed layout)", ""]
    if not len(bright):
        return md + ["**not measured** (no DIV2K images found).", "",
                     TFHE_WHY if tfhe_stages(tfhe) is None else "TFHE: see its own section.", ""]
    plot_brightness60(df, out / "brightness60.png")
    rows = []
    for _, r in bright.iterrows():
        rows.append([r.image, r.scheme.upper(), r.preset, int(r.ciphertexts), _f(r.encrypt_seconds, ".2f"),
                     _f(r.op_seconds, ".2f"), _f(r.decrypt_seconds, ".2f"),
                     " / ".join(_f(_mib(r[c]), ",.0f")
                                for c in ("driver_peak_rss_encrypt", "driver_peak_rss_op", "driver_peak_rss_decrypt")),
                     _f(r.ssim, ".5f"), _f(r.psnr, ".2f"), _f(r.exact_fraction, ".4f")])
    md += ["![brightness +60](brightness60.png)", "",
           "Times per stage in seconds; peak RSS per stage in MiB (encrypt / +60 / decrypt) of the process "
           "that ran it (each preset in its own process when `hepix bench` runs it: libraries, keys and "
           "images of that scheme only; no separate workers); SSIM/PSNR of the decrypted result against the "
           "plaintext +60 image (clipped to 0..255).", "",
           _md(rows, ["image", "scheme", "preset", "ciphertexts", "encrypt s", "+60 s", "decrypt s",
                      "peak MiB", "SSIM", "PSNR dB", "exact"]), ""]
    rows = []
    crops = bright[bright.image.str.endswith("@512")]
    for scheme in dict.fromkeys(bright.scheme):
        g = crops[crops.scheme == scheme]
        ref = seeds.TENSEAL_STAGES.get(scheme)
        if not len(g):
            continue
        ours = (g.encrypt_seconds.mean(), g.op_seconds.mean(), g.decrypt_seconds.mean())
        mem = tuple(g[c].max() / 1e6 for c in ("driver_peak_rss_encrypt", "driver_peak_rss_op", "driver_peak_rss_decrypt"))
        for i, stage in enumerate(("encrypt", "+60", "decrypt")):
            rows.append([scheme.upper(), stage, _f(ref.seconds[i] if ref else None), _f(ours[i], ".3f"),
                         _ratio(ours[i], ref.seconds[i] if ref else None), _f(ref.mb[i] if ref else None),
                         _f(mem[i], ",.0f"), _ratio(mem[i], ref.mb[i] if ref else None)])
    paper = seeds.TENSEAL_STAGES["tfhe"]
    ours = tfhe_stages(tfhe)
    if ours is None:
        rows.append(["TFHE", "all", " / ".join(f"{v:g}" for v in paper.seconds), "not measured", "-",
                     " / ".join(f"{v:g}" for v in paper.mb), "not measured", "-"])
    else:
        for i, stage in enumerate(("encrypt", "+60", "decrypt")):
            rows.append(["TFHE", stage, _f(paper.seconds[i]), _f(ours["seconds"][i], ",.1f") + " (extrapolated)",
                         _ratio(ours["seconds"][i], paper.seconds[i]), _f(paper.mb[i]), _f(ours["mb"][i], ",.0f"),
                         _ratio(ours["mb"][i], paper.mb[i])])
    tfhe_note = (TFHE_WHY if ours is None else
                 f"TFHE rows: hepix's own measurement (`hepix bench --suite tfhe`) on {ours['image']}, one thread, "
                 f"per pixel value times 786,432 values (extrapolated, not run at that size); +60 saturates "
                 f"(exact against the plaintext: {'yes' if ours['exact'] else 'NO'}); "
                 f"{ours['bytes_per_pixel']:,.0f} bytes per encrypted pixel value (seeded); memory is the peak RSS of "
                 "the measuring process (keys included) at that stage.")
    return md + [
        "Against the TenSEAL study's Tables 2 and 3 (512x512 RGB; the paper's seconds, stated \"for 1000 images\", "
        "are read as per image; our memory is the highest peak RSS of the preset's process over the 512x512 "
        "images, keys and libraries included, in MB of 10^6 bytes):", "",
        _md(rows, ["scheme", "stage", "paper s", "ours s", "ours / paper", "paper MB", "ours MB (peak)",
                   "ours / paper"]),
        "", f"Sources: {seeds.TENSEAL_STUDY.short}, Table 2 (seconds per stage) and Table 3 (MB per stage).", "",
        tfhe_note, ""]


def _spark_section(df) -> list[str]:
    sp = df[df.experiment == "spark"]
    md = ["## The TenSEAL study's brightness +60 on Spark: the jobs, with driver and worker memory per stage", ""]
    if not len(sp):
        return md + ["**not measured** in this run (no DIV2K images, or the Spark step was skipped).", ""]
    rows = []
    for _, r in sp.iterrows():
        for stage, col, key in (("encrypt", "encrypt_seconds", "encrypt"), ("process +60", "op_seconds", "op"),
                                ("decrypt", "decrypt_seconds", "decrypt")):
            rows.append([r.implementation, r.image, stage, _f(r[col], ".1f"),
                         _f(_mib(r[f"driver_peak_rss_{key}"]), ",.0f"), _f(_mib(r[f"workers_peak_rss_{key}"]), ",.0f")])
    first = sp.iloc[0]
    return md + [
        f"`hepix encrypt`, `process --op brightness:60` and `decrypt` on {first.image} "
        f"({first.preset}); wall seconds per job, Spark start-up included; peak RSS sampled every 50 ms: "
        "driver = the hepix process plus Spark's JVM, workers = PySpark's Python workers together. "
        f"Decrypted vs plaintext +60: SSIM {_f(first.ssim, '.5f')} (worst image), PSNR "
        f"{_f(first.psnr, '.2f')} dB, exact {_f(first.exact_fraction, '.4f')}.", "",
        _md(rows, ["run", "images", "stage", "seconds", "driver peak MiB", "workers peak MiB"]), ""]


def _limits_section(df, meas3, out: Path) -> list[str]:
    md = ["## Physical limits", ""]
    lim = df[df.experiment == "limits"]
    mem = lim[lim.implementation == "numpy-memcpy"]
    if len(mem):
        bw = float(mem.bytes_per_second.iloc[0])
        rows = [["NumPy memcpy (256 MiB, best of 5)", _f(bw / 1e6, ",.0f"), "1.00"]]
        for _, r in meas3[(meas3.layout == "pixel")].iterrows():
            if r["size"] == meas3["size"].max():
                rows.append([f"pixel {r.strategy} @ {int(r['size'])}px (ciphertext bytes written)",
                             _f(r.bytes_per_second / 1e6, ",.0f"), _f(r.bytes_per_second / bw, ".3f")])
        md += [_md(rows, ["path", "MB/s", "share of memcpy"]), "",
               "A cached pixel encryption copies a ciphertext and adds a pool entry; memcpy is the floor of any "
               "such scheme on this machine.", ""]
    pl = lim[lim.layout == "packed"]
    if len(pl):
        plot_limits(df, out / "limits.png")
        rows = []
        for _, r in pl.iterrows():
            parts = r.encode_seconds + r.encrypt_seconds + r.serialize_seconds
            rows.append([r.preset, _f(r.seconds, ".3f"), f"{r.encode_seconds / parts:.0%}",
                         f"{r.encrypt_seconds / parts:.0%}", f"{r.serialize_seconds / parts:.0%}",
                         _f(r.bytes_per_second / 1e6, ",.0f")])
        md += ["![limits](limits.png)", "",
               f"Packed layout on {pl.image.iloc[0]}: share of encoding, encryption and serialisation "
               "(each timed apart per ciphertext).", "",
               _md(rows, ["preset", "pass s", "encoding", "encryption", "serialisation", "ciphertext MB/s"]), ""]
    if not len(lim):
        md += ["**not measured** in this run.", ""]
    return md


def _dft_section(dft, out: Path) -> list[str]:
    md = [f"## DFT-Hadamard-iDFT against {seeds.DFT_PAPER.short}", ""]
    if dft is None or not len(dft):
        return md + ["**not measured** here (`hepix bench --suite dft --out DIR` writes the bench_dft table).", ""]
    plot_dft(dft, out / "dft.png")
    rows = []
    for _, r in dft.iterrows():
        rows.append([int(r.n), r.preset, r.stages, f"{int(r.levels)}+{int(r.inverse_levels)}",
                     _f(r.keygen_seconds, ".2f"), _f(r.build_seconds + r.encrypt_seconds, ".3f"),
                     _f(r.pipeline_seconds, ".3f"), _f(r.warm_seconds, ".3f"), _f(r.decrypt_seconds, ".3f"),
                     _f(r.end_to_end_seconds, ".3f"), _f(r.seed_seconds, "g"), _f(r.speedup_vs_seed, ".3g"),
                     _f(r.max_abs_err, ".1e")])
    first = dft.iloc[0]
    return md + [
        "![DFT](dft.png)", "",
        f"Run {first.run_id} ({first.cores} core{'s' if first.cores != 1 else ''}). The paper's seconds are "
        "the whole encrypted computation, encryption and decryption included (HElib BGV, one core), so the ratio "
        "is taken from our end-to-end time: building and encoding the plaintext diagonals, encryption, the "
        "pipeline and decryption; key generation is apart. The pipeline alone (cold: encoding included; warm: "
        "encoded diagonals reused) is shown next to it.", "",
        _md(rows, ["N", "preset", "stages", "levels", "keygen s", "build + encrypt s", "pipeline cold s",
                   "pipeline warm s", "decrypt s", "end to end s", "paper s", "paper / end to end", "max err"]),
        "", _sources(*seeds.DFT_SECONDS.values()), ""]


def _infer_section(infer, out: Path) -> list[str]:
    md = [f"## Encrypted inference against {seeds.ML_PAPER.short}", ""]
    if infer is None or not len(infer):
        return md + ["**not measured** here (`hepix bench --suite infer --out DIR` writes the bench_infer table).", ""]
    plot_infer(infer, out / "infer.png")
    rows = []
    for _, r in infer.iterrows():
        one = getattr(r, "single_sample_layout", None) or r.layout
        rows.append([r.model, r.task, r.preset, r.layout, one, _f(r.single_sample_ms, ",.2f"),
                     _f(r.seed_ms_per_sample, "g"), _f(r.latency_vs_seed, ".3g"), int(r.samples),
                     _f(r.end_to_end_samples_per_second, ",.0f"), _f(r.seed_samples_per_second, "g"),
                     _f(r.throughput_vs_seed, ".3g"), _f(r.samples_per_second, ",.0f"),
                     _f(r.accuracy_encrypted, ".3f"), _f(r.seed_accuracy, ".2f")])
    first = infer.iloc[0]
    places = dict.fromkeys(f"{fig.latency_ms.where} ({fig.latency_ms.what.removesuffix(' latency per sample')})"
                           for fig in seeds.INFERENCE.values())
    return md + [
        "![inference](infer.png)", "",
        f"Run {first.run_id} ({first.cores} core{'s' if first.cores != 1 else ''}). The paper's figures are "
        "per sample: its latency is set against ONE sample alone, end to end (a batch of one encrypted, "
        "inferred with the weights already encoded, decrypted; median of the runs), and its throughput against "
        "our batch's end-to-end rate (the test set encrypted as one batch, cold inference, decrypted). "
        "Each is in the layout chosen for its number of samples (one sample: one ciphertext). "
        "The warm inference rate of the batch (the server's alone) is shown too; the paper measured the "
        "0-vs-1 task only.", "",
        _md(rows, ["model", "task", "preset", "batch layout", "one sample layout", "one sample ms", "paper ms", "paper / ours",
                   "batch", "batch e2e samples/s", "paper samples/s", "ours / paper", "batch warm infer/s",
                   "accuracy", "paper accuracy"]),
        "", f"Sources: {seeds.ML_PAPER.short}, {'; '.join(places)}: latency per sample (ms), throughput "
        "(samples/s), accuracy, ciphertext size.", ""]


def render(df, out: Path, *, dft=None, infer=None, tfhe=None, lut=None) -> Path:
    """Write ``out/report.md`` and its plots from the ``bench`` rows ``df`` (or None) and, when given,
    the ``bench_dft``, ``bench_infer`` and ``bench_tfhe`` rows."""
    out.mkdir(parents=True, exist_ok=True)
    md: list[str] = []
    if df is not None:
        first = df.iloc[0]
        versions = json.loads(first.versions) if isinstance(first.versions, str) else {}
        load = df.load_1m.dropna()
        md += [f"# hepix benchmark report: run {first.run_id}", "",
               f"Measured {first.started} on {first.machine} ({first.cores} cores), "
               f"{'`hepix bench --quick`' if first.quick else '`hepix bench`'}, git {first.git_commit or '-'}; "
               f"versions: {', '.join(f'{k} {v}' for k, v in versions.items() if v)}."]
        if len(load):
            md.append(f"1-minute load average during the run: {load.min():.2f} to {load.max():.2f} on {first.cores} "
                      "cores (the machine is shared: absolute times are noisy; ratios within the run are what we claim).")
    else:
        first = next(t for t in (dft, infer, tfhe, lut) if t is not None).iloc[0]
        md += [f"# hepix benchmark report: {first.machine}", "",
               "No `bench` table (the default suite) in this directory: only the suites below."]
    md += ["The papers' figures are *reference* figures typed in from the papers (source given with each); every "
           "figure under \"ours\" is read from the bench tables.",
           _papers(*seeds.PAPERS), ""]

    if df is not None:
        fig3 = df[df.experiment == "fig3"]
        meas3 = fig3[~fig3.extrapolated.astype(bool)]
        full3 = meas3[(meas3.strategy == "full") & (meas3.layout == "pixel")]
        f10 = _fig10_table(df)
        bright = df[df.experiment == "brightness60"]
        q = seeds.TENSEAL_QUALITY
        md += ["## Headline: the papers' figures next to ours", "",
               _md(_headline(df, full3, f10, bright), ["figure", "paper (reference)", "ours (measured)", "ours / paper"]),
               "", _sources(seeds.FULL_SPEEDUP_MAX, seeds.FULL_SPEEDUP_AVG, seeds.MSE, seeds.PSNR, q["ckks"].ssim,
                            q["ckks"].psnr, q["bgv"].ssim, q["bgv"].psnr),
               "PSNR is infinite when the decrypted image equals the reference exactly (MSE 0); "
               "the ratio is then not defined.", ""]
        md += _packed_section(df, meas3, out)
        md += _fig3_section(df, fig3, meas3, out)
        md += _fig10_section(f10, out)
        md += _brightness60_section(df, bright, out, tfhe)
        md += _spark_section(df)
        md += _limits_section(df, meas3, out)
    md += _dft_section(dft, out)
    md += _infer_section(infer, out)
    md += _tfhe_section(tfhe)
    if lut is not None:
        from bench.lutreport import lut_section

        md += lut_section(lut)

    md += ["## What is extrapolated or missing", ""]
    if df is not None:
        md += [f"- Extrapolated rows: {int(df.extrapolated.fillna(False).astype(bool).sum())} of {len(df)} "
               "(Fig. 3 sizes beyond the largest run, Fig. 10 whole-image times from centre crops).",
               ("- TFHE: not measured (see the TenSEAL study's section)." if tfhe is None else
                "- TFHE: whole-image figures are extrapolated from a measured crop (see its section)."),
               f"- Experiments in this run: {', '.join(sorted(set(df.experiment)))}."]
    md += [f"- Suites beside the bench table: "
           f"{', '.join(n for n, t in (('dft', dft), ('infer', infer), ('tfhe', tfhe)) if t is not None) or 'none'}.", ""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path


def _holds_bench_table(root: Path) -> bool:
    """``root`` is a bench output directory with a ``bench`` table, or that table (folder or file) itself."""
    return (root / BENCH).is_dir() or root.is_file() or (root.is_dir() and any(root.glob("*.parquet")))


def run(args) -> int:
    root = Path(args.bench)
    df = load_rows(root, args.run) if _holds_bench_table(root) else None
    dft, infer, tfhe = load_suite(root, BENCH_DFT), load_suite(root, BENCH_INFER), load_suite(root, BENCH_TFHE)
    from bench.lutreport import BENCH_LUT

    lut = load_suite(root, BENCH_LUT)
    if df is None and dft is None and infer is None and tfhe is None and lut is None:
        raise SystemExit(f"hepix report: no bench tables in {root}; run `hepix bench --out {root}` first")
    path = render(df, Path(args.out), dft=dft, infer=infer, tfhe=tfhe, lut=lut)
    pngs = sorted(p.name for p in Path(args.out).glob("*.png"))
    rows = sum(len(t) for t in (df, dft, infer, tfhe, lut) if t is not None)
    what = f"run {df.run_id.iloc[0]}" if df is not None else "suites"
    print(f"hepix report: {what}, {rows} rows -> {path} ({', '.join(pngs)})")
    return 0
