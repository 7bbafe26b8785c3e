"""hecore.planner: the smallest preset that runs an op chain in a layout, and the messages of check()."""
from __future__ import annotations

import re

import pytest

from hecore.errors import InvalidParameters
from hecore.ops.spec import parse_match, parse_ops
from hecore.planner import check, describe_plan, plan, problems, requirements
from hecore.seal.params import PRESETS, preset


def _plan(specs, layout, match=None, scheme=None):
    return [p.name for p in plan(parse_ops(specs), layout, scheme=scheme,
                                 match=parse_match(match) if match else None)]


def _check(name, specs, layout, match=None):
    check(preset(name), parse_ops(specs), layout, parse_match(match) if match else None)


@pytest.mark.parametrize("layout", ["pixel", "packed"])
@pytest.mark.parametrize("specs", [[], ["brightness:50"], ["brightness:-30", "watermark:3,4,5"], ["contrast:1.5"]])
def test_add_only_chains_get_addonly_2048(layout, specs):
    assert _plan(specs, layout)[0] == "addonly-2048"


def test_the_pixel_layout_needs_no_rotations_for_a_mean_filter():
    assert _plan(["meanfilter:3"], "pixel")[0] == "addonly-2048"


@pytest.mark.parametrize("specs", [["meanfilter:3"], ["brightness:20", "watermark:1,1,5", "meanfilter:3", "contrast:0.5"],
                                   ["meanfilter:2"]])
def test_a_packed_mean_filter_gets_paper_4096(specs):
    got = _plan(specs, "packed")
    assert got[0] == "paper-4096"
    assert "addonly-2048" not in got                            # no rotations there


@pytest.mark.parametrize("layout", ["pixel", "packed"])
def test_match_l2_gets_tenseal_8192(layout):
    got = _plan([], layout, "match:q,l2")
    assert got[0] == "tenseal-8192"
    assert all(PRESETS[n].n >= 8192 for n in got)


@pytest.mark.parametrize("match", ["match:q,l1", "match:q"])
@pytest.mark.parametrize("specs", [[], ["brightness:20", "meanfilter:3"]])
def test_match_l1_gets_match_8192(match, specs):
    got = _plan(specs, "packed", match)
    assert got[0] == "match-8192"
    assert set(got) <= {"match-8192", "dft-8192", "dft-16384"}    # the DFT presets have the levels too


def test_plans_are_sorted_smallest_first_ckks_before_bfv_before_bgv():
    got = _plan(["brightness:50"], "packed")
    assert got == ["addonly-2048", "paper-4096", "bfv-4096", "bgv-4096", "tenseal-8192", "match-8192",
                   "dft-8192", "bfv-8192", "bgv-8192", "dft-16384", "lut-16384"]


def test_integer_schemes():
    assert _plan(["meanfilter:3"], "packed", scheme="bfv") == ["bfv-4096", "bfv-8192"]
    assert _plan([], "packed", "match:q,l2", scheme="bfv") == ["bfv-8192"]   # a multiplication: N=8192
    assert _plan([], "packed", "match:q,l2", scheme="bgv") == ["bgv-8192"]
    assert _plan(["contrast:1.5"], "packed", scheme="bfv") == []           # raw constant -42.67
    assert _plan(["meanfilter:3", "contrast:1.5"], "packed", scheme="bfv")[0] == "bfv-4096"   # -384
    assert _plan(["brightness:50"], "pixel", scheme="bfv") == []           # the pixel layout is CKKS-only
    assert _plan([], "packed", "match:q,l1", scheme="bgv") == []


def test_the_integer_bound_is_half_the_real_plaintext_prime():
    # bfv-4096's t is 1032193 < 2^20: raw values must stay within 516096, not 2^19 = 524288.
    t_half = (preset("bfv-4096").plain_modulus - 1) // 2
    assert t_half == 516096
    ok = requirements(parse_ops(["meanfilter:44"]), "packed")           # 255 x 44^2 = 493680
    over = requirements(parse_ops(["meanfilter:45"]), "packed")         # 255 x 45^2 = 516375 < 2^19
    assert ok.integer_bound <= t_half < over.integer_bound < 2**19
    assert not problems(preset("bfv-4096"), ok)
    assert any("overflow t/2 = 516096" in w for w in problems(preset("bfv-4096"), over))


def test_requirements():
    req = requirements(parse_ops(["brightness:20", "meanfilter:3"]), "packed", parse_match("match:q,l1"))
    assert req.layout == "packed" and req.depth == 3 and req.multiplies and req.rotations
    assert req.raw_bound == 275 * 9
    assert not req.integer_ok and "L1" in req.why_not_integer
    req = requirements(parse_ops(["contrast:1.5"]), "packed")
    assert req.fractional == ["contrast:1.5"] and not req.integer_ok
    assert not req.multiplies and not req.rotations and req.depth == 0
    with pytest.raises(InvalidParameters, match=r"unknown layout 'tiles'"):
        requirements([], "tiles")


