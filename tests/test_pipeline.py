"""End-to-end tests of the Spark jobs: keygen -> encrypt -> process -> decrypt.

The jobs run in-process through ``jobs.cli.main`` (each builds and stops its own
``local[2]`` SparkSession).  Expensive runs are shared through module-scoped
fixtures: one key pair (plus an independent one for the mismatch tests), one
input folder, and one run per strategy / op chain, made lazily and cached by
:class:`Pipeline`.  Images are tiny (16x16 grey and RGB, preset addonly-2048),
so the time goes into Spark's per-job overhead, not into encryption.

Input images are copied from the USC-SIPI data set (or its stand-ins without it, see
conftest.py) into temporary directories, plus one generated bright PNG whose values lie
in 200..255, so that brightening it clips.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from conftest import shared_dataset
from PIL import Image

from jobs.cli import main
from schemas.manifest import RunManifest
from schemas.tables import CIPHERTEXTS, METRICS, REJECTS

pytestmark = [pytest.mark.seconds(260), pytest.mark.spark]

SPARK = ["--master", "local[2]", "--quiet"]
PRESET = "addonly-2048"
SIZE = 16
TILE = "5x7"                 # 4x3 tiles per 16x16 image, ragged at the bottom and right edges;
TILES_PER_IMAGE = 4 * 3      # the mean filter has to cross tile borders
LEAKY = ["radix", "radix-rand", "scan", "full"]
STRATEGIES = ["fresh", *LEAKY]

#: input file name -> (USC-SIPI file it is copied from, or None when generated; channels)
GOOD_IMAGES = {"grey.tiff": ("5.1.12.tiff", 1), "colour.tiff": ("4.1.05.tiff", 3), "bright.png": (None, 1)}
#: ciphertexts per image: one per pixel value per channel of the 16x16 image
EXPECTED_CTS = {name: SIZE * SIZE * ch for name, (_, ch) in GOOD_IMAGES.items()}

OP_CHAINS = [
    ("brightness:50",),
    ("watermark:3,4,5",),
    ("meanfilter:3",),
    ("brightness:50", "watermark:3,4,5", "meanfilter:3"),
]
OP_IDS = ["brightness", "watermark", "meanfilter", "chained"]


# --- helpers ------------------------------------------------------------------------------------

def hepix(*argv) -> int:
    """Run ``hepix ARGV`` in this process; return its exit status."""
    return main([str(a) for a in argv])


def hepix_ok(*argv) -> None:
    rc = hepix(*argv)
    if rc != 0:
        raise AssertionError(f"`hepix {' '.join(map(str, argv))}` exited {rc} (stderr above)")


def manifest(directory: Path) -> RunManifest:
    return RunManifest.from_json((Path(directory) / "_manifest.json").read_text())


def read_table(directory: Path, columns: list[str] | None = None) -> pa.Table:
    return ds.dataset(str(directory), format="parquet").to_table(columns=columns)


def basename(source: str) -> str:
    return source.rsplit("/", 1)[-1]


def fingerprint_of(keys: Path) -> str:
    return json.loads((keys / "hepix-keys.json").read_text())["fingerprint"]


def preprocessed(path: Path) -> np.ndarray:
    """The pixels encrypt works on: hecore's loader, centre crop and resize to SIZE."""
    from hecore.images import load_image, preprocess

    return preprocess(load_image(path), SIZE).pixels


