"""bench.seeds: every reference figure once, with its paper and where in it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import seeds

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"


def _figures():
    out = [v for v in vars(seeds).values() if isinstance(v, seeds.Figure)]
    for v in vars(seeds).values():
        if isinstance(v, dict):
            for x in v.values():
                if isinstance(x, seeds.Figure):
                    out.append(x)
                elif hasattr(x, "__dataclass_fields__"):
                    out += [getattr(x, f) for f in x.__dataclass_fields__ if isinstance(getattr(x, f), seeds.Figure)]
    return out


def test_every_figure_cites_one_of_the_papers_and_a_place_in_it():
    figures = _figures()
    assert len(figures) > 60
    for f in figures:
        assert f.paper in seeds.PAPERS and f.where and f.what
        assert f.source.startswith(f.paper.short)
    assert {f.paper for f in figures} == set(seeds.PAPERS)


def test_papers_are_cited_by_title():
    assert seeds.DFT_PAPER.cite() == ('A. Costache, N. P. Smart, S. Vivek, '
                                      '"Faster Homomorphic Evaluation of Discrete Fourier Transforms"')
    assert seeds.ZINC.cite().startswith('"At Least Factor-of-Two Optimization')


def test_the_dft_paper_s_table_3():
    assert {n: f.value for n, f in seeds.DFT_SECONDS.items()} == {
        16: 0.46, 64: 2.08, 256: 9.43, 1024: 104.12, 4096: 464.44, 8192: 1026.1}


@pytest.mark.parametrize("key", sorted(seeds.INFERENCE))
def test_the_ml_paper_s_throughput_is_its_per_sample_latency_inverted(key):
    """Its figures are per sample (no batching): samples/s = 1000 / latency ms, to the printed digits;
    so its latency is compared with one sample alone."""
    fig = seeds.INFERENCE[key]
    assert fig.samples_per_second.value == pytest.approx(1000 / fig.latency_ms.value, rel=0.01)


def test_icheetah_cases_and_table_3():
    assert seeds.ICHEETAH_CASES["matching"].fresh_seconds.value == 826.19
    assert seeds.ICHEETAH_CASES["meanfilter"].size == 64
    d = {k: f.value for k, f in seeds.MATCHING_DISTANCES.items()}
    assert d["d12"] < d["d23"] < d["d13"] and d["d12"] == 11075.62


def test_reference_figures_live_only_in_seeds():
    """The papers' numbers appear in bench only in seeds.py."""
    pattern = re.compile(r"11075|826\.19|1026\.1|2055\.09|80\.87|0\.9991|48\.7|17\.57|0\.476|51\.30|464\.44")
    for path in sorted(BENCH_DIR.rglob("*.py")):
        if path.name != "seeds.py":
            assert not pattern.search(path.read_text()), path


def test_no_paper_is_called_by_number():
    for path in sorted(BENCH_DIR.rglob("*.py")):
        assert not re.search(r"seed ?0\d\d|seed00\d", path.read_text(), re.IGNORECASE), path
