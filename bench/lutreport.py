"""The ``hepix report`` section of ``hepix bench --suite lut`` (the ``bench_lut`` table): exact 8-bit ops on
packed BFV against TFHE and CKKS's sign, measured in one run, and the ratio to TFHE."""
from __future__ import annotations

import math

#: The ``bench_lut`` table's folder under a bench output directory.
BENCH_LUT = "bench_lut"


def _f(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _exact(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else ("yes" if v else "NO")


def lut_section(lut) -> list[str]:
    """Markdown lines: every op row of the run, the TFHE / BFV ratios, the measured 512x512 RGB image."""
    md = ["## 8-bit ops: BFV tables against TFHE and CKKS's sign (one run)", ""]
    if lut is None:
        return md + ["**not measured** here (`hepix bench --suite lut --out DIR` writes the bench_lut table).", ""]
    ops = lut[lut.stage.isin(["encrypt", "bfv-encrypt", "op", "bfv-lut", "ckks-sign"])]
    rows = ["| scheme | op | values | ms / value | bytes / value | exact | off by > 0.5 |", "|---|---|---|---|---|---|---|"]
    for _, r in ops.iterrows():
        scheme = {"op": "TFHE", "encrypt": f"TFHE encrypt ({r.variant})", "bfv-encrypt": "BFV encrypt",
                  "bfv-lut": "BFV lut-16384", "ckks-sign": f"CKKS sign {r.variant}"}[r.stage]
        rows.append(f"| {scheme} | {r.op} | {int(r.pixels)} | {_f(r.ms_per_pixel, '.4f')} | "
                    f"{_f(r.bytes_per_pixel, ',.1f')} | {_exact(r.exact)} | {_f(r.get('off_fraction'), '.1%')} |")
    md += [(f"On {lut.iloc[0].machine}, one core. Bytes per value at rest: the encrypt rows (what a run stores "
            "before processing) and, for BFV, the table's output."), ""] + rows + [""]
    tfhe = {r.op: r.seconds_per_pixel for _, r in lut[lut.stage == "op"].iterrows()}
    bfv = {r.op: r.seconds_per_pixel for _, r in lut[lut.stage == "bfv-lut"].iterrows()}
    for op in (o for o in tfhe if o in bfv):
        md.append(f"- {op}: BFV is **{tfhe[op] / bfv[op]:,.0f}x** TFHE's time per value.")
    for _, r in lut[lut.stage == "bfv-image"].iterrows():
        md.append(f"- One 512x512 RGB image, {r.op} on BFV, measured: {r.extrapolated_512x512x3_seconds:.0f} s "
                  f"(encrypt {r.encrypt_seconds:.1f} s, decrypt {r.decrypt_seconds:.1f} s), exact: {_exact(r.exact)}.")
    return md + [""]