def numpy_reference(pixels: np.ndarray, ops: tuple[str, ...]) -> np.ndarray:
    """The ops on plaintext, written independently of hecore.ops.spec: float, no clipping between
    ops, round to nearest and clip to 0..255 once at the end; the mean filter replicates edges."""
    a = pixels.astype(np.float64)
    for spec in ops:
        name, _, arg = spec.partition(":")
        if name == "brightness":
            a = a + float(arg)
        elif name == "watermark":
            x, y, v = arg.split(",")
            a = a.copy()
            a[int(y), int(x)] += float(v)
        elif name == "conv":                  # the 3x3 weights row-major, the first on the pixel above-left
            weights, _, div = arg.partition("/")
            w = np.array([int(v) for v in weights.split(",")], dtype=np.float64).reshape(3, 3)
            pad = [(1, 1), (1, 1)] + [(0, 0)] * (a.ndim - 2)
            p = np.pad(a, pad, mode="edge")
            h, wd = a.shape[:2]
            a = sum(w[i, j] * p[i:i + h, j:j + wd] for i in range(3) for j in range(3)) / float(div or 1)
        elif name == "contrast":
            a = (a - 128) * float(arg) + 128
        elif name == "grey":                  # ITU-R BT.601 in integers; a grey image is unchanged
            if a.ndim == 3:
                a = (77 * a[:, :, 0] + 150 * a[:, :, 1] + 29 * a[:, :, 2]) / 256
        elif name == "downsample":            # the F x F block mean, the last blocks' edge replicated
            f = int(arg)
            h, w = a.shape[:2]
            hh, ww = -(-h // f), -(-w // f)
            pad = [(0, hh * f - h), (0, ww * f - w)] + [(0, 0)] * (a.ndim - 2)
            p = np.pad(a, pad, mode="edge")
            a = sum(p[i::f, j::f] for i in range(f) for j in range(f)) / (f * f)
        elif name == "meanfilter":
            k = int(arg)
            assert k % 2 == 1, "this reference only handles odd windows"
            r = k // 2
            pad = [(r, r), (r, r)] + [(0, 0)] * (a.ndim - 2)
            p = np.pad(a, pad, mode="edge")
            h, w = a.shape[:2]
            a = sum(p[dy:dy + h, dx:dx + w] for dy in range(k) for dx in range(k)) / (k * k)
        else:
            raise ValueError(spec)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def owner_dir(enc: Path) -> Path:
    """The owner map encrypt wrote beside ``enc`` (its default, ``<--out>.owner``)."""
    return enc.with_name(enc.name + ".owner")


def sources_by_id(enc: Path) -> dict[str, str]:
    """image id -> source, from the owner map (the ciphertext table names images by id only)."""
    t = read_table(owner_dir(enc) / "images", ["image_id", "source"])
    return dict(zip(t.column("image_id").to_pylist(), t.column("source").to_pylist()))


def png_images(decrypted: Path) -> dict[str, Path]:
    """``OUT/images/<image_id>-<stem>.png`` by input file stem."""
    return {p.name.split("-", 1)[1].removesuffix(".png"): p for p in sorted((decrypted / "images").glob("*.png"))}


def stem(name: str) -> str:
    return name.rsplit(".", 1)[0]


# --- shared fixtures --------------------------------------------------------------------------------

class Keys:
    def __init__(self, secret: Path, public: Path):
        self.secret, self.public = secret, public
        self.fingerprint = fingerprint_of(secret)


def _make_keys(root: Path) -> Keys:
    hepix_ok("keygen", "--out", root / "keys", "--preset", PRESET)
    hepix_ok("export-public", "--keys", root / "keys", "--out", root / "public")
    return Keys(root / "keys", root / "public")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Keys:
    return _make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory) -> Keys:
    """An independent keygen with the same preset."""
    return _make_keys(tmp_path_factory.mktemp("other-keys"))


@pytest.fixture(scope="module")
def usc_sipi_dir() -> Path:
    return shared_dataset("usc-sipi")


def _bright_png(path: Path) -> None:
    """A 16x16 grey PNG with every value in 200..255 (brightness +50 must clip)."""
    values = 200 + (np.arange(SIZE * SIZE).reshape(SIZE, SIZE) * 7) % 56
    Image.fromarray(values.astype(np.uint8), mode="L").save(path, format="PNG")


@pytest.fixture(scope="module")
def images(tmp_path_factory, usc_sipi_dir) -> Path:
    """grey.tiff (256x256 L), colour.tiff (256x256 RGB), bright.png (16x16 L, 200..255)."""
    d = tmp_path_factory.mktemp("images")
    for name, (src, _) in GOOD_IMAGES.items():
        if src is None:
            _bright_png(d / name)
        else:
            shutil.copyfile(usc_sipi_dir / src, d / name)
    return d


class Pipeline:
    """Runs of the jobs on the shared input, made on first use and cached for the module."""

    def __init__(self, root: Path, keys: Keys, images: Path):
        self.root, self.keys, self.images = root, keys, images
        self._encrypted: dict[str, Path] = {}
        self._processed: dict[tuple[str, ...], Path] = {}
        self._decrypted: dict[Path, Path] = {}
        self.owner: dict[Path, Path] = {}            # run -> the owner map of the encrypt run it comes from

    def encrypt(self, strategy: str) -> Path:
        if strategy not in self._encrypted:
            out = self.root / f"enc-{strategy}"
            leaky = [] if strategy == "fresh" else ["--allow-leaky"]
            hepix_ok("encrypt", "--layout", "pixel", "--keys", self.keys.public, "--input", self.images, "--out", out,
                     "--resize", SIZE, "--tile", TILE, "--strategy", strategy, *leaky, *SPARK)
            self._encrypted[strategy] = out
            self.owner[out] = owner_dir(out)
        return self._encrypted[strategy]

    def process(self, ops: tuple[str, ...]) -> Path:
        if ops not in self._processed:
            out = self.root / f"proc-{len(self._processed)}"
            op_args = [a for op in ops for a in ("--op", op)]
            hepix_ok("process", "--keys", self.keys.public, "--input", self.encrypt("fresh"), "--out", out,
                     *op_args, *SPARK)
            self._processed[ops] = out
            self.owner[out] = self.owner[self.encrypt("fresh")]
        return self._processed[ops]

    def decrypt(self, src: Path) -> Path:
        if src not in self._decrypted:
            out = src.with_name(src.name + "-dec")
            hepix_ok("decrypt", "--keys", self.keys.secret, "--input", src, "--out", out,
                     "--owner", self.owner[src], "--images", self.images, "--png", *SPARK)
            self._decrypted[src] = out
        return self._decrypted[src]


