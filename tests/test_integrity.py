"""The owner's secret spot checks (hecore/integrity.py): samples drawn, kept and read back; the op chains'
reference at the sampled places equal to the whole image's; and the red team (bench/suites/integrity.py) --
lying clusters computed on real ciphertexts -- caught at no less than the formula's rate."""
from __future__ import annotations

import numpy as np
import pytest

from hecore import integrity
from hecore.ops.spec import recorded_reference, recorded_reference_known
from hecore.quality import round_to_uint8


def _image(h=48, w=40, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, c) if c > 1 else (h, w), dtype=np.uint8)


def _expected(specs, preset):
    return lambda partial: recorded_reference_known(partial, specs, preset)


def test_the_default_catches_one_percent_with_probability_one_minus_two_to_the_minus_twenty():
    k = integrity.positions_for(0.01, 20)
    assert k == integrity.DEFAULT_POSITIONS == 1380
    assert integrity.escape_probability(0.01, k) <= 2.0 ** -20 < integrity.escape_probability(0.01, k - 1)


def test_a_sample_reads_back_as_it_was_drawn():
    img = _image()
    s = integrity.draw(img, positions=100, radius=2, rng=np.random.default_rng(1))
    back = integrity.SpotSample.from_bytes(s.to_bytes(), shape=img.shape)
    assert np.array_equal(back.centers, s.centers) and np.array_equal(back.values, s.values)
    partial = back.image()
    known = np.isfinite(partial)
    assert np.array_equal(partial[known], img[known].astype(float))
    ys, xs = np.divmod(back.centers, img.shape[1])
    assert len(set(back.centers.tolist())) == 100 and known[ys, xs].all()


def test_a_small_image_is_sampled_whole():
    img = _image(4, 5, 1)
    s = integrity.draw(img, positions=1000, radius=0)
    assert len(s.centers) == 20 and np.array_equal(s.image()[:, :, 0], img.astype(float))


def _corrupt(data: bytes, at: int, value: int) -> bytes:
    b = bytearray(data)
    b[at] = value
    return bytes(b)


@pytest.mark.parametrize("mangle, message", [
    (lambda d: d[:10], "shorter than"),
    (lambda d: b"XXXX" + d[4:], "not a spot sample"),
    (lambda d: d[:-1], "value bytes"),
    (lambda d: d + b"\0", "value bytes"),
    (lambda d: _corrupt(d, 14, 200), "implausible"),                  # radius 200
    (lambda d: d[:19] + (10**6).to_bytes(4, "little") + d[23:], "positions"),
    (lambda d: d[:23] + bytes(4) + d[27:], "sorted"),                 # two positions the same
])
def test_a_changed_sample_is_refused_with_a_reason(mangle, message):
    data = integrity.draw(_image(), positions=50, radius=1, rng=np.random.default_rng(2)).to_bytes()
    with pytest.raises(integrity.SpotSampleError, match=message):
        integrity.SpotSample.from_bytes(mangle(data))


def test_a_sample_of_another_size_is_refused():
    data = integrity.draw(_image(), positions=5).to_bytes()
    with pytest.raises(integrity.SpotSampleError, match="recorded as"):
        integrity.SpotSample.from_bytes(data, shape=(48, 41, 3))


CHAINS = [
    (["brightness:20"], "paper-4096", 0),
    (["contrast:1.5", "watermark:7,9,30"], "paper-4096", 0),
    (["meanfilter:3"], "paper-4096", 1),
    (["meanfilter:5", "brightness:-10"], "bfv-4096", 2),
    (["conv:sharpen"], "paper-4096", 1),
    (["conv:gauss5"], "paper-4096", 2),
    (["conv:sobel-x", "conv:gauss3"], "paper-4096", 2),
    (["grey"], "paper-4096", 0),
    (["grey", "conv:laplace"], "paper-4096", 1),
    (["downsample:2"], "paper-4096", 1),
    (["downsample:4"], "bfv-4096", 3),
    (["lut:invert"], "lut-16384", 0),
    (["brightness:60", "threshold:128"], "tfhe-default", 0),
]


