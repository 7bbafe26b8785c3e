"""The suites of ``hepix bench --suite NAME``: one module each, found through :data:`SUITES`.

A suite module holds its measurement code and its command-line side:

* ``OPTIONS`` -- the options of ``hepix bench`` it reads besides ``--out`` and ``--quick``
  (a subset of :data:`bench.command.SUITE_OPTIONS`); ``hepix bench`` refuses the others;
* ``run(args) -> int`` -- measure, write ``OUT/<table>/<run_id>.parquet`` through
  :func:`bench.rows.write_rows`, print what was measured.

Adding a suite is one module here and one line in :data:`SUITES`.  Modules are imported only
when their suite runs, so ``hepix`` starts without loading every benchmark.
"""
from __future__ import annotations

#: suite -> (module, one-line help).  ``all`` is the default suite.
SUITES: dict[str, tuple[str, str]] = {
    "all": ("bench.suites.all", "the papers' experiments (iCHEETAH Fig. 3, Table 2, Fig. 10; the TenSEAL "
                                "study's brightness +60; physical limits; packed) into one `bench` table "
                                "for `hepix report`"),
    "pixel": ("bench.suites.pixel", "every pixel-layout strategy against fresh encryption, one process"),
    "spark": ("bench.suites.spark", "the encrypt job against hecore alone, and local[1] against local[2]"),
    "cluster": ("bench.suites.cluster", ("the encrypt job on a standalone cluster on loopback, one "
                                         "one-core worker against two (DIV2K 2048x1024); with --hdfs the "
                                         "corpus pipeline on HDFS and one one-core worker, against one core")),
    "packed": ("bench.suites.packed", "the packed layout against TenSEAL (zstd as shipped, and "
                                      "uncompressed) and the pixel layout's full caching, one process"),
    "ops": ("bench.suites.ops", "iCHEETAH's 4.4 cases (mean filter, brightness, matching, watermark) "
                                "encrypted in both layouts, encrypt / op / decrypt timed apart"),
    "dft": ("bench.suites.dft", "the DFT-Hadamard-iDFT pipeline, end to end and pipeline only, against "
                                "Costache-Smart-Vivek, one core"),
    "tfhe": ("bench.suites.tfhe", "TFHE per pixel value on a measured crop (encrypt, brightness +60 "
                                  "saturating, threshold, min/max, a gamma table, decrypt), extrapolated to "
                                  "512x512 RGB, bytes per value, peak memory"),
    "lut": ("bench.suites.lut", ("exact 8-bit ops (threshold, saturating +60, a gamma table) on packed BFV "
                                 "(lut-16384) against TFHE and CKKS's sign on the same pixels, one run; a "
                                 "512x512 RGB image thresholded on BFV, measured")),
    "infer": ("bench.suites.infer", "encrypted logistic regression and TinyCNN on the digits, one sample "
                                    "alone and a batch, against Deonise et al., one core"),
    "corpus": ("bench.suites.corpus", "encrypt -> process brightness:60 -> decrypt of the DIV2K 2048x1024 "
                                      "images on local[2], per layout and encryption mode, against hecore "
                                      "doing the same in one process on one core"),
    "atrest": ("bench.suites.atrest", "bytes at rest and encryption speed of the secure paths (seeded, "
                                      "compact) against the pixel layout's full caching, one process"),
    "integrity": ("bench.suites.integrity", "lying clusters (the op skipped, another constant, ciphertexts "
                                            "swapped or replayed, 1 %% of values corrupted, a selector) against "
                                            "the owner's secret spot checks: measured detection beside the "
                                            "formula's, per lie"),
    "load": ("bench.suites.load", "many small images through packed `hepix encrypt` as a child process with a "
                                  "bounded driver heap: throughput and the process tree's peak memory (a "
                                  "summary, no table)"),
}