@pytest.fixture(scope="module")
def pipe(tmp_path_factory, keys, images) -> Pipeline:
    return Pipeline(tmp_path_factory.mktemp("runs"), keys, images)


# --- 1. every strategy round-trips exactly --------------------------------------------------------

@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_decrypts_every_image_exactly(pipe, strategy):
    rows = read_table(pipe.decrypt(pipe.encrypt(strategy)) / "metrics").to_pylist()
    assert sorted(basename(r["source"]) for r in rows) == sorted(GOOD_IMAGES)
    for r in rows:
        assert r["reference"] == "original", r
        assert r["strategy"] == strategy
        assert r["mse"] == 0, r
        assert r["exact_fraction"] == 1.0, r
        assert r["ciphertexts"] == EXPECTED_CTS[basename(r["source"])]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_encrypt_manifest_counts_add_up(pipe, strategy):
    m = manifest(pipe.encrypt(strategy))
    assert (m.job, m.status, m.strategy, m.preset) == ("encrypt", "complete", strategy, PRESET)
    c = m.counts
    assert c.images_in == c.images_encrypted + c.images_rejected
    assert (c.images_in, c.images_encrypted, c.images_rejected) == (3, 3, 0)
    assert c.ciphertexts == sum(EXPECTED_CTS.values())
    assert read_table(pipe.encrypt(strategy) / "ciphertexts", ["index"]).num_rows == c.ciphertexts


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_security_label_in_ciphertext_rows_and_manifest(pipe, strategy):
    expected = "ind-cpa" if strategy == "fresh" else "leaks"
    out = pipe.encrypt(strategy)
    t = read_table(out / "ciphertexts", ["security", "strategy"])
    assert set(t.column("security").to_pylist()) == {expected}
    assert set(t.column("strategy").to_pylist()) == {strategy}
    assert manifest(out).security == expected
    metrics = read_table(pipe.decrypt(out) / "metrics", ["security"])
    assert set(metrics.column("security").to_pylist()) == {expected}


# --- 2. leaky strategies need --allow-leaky -----------------------------------------------------------

@pytest.mark.parametrize("strategy", LEAKY)
def test_leaky_strategy_without_allow_leaky_is_refused_before_any_output(keys, images, tmp_path, capsys,
                                                                          strategy):
    out = tmp_path / "enc"
    rc = hepix("encrypt", "--layout", "pixel", "--keys", keys.public, "--input", images, "--out", out, "--resize", SIZE,
               "--tile", TILE, "--strategy", strategy, *SPARK)
    err = capsys.readouterr().err
    assert rc == 2
    assert "LeakyStrategyRefused" in err and "not IND-CPA secure" in err
    assert repr(strategy) in err
    assert "--allow-leaky" in err
    from hecore.encrypt.strategies import WHAT_LEAKS
    assert WHAT_LEAKS[strategy] in err                      # says *what* leaks
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


# --- 3. encrypted ops equal plaintext ops, clipping once at the end -----------------------------------

def test_bright_input_makes_clipping_matter(images):
    """Precondition of the op tests: brightening the bright image pushes values past 255."""
    px = preprocessed(images / "bright.png")
    assert px.min() >= 200
    assert (px.astype(int) + 50 > 255).mean() > 0.5


@pytest.mark.parametrize("ops", OP_CHAINS, ids=OP_IDS)
def test_processed_ciphertexts_decrypt_to_the_plaintext_processed_images(pipe, ops):
    rows = read_table(pipe.decrypt(pipe.process(ops)) / "metrics").to_pylist()
    assert sorted(basename(r["source"]) for r in rows) == sorted(GOOD_IMAGES)
    for r in rows:
        assert r["ops"] == "|".join(ops)
        assert r["reference"] == "plaintext-processed", r
        assert r["mse"] == 0, r
        assert r["exact_fraction"] == 1.0, r