@pytest.mark.parametrize("specs, preset, radius", CHAINS, ids=["|".join(c[0]) for c in CHAINS])
def test_the_reference_at_the_sampled_places_is_the_whole_image_s(specs, preset, radius):
    """What decrypt compares: the chain on the sample alone, wherever it can know, equals the chain on the
    whole image; the radius the chain reaches leaves every sampled place checked."""
    img = _image(40, 36, 3, seed=len(specs))
    assert integrity.reach(_expected(specs, preset)) == radius
    truth = round_to_uint8(recorded_reference(img, specs, preset))
    s = integrity.draw(img, positions=200, radius=radius, rng=np.random.default_rng(3))
    found = integrity.check(s, truth, _expected(specs, preset))
    assert found.ok and found.positions == 200 and found.values >= 200, found.describe()
    wrong = truth.copy()
    ys, xs = np.divmod(s.centers[17], img.shape[1])
    oy, ox = ys * truth.shape[0] // img.shape[0], xs * truth.shape[1] // img.shape[1]
    wrong[oy, ox] = wrong[oy, ox] ^ 1               # one value at one sampled place
    bad = integrity.check(s, wrong, _expected(specs, preset))
    assert not bad.ok and bad.wrong >= 1 and "differ from the op chain's result" in bad.describe()


@pytest.mark.parametrize("specs, preset, radius", CHAINS, ids=["|".join(c[0]) for c in CHAINS])
def test_the_windows_alone_give_what_the_image_gives(specs, preset, radius):
    """decrypt's fast path for chains whose patches decide their centres (tasks/metrics.py): the chain on the
    stacked windows gives every sampled place the value the whole image gives, and finds a changed one; the
    other chains (a watermark, a downsample, two windows) take the whole-image way, with the same verdict."""
    from hecore.ops.spec import patch_local_chain
    from tasks.metrics import spot_check

    img = _image(40, 36, 3, seed=len(specs) + 1)
    truth = round_to_uint8(recorded_reference(img, specs, preset))
    s = integrity.draw(img, positions=150, radius=radius, rng=np.random.default_rng(4))
    patched = spot_check(s.to_bytes(), specs, preset, truth)
    assert patched.ok and patched.positions == 150, patched.describe()
    whole_image_way = {"contrast:1.5|watermark:7,9,30", "conv:sobel-x|conv:gauss3", "downsample:2", "downsample:4"}
    assert patch_local_chain(specs, preset) == ("|".join(specs) not in whole_image_way)
    if patch_local_chain(specs, preset):
        assert patched.values == 150 * (truth.shape[2] if truth.ndim == 3 else 1)     # the centres alone
        fast = integrity.check_patches(s, truth, _expected(specs, preset))
        assert fast == patched
        wrong = truth.copy()
        y, x = np.divmod(s.centers[3], img.shape[1])
        wrong[y, x] = wrong[y, x] ^ 4
        assert not integrity.check_patches(s, wrong, _expected(specs, preset)).ok


@pytest.mark.parametrize("specs, preset, radius", CHAINS, ids=["|".join(c[0]) for c in CHAINS])
def test_a_declared_chain_s_results_are_kept_in_a_few_bytes_a_place_and_checked(specs, preset, radius):
    """encrypt --for-op: the sample keeps the chain's finished results at its places (tasks/decode.py), no
    pixel; decrypt compares them as they are, finds a changed one, and fails a run of another chain."""
    from hecore.ops.spec import op_chain_text, patch_local_chain
    from tasks.metrics import spot_check

    img = _image(40, 36, 3, seed=len(specs) + 2)
    truth = round_to_uint8(recorded_reference(img, specs, preset))
    s = integrity.draw(img, positions=150, radius=radius, rng=np.random.default_rng(6))
    chain = "|".join(op_chain_text(specs, preset))
    kept = integrity.keep_results(s, _expected(specs, preset), chain, patches=patch_local_chain(specs, preset))
    data = kept.to_bytes()
    out_channels = truth.shape[2] if truth.ndim == 3 else 1
    assert len(data) == 21 + len(chain.encode()) + len(kept.centers) * (4 + out_channels)
    back = integrity.read_sample(data)
    assert (back.height, back.width, back.channels, back.chain) == (kept.height, kept.width, kept.channels, chain)
    assert np.array_equal(back.centers, kept.centers) and np.array_equal(back.values, kept.values)
    found = spot_check(data, specs, preset, truth)
    assert found.ok and found.positions == len(kept.centers), found.describe()
    assert len(kept.centers) >= 150 or truth.shape[:2] != img.shape[:2]       # a downsample: a place a block
    wrong = truth.copy()
    y, x = np.divmod(kept.centers[5], kept.width)
    wrong[y, x] = wrong[y, x] ^ 2
    bad = spot_check(data, specs, preset, wrong)
    assert not bad.ok and bad.wrong >= 1 and "differ from the op chain's result" in bad.describe()
    other = spot_check(data, [*specs, "brightness:1"], preset, truth)     # a run relabelled with another chain
    assert not other.ok and "the chain declared at encrypt" in other.describe()


