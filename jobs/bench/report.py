"""`hepix report`: the ``bench`` table of ``hepix bench`` as PNG plots and a Markdown report.

Every number under "ours" is read from the table (one run: the newest, or
``--run``); the seeds' figures are typed in below as *reference* figures with
their source, and each is set next to ours with the ratio.  A section whose
rows are missing says "not measured" instead of inventing a number.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.dataset as ds

#: The seeds' own figures (reference only, never used as a measurement), with their source.
SEED = {
    "speedup_max": (19.0, "iCHEETAH (seed 000) abstract: full caching up to 19x faster than fresh"),
    "speedup_avg": (17.57, "iCHEETAH Fig. 10: average over 200 USC-SIPI 256x256 images"),
    "mse": (0.476, "iCHEETAH Table 2 / Fig. 10: average MSE decrypted vs original"),
    "psnr": (51.30, "iCHEETAH Table 2 / Fig. 10: average PSNR (dB)"),
    "ckks_ssim": (0.9991, "seed 001 Table 4: CKKS, decrypted vs plaintext-brightened, 800 DIV2K 512x512"),
    "ckks_psnr": (48.7, "seed 001 Table 4: CKKS PSNR (dB)"),
    "bgv_ssim": (1.0000, "seed 001 Table 4: BGV SSIM"),
    "bgv_psnr": (59.9, "seed 001 Table 4: BGV PSNR (dB)"),
}
#: seed 001 Tables 2 and 3 (TenSEAL, OpenStack on a laptop; "1000 images", read here as per image):
#: encrypt / brightness / decrypt seconds and peak MB per stage.
SEED001_STAGES = {
    "bgv": ((55, 14, 45), (400, 420, 400)),
    "ckks": ((45, 12, 35), (350, 360, 340)),
    "tfhe": ((70, 100, 60), (500, 510, 500)),
}
TFHE_WHY = (
    "TFHE (seed 001's third scheme) is not measured: the only maintained Python TFHE here is "
    "`concrete-python`, whose wheel pins numpy < 2 and pulls torch, so it cannot share Pyfhel's "
    "environment (numpy >= 2.1); a separate environment means downloading torch and its CUDA "
    "dependencies (gigabytes) on a 2-core machine shared by other sessions, which does not fit "
    "`hepix bench --quick`'s 10-minute budget, so this bench does not create one. Seed 001's TFHE "
    "figures are listed for reference only.")

MIB = 2**20


def add_arguments(p):
    p.add_argument("--bench", required=True,
                   help="a `hepix bench` output directory (its bench/ table), or the table itself")
    p.add_argument("--out", required=True, help="report directory (report.md and PNG plots)")
    p.add_argument("--run", default=None, help="run_id to report (default: the newest in the table)")


def bench_path(path: str | Path) -> Path:
    """The ``bench`` table under ``path`` (a bench output directory, or the table folder/file)."""
    p = Path(path)
    if (p / "bench").is_dir():
        return p / "bench"
    if p.exists():
        return p
    raise SystemExit(f"hepix report: {p} does not exist; pass the --out directory of `hepix bench`")


def load_rows(path: str | Path, run: str | None = None):
    """The rows of one run as a pandas DataFrame (newest run unless ``run``)."""
    table = ds.dataset(bench_path(path), format="parquet").to_table()
    if table.num_rows == 0:
        raise SystemExit(f"hepix report: the bench table in {path} has no rows; run `hepix bench` first")
    df = table.to_pandas()
    runs = sorted(df["run_id"].unique())
    run = run or runs[-1]
    if run not in runs:
        raise SystemExit(f"hepix report: run {run!r} is not in {path}; runs there: {', '.join(runs)}")
    df = df[df["run_id"] == run].reset_index(drop=True)
    df["extrapolated"] = df["extrapolated"].astype("boolean").fillna(False).astype(bool)
    return df


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


# --- the plots -------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_fig3(df, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = df[df.experiment == "fig3"]
    for (layout, strategy), g in rows.groupby(["layout", "strategy"], sort=False):
        label = f"{layout} {strategy}"
        g = g.sort_values("size")
        meas, extra = g[~g.extrapolated], g[g.extrapolated]
        line, = ax.plot(meas["size"], meas["seconds"], marker="o", label=label)
        if len(extra):
            ax.plot([meas["size"].iloc[-1]] + list(extra["size"]), [meas["seconds"].iloc[-1]] + list(extra["seconds"]),
                    ls="--", marker="o", mfc="none", color=line.get_color())
    packed = df[(df.experiment == "packed") & df.implementation.str.startswith("hepix-packed")]
    for (impl, enc, pre), g in packed.groupby(["implementation", "encryption", "preset"]):
        ax.plot(g["size"].median(), g["seconds"].median(), marker="*", ms=10, ls="none",
                label=f"{impl} {enc} {pre} (packed suite)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("image side (pixels)")
    ax.set_ylabel("encryption time (s)")
    ax.set_title("Fig. 3: encryption time vs size (hollow, dashed: extrapolated)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    x = range(len(table))
    a1.plot(x, [r["fresh_s"] for r in table], marker="o", label="fresh")
    a1.plot(x, [r["full_s"] for r in table], marker="o", label="full (with cache set-up)")
    a1.set_yscale("log")
    a1.set_ylabel("est. time per 256x256 image (s)")
    a1.legend(fontsize=8)
    a1.set_title("Fig. 10: per image (measured on a centre crop, extrapolated to the image)")
    a2.bar(list(x), [r["mse"] for r in table])
    a2.set_ylabel("MSE (full)")
    a2.set_xticks(list(x), [r["image"].split("/")[-1].split("@")[0] for r in table], rotation=70, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_seed001(df, path: Path) -> None:
    plt = _plt()
    rows = df[df.experiment == "seed001"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
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
    for a, ylabel in ((a1, "seconds per image (mean)"), (a2, "peak RSS of the process (MiB)")):
        a.set_xticks([j + width for j in range(len(schemes))], [s.upper() for s in schemes])
        a.set_ylabel(ylabel)
        a.legend(fontsize=8)
    a1.set_title("seed 001: brightness +60, DIV2K at 512x512" if len(crops) else "seed 001: brightness +60")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the report --------------------------------------------------------------------------------

def render(df, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    first = df.iloc[0]
    exps = set(df.experiment)
    md: list[str] = []
    versions = json.loads(first.versions) if isinstance(first.versions, str) else {}
    load = df.load_1m.dropna()
    md += [f"# hepix reproduction report: run {first.run_id}", "",
           f"Measured {first.started} on {first.machine} ({first.cores} cores), "
           f"{'`hepix bench --quick`' if first.quick else '`hepix bench`'}, git {first.git_commit or '-'}; "
           f"versions: {', '.join(f'{k} {v}' for k, v in versions.items() if v)}.",
           f"1-minute load average during the run: {load.min():.2f} to {load.max():.2f} on {first.cores} cores "
           "(the machine is shared: absolute times are noisy; ratios within the run are what we claim).",
           "Seed figures are *reference* figures typed in from the papers (source given); every figure under "
           "\"ours\" is read from the bench table.", ""]

    fig3 = df[df.experiment == "fig3"]
    meas3 = fig3[~fig3.extrapolated.astype(bool)]
    full3 = meas3[(meas3.strategy == "full") & (meas3.layout == "pixel")]
    f10 = _fig10_table(df)
    seed = df[df.experiment == "seed001"]

    # headline
    sp_max = float(full3.speedup_vs_fresh.max()) if len(full3) else None
    sp_avg = sum(r["speedup"] for r in f10) / len(f10) if f10 else None
    mse = sum(r["mse"] for r in f10) / len(f10) if f10 else (_mean(full3.mse) if len(full3) else None)
    psnr_src = [r["psnr"] for r in f10] if f10 else list(full3.psnr)
    import pandas as pd
    psnr = _psnr_mean(pd.Series(psnr_src, dtype=float)) if psnr_src else None
    head = [
        ["full over fresh, best size (Fig. 3)", _f(SEED["speedup_max"][0], "g"), _f(sp_max, ".2f"), _ratio(sp_max, SEED["speedup_max"][0])],
        [f"full over fresh, average over {len(f10)} USC-SIPI 256x256 images (Fig. 10)", _f(SEED["speedup_avg"][0], "g"),
         _f(sp_avg, ".2f"), _ratio(sp_avg, SEED["speedup_avg"][0])],
        ["MSE decrypted vs original (full)", _f(SEED["mse"][0], "g"), _f(mse, ".4f"), _ratio(mse, SEED["mse"][0])],
        ["PSNR dB (full)", _f(SEED["psnr"][0], "g"), _f(psnr, ".2f"), _ratio(psnr, SEED["psnr"][0])],
    ]
    for scheme, key in (("ckks", "ckks"), ("bgv", "bgv")):
        g = seed[seed.scheme == scheme]
        ssim = _mean(g.ssim) if len(g) else None
        ps = _psnr_mean(g.psnr) if len(g) else None
        head.append([f"seed 001 {scheme.upper()} SSIM vs plaintext +60", _f(SEED[f'{key}_ssim'][0], "g"), _f(ssim, ".4f"),
                     _ratio(ssim, SEED[f'{key}_ssim'][0])])
        head.append([f"seed 001 {scheme.upper()} PSNR dB", _f(SEED[f'{key}_psnr'][0], "g"), _f(ps, ".2f"),
                     _ratio(ps, SEED[f'{key}_psnr'][0])])
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
    md += ["## Headline: the seeds' figures next to ours", "",
           _md(head, ["figure", "seed (reference)", "ours (measured)", "ours / seed"]), "",
           "Sources: " + "; ".join(f"{v[1]}" for v in SEED.values()) + ".",
           "PSNR is infinite when the decrypted image equals the reference exactly (MSE 0); "
           "the ratio is then not defined.", ""]

    # packed and secure
    md += ["## Packed layout and the secure (IND-CPA) figures", ""]
    if len(pk):
        full_pps = pk[pk.implementation == "hepix-pixel-full"].pixels_per_second
        full_pps = float(full_pps.median()) if len(full_pps) else None
        fresh_pps = meas3[(meas3.strategy == "fresh") & (meas3.layout == "pixel")].pixels_per_second
        fresh_pps = float(fresh_pps.iloc[-1]) if len(fresh_pps) else None
        rows = []
        for (impl, pre, enc, sec), g in pk.groupby(["implementation", "preset", "encryption", "security"], sort=False):
            pps = float(g.pixels.sum() / g.seconds.sum())
            rows.append([impl, pre, enc, sec, len(g), _f(pps, ",.0f"), _f(float(g.bytes.sum() / g.pixels.sum()), ".1f"),
                         _ratio(pps, full_pps), _ratio(pps, fresh_pps), _f(g.exact_fraction.min(), ".4f")])
        md += [_md(rows, ["implementation", "preset", "encryption", "security", "images", "values/s", "bytes/value",
                          "x pixel full (leaks)", "x pixel fresh (Fig. 3, largest size)", "exact (worst)"]), ""]
        variants = set(pk[pk.implementation.str.startswith("hepix-packed")].encryption)
        others = sorted(variants - {"public"})
        md.append("Packed encryption variants measured: " + ", ".join(sorted(variants)) + ". "
                  + ("Secure fast path (" + ", ".join(others) + "): measured above." if others else
                     "Secure symmetric fast path of the packed layout: **not measured** (no such rows in this "
                     "table; it lands from another branch and appears here once `hepix bench` measures it)."))
        md.append("")
    else:
        md += ["Packed suite: **not measured** in this run.", ""]

    # Fig 3
    if len(fig3):
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
        md += ["## iCHEETAH Fig. 3: encryption time against image size", "",
               "![Fig. 3](fig3.png)", "",
               f"Image {src}, centre-cropped and resized; preset {fig3.preset.iloc[0]}; seconds to encrypt all "
               "values (pixel layout: one ciphertext per value; caching strategies leak and are research modes). "
               "Rows marked *extrap.* were not run: their time is the per-value rate measured at "
               f"{int(meas3['size'].max())}x{int(meas3['size'].max())} times the values of the larger image.", "",
               _md(rows, ["size"] + [f"{l} {s}" for l, s in series]), ""]
        rows = [[int(r["size"]), r.strategy, _f(r.speedup_vs_fresh, ".2f")] for _, r in
                meas3[meas3.layout == "pixel"].iterrows() if r.strategy != "fresh"]
        md += ["Speedup over fresh (measured sizes):", "", _md(rows, ["size", "strategy", "x fresh"]), ""]

        # Table 2
        rows = []
        for _, r in meas3[(meas3.layout == "pixel") & (meas3.strategy == "full")].iterrows():
            rows.append([int(r["size"]), _f(r.mse, ".4f"), _f(r.psnr, ".2f"), _f(r.ssim, ".5f"), _f(r.max_abs_err, ".2e")])
        for _, r in meas3[meas3.layout == "packed"].iterrows():
            rows.append([f"{int(r['size'])} (packed)", _f(r.mse, ".4f"), _f(r.psnr, ".2f"), _f(r.ssim, ".5f"),
                         _f(r.max_abs_err, ".2e")])
        md += ["## iCHEETAH Table 2: MSE / PSNR per resolution (decrypted vs original)", "",
               f"Paper: average MSE {SEED['mse'][0]}, PSNR {SEED['psnr'][0]} dB.", "",
               _md(rows, ["size", "MSE", "PSNR dB", "SSIM", "max abs err (raw)"]), ""]
    else:
        md += ["## iCHEETAH Fig. 3 / Table 2", "", "**not measured** in this run.", ""]

    # Fig 10
    md += ["## iCHEETAH Fig. 10: fresh vs full over USC-SIPI images at 256x256", ""]
    if f10:
        plot_fig10(f10, out / "fig10.png")
        m = f10[0]["measured"]
        md += ["![Fig. 10](fig10.png)", "",
               f"{len(f10)} images (as many as the time budget allowed), each measured on a centre crop of {m} "
               f"values of its {f10[0]['pixels']}; image times are extrapolated from the measured rate (full adds its "
               "cache set-up once). MSE/PSNR are of the measured crop.", "",
               _md([[r["image"], _f(r["fresh_s"], ".1f"), _f(r["full_s"], ".2f"), _f(r["speedup"], ".2f"),
                     _f(r["speedup_with_setup"], ".2f"), _f(r["mse"], ".4f"), _f(r["psnr"], ".2f")] for r in f10],
                   ["image", "fresh s (est.)", "full s (est.)", "x fresh", "x fresh incl. set-up", "MSE", "PSNR dB"]),
               "", f"Average speedup {_f(sp_avg, '.2f')} (paper {SEED['speedup_avg'][0]}), average MSE "
               f"{_f(mse, '.4f')} (paper {SEED['mse'][0]}).", ""]
    else:
        md += ["**not measured** (no USC-SIPI images found).", ""]

    # seed 001
    md += ["## seed 001: brightness +60 on DIV2K (CKKS vs BFV/BGV, packed layout)", ""]
    if len(seed):
        plot_seed001(df, out / "seed001.png")
        rows = []
        for _, r in seed.iterrows():
            rows.append([r.image, r.scheme.upper(), r.preset, int(r.ciphertexts), _f(r.encrypt_seconds, ".2f"),
                         _f(r.op_seconds, ".2f"), _f(r.decrypt_seconds, ".2f"),
                         " / ".join(_f(r[c] / MIB if r[c] == r[c] and r[c] is not None else None, ",.0f")
                                    for c in ("driver_peak_rss_encrypt", "driver_peak_rss_op", "driver_peak_rss_decrypt")),
                         _f(r.ssim, ".5f"), _f(r.psnr, ".2f"), _f(r.exact_fraction, ".4f")])
        md += ["![seed 001](seed001.png)", "",
               "Times per stage in seconds; peak RSS per stage in MiB (encrypt / +60 / decrypt) of the process "
               "that ran it (each preset in its own process when `hepix bench` runs it: libraries, keys and "
               "images of that scheme only; no separate workers); SSIM/PSNR of the decrypted result against the plaintext "
               "+60 image (clipped to 0..255).", "",
               _md(rows, ["image", "scheme", "preset", "ciphertexts", "encrypt s", "+60 s", "decrypt s",
                          "peak MiB", "SSIM", "PSNR dB", "exact"]), ""]
        rows = []
        crops = seed[seed.image.str.endswith("@512")]
        for scheme in dict.fromkeys(seed.scheme):
            g = crops[crops.scheme == scheme]
            ref = SEED001_STAGES.get(scheme)
            if not len(g):
                continue
            ours = (g.encrypt_seconds.mean(), g.op_seconds.mean(), g.decrypt_seconds.mean())
            mem = tuple(g[c].max() / 1e6 for c in ("driver_peak_rss_encrypt", "driver_peak_rss_op", "driver_peak_rss_decrypt"))
            for i, stage in enumerate(("encrypt", "+60", "decrypt")):
                rows.append([scheme.upper(), stage, _f(ref[0][i] if ref else None), _f(ours[i], ".3f"),
                             _ratio(ours[i], ref[0][i] if ref else None), _f(ref[1][i] if ref else None),
                             _f(mem[i], ",.0f"), _ratio(mem[i], ref[1][i] if ref else None)])
        rows.append(["TFHE", "all", "70 / 100 / 60", "not measured", "-", "500 / 510 / 500", "not measured", "-"])
        md += ["Against seed 001's Tables 2 and 3 (512x512 RGB; the seed's seconds, stated \"for 1000 images\", are "
               "read as per image; our memory is the highest peak RSS of the preset's process over the 512x512 images, "
               "keys and libraries included, in MB of 10^6 bytes):", "",
               _md(rows, ["scheme", "stage", "seed s", "ours s", "ours / seed", "seed MB", "ours MB (peak)", "ours / seed"]),
               "", TFHE_WHY, ""]
    else:
        md += ["**not measured** (no DIV2K images found).", "", TFHE_WHY, ""]

    # seed 001 through the jobs on Spark: driver and worker memory
    sp = df[df.experiment == "spark"]
    md += ["## seed 001 on Spark: the jobs, with driver and worker memory per stage", ""]
    if len(sp):
        rows = []
        for _, r in sp.iterrows():
            for stage, col in (("encrypt", "encrypt_seconds"), ("process +60", "op_seconds"),
                               ("decrypt", "decrypt_seconds")):
                key = {"encrypt": "encrypt", "process +60": "op", "decrypt": "decrypt"}[stage]
                drv, wrk = r[f"driver_peak_rss_{key}"], r[f"workers_peak_rss_{key}"]
                rows.append([r.implementation, r.image, stage, _f(r[col], ".1f"),
                             _f(drv / MIB if drv == drv and drv is not None else None, ",.0f"),
                             _f(wrk / MIB if wrk == wrk and wrk is not None else None, ",.0f")])
        first_sp = sp.iloc[0]
        md += [f"`hepix encrypt`, `process --op brightness:60` and `decrypt` on {first_sp.image} "
               f"({first_sp.preset}); wall seconds per job, Spark start-up included; peak RSS sampled every 50 ms: "
               "driver = the hepix process plus Spark's JVM, workers = PySpark's Python workers together. "
               f"Decrypted vs plaintext +60: SSIM {_f(first_sp.ssim, '.5f')} (worst image), PSNR "
               f"{_f(first_sp.psnr, '.2f')} dB, exact {_f(first_sp.exact_fraction, '.4f')}.", "",
               _md(rows, ["run", "images", "stage", "seconds", "driver peak MiB", "workers peak MiB"]), ""]
    else:
        md += ["**not measured** in this run (no DIV2K images, or the Spark step was skipped).", ""]

    # limits
    md += ["## Physical limits", ""]
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

    md += ["## What is extrapolated or missing", "",
           f"- Extrapolated rows: {int(df.extrapolated.fillna(False).astype(bool).sum())} of {len(df)} "
           "(Fig. 3 sizes beyond the largest run, Fig. 10 whole-image times from centre crops).",
           "- TFHE: not measured (see seed 001).",
           f"- Experiments in this run: {', '.join(sorted(exps))}.", ""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path


def run(args) -> int:
    df = load_rows(args.bench, args.run)
    path = render(df, Path(args.out))
    pngs = sorted(p.name for p in Path(args.out).glob("*.png"))
    print(f"hepix report: run {df.run_id.iloc[0]}, {len(df)} rows -> {path} ({', '.join(pngs)})")
    return 0