@pytest.mark.parametrize("ops", OP_CHAINS, ids=OP_IDS)
def test_processed_images_match_an_independent_numpy_reference(pipe, images, ops):
    pngs = png_images(pipe.decrypt(pipe.process(ops)))
    assert sorted(pngs) == sorted(stem(n) for n in GOOD_IMAGES)
    for name in GOOD_IMAGES:
        got = np.array(Image.open(pngs[stem(name)]))
        want = numpy_reference(preprocessed(images / name), ops)
        assert got.shape == want.shape
        diff = np.argwhere(got != want)
        assert diff.size == 0, f"{name}: {len(diff)} pixels differ, first at {diff[:3].tolist()}"


@pytest.mark.parametrize("ops", OP_CHAINS, ids=OP_IDS)
def test_process_manifest_records_ops_and_keeps_every_ciphertext(pipe, keys, ops):
    src, out = pipe.encrypt("fresh"), pipe.process(ops)
    m, parent = manifest(out), manifest(src)
    assert (m.job, m.status) == ("process", "complete")
    assert m.ops == list(ops)
    assert m.parent["run_id"] == parent.run_id
    assert m.counts.ciphertexts == parent.counts.ciphertexts
    t = read_table(out / "ciphertexts", ["ops", "image_id", "channel", "tile_y", "tile_x", "index"])
    assert t.num_rows == parent.counts.ciphertexts
    assert {tuple(o) for o in t.column("ops").to_pylist()} == {ops}


# --- 3b. process run on a processed run --------------------------------------------------------------------

CHAIN_1 = OP_CHAINS[-1]              # brightness:50 | watermark:3,4,5 | meanfilter:3 (from the shared runs)
CHAIN_2 = ("meanfilter:5",)          # a halo of 2 across the ragged 5x7 tiles


@pytest.fixture(scope="module")
def chained_runs(tmp_path_factory, pipe, keys, images):
    """The shared run of CHAIN_1 -> process CHAIN_2 -> decrypt."""
    d = tmp_path_factory.mktemp("chained")
    p1 = pipe.process(CHAIN_1)
    hepix_ok("process", "--keys", keys.public, "--input", p1, "--out", d / "p2",
             *[a for op in CHAIN_2 for a in ("--op", op)], *SPARK)
    hepix_ok("decrypt", "--keys", keys.secret, "--input", d / "p2", "--out", d / "dec", "--owner", pipe.owner[p1],
             "--images", images, "--png", *SPARK)
    return {"p1": p1, "p2": d / "p2", "dec": d / "dec"}


def test_process_on_a_processed_run_appends_its_ops(chained_runs):
    m1, m2 = manifest(chained_runs["p1"]), manifest(chained_runs["p2"])
    assert m2.ops == list(CHAIN_1 + CHAIN_2)
    assert m2.parent["run_id"] == m1.run_id and m2.parent["job"] == "process"
    ops = read_table(chained_runs["p2"] / "ciphertexts", ["ops"]).column("ops").to_pylist()
    assert {tuple(o) for o in ops} == {CHAIN_1 + CHAIN_2}


def test_two_process_runs_decrypt_exactly(chained_runs):
    rows = read_table(chained_runs["dec"] / "metrics").to_pylist()
    assert sorted(basename(r["source"]) for r in rows) == sorted(GOOD_IMAGES)
    for r in rows:
        assert r["ops"] == "|".join(CHAIN_1 + CHAIN_2)
        assert r["reference"] == "plaintext-processed"
        assert (r["mse"], r["exact_fraction"]) == (0, 1.0), r


def test_two_process_runs_match_an_independent_numpy_reference(chained_runs, images):
    pngs = png_images(chained_runs["dec"])
    for name in GOOD_IMAGES:
        got = np.array(Image.open(pngs[stem(name)]))
        want = numpy_reference(preprocessed(images / name), CHAIN_1 + CHAIN_2)
        np.testing.assert_array_equal(got, want, err_msg=name)


# --- 3b'. convolutions, twice through the shuffle ---------------------------------------------------------------

CONV_CHAIN = ("conv:-1,0,1,-2,0,2,-1,0,1", "brightness:128", "conv:1,2,1,2,4,2,1,2,1/16")


def test_convolutions_in_the_pixel_layout_decrypt_exactly(pipe, images):
    dec = pipe.decrypt(pipe.process(CONV_CHAIN))
    rows = read_table(dec / "metrics").to_pylist()
    assert sorted(basename(r["source"]) for r in rows) == sorted(GOOD_IMAGES)
    for r in rows:
        assert r["ops"] == "|".join(CONV_CHAIN) and (r["mse"], r["exact_fraction"]) == (0, 1.0), r
    pngs = png_images(dec)
    for name in GOOD_IMAGES:
        want = numpy_reference(preprocessed(images / name), CONV_CHAIN)
        np.testing.assert_array_equal(np.array(Image.open(pngs[stem(name)])), want, err_msg=name)