@pytest.mark.parametrize("mangle, message", [
    (lambda d: d[:20], "shorter than"),
    (lambda d: d[:-1], "take"),
    (lambda d: d + b"\0", "take"),
    (lambda d: _corrupt(d, 14, 1), "implausible"),                   # a radius
    (lambda d: d[:15] + (10**6).to_bytes(4, "little") + d[19:], "implausible"),    # positions
    (lambda d: d[:25] + b"\xff" + d[26:], "not text"),
])
def test_a_changed_results_sample_is_refused_with_a_reason(mangle, message):
    img = _image()
    s = integrity.draw(img, positions=40, radius=0, rng=np.random.default_rng(7))
    data = integrity.keep_results(s, _expected(["brightness:20"], "paper-4096"), "brightness:20",
                                  patches=True).to_bytes()
    with pytest.raises(integrity.SpotSampleError, match=message):
        integrity.read_sample(mangle(data))


def test_a_global_op_is_not_checked_and_says_so():
    assert integrity.reach(_expected(["dftfilter:lowpass=0.5"], "dft-8192")) is None
    img = _image(32, 32, 1)
    s = integrity.draw(img, positions=50, radius=0)
    truth = round_to_uint8(recorded_reference(img, ["dftfilter:lowpass=0.5"], "dft-8192"))
    found = integrity.check(s, truth, _expected(["dftfilter:lowpass=0.5"], "dft-8192"))
    assert found.ok and found.positions == 0 and found.values == 0


def test_a_result_of_another_size_fails():
    img = _image()
    s = integrity.draw(img, positions=10)
    found = integrity.check(s, _image(48, 40, 1), _expected([], "paper-4096"))
    assert not found.ok and "48x40x3" in found.describe()


@pytest.fixture(scope="module")
def red_team():
    from bench.suites.integrity import measure

    return measure(trials=200)


def test_every_lie_is_caught_at_no_less_than_the_formula_s_rate(red_team):
    from bench.suites.integrity import margin

    lies = [r for r in red_team if r["attack"] != "honest" and not r.get("refused")]
    assert {r["attack"] for r in lies} >= {"skip the op", "another constant", "tiles swapped within an image",
                                          "a tile of another image", "an error on 1 % of the values",
                                          "one ciphertext corrupted", "selector: values above 128 corrupted"}
    for r in lies:
        assert r["trials"] == 200 and r["wrong_fraction"] > 0, r
        assert r["detected"] >= r["formula"] - margin(r["formula"], r["trials"]), r
    few = next(r for r in lies if r["attack"] == "an error on 1 % of the values" and r["positions"] == 32)
    assert 0.2 < few["formula"] < 0.9         # a rate the trials can tell from 0 and 1


def test_honest_results_raise_no_alarm(red_team):
    honest = [r for r in red_team if r["attack"] == "honest"]
    assert honest and all(r["detected"] == 0.0 and r["wrong_fraction"] == 0.0 for r in honest)


def test_without_a_relinearisation_key_the_selector_cannot_be_built(red_team):
    refused = [r for r in red_team if r.get("refused")]
    assert refused and all("relinearisation key" in r["refused"] for r in refused)


# --- least-capability keys --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def owner_keys(tmp_path_factory):
    from jobs.cli import main

    root = tmp_path_factory.mktemp("least")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "paper-4096"]) == 0
    return root


@pytest.mark.parametrize("chain, kept", [
    (["brightness:20"], {"context.bin", "public.key"}),
    (["brightness:20", "meanfilter:3"], {"context.bin", "public.key", "rotate.key"}),
    (["conv:sharpen"], {"context.bin", "public.key", "rotate.key"}),
])
def test_export_for_a_chain_gives_only_the_keys_it_needs(owner_keys, chain, kept):
    from hecore.seal.keys import read_info, read_public
    from jobs.cli import main

    out = owner_keys / ("pub-" + "-".join(s.replace(":", "") for s in chain))
    assert main(["export-public", "--keys", str(owner_keys / "keys"), "--out", str(out),
                 *[a for s in chain for a in ("--for-op", s)]]) == 0
    assert {p.name for p in out.iterdir()} == kept | {"hepix-keys.json"}
    material = read_public(out)                      # the fingerprint still names the whole key set
    assert material.fingerprint() == read_info(owner_keys / "keys").fingerprint
    assert (material.relin_key is None) and ((material.rotate_key is None) == ("rotate.key" not in kept))


