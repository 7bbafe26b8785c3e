"""Every reference figure of the papers hepix compares itself with, once, each with its source.

These are *reference* figures typed in from the papers, never measurements: the benchmarks set
them next to what they measure (with the ratio), and ``hepix report`` prints the source of each.
A figure is a :class:`Figure` (value, unit, paper, where in the paper, what it measures); the
papers are :class:`Paper` records cited by authors and title.

* :data:`ICHEETAH` -- Wang, Yang, Sun, Dai, Zhao: pixel-level CKKS with caching (Fig. 3,
  Table 2, Fig. 10, the four cases of §4.4).
* :data:`TENSEAL_STUDY` -- Saker, Eyvazov, Ali, Biró, Alwahab: BGV / CKKS / TFHE brightness +60
  on DIV2K in TenSEAL (Tables 2-4).
* :data:`DFT_PAPER` -- Costache, Smart, Vivek: DFT-Hadamard-iDFT latency in HElib BGV (Tables 2-3).
* :data:`ZINC` -- Zinc against SEAL CKKS, with Rache as the caching baseline (Tables 1-2).
* :data:`ML_PAPER` -- Deonise, Roanghes, Gheorghe, Simion, Mocanu, Turcanu, Pop: encrypted
  logistic regression and TinyCNN on scikit-learn's digits (Tables 1-2).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """A paper the benchmarks compare with, cited by ``short`` in tables and by :meth:`cite` in text."""

    short: str
    authors: str
    title: str

    def cite(self) -> str:
        return f'{self.authors}, "{self.title}"' if self.authors else f'"{self.title}"'


@dataclass(frozen=True)
class Figure:
    """One reference figure: ``value`` in ``unit`` as ``paper`` reports it at ``where``."""

    value: float
    unit: str
    paper: Paper
    where: str          # table, figure or section of the paper
    what: str           # what was measured, in the paper's terms

    @property
    def source(self) -> str:
        """``short, where: what`` -- the line a report prints under the figure."""
        return f"{self.paper.short}, {self.where}: {self.what}"


ICHEETAH = Paper("iCHEETAH (Wang et al.)", "C. Wang, S. Yang, X. Sun, J. Dai, D. Zhao",
                 "Enabling Practical and Privacy-Preserving Image Processing")
TENSEAL_STUDY = Paper("Saker et al. 2025", "H. Saker, F. Eyvazov, T. E. Ali, C. Biró, D. Z. Alwahab",
                      "Comparative analysis of homomorphic encryption schemes for encrypted image processing "
                      "in OpenStack using TenSEAL")
DFT_PAPER = Paper("Costache-Smart-Vivek", "A. Costache, N. P. Smart, S. Vivek",
                  "Faster Homomorphic Evaluation of Discrete Fourier Transforms")
ZINC = Paper("Zinc", "",                 # the paper names no authors
             "At Least Factor-of-Two Optimization for RWLE-Based Homomorphic Encryption")
ML_PAPER = Paper("Deonise et al.", "C.-A. Deonise, A.-M. Roanghes, L.-I. Gheorghe, E. Simion, B.-C. Mocanu, "
                 "D. Turcanu, F. Pop", "Homomorphic encryption for privacy-preserving machine learning inference")

PAPERS = (ICHEETAH, TENSEAL_STUDY, DFT_PAPER, ZINC, ML_PAPER)


# --- iCHEETAH (CKKS N=2^12, Q=2^109, one ciphertext per pixel value) -------------------------------

#: Abstract and §4.3.1 (Fig. 3): full caching against uncached pixel encryption, at the largest size.
FULL_SPEEDUP_MAX = Figure(19.0, "x", ICHEETAH, "abstract, §4.3.1 Fig. 3",
                          "full caching up to 19x faster than uncached pixel encryption")
#: §4.5, Fig. 10: the average over 200 USC-SIPI images at 256x256.
FULL_SPEEDUP_AVG = Figure(17.57, "x", ICHEETAH, "§4.5 Fig. 10",
                          "full caching over uncached, average over 200 USC-SIPI 256x256 images")
#: §4.3.2, Table 2: decrypted against original, averaged over the resolutions.
MSE = Figure(0.476, "", ICHEETAH, "§4.3.2 Table 2", "average MSE, decrypted vs original")
PSNR = Figure(51.30, "dB", ICHEETAH, "§4.3.2 Table 2", "average PSNR, decrypted vs original")
#: §4.5, Fig. 10: the average MSE difference over the USC-SIPI images.
FIG10_MSE = Figure(0.146, "", ICHEETAH, "§4.5 Fig. 10", "average MSE over the USC-SIPI images")


@dataclass(frozen=True)
class CaseFigures:
    """One case of iCHEETAH §4.4: encryption time uncached (``fresh``) and with full caching."""

    size: int
    fresh_seconds: Figure
    full_seconds: Figure


def _case(section: str, what: str, size: int, fresh: float, full: float) -> CaseFigures:
    return CaseFigures(size, Figure(fresh, "s", ICHEETAH, section, f"{what}: encryption without caching"),
                       Figure(full, "s", ICHEETAH, section, f"{what}: encryption with full caching"))


#: iCHEETAH §4.4 by the ops suite's case name.
ICHEETAH_CASES = {
    "meanfilter": _case("§4.4.1", "3x3 mean filter on 64x64", 64, 84.29, 4.65),
    "brightness": _case("§4.4.2", "brightness +50 on 256x256", 256, 16.96, 4.57),
    "matching": _case("§4.4.3", "L1 matching of three 128x128 images", 128, 826.19, 69.99),
    "watermark": _case("§4.4.4", "watermark +5.0 at one pixel", 64, 63.08, 4.8),
}
#: §4.4.3, Table 3: L1 distances between image 1, image 2 (image 1 brightened) and image 3.
MATCHING_DISTANCES = {
    "d12": Figure(11075.62, "", ICHEETAH, "§4.4.3 Table 3", "L1 distance image 1 - image 2"),
    "d13": Figure(21036.48, "", ICHEETAH, "§4.4.3 Table 3", "L1 distance image 1 - image 3"),
    "d23": Figure(15133.89, "", ICHEETAH, "§4.4.3 Table 3", "L1 distance image 2 - image 3"),
}


# --- the TenSEAL study (N=8192, [60, 40, 40, 60], 2^40; DIV2K at 512x512 RGB) ----------------------

@dataclass(frozen=True)
class StageFigures:
    """Tables 2 and 3: seconds and peak MB of encryption, brightness adjustment, decryption.  The
    paper states them "for 1000 images"; read here as per image (their size says so)."""

    encrypt_seconds: Figure
    adjust_seconds: Figure
    decrypt_seconds: Figure
    encrypt_mb: Figure
    adjust_mb: Figure
    decrypt_mb: Figure

    @property
    def seconds(self) -> tuple[float, float, float]:
        return (self.encrypt_seconds.value, self.adjust_seconds.value, self.decrypt_seconds.value)

    @property
    def mb(self) -> tuple[float, float, float]:
        return (self.encrypt_mb.value, self.adjust_mb.value, self.decrypt_mb.value)


def _stages(scheme: str, seconds: tuple, mb: tuple) -> StageFigures:
    stages = ("encryption", "brightness adjustment", "decryption")
    return StageFigures(*(Figure(v, "s", TENSEAL_STUDY, "Table 2", f"{scheme} {s} time")
                          for v, s in zip(seconds, stages)),
                        *(Figure(v, "MB", TENSEAL_STUDY, "Table 3", f"{scheme} {s} memory")
                          for v, s in zip(mb, stages)))


#: Tables 2 and 3 by scheme (lower case).
TENSEAL_STAGES = {
    "bgv": _stages("BGV", (55, 14, 45), (400, 420, 400)),
    "ckks": _stages("CKKS", (45, 12, 35), (350, 360, 340)),
    "tfhe": _stages("TFHE", (70, 100, 60), (500, 510, 500)),
}


@dataclass(frozen=True)
class QualityFigures:
    """Table 4: decrypted against the plaintext-brightened image, 800 DIV2K images at 512x512."""

    ssim: Figure
    psnr: Figure


TENSEAL_QUALITY = {
    "ckks": QualityFigures(Figure(0.9991, "", TENSEAL_STUDY, "Table 4", "CKKS SSIM vs plaintext +60"),
                           Figure(48.7, "dB", TENSEAL_STUDY, "Table 4", "CKKS PSNR vs plaintext +60")),
    "bgv": QualityFigures(Figure(1.0000, "", TENSEAL_STUDY, "Table 4", "BGV SSIM vs plaintext +60"),
                          Figure(59.9, "dB", TENSEAL_STUDY, "Table 4", "BGV PSNR vs plaintext +60")),
}


# --- Costache-Smart-Vivek (HElib BGV, one core; the time of the whole encrypted pipeline) ----------

#: Table 3 (Table 2 repeats N = 16, 64, 256): DFT-Hadamard-iDFT latency by N, at B = 1.
DFT_SECONDS = {n: Figure(s, "s", DFT_PAPER, "Table 3", "DFT-Hadamard-iDFT pipeline latency by N, HElib BGV, one core")
               for n, s in ((16, 0.46), (64, 2.08), (256, 9.43), (1024, 104.12), (4096, 464.44), (8192, 1026.1))}


# --- Zinc (SEAL CKKS; Rache as the caching baseline) -------------------------------------------------

#: Abstract: Zinc's encryption at least twice as fast as SEAL's CKKS.
ZINC_SPEEDUP = Figure(2.0, "x", ZINC, "abstract", "Zinc encryption at least 2x faster than SEAL CKKS")
#: Table 1: Rache encrypting 1,024 integers by the number of pivots (CKKS: about 57.6 ms).
RACHE_MS = {p: Figure(ms, "ms", ZINC, "Table 1", f"Rache, {p} pivots, 1,024 integers")
            for p, ms in ((4, 8.03), (8, 15.51), (16, 29.85), (32, 58.35), (64, 109.81))}
CKKS_1024_MS = Figure(57.6, "ms", ZINC, "Table 1", "SEAL CKKS encrypting 1,024 integers (average)")
#: Table 2: total encryption time over each data set.
ZINC_DATASETS = {
    (scheme, data): Figure(s, "s", ZINC, "Table 2", f"{scheme} total encryption time, {data}")
    for scheme, row in (("CKKS", (19.2, 62.2, 1983.6)), ("Rache", (18.4, 61.2, 1789.4)),
                        ("Zinc", (8.2, 24.8, 812.6)))
    for data, s in zip(("Covid-19", "Bitcoin", "hg38"), row)
}


# --- Deonise et al. (scikit-learn digits 8x8, 0 vs 1, 108 test samples, N=8192) --------------------

@dataclass(frozen=True)
class InferenceFigures:
    """One encrypted model of Tables 1-2: accuracy, ciphertext bytes, per-sample latency, throughput."""

    accuracy: Figure
    ciphertext_bytes: Figure
    latency_ms: Figure
    samples_per_second: Figure


def _inference(where: str, label: str, accuracy: float, nbytes: int, ms: float, per_s: float) -> InferenceFigures:
    return InferenceFigures(Figure(accuracy, "", ML_PAPER, where, f"{label} accuracy"),
                            Figure(nbytes, "B", ML_PAPER, where, f"{label} ciphertext size"),
                            Figure(ms, "ms", ML_PAPER, where, f"{label} latency per sample"),
                            Figure(per_s, "samples/s", ML_PAPER, where, f"{label} throughput"))


#: Tables 1-2 by (model, scheme), digits 0 vs 1.
INFERENCE = {
    ("logreg", "ckks"): _inference("Table 1", "CKKS logistic regression", 1.00, 432469, 12.37, 80.87),
    ("logreg", "bfv"): _inference("Table 1", "BFV logistic regression (quantised)", 1.00, 432468, 2.55, 391.64),
    ("tinycnn", "ckks"): _inference("Table 2", "CKKS TinyCNN", 0.49, 432526, 2055.09, 0.49),
}
#: The plaintext baselines of Tables 1-2.
PLAIN_INFERENCE = {
    "logreg": _inference("Table 1", "plaintext logistic regression", 1.00, 0, 0.05, 21532.57),
    "tinycnn": _inference("Table 2", "plaintext TinyCNN", 0.98, 0, 0.82, 1222.42),
}