GREY_CHAIN = ("brightness:-20", "grey", "meanfilter:3", "contrast:2")


def test_grey_in_the_pixel_layout_decrypts_one_channel_exactly(pipe, images):
    dec = pipe.decrypt(pipe.process(GREY_CHAIN))
    rows = read_table(dec / "metrics").to_pylist()
    assert sorted(basename(r["source"]) for r in rows) == sorted(GOOD_IMAGES)
    for r in rows:
        assert (r["channels"], r["mse"], r["exact_fraction"]) == (1, 0, 1.0), r
    pngs = png_images(dec)
    for name in GOOD_IMAGES:
        got = np.array(Image.open(pngs[stem(name)]))
        assert got.ndim == 2, name
        np.testing.assert_array_equal(got, numpy_reference(preprocessed(images / name), GREY_CHAIN), err_msg=name)
    cts = read_table(pipe.process(GREY_CHAIN) / "ciphertexts", ["channel", "image_channels"])
    assert set(cts.column("channel").to_pylist()) == {0} and set(cts.column("image_channels").to_pylist()) == {1}


SMALL_CHAIN = ("conv:0,-1,0,-1,5,-1,0,-1,0", "downsample:4", "grey", "brightness:7")


def test_downsample_in_the_pixel_layout_decrypts_the_smaller_image_exactly(pipe, images):
    dec = pipe.decrypt(pipe.process(SMALL_CHAIN))
    rows = read_table(dec / "metrics").to_pylist()
    assert sorted(basename(r["source"]) for r in rows) == sorted(GOOD_IMAGES)
    for r in rows:
        assert (r["height"], r["width"], r["channels"], r["mse"], r["exact_fraction"]) == (4, 4, 1, 0, 1.0), r
    pngs = png_images(dec)
    for name in GOOD_IMAGES:
        got = np.array(Image.open(pngs[stem(name)]))
        np.testing.assert_array_equal(got, numpy_reference(preprocessed(images / name), SMALL_CHAIN), err_msg=name)
    assert manifest(pipe.process(SMALL_CHAIN)).counts.ciphertexts == 3 * 4 * 4


# --- 3c. a watermark outside the image ------------------------------------------------------------------

@pytest.fixture(scope="module")
def off_image_watermark(tmp_path_factory, pipe, keys):
    """process with a watermark at (100, 100) on 16x16 images."""
    out = tmp_path_factory.mktemp("off-image") / "proc"
    rc = hepix("process", "--keys", keys.public, "--input", pipe.encrypt("fresh"), "--out", out,
               "--op", "watermark:100,100,5", *SPARK)
    return rc, out


def test_process_refuses_a_watermark_outside_the_images(off_image_watermark):
    rc, out = off_image_watermark
    assert rc == 2
    assert not (out / "_manifest.json").exists()


# --- 4. bad inputs become rejects ------------------------------------------------------------------

BAD_FILES = {"truncated.tiff": "truncated", "notes.txt": "not-an-image", "empty.tiff": "empty-file"}