def test_keygen_writes_the_cluster_s_copy_for_its_chain_alone(tmp_path, capsys):
    from hecore.seal.keys import read_info, read_public
    from jobs.cli import main

    keys, pub = tmp_path / "keys", tmp_path / "pub"
    assert main(["keygen", "--out", str(keys), "--preset", "paper-4096", "--op", "brightness:20",
                 "--op", "meanfilter:3", "--public-out", str(pub)]) == 0
    assert "meanfilter:3 and no others" in capsys.readouterr().out
    assert {p.name for p in pub.iterdir()} == {"context.bin", "public.key", "rotate.key", "hepix-keys.json"}
    assert (pub / "rotate.key").stat().st_size < (keys / "rotate.key").stat().st_size / 2
    material = read_public(pub)
    assert material.relin_key is None and material.fingerprint() == read_info(keys).fingerprint
    # a directory the copy cannot go to is refused before any key is made
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["keygen", "--out", str(tmp_path / "k2"), "--preset", "paper-4096",
                 "--public-out", str(tmp_path / "full")]) == 2
    assert not (tmp_path / "k2").exists() and "not empty" in capsys.readouterr().err


def test_a_withheld_key_put_back_or_a_context_withheld_is_refused(owner_keys):
    import json
    import shutil

    from hecore.errors import KeyDirectoryError
    from hecore.seal.keys import read_public
    from jobs.cli import main

    out = owner_keys / "pub-tamper"
    assert main(["export-public", "--keys", str(owner_keys / "keys"), "--out", str(out), "--for-op",
                 "brightness:1"]) == 0
    shutil.copy(owner_keys / "keys" / "relin.key", out / "relin.key")
    with pytest.raises(KeyDirectoryError, match="exported without it"):
        read_public(out)
    (out / "relin.key").unlink()
    doc = json.loads((out / "hepix-keys.json").read_text())
    doc["withheld"] = ["context.bin", "relin.key", "rotate.key"]
    (out / "hepix-keys.json").write_text(json.dumps(doc))
    with pytest.raises(KeyDirectoryError, match="withholds"):
        read_public(out)


def test_tfhe_keys_are_not_divided(tmp_path):
    from hecore.schemes.tfhe import TFHE

    with pytest.raises(ValueError, match="does not apply to TFHE"):
        TFHE.export_public(tmp_path / "k", tmp_path / "o", for_ops=["brightness:1"])


def test_an_unrelinearised_product_is_not_decrypted():
    """A cluster without the relinearisation key can still multiply two ciphertexts (three polynomials);
    the row checks refuse such a ciphertext by name, so keys exported for a linear chain allow no product."""
    from hecore.seal.checks import CiphertextChecker
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset

    ctx, _ = HEContext.generate(preset("paper-4096"), rotations=False)
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.arange(8.0)))
    check = CiphertextChecker.for_params(preset("paper-4096"))
    assert check.problem(ev.dump(c)) is None
    product = ev.multiply_raw(c, c, relinearize=False)
    found = check.problem(ev.dump(product))
    assert found is not None and found.reason == "ciphertext-size" and "3 polynomials" in found.detail


def test_no_product_at_the_level_a_declared_add_only_chain_is_stored_at():
    """docs/threat-model.md: ciphertexts stored for an add-only chain (one prime left) leave no room for a product,
    whatever keys the cluster holds -- SEAL refuses to make it."""
    from hecore.seal.context import HEContext
    from hecore.seal.evaluator import Evaluator
    from hecore.seal.params import preset

    ctx, _ = HEContext.generate(preset("paper-4096"), rotations=False)
    ev = Evaluator(ctx)
    c = ev.load(ctx.encrypt_vector(np.linspace(0, 255, 64), scale_bits=29, level=1))
    with pytest.raises(ValueError, match="scale out of bounds"):
        ev.multiply_raw(c, c)
