"""The Galois keys hepix makes under CKKS: every power-of-two rotation both ways, and no conjugation key.

SEAL's default set (Pyfhel's ``rotateKeyGen``) adds the key of the complex conjugation, Galois element 2N - 1,
which no hepix op takes.  With it a cluster can split a slot's real part from its imaginary part
((z + conj z) / 2, (z - conj z) / 2) and graft one ciphertext's imaginary parts -- the keyed check values of
``encrypt --bind`` (hecore/binding.py) -- onto another's real parts; every value it can compute without it is
a polynomial of the slots with complex coefficients, which cannot.  Read back with the native extension's
``galois_elements``.
"""
from __future__ import annotations

import numpy as np
import pytest

from hecore.seal.galois import conjugation_element, whole_set_steps
from hecore.seal.native import native_module, pyfhel_for, seal_context_bytes
from hecore.seal.params import preset
from hecore.seal.steps import whole_set_keys


def elements(context: bytes, rotate_key: bytes) -> set[int]:
    security, _, seal_bytes = seal_context_bytes(context)
    return set(native_module().galois_elements(seal_bytes, rotate_key, security))


def rotation_element(step: int, n: int) -> int:
    """SEAL's Galois element of a rotation by ``step`` slots at ring degree ``n``: 3^step mod 2n."""
    return pow(3, step % (n // 2), 2 * n)


@pytest.mark.parametrize("slots", [1024, 2048, 4096, 8192])
def test_the_whole_set_is_every_power_of_two_both_ways_the_half_way_step_once(slots):
    steps = whole_set_steps(slots)
    assert len(steps) == whole_set_keys(slots)
    assert {abs(s) for s in steps} == {1 << k for k in range(slots.bit_length() - 1)}
    assert slots // 2 in steps and -(slots // 2) not in steps and 0 not in steps


def test_ckks_keys_hold_every_power_of_two_rotation_and_no_conjugation_key(he_paper4096):
    ctx, _ = he_paper4096
    n, slots = ctx.params.n, ctx.params.slots
    held = elements(ctx.public.context, ctx.public.rotate_key)
    assert held == {rotation_element(s, n) for s in whole_set_steps(slots)}
    assert conjugation_element(n) not in held
    # SEAL's own default set, for the same parameters, holds it: what the keys above leave out
    he = pyfhel_for(ctx.params)
    he.keyGen()
    he.rotateKeyGen()
    default = elements(ctx.public.context, he.to_bytes_rotate_key(compr_mode="zstd"))
    assert default == held | {conjugation_element(n)}


def test_any_rotation_is_still_composed_from_them(he_paper4096):
    from hecore.seal.evaluator import Evaluator

    ctx, _ = he_paper4096
    slots = ctx.params.slots
    ev = Evaluator(ctx)
    values = np.arange(slots, dtype=np.float64) % 251
    c = ev.load(ctx.encrypt_vector(values))
    for step in (1, -1, 3, -5, 77, 513, -1023, slots // 2):
        got = ctx.decrypt_slots(ev.rotate(c, step), slots)
        assert np.abs(got - np.roll(values, -step)).max() < 1e-3, step


def test_hepix_keygen_and_its_public_copies_hold_no_conjugation_key(tmp_path):
    from jobs.cli import main

    keys, pub, chain = tmp_path / "keys", tmp_path / "pub", tmp_path / "chain"
    assert main(["keygen", "--out", str(keys), "--preset", "paper-4096"]) == 0
    assert main(["export-public", "--keys", str(keys), "--out", str(pub)]) == 0
    assert main(["export-public", "--keys", str(keys), "--out", str(chain), "--for-op", "meanfilter:3"]) == 0
    n = preset("paper-4096").n
    for d in (keys, pub, chain):
        held = elements((d / "context.bin").read_bytes(), (d / "rotate.key").read_bytes())
        assert held and conjugation_element(n) not in held, d


def test_exporting_a_key_set_that_holds_the_conjugation_key_warns_by_name(tmp_path, monkeypatch, caplog):
    """A key directory made by an earlier hepix (SEAL's default Galois set, here made so by patching keygen) is
    exported with a warning naming it; its copy for a chain's steps holds no conjugation key, and hepix's own
    keys export without a warning."""
    import logging

    from hecore.seal import context
    from hecore.seal.keys import holds_conjugation, read_public
    from jobs.cli import main

    def seal_default(he, params):
        he.rotateKeyGen()
        return he.to_bytes_rotate_key(compr_mode="zstd")

    old, new = tmp_path / "old", tmp_path / "new"
    with monkeypatch.context() as m:
        m.setattr(context, "_whole_rotation_set", seal_default)
        assert main(["keygen", "--out", str(old), "--preset", "paper-4096"]) == 0
    assert main(["keygen", "--out", str(new), "--preset", "paper-4096"]) == 0
    assert holds_conjugation(read_public(old)) and not holds_conjugation(read_public(new))
    with caplog.at_level(logging.WARNING):
        assert main(["export-public", "--keys", str(old), "--out", str(tmp_path / "old-pub")]) == 0
    assert f"{old} holds SEAL's conjugation key" in caplog.text
    assert holds_conjugation(read_public(tmp_path / "old-pub"))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["export-public", "--keys", str(old), "--out", str(tmp_path / "old-chain"),
                     "--for-op", "meanfilter:3"]) == 0
        assert main(["export-public", "--keys", str(new), "--out", str(tmp_path / "new-pub")]) == 0
    assert "conjugation" not in caplog.text
    assert not holds_conjugation(read_public(tmp_path / "old-chain"))