@pytest.fixture(scope="module")
def bad_input_run(tmp_path_factory, keys, images):
    d = tmp_path_factory.mktemp("bad-input")
    src = d / "in"
    src.mkdir()
    shutil.copyfile(images / "grey.tiff", src / "grey.tiff")
    shutil.copyfile(images / "bright.png", src / "bright.png")
    data = (images / "grey.tiff").read_bytes()
    (src / "truncated.tiff").write_bytes(data[: len(data) // 2])
    (src / "notes.txt").write_text("not an image\n")
    (src / "empty.tiff").write_bytes(b"")
    out = d / "enc"
    rc = hepix("encrypt", "--layout", "pixel", "--keys", keys.public, "--input", src, "--out", out, "--resize", SIZE,
               "--tile", TILE, *SPARK)
    return rc, src, out


def test_encrypt_with_bad_files_succeeds(bad_input_run):
    rc, _, out = bad_input_run
    assert rc == 0
    assert (out / "_manifest.json").is_file()


def test_rejects_table_lists_each_bad_file_with_its_reason(bad_input_run):
    """The rejects name the owner's files: they go to the owner map, not next to the ciphertexts."""
    _, src, out = bad_input_run
    assert not (out / "rejects").exists()
    rows = read_table(owner_dir(out) / "rejects").to_pylist()
    assert {basename(r["source"]): r["reason"] for r in rows} == BAD_FILES
    assert len(rows) == len(BAD_FILES)
    run_id = manifest(out).run_id
    for r in rows:
        assert r["run_id"] == run_id
        # Empty files are found by listing the input (Spark's binaryFile source skips them).
        assert r["stage"] == ("read" if r["reason"] == "empty-file" else "decode")
        assert basename(r["source"]) in r["detail"]
        assert r["bytes"] == (src / basename(r["source"])).stat().st_size


# Spark's binaryFile source skips zero-length files (SPARK-26161); encrypt lists them itself.

def test_rejects_table_lists_the_empty_file(bad_input_run):
    _, _, out = bad_input_run
    rows = read_table(owner_dir(out) / "rejects").to_pylist()
    assert {basename(r["source"]): r["reason"] for r in rows}.get("empty.tiff") == "empty-file"


def test_ciphertexts_exist_for_the_good_images_only(bad_input_run):
    _, _, out = bad_input_run
    names = sources_by_id(out)
    sources = Counter(basename(names[i]) for i in read_table(out / "ciphertexts", ["image_id"]).column("image_id")
                      .to_pylist())
    assert dict(sources) == {"grey.tiff": EXPECTED_CTS["grey.tiff"], "bright.png": EXPECTED_CTS["bright.png"]}


def test_manifest_counts_add_up_with_rejects(bad_input_run):
    _, _, out = bad_input_run
    c = manifest(out).counts
    n_rejects = read_table(owner_dir(out) / "rejects", ["source"]).num_rows
    assert c.images_in == c.images_encrypted + c.images_rejected
    assert c.images_encrypted == 2
    assert c.images_rejected == c.rejects == n_rejects
    assert c.ciphertexts == EXPECTED_CTS["grey.tiff"] + EXPECTED_CTS["bright.png"]


def test_manifest_counts_every_input_file(bad_input_run):
    _, _, out = bad_input_run
    c = manifest(out).counts
    assert (c.images_in, c.images_encrypted, c.images_rejected) == (2 + len(BAD_FILES), 2, len(BAD_FILES))


# --- 5. key mismatch is caught before any work ---------------------------------------------------------

def _assert_key_mismatch(err: str, out: Path, keys: Keys, other: Keys, table: str) -> None:
    assert "KeyMismatch" in err
    assert keys.fingerprint[:16] in err, err
    assert other.fingerprint[:16] in err, err
    assert keys.fingerprint[:16] != other.fingerprint[:16]
    assert not (out / "_manifest.json").exists()
    assert not (out / table).exists()


def test_process_with_another_key_is_a_key_mismatch(pipe, keys, other_keys, tmp_path, capsys):
    src = pipe.encrypt("fresh")
    capsys.readouterr()
    out = tmp_path / "proc"
    rc = hepix("process", "--keys", other_keys.public, "--input", src, "--out", out, "--op", "brightness:50", *SPARK)
    err = capsys.readouterr().err
    assert rc == 2
    _assert_key_mismatch(err, out, keys, other_keys, "ciphertexts")


def test_decrypt_with_another_key_is_a_key_mismatch(pipe, keys, other_keys, images, tmp_path, capsys):
    src = pipe.encrypt("fresh")
    capsys.readouterr()
    out = tmp_path / "dec"
    rc = hepix("decrypt", "--keys", other_keys.secret, "--input", src, "--out", out, "--owner", owner_dir(src),
               "--images", images, "--png", *SPARK)
    err = capsys.readouterr().err
    assert rc == 2
    _assert_key_mismatch(err, out, keys, other_keys, "metrics")
    assert not (out / "images").exists()


# --- 6. process runs with public keys only ---------------------------------------------------------------

def test_process_refuses_a_key_directory_with_a_secret_key(pipe, keys, tmp_path, capsys):
    src = pipe.encrypt("fresh")
    capsys.readouterr()
    out = tmp_path / "proc"
    rc = hepix("process", "--keys", keys.secret, "--input", src, "--out", out, "--op", "brightness:50", *SPARK)
    err = capsys.readouterr().err
    assert rc == 2
    assert "KeyDirectoryError" in err and "secret.key" in err
    assert "export-public" in err
    assert not out.exists()


def test_process_succeeds_with_the_exported_public_keys(pipe, keys):
    assert not (keys.public / "secret.key").exists()
    m = manifest(pipe.process(("brightness:50",)))            # run with --keys keys.public
    assert (m.job, m.status) == ("process", "complete")
    assert m.key_fingerprint == keys.fingerprint == fingerprint_of(keys.public)


# --- 7. rerunning encrypt into the same directory ---------------------------------------------------------

KEY_COLUMNS = ["image_id", "channel", "tile_y", "tile_x", "index"]


def test_encrypt_rerun_into_the_same_directory_is_idempotent(keys, images, tmp_path, capsys):
    out = tmp_path / "enc"
    argv = ["encrypt", "--layout", "pixel", "--keys", keys.public, "--input", images, "--out", out, "--resize", SIZE,
            "--tile", TILE, *SPARK]

    def snapshot():
        """The rows' keys with each image named by its source (ids are random per run, by design)."""
        t = read_table(out / "ciphertexts", KEY_COLUMNS + ["run_id"])
        names = sources_by_id(out)
        keys_ = [(names[k[0]],) + k[1:] for k in zip(*(t.column(c).to_pylist() for c in KEY_COLUMNS))]
        return keys_, set(t.column("run_id").to_pylist())

    hepix_ok(*argv)
    first_keys, first_runs = snapshot()
    first = manifest(out)
    files = sorted(p.name for p in (out / "ciphertexts").iterdir())
    capsys.readouterr()
    hepix_ok(*argv)                     # the same settings: every image is done, nothing is redone
    assert "nothing to encrypt" in capsys.readouterr().out
    assert manifest(out).run_id == first.run_id and sorted(p.name for p in (out / "ciphertexts").iterdir()) == files
    hepix_ok(*argv, "--overwrite")      # --overwrite: everything again, nothing of the old run left
    second_keys, second_runs = snapshot()
    second = manifest(out)

    assert len(second_keys) == len(first_keys) == sum(EXPECTED_CTS.values())
    assert len(set(second_keys)) == len(second_keys), "duplicate (image_id, channel, tile_y, tile_x, index)"
    assert set(second_keys) == set(first_keys)
    assert first.run_id != second.run_id
    assert first_runs == {first.run_id} and second_runs == {second.run_id}, "rows of the old run survived"
    assert second.counts == first.counts
    assert [p.relative_to(out) for p in out.rglob("_manifest.json")] == [Path("_manifest.json")]
    assert not (out / "_staging").exists() and not (out / "_trash").exists()
    assert not [p for p in out.rglob("*") if "_tmp" in p.name]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["_manifest.json", "ciphertexts"]
    assert sorted(p.name for p in owner_dir(out).iterdir()) == ["images", "owner.json", "spots"]


def test_decrypt_leaves_no_staging_behind(pipe):
    out = pipe.decrypt(pipe.encrypt("fresh"))
    # dot files are Hadoop's local checksums (._manifest.json.crc)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "_manifest.json", "images", "metrics", "rejects"]
    assert not [p for p in out.rglob("*") if "_tmp" in p.name]


# --- 8. the tables from Spark SQL and pyarrow ------------------------------------------------------------

def _spark_fields(schema) -> list[tuple[str, str]]:
    """(name, type) of a Spark StructType, ignoring nullability (simpleString has none)."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _arrow_type(t: pa.DataType) -> str:
    """A pyarrow type without nullability or the name of a list's item field."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_arrow_type(t.value_type)}>"
    return str(t)


def _arrow_fields(schema: pa.Schema) -> list[tuple[str, str]]:
    return [(f.name, _arrow_type(f.type)) for f in schema]


@pytest.fixture(scope="module")
def spark_sql(pipe, bad_input_run):
    """After the jobs ran: a SparkSession of our own, queried, then stopped (results kept as data)."""
    from pyspark.sql import SparkSession

    from schemas.tables import spark_schema

    enc = pipe.encrypt("fresh")
    dec = pipe.decrypt(enc)
    rejects = owner_dir(bad_input_run[2]) / "rejects"
    spark = (SparkSession.builder.master("local[2]").appName("hepix-test-sql")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    try:
        res = {}
        for name, path, arrow in (("ciphertexts", enc / "ciphertexts", CIPHERTEXTS),
                                  ("metrics", dec / "metrics", METRICS), ("rejects", rejects, REJECTS)):
            df = spark.read.parquet(str(path))
            df.createOrReplaceTempView(name)
            res[f"{name}.schema"] = _spark_fields(df.schema)
            res[f"{name}.expected"] = _spark_fields(spark_schema(arrow))
        names = sources_by_id(enc)
        res["per_image"] = [{**r.asDict(), "source": names[r["image_id"]]} for r in spark.sql(
            "SELECT image_id, COUNT(*) AS n, COUNT(DISTINCT channel) AS channels, "
            "COUNT(DISTINCT tile_y, tile_x) AS tiles, SUM(length(ct)) AS bytes "
            "FROM ciphertexts GROUP BY image_id ORDER BY image_id").collect()]
        res["joined"] = [r.asDict() for r in spark.sql(
            "SELECT m.source, m.ciphertexts, c.n FROM metrics m JOIN "
            "(SELECT image_id, COUNT(*) AS n FROM ciphertexts GROUP BY image_id) c "
            "ON m.image_id = c.image_id").collect()]
        res["reasons"] = {r["reason"]: r["n"] for r in spark.sql(
            "SELECT reason, COUNT(*) AS n FROM rejects GROUP BY reason").collect()}
        return res
    finally:
        spark.stop()


def test_spark_sql_counts_ciphertexts_per_image(spark_sql, pipe):
    rows = spark_sql["per_image"]
    assert {basename(r["source"]): r["n"] for r in rows} == EXPECTED_CTS
    for r in rows:
        name = basename(r["source"])
        assert r["channels"] == GOOD_IMAGES[name][1]
        assert r["tiles"] == TILES_PER_IMAGE
    assert sum(r["bytes"] for r in rows) == manifest(pipe.encrypt("fresh")).counts.ciphertext_bytes


def test_spark_sql_joins_metrics_to_ciphertexts(spark_sql):
    assert {basename(r["source"]): (r["ciphertexts"], r["n"]) for r in spark_sql["joined"]} == {
        name: (n, n) for name, n in EXPECTED_CTS.items()}


def test_spark_sql_groups_rejects_by_reason(spark_sql, bad_input_run):
    reasons = read_table(owner_dir(bad_input_run[2]) / "rejects", ["reason"]).column("reason").to_pylist()
    assert spark_sql["reasons"] == dict(Counter(reasons))
    assert {"truncated", "not-an-image"} <= set(spark_sql["reasons"])


@pytest.mark.parametrize("table", ["ciphertexts", "metrics", "rejects"])
def test_spark_reads_the_schema_of_schemas_tables(spark_sql, table):
    assert spark_sql[f"{table}.schema"] == spark_sql[f"{table}.expected"]


@pytest.mark.parametrize("table", ["ciphertexts", "metrics", "rejects"])
def test_pyarrow_reads_the_schema_of_schemas_tables(pipe, bad_input_run, table):
    path = {"ciphertexts": pipe.encrypt("fresh") / "ciphertexts",
            "metrics": pipe.decrypt(pipe.encrypt("fresh")) / "metrics",
            "rejects": owner_dir(bad_input_run[2]) / "rejects"}[table]
    expected = {"ciphertexts": CIPHERTEXTS, "metrics": METRICS, "rejects": REJECTS}[table]
    dataset = ds.dataset(str(path), format="parquet")
    assert _arrow_fields(dataset.schema) == _arrow_fields(expected)
    assert dataset.count_rows() > 0


# --- 9. decrypt --png ----------------------------------------------------------------------------------------

def test_decrypt_png_writes_one_readable_image_per_input_with_the_right_size(pipe):
    out = pipe.decrypt(pipe.encrypt("fresh"))
    files = sorted((out / "images").iterdir())
    assert len(files) == len(GOOD_IMAGES)
    assert all(f.suffix == ".png" for f in files)
    pngs = png_images(out)
    assert sorted(pngs) == sorted(stem(n) for n in GOOD_IMAGES)
    for name, (_, channels) in GOOD_IMAGES.items():
        with Image.open(pngs[stem(name)]) as im:
            im.load()
            assert im.format == "PNG"
            assert im.size == (SIZE, SIZE)
            assert im.mode == ("L" if channels == 1 else "RGB")


def test_decrypt_png_holds_the_original_pixels(pipe, images):
    pngs = png_images(pipe.decrypt(pipe.encrypt("fresh")))
    for name in GOOD_IMAGES:
        np.testing.assert_array_equal(np.array(Image.open(pngs[stem(name)])), preprocessed(images / name))


# --- 10. process needs a complete run ---------------------------------------------------------------------------

def test_process_on_a_directory_without_manifest_is_a_clear_error(pipe, keys, tmp_path, capsys):
    src = tmp_path / "incomplete"
    src.mkdir()
    shutil.copytree(pipe.encrypt("fresh") / "ciphertexts", src / "ciphertexts")
    capsys.readouterr()
    out = tmp_path / "proc"
    rc = hepix("process", "--keys", keys.public, "--input", src, "--out", out, "--op", "brightness:50", *SPARK)
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "_manifest.json" in err and str(src) in err
    assert "no complete hepix run" in err
    assert not (out / "_manifest.json").exists() and not (out / "ciphertexts").exists()
