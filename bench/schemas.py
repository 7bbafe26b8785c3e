"""The tables ``hepix bench`` writes and ``hepix report`` reads: one row per measured configuration.

The product tables (what the jobs write) are in :mod:`schemas.tables`; these are the benchmarks'.
The suites that write them are in :mod:`bench.suites`; the papers' reference figures set next
to the measurements (``seed_*`` columns) come from :mod:`bench.seeds`.
"""
from __future__ import annotations

import pyarrow as pa

#: One row per measured configuration of the pixel-layout benchmark (``hepix bench --suite pixel``).
BENCH_PIXEL = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("hepix_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("n", pa.int32(), nullable=False),
    pa.field("qi_sizes", pa.list_(pa.int32())),
    pa.field("scale_bits", pa.int32()),
    pa.field("image", pa.string(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),
    pa.field("channels", pa.int32(), nullable=False),
    pa.field("pixels", pa.int64(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),
    pa.field("strategy_options", pa.string()),
    pa.field("security", pa.string(), nullable=False),
    pa.field("reuse_buffer", pa.bool_()),
    pa.field("setup_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("pixels_per_second", pa.float64()),
    pa.field("ciphertext_bytes", pa.int64()),
    pa.field("ciphertext_mb_per_second", pa.float64()),
    pa.field("speedup_vs_fresh", pa.float64()),
    pa.field("speedup_vs_fresh_with_setup", pa.float64()),
    pa.field("memcpy_mb_per_second", pa.float64()),
    pa.field("mse", pa.float64()),
    pa.field("psnr", pa.float64()),
    pa.field("ssim", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("exact_fraction", pa.float64()),
])


#: One row per configuration of the Spark overhead/scaling benchmark (``hepix bench --suite spark``).
BENCH_SPARK = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores_available", pa.int32()),
    pa.field("git_commit", pa.string()),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("images", pa.int32(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),
    pa.field("tile", pa.int32(), nullable=False),
    pa.field("config", pa.string(), nullable=False),       # hecore, one process | spark local[N]
    pa.field("cores", pa.int32(), nullable=False),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),     # decode + cache build + encrypt + write
    pa.field("wall_seconds", pa.float64()),                # including the Spark session start-up
    pa.field("ciphertexts_per_second", pa.float64(), nullable=False),
    pa.field("vs_hecore_alone", pa.float64(), nullable=False),
    pa.field("speedup_vs_local1", pa.float64()),
    pa.field("workers", pa.string()),                      # JSON: cache rebuilds, python workers, tasks
])


#: One row per configuration and repeat of ``hepix bench --suite cluster``: the encrypt job on a Spark
#: standalone cluster on this machine's loopback with one one-core worker, then with two.  ``seconds`` is what the
#: job's manifest times (decode + cache build + encrypt + write); ``startup_seconds`` the rest of the
#: submit's wall time (driver, executors unpacking the packed environment, shutdown);
#: ``cluster_start_seconds`` the master and workers coming up (for two workers: the added one).
BENCH_CLUSTER = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores_available", pa.int32()),
    pa.field("git_commit", pa.string()),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("images", pa.int32(), nullable=False),
    pa.field("corpus", pa.string(), nullable=False),        # DIV2K 2048x1024 | generated 2048x1024
    pa.field("size", pa.string(), nullable=False),          # WxH the job encrypted
    pa.field("config", pa.string(), nullable=False),        # standalone, N worker(s) of 1 core
    pa.field("repeat", pa.int32(), nullable=False),
    pa.field("workers", pa.int32(), nullable=False),
    pa.field("cores", pa.int32(), nullable=False),
    pa.field("partitions", pa.int32(), nullable=False),     # encrypt tasks (--partitions), the same in both
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("ciphertext_bytes", pa.int64(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("decode_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("wall_seconds", pa.float64(), nullable=False),
    pa.field("startup_seconds", pa.float64(), nullable=False),
    pa.field("cluster_start_seconds", pa.float64()),
    pa.field("ciphertexts_per_second", pa.float64(), nullable=False),
    pa.field("speedup_vs_one_worker", pa.float64()),
    pa.field("load_1m_before", pa.float64()),
    pa.field("load_1m_after", pa.float64()),
    pa.field("python_workers", pa.string()),                # JSON: the job's worker report
])


#: One row per (implementation, parameters, encryption type, image) of ``hepix bench --suite packed``:
#: hepix's packed layout against TenSEAL ``ckks_vector`` at equal parameters and against the pixel
#: layout's ``full`` caching.  ``pixels`` counts channel values (width x height x channels);
#: ``seconds`` is the median over ``repeats`` single-threaded passes over the image (every row, the
#: pixel ``full`` baseline included); the ``vs_*`` ratios are pixels/s over the reference's pixels/s on
#: the same image: TenSEAL at the same N serialised as it ships (zstd), or ``*_uncompressed`` without
#: compression (``serialization`` none, like hepix's ciphertexts).
BENCH_PACKED = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("hepix_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("implementation", pa.string(), nullable=False),   # hepix-packed | tenseal | hepix-pixel-full
    pa.field("library", pa.string()),                          # e.g. "TenSEAL 0.3.18"
    pa.field("preset", pa.string(), nullable=False),
    pa.field("n", pa.int32(), nullable=False),
    pa.field("qi_sizes", pa.list_(pa.int32())),
    pa.field("scale_bits", pa.int32()),
    pa.field("encryption", pa.string(), nullable=False),       # public | symmetric | cached
    pa.field("serialization", pa.string(), nullable=False),    # none | zstd
    pa.field("security", pa.string(), nullable=False),         # ind-cpa | leaks
    pa.field("image", pa.string(), nullable=False),
    pa.field("width", pa.int32(), nullable=False),
    pa.field("height", pa.int32(), nullable=False),
    pa.field("channels", pa.int32(), nullable=False),
    pa.field("pixels", pa.int64(), nullable=False),
    pa.field("tile_h", pa.int32()),
    pa.field("tile_w", pa.int32()),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("repeats", pa.int32(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("pixels_per_second", pa.float64(), nullable=False),
    pa.field("encrypt_seconds", pa.float64()),                 # encoding + encryption, measured apart
    pa.field("serialize_seconds", pa.float64()),               # serialization, measured apart
    pa.field("setup_seconds", pa.float64()),                   # keys, context, cache: not in seconds
    pa.field("bytes", pa.int64(), nullable=False),             # serialized ciphertext bytes
    pa.field("bytes_per_pixel", pa.float64(), nullable=False),
    pa.field("vs_tenseal_public", pa.float64()),
    pa.field("vs_tenseal_symmetric", pa.float64()),
    pa.field("vs_tenseal_public_uncompressed", pa.float64()),
    pa.field("vs_tenseal_symmetric_uncompressed", pa.float64()),
    pa.field("vs_pixel_full", pa.float64()),
    pa.field("exact_fraction", pa.float64()),                  # after decryption and rounding; null: not decrypted
    pa.field("max_abs_err", pa.float64()),
    pa.field("bytes_vs_tenseal_symmetric", pa.float64()),      # bytes_per_pixel over TenSEAL symmetric's (zstd), same N
])


#: One row per (case, layout, parameters, strategy) of ``hepix bench --suite ops``: the iCHEETAH §4.4 cases
#: (and the TenSEAL study's brightness +60, and a contrast stretch) encrypted, operated on and decrypted,
#: each stage timed apart (single runs).
#: ``pixels`` counts the channel values of one image (matching: of each of the three); ``ciphertexts``
#: and ``bytes`` the encrypted input(s).  Image operations: ``exact_fraction`` against
#: ``round_to_uint8(hecore.ops.spec.reference)``, ``max_abs_err`` of ``raw x post_scale`` before the finish
#: snaps and rounds; a watermark's ``detected`` (exactly its pixel, by bench.detect).  Matching: one row
#: per metric, ``d12 d13 d23`` decrypted, ``ref_d*`` exact in plaintext, ``distance_rel_err`` against what
#: the ciphertexts compute exactly (L2², or L1's polynomial stand-in), and whether d12 < d23 < d13 (Table 3).
BENCH_OPS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("hepix_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("case", pa.string(), nullable=False),            # meanfilter | brightness | matching | watermark | ...
    pa.field("section", pa.string(), nullable=False),         # 4.4.1 .. 4.4.4 (iCHEETAH) | Saker et al. 2025 §5.1 | hepix
    pa.field("ops", pa.string(), nullable=False),             # e.g. meanfilter:3, match:l1
    pa.field("layout", pa.string(), nullable=False),          # pixel | packed
    pa.field("scheme", pa.string(), nullable=False),          # ckks | bfv | bgv
    pa.field("preset", pa.string(), nullable=False),
    pa.field("n", pa.int32(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),        # fresh | full (pixel layout, leaks)
    pa.field("security", pa.string(), nullable=False),        # ind-cpa | leaks
    pa.field("image", pa.string(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),             # square side in pixels
    pa.field("channels", pa.int32(), nullable=False),
    pa.field("pixels", pa.int64(), nullable=False),
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("bytes", pa.int64(), nullable=False),
    pa.field("setup_seconds", pa.float64()),                  # strategy cache; key generation not included
    pa.field("encrypt_seconds", pa.float64(), nullable=False),
    pa.field("op_seconds", pa.float64(), nullable=False),
    pa.field("decrypt_seconds", pa.float64(), nullable=False),
    pa.field("exact_fraction", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("detected", pa.bool_()),
    pa.field("detected_pixels", pa.string()),                 # "(x,y) ..." found by detect_watermark
    pa.field("metric", pa.string()),                          # l2 (squared) | l1
    pa.field("d12", pa.float64()),
    pa.field("d13", pa.float64()),
    pa.field("d23", pa.float64()),
    pa.field("ref_d12", pa.float64()),
    pa.field("ref_d13", pa.float64()),
    pa.field("ref_d23", pa.float64()),
    pa.field("distance_rel_err", pa.float64()),
    pa.field("order_as_paper", pa.bool_()),                   # decrypted: d12 < d23 < d13
    pa.field("ref_order_as_paper", pa.bool_()),               # plaintext (exact) distances
])


#: One row per measured configuration of ``hepix bench`` (the default suite, ``--suite all``), read by
#: ``hepix report`` and notebooks/results.ipynb.  ``experiment``: fig3 (iCHEETAH Fig. 3 / Table 2),
#: fig10, brightness60 (the TenSEAL study's brightness +60), limits (memcpy; packed encode/encrypt/
#: serialise split), packed (``bench.suites.packed``), spark (brightness +60 through the jobs on
#: local Spark); see ``bench.suites.paper``.  Times are seconds measured on
#: ``pixels_measured`` channel values; when that is fewer than ``pixels`` (the whole image) or the row
#: is an extrapolation to a size not run, ``extrapolated`` is true and only ``pixels_per_second`` /
#: ``seconds`` (= pixels / pixels_per_second) describe the whole image.  ``*_peak_rss_<stage>``: bytes;
#: driver = this process (plus Spark's JVM), workers = other child processes (null: none).
BENCH = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("quick", pa.bool_()),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("load_1m", pa.float64()),                     # 1-minute load average when the row started
    pa.field("hepix_version", pa.string()),
    pa.field("versions", pa.string()),                     # JSON: Pyfhel, numpy, pyspark, ...
    pa.field("git_commit", pa.string()),
    pa.field("experiment", pa.string(), nullable=False),
    pa.field("layout", pa.string()),                       # pixel | packed | none
    pa.field("implementation", pa.string()),               # hepix-pixel | hepix-packed | tenseal | numpy-memcpy | ...
    pa.field("library", pa.string()),
    pa.field("scheme", pa.string()),
    pa.field("preset", pa.string()),
    pa.field("n", pa.int32()),
    pa.field("qi_sizes", pa.list_(pa.int32())),
    pa.field("scale_bits", pa.int32()),
    pa.field("strategy", pa.string()),
    pa.field("strategy_options", pa.string()),
    pa.field("encryption", pa.string()),                   # public | symmetric | cached | ...
    pa.field("serialization", pa.string()),                # none | zstd
    pa.field("security", pa.string()),                     # ind-cpa | leaks
    pa.field("image", pa.string()),
    pa.field("size", pa.int32()),
    pa.field("width", pa.int32()),
    pa.field("height", pa.int32()),
    pa.field("channels", pa.int32()),
    pa.field("pixels", pa.int64()),
    pa.field("pixels_measured", pa.int64()),
    pa.field("extrapolated", pa.bool_()),
    pa.field("ops", pa.string()),
    pa.field("repeats", pa.int32()),
    pa.field("setup_seconds", pa.float64()),
    pa.field("encode_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("serialize_seconds", pa.float64()),
    pa.field("op_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("seconds", pa.float64()),
    pa.field("pixels_per_second", pa.float64()),
    pa.field("ciphertexts", pa.int64()),
    pa.field("bytes", pa.int64()),
    pa.field("bytes_per_second", pa.float64()),
    pa.field("memcpy_bytes_per_second", pa.float64()),
    pa.field("speedup_vs_fresh", pa.float64()),
    pa.field("driver_peak_rss_encrypt", pa.int64()),
    pa.field("driver_peak_rss_op", pa.int64()),
    pa.field("driver_peak_rss_decrypt", pa.int64()),
    pa.field("workers_peak_rss_encrypt", pa.int64()),
    pa.field("workers_peak_rss_op", pa.int64()),
    pa.field("workers_peak_rss_decrypt", pa.int64()),
    pa.field("reference", pa.string()),                    # original | plaintext-processed
    pa.field("mse", pa.float64()),
    pa.field("psnr", pa.float64()),
    pa.field("ssim", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("exact_fraction", pa.float64()),
    pa.field("extra", pa.string()),                        # JSON: experiment-specific values
])


_RUN_FIELDS = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("hepix_version", pa.string()),
    pa.field("git_commit", pa.string()),
]


#: One row per configuration of ``hepix bench --suite dft`` (bench.suites.dft): the DFT-Hadamard-iDFT
#: low-pass pipeline on N pixel values, cold (diagonals encoded on the way) and warm, errors against
#: NumPy's FFT pipeline.  ``seed_seconds``: Costache-Smart-Vivek's latency for the same N (Table 3,
#: encryption and decryption included), so ``speedup_vs_seed`` = seed_seconds / ``end_to_end_seconds``
#: (build + encode the diagonals + encrypt + cold pipeline + decrypt; key generation apart).
BENCH_DFT = pa.schema(_RUN_FIELDS + [
    pa.field("n", pa.int32(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("ring", pa.int32(), nullable=False),
    pa.field("stages", pa.string(), nullable=False),           # three | fold | circulant
    pa.field("levels", pa.int32(), nullable=False),            # per forward transform
    pa.field("inverse_levels", pa.int32(), nullable=False),    # per inverse transform
    pa.field("depth", pa.int32(), nullable=False),
    pa.field("rotations", pa.int32(), nullable=False),
    pa.field("plaintext_products", pa.int32(), nullable=False),
    pa.field("cutoff", pa.float64(), nullable=False),
    pa.field("keygen_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("build_seconds", pa.float64()),
    pa.field("encode_seconds", pa.float64()),
    pa.field("pipeline_seconds", pa.float64(), nullable=False),
    pa.field("warm_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("end_to_end_seconds", pa.float64(), nullable=False),
    pa.field("max_abs_err", pa.float64(), nullable=False),
    pa.field("rel_err", pa.float64(), nullable=False),
    pa.field("seed_seconds", pa.float64()),
    pa.field("speedup_vs_seed", pa.float64()),
    pa.field("ciphertext_bytes", pa.int64()),
])


#: One row per configuration of ``hepix bench --suite infer`` (bench.suites.infer): a model on the
#: digits test set as one encrypted batch, and on one sample alone; Deonise et al.'s figures alongside
#: (``seed_*``, 0-vs-1 task only): their per-sample latency against ``single_sample_ms``
#: (``latency_vs_seed`` = seed / ours), their throughput against the batch's end-to-end rate
#: (``throughput_vs_seed`` = ours / seed).
BENCH_INFER = pa.schema(_RUN_FIELDS + [
    pa.field("model", pa.string(), nullable=False),            # logreg | tinycnn
    pa.field("task", pa.string(), nullable=False),             # 01 | all
    pa.field("classes", pa.int32(), nullable=False),
    pa.field("scheme", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("ring", pa.int32(), nullable=False),
    pa.field("layout", pa.string(), nullable=False),           # the batch's: pixel-per-ciphertext | block-B | coefficients | windows
    pa.field("layout_requested", pa.string()),                 # auto (hecore.infer.layouts.choose) | a forced layout
    pa.field("samples", pa.int32(), nullable=False),
    pa.field("ciphertexts", pa.int32(), nullable=False),
    pa.field("ciphertext_bytes", pa.int64(), nullable=False),
    pa.field("bytes_per_sample", pa.float64(), nullable=False),
    pa.field("train_seconds", pa.float64()),
    pa.field("keygen_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("infer_seconds", pa.float64(), nullable=False),
    pa.field("infer_warm_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("samples_per_second", pa.float64(), nullable=False),
    pa.field("end_to_end_samples_per_second", pa.float64(), nullable=False),
    pa.field("ms_per_sample", pa.float64(), nullable=False),   # the batch's end to end, amortised
    pa.field("single_sample_ms", pa.float64(), nullable=False),   # a batch of one: encrypt + infer + decrypt
    pa.field("single_sample_infer_ms", pa.float64()),
    pa.field("single_sample_layout", pa.string()),
    pa.field("single_sample_repeats", pa.int32()),
    pa.field("single_sample_baseline_layout", pa.string()),    # the batch's layout with one sample
    pa.field("single_sample_baseline_ms", pa.float64()),
    pa.field("single_sample_speedup", pa.float64()),           # baseline ms / single_sample_ms
    pa.field("accuracy_plain", pa.float64(), nullable=False),
    pa.field("accuracy_encrypted", pa.float64(), nullable=False),
    pa.field("agreement", pa.float64(), nullable=False),
    pa.field("max_abs_err", pa.float64()),
    pa.field("seed_samples_per_second", pa.float64()),
    pa.field("seed_ms_per_sample", pa.float64()),
    pa.field("seed_accuracy", pa.float64()),
    pa.field("seed_bytes_per_sample", pa.float64()),
    pa.field("latency_vs_seed", pa.float64()),
    pa.field("throughput_vs_seed", pa.float64()),
])


#: One row per measurement of ``hepix bench --suite tfhe`` (bench.suites.tfhe): a stage (keygen, encrypt,
#: decrypt, expand, op, compress) of TFHE on a measured crop of pixel values, per pixel value, and the figure
#: extrapolated (``extrapolated`` true: nothing that size is run) to one 512x512 RGB image.
BENCH_TFHE = pa.schema(_RUN_FIELDS + [
    pa.field("stage", pa.string(), nullable=False),
    pa.field("op", pa.string()),                                 # the op spec of an op row, else ""
    pa.field("variant", pa.string()),                            # encoding (seeded/full/list) or circuit
    pa.field("image", pa.string()),                              # the crop measured, e.g. astronaut[0:8,0:8]
    pa.field("pixels", pa.int64()),                              # pixel values measured
    pa.field("threads", pa.int32()),
    pa.field("seconds_per_pixel", pa.float64()),
    pa.field("ms_per_pixel", pa.float64()),
    pa.field("extrapolated_512x512x3_seconds", pa.float64()),
    pa.field("extrapolated", pa.bool_()),
    pa.field("bytes_per_pixel", pa.float64()),
    pa.field("exact", pa.bool_()),                               # decrypted == the plaintext reference
    pa.field("peak_rss_mb", pa.float64()),                       # of this process, so far (MiB)
    pa.field("load_average_1min", pa.float64()),
    pa.field("keygen_seconds", pa.float64()),
    pa.field("client_key_bytes", pa.int64()),
    pa.field("server_key_bytes", pa.int64()),
    pa.field("compressed_server_key_bytes", pa.int64()),
    pa.field("server_key_load_seconds", pa.float64()),
    pa.field("compressed_server_key_load_seconds", pa.float64()),
    # stage "ckks-sign": CKKS's polynomial approximation of threshold:T (hecore.ops.sign) against the exact mask
    pa.field("preset", pa.string()),                             # the CKKS preset of a ckks-sign row
    pa.field("max_abs_err", pa.float64()),                       # max |decrypted mask - exact mask| (0..255)
    pa.field("wrong_side_fraction", pa.float64()),               # (mask >= 127.5) != (p >= T)
    pa.field("off_fraction", pa.float64()),                      # |mask - exact| > 0.5: wrong after rounding
    pa.field("near_off_fraction", pa.float64()),                 # the same among pixels with |p - T| <= near_band
    pa.field("near_band", pa.int32()),
    pa.field("off_band", pa.float64()),                          # every pixel with |p - T + 1/2| > this is right
    pa.field("max_err_vs_polynomial", pa.float64()),             # vs the same polynomial in float64: CKKS's own error
])

#: ``hepix bench --suite lut`` (bench/suites/lut.py): BENCH_TFHE's columns (its TFHE and ckks-sign rows), and for
#: the BFV rows (stages bfv-keygen, bfv-encrypt, bfv-lut, bfv-image) the table's input bytes, noise left, and
#: a measured image's encrypt and decrypt seconds.
BENCH_LUT = pa.schema(list(BENCH_TFHE) + [
    pa.field("input_bytes_per_pixel", pa.float64()),              # the ciphertext the table ran on, per value
    pa.field("noise_budget_bits", pa.int32()),                    # BFV noise budget left after the table
    pa.field("encrypt_seconds", pa.float64()),                    # bfv-image: the whole image
    pa.field("decrypt_seconds", pa.float64()),
])


#: One row per (corpus size, mode, job, implementation) of ``hepix bench --suite corpus``: encrypt -> process
#: (``op``) -> decrypt of an image corpus by the Spark jobs on ``local[2]``, each job its own process, and, as
#: the baseline, the same work by hecore in one process on one core, in the same run.  ``seconds`` is the work
#: (a job's own time, from its manifest), ``wall_seconds`` adds the process and session start-up and the commit
#: (``startup_seconds``); ``vs_core`` is the job's rate over the baseline's, ``vs_core_x2`` over twice it
#: (2 cores).  A job's row also has its manifest's stage timings and its process tree's peak memory and CPU
#: seconds by role (driver Python, the Spark JVM, the Python workers), ``core_seconds`` the core work's own
#: time summed over its output rows (encrypt_seconds, process_seconds of the ciphertexts; decrypt_seconds of
#: the metrics).
BENCH_CORPUS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores_available", pa.int32()),
    pa.field("git_commit", pa.string()),
    pa.field("load_1m", pa.float64()),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("dataset", pa.string(), nullable=False),       # div2k 2048x1024, or generated images of that size
    pa.field("op", pa.string(), nullable=False),
    pa.field("layout", pa.string(), nullable=False),
    pa.field("encryption", pa.string(), nullable=False),    # public | symmetric
    pa.field("job", pa.string(), nullable=False),           # encrypt | process | decrypt
    pa.field("implementation", pa.string(), nullable=False),  # hecore, one core | spark local[2]
    pa.field("cores", pa.int32(), nullable=False),
    pa.field("images", pa.int32(), nullable=False),
    pa.field("pixels", pa.int64(), nullable=False),         # channel values of the corpus
    pa.field("ciphertexts", pa.int64(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("seconds_per_ciphertext", pa.float64(), nullable=False),
    pa.field("pixels_per_second", pa.float64(), nullable=False),
    pa.field("wall_seconds", pa.float64()),
    pa.field("startup_seconds", pa.float64()),
    pa.field("vs_core", pa.float64()),
    pa.field("vs_core_x2", pa.float64()),
    pa.field("bytes_at_rest", pa.int64()),
    pa.field("bytes_per_pixel", pa.float64()),
    pa.field("driver_peak_rss", pa.int64()),                # a job: its driver Python + the Spark JVM, bytes
    pa.field("workers_peak_rss", pa.int64()),               # a job: the largest Python worker, bytes
    pa.field("min_psnr", pa.float64()),
    pa.field("min_exact_fraction", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    # a job: its manifest's timings (null where the job writes none), and all of them as JSON
    pa.field("decode_seconds", pa.float64()),
    pa.field("cache_build_seconds", pa.float64()),
    pa.field("encrypt_seconds", pa.float64()),
    pa.field("check_seconds", pa.float64()),
    pa.field("process_seconds", pa.float64()),
    pa.field("scored_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("timings", pa.string()),
    # a job: its process tree sampled from /proc (peaks are VmHWM; CPU is utime + stime, a lower bound)
    pa.field("driver_python_peak_rss", pa.int64()),
    pa.field("driver_jvm_peak_rss", pa.int64()),            # local mode: the driver and the executor
    pa.field("workers_together_peak_rss", pa.int64()),      # the largest sum of the workers' RSS at one sample
    pa.field("worker_processes", pa.int32()),
    pa.field("driver_python_cpu_seconds", pa.float64()),
    pa.field("jvm_cpu_seconds", pa.float64()),
    pa.field("workers_cpu_seconds", pa.float64()),
    pa.field("core_seconds", pa.float64()),                 # the core work's own wall time in the rows, summed
    # a job: its limit on these cores -- the core's time / 2, or for process the larger of that and a pyarrow
    # copy of the input's files on two processes (process is one addition per ciphertext: bound by I/O) --,
    # the job's rate over it (goal >= 0.8), and the JVM's CPU seconds per GB of ciphertext the job read
    pa.field("copy_seconds", pa.float64()),
    pa.field("limit_seconds", pa.float64()),
    pa.field("vs_limit", pa.float64()),
    pa.field("jvm_cpu_seconds_per_gb", pa.float64()),
])


#: One row per job of ``hepix bench --suite cluster --hdfs`` (``bench.suites.corpuscluster``): the corpus
#: table's columns (``implementation``: hecore, one core | spark standalone ... | spark local[1], the owner's
#: | pyarrow copy, one process), and the cluster's processes by role (CPU is utime + stime while sampled).
_CORPUS_CLUSTER_COLUMNS = [
    pa.field("load_1m_before", pa.float64()),
    pa.field("input_bytes", pa.int64()),                    # ciphertext bytes the job read (its input files)
    pa.field("limit_seconds", pa.float64()),                # what the job is held to: the core's, or process's
    pa.field("vs_limit", pa.float64()),                     # ... max(core, the pyarrow copy); goal >= 0.7
    pa.field("jvm_cpu_seconds_per_gb", pa.float64()),       # Spark JVMs' CPU per 10^9 input bytes; goal <= 1
    pa.field("jvm_startup_cpu_seconds", pa.float64()),      # ... of which before the first Python worker
    pa.field("driver_jvm_cpu_seconds", pa.float64()),
    pa.field("driver_jvm_startup_cpu_seconds", pa.float64()),
    pa.field("executor_jvm_cpu_seconds", pa.float64()),
    pa.field("executor_jvm_startup_cpu_seconds", pa.float64()),
    pa.field("worker_daemon_cpu_seconds", pa.float64()),
    pa.field("master_cpu_seconds", pa.float64()),
    pa.field("hdfs_cpu_seconds", pa.float64()),             # HDFS's name and data node (WebHDFS served)
    pa.field("executor_jvm_peak_rss", pa.int64()),
    pa.field("worker_daemon_peak_rss", pa.int64()),         # VmHWM over the daemon's life
    pa.field("master_peak_rss", pa.int64()),
    pa.field("task_metrics", pa.string()),                  # JSON: Spark's task metrics of the job, summed
]
BENCH_CORPUS_CLUSTER = pa.schema(list(BENCH_CORPUS)
                                 + [f for f in _CORPUS_CLUSTER_COLUMNS if f.name not in BENCH_CORPUS.names])

#: One row per (image, encryption path) of ``hepix bench --suite atrest``: bytes at rest and the speed of
#: each secure encryption path against the pixel layout's ``full`` caching, one process, one thread
#: (``bench.suites.atrest.AtRestRow``).
BENCH_ATREST = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("machine", pa.string()),
    pa.field("cores", pa.int32()),
    pa.field("git_commit", pa.string()),
    pa.field("load_1m", pa.float64()),
    pa.field("repeats", pa.int32()),
    pa.field("image", pa.string(), nullable=False),
    pa.field("implementation", pa.string(), nullable=False),
    pa.field("encryption", pa.string(), nullable=False),      # cached | symmetric | public
    pa.field("security", pa.string(), nullable=False),        # leaks | ind-cpa
    pa.field("chain", pa.string()),                           # the ops the storage was planned for
    pa.field("preset", pa.string(), nullable=False),
    pa.field("level", pa.int32()),
    pa.field("primes", pa.int32()),
    pa.field("scale_bits", pa.int32()),
    pa.field("drop0", pa.int32()),
    pa.field("drop1", pa.int32()),
    pa.field("halo", pa.int32()),
    pa.field("tile", pa.string()),
    pa.field("pixels", pa.int64()),
    pa.field("ciphertexts", pa.int64()),
    pa.field("seconds", pa.float64()),                        # median over the repeats
    pa.field("pixels_per_second", pa.float64()),
    pa.field("bytes", pa.int64()),
    pa.field("bytes_per_pixel", pa.float64()),
    pa.field("vs_pixel_full", pa.float64()),
    pa.field("expand_seconds", pa.float64()),
    pa.field("decrypt_seconds", pa.float64()),
    pa.field("expand_us_per_ciphertext", pa.float64()),
    pa.field("decrypt_us_per_ciphertext", pa.float64()),
    pa.field("exact_fraction", pa.float64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("error_bound", pa.float64()),
])


#: One row per (lie, sample kind, positions) of ``hepix bench --suite integrity`` (bench.suites.integrity): a
#: lying cluster's result checked against ``trials`` fresh spot samples of ``positions`` secret positions.
#: ``wrong_fraction``: pixels the lie got wrong; ``formula``: 1 - (1 - wrong_fraction)^positions;
#: ``detected``: the fraction of trials that caught it (the honest row: false alarms); ``refused``: why the
#: keys could not compute the lie at all.
BENCH_INTEGRITY = pa.schema(_RUN_FIELDS + [
    pa.field("load_1m", pa.float64()),
    pa.field("attack", pa.string(), nullable=False),
    pa.field("preset", pa.string(), nullable=False),
    pa.field("chain", pa.string(), nullable=False),
    pa.field("image", pa.string(), nullable=False),
    pa.field("sample", pa.string()),            # pixels, results (the declared chain's), ringers, slots (keyed
                                                # check slots) or none (a dropped one)
    pa.field("positions", pa.int32(), nullable=False),
    pa.field("trials", pa.int32(), nullable=False),
    pa.field("wrong_fraction", pa.float64()),
    pa.field("formula", pa.float64()),
    pa.field("detected", pa.float64()),
    pa.field("checked_positions", pa.float64()),
    pa.field("check_ms", pa.float64()),
    pa.field("refused", pa.string()),
])


#: Every benchmark table by its directory name under ``hepix bench --out``.
BENCH_TABLES = {
    "bench": BENCH,
    "bench_pixel": BENCH_PIXEL,
    "bench_spark": BENCH_SPARK,
    "bench_cluster": BENCH_CLUSTER,
    "bench_packed": BENCH_PACKED,
    "bench_ops": BENCH_OPS,
    "bench_imageops": BENCH_OPS,
    "bench_dft": BENCH_DFT,
    "bench_infer": BENCH_INFER,
    "bench_tfhe": BENCH_TFHE,
    "bench_lut": BENCH_LUT,
    "bench_corpus": BENCH_CORPUS,
    "bench_corpus_cluster": BENCH_CORPUS_CLUSTER,
    "bench_atrest": BENCH_ATREST,
    "bench_integrity": BENCH_INTEGRITY,
}