# --- check() -----------------------------------------------------------------------------------

def _named_preset(msg: str) -> str:
    m = re.search(r"`hepix keygen --preset ([\w-]+)`", msg)
    assert m, f"no preset named in: {msg}"
    return m.group(1)


@pytest.mark.parametrize("name, specs, layout, match, why, works", [
    ("addonly-2048", ["meanfilter:3"], "packed", None, r"no key switching \(needed for rotations\)", "paper-4096"),
    ("addonly-2048", [], "packed", "match:q,l2", r"no key switching \(needed for multiplication\)", "tenseal-8192"),
    ("paper-4096", [], "pixel", "match:q,l2", r"after 1 rescale\(s\) do not fit", "tenseal-8192"),
    ("tenseal-8192", [], "packed", "match:q,l1", r"needs 3 level\(s\), tenseal-8192 has 2", "match-8192"),
    ("bfv-8192", [], "packed", "match:q,l1", r"BFV cannot: L1 needs an approximation of \|x\|", "match-8192"),
    ("bgv-8192", [], "packed", "match:q", r"BGV cannot", "match-8192"),
    ("bfv-4096", [], "packed", "match:q,l2", r"too little noise budget below N=8192", "bfv-8192"),
    ("bfv-4096", ["contrast:1.5"], "packed", None, r"contrast:1\.5 add non-integer raw values", "addonly-2048"),
    ("bgv-4096", ["brightness:5"], "pixel", None, r"the pixel layout is CKKS-only", "addonly-2048"),
])
def test_check_refuses_naming_a_preset_that_works(name, specs, layout, match, why, works):
    with pytest.raises(InvalidParameters) as info:
        _check(name, specs, layout, match)
    msg = str(info.value)
    chain = " | ".join(specs + ([match] if match else [])) or "(no ops)"
    assert msg.startswith(f"{chain} in the {layout} layout cannot run on {name}: "), msg
    assert re.search(why, msg), msg
    assert _named_preset(msg) == works, msg
    assert PRESETS[works].describe() in msg
    _check(works, specs, layout, match)                  # the preset named does run it


def test_check_prefers_a_preset_of_the_same_scheme():
    with pytest.raises(InvalidParameters) as info:
        _check("bfv-4096", [], "packed", "match:q,l2")
    assert _named_preset(str(info.value)) == "bfv-8192"


def test_check_when_no_preset_can():
    with pytest.raises(InvalidParameters, match=r"no preset can; split the chain or use the other layout"):
        _check("match-8192", ["brightness:1e95"], "packed")


@pytest.mark.parametrize("name, specs, layout, match", [
    ("addonly-2048", ["brightness:50", "meanfilter:3"], "pixel", None),
    ("paper-4096", ["meanfilter:3"], "packed", None),
    ("bfv-4096", ["brightness:20", "meanfilter:3", "contrast:0.5"], "packed", None),
    ("tenseal-8192", [], "packed", "match:q,l2"),
    ("bfv-8192", [], "packed", "match:q,l2"),
    ("match-8192", ["meanfilter:5"], "packed", "match:q"),
])
def test_check_accepts_what_fits(name, specs, layout, match):
    _check(name, specs, layout, match)


# --- describe_plan -------------------------------------------------------------------------------

def test_describe_plan_lists_every_preset_with_its_verdict():
    text = describe_plan(parse_ops(["meanfilter:3"]), "packed")
    lines = text.splitlines()
    assert len(lines) == len(PRESETS)
    for name, p in PRESETS.items():
        (line,) = [ln for ln in lines if re.search(rf"\s{re.escape(name)}\s", ln)]
        assert p.describe() in line
        verdict = "no " if problems(p, requirements(parse_ops(["meanfilter:3"]), "packed")) else "ok "
        assert line.strip().startswith(verdict.strip()), line
    (addonly,) = [ln for ln in lines if "addonly-2048" in ln]
    assert addonly.strip().startswith("no") and "-- addonly-2048 has no key switching" in addonly
    assert [ln for ln in lines if "paper-4096" in ln][0].strip().startswith("ok")


def test_describe_plan_for_one_scheme():
    lines = describe_plan([], "packed", scheme="bgv", match=parse_match("match:q,l2")).splitlines()
    assert [ln.split()[1] for ln in lines] == ["bgv-4096", "bgv-8192"]
    assert lines[0].strip().startswith("no") and lines[1].strip().startswith("ok")
