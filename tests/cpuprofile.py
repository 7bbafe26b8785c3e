"""Where the test run's CPU goes, test by test (Linux: it reads ``/proc``).

``HEPIX_TEST_CPU_PROFILE=DIR make test``: every test process appends to ``DIR/cpu-<pid>.jsonl``, for each
test, the CPU seconds its whole process tree spent on it (the process, and the JVMs, Python workers and
commands it started that are still its descendants), with the test's setup and teardown, and its wall
seconds; the process that started the run writes the machine's busy CPU seconds over the run to
``DIR/machine.json``.  ``python tests/cpuprofile.py DIR`` sums the tests by file, largest first, and says how
much of the machine's CPU the tests' trees account for (the rest: collection, the processes' start and end,
daemons that left the tree -- a test cluster's -- and whatever else ran on the machine).

Not a test module: ``tests/conftest.py`` registers it as a plugin (an environment variable, not an option,
because pytest-xdist's processes parse their options before they read the conftest).
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its descendants: their own and their reaped children's."""
    children: dict[int, list[tuple[int, list[str]]]] = defaultdict(list)
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (fields := _fields(pid)) is not None:
            children[int(fields[1])].append((int(pid), fields))
    own = _fields(str(root))
    ticks = sum(int(x) for x in own[11:15]) if own else 0
    stack = [root]
    while stack:
        for pid, fields in children.get(stack.pop(), []):
            ticks += sum(int(x) for x in fields[11:15])
            stack.append(pid)
    return ticks / _TICKS


def machine_busy() -> float:
    """Busy CPU seconds of the machine since boot (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / _TICKS


#: The directory the profile goes to; unset or empty: no profile.
ENV = "HEPIX_TEST_CPU_PROFILE"


def _out(config) -> Path | None:
    where = os.environ.get(ENV, "")
    return Path(where) if where else None


def pytest_configure(config):
    out = _out(config)
    if out is None:
        return
    if not Path("/proc/stat").exists():
        raise pytest.UsageError(f"{ENV}: the profile reads /proc, which this system has not")
    out.mkdir(parents=True, exist_ok=True)
    if not hasattr(config, "workerinput"):          # the process that started the run
        config._cpu_profile_start = (machine_busy(), time.monotonic())


def pytest_unconfigure(config):
    out, start = _out(config), getattr(config, "_cpu_profile_start", None)
    if out is not None and start is not None:
        (out / "machine.json").write_text(json.dumps({"busy_cpu_s": machine_busy() - start[0],
                                                      "wall_s": time.monotonic() - start[1]}))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = _out(item.config)
    if out is None:
        yield
        return
    cpu, wall = tree_cpu(os.getpid()), time.monotonic()
    yield
    record = {"test": item.nodeid, "cpu_s": round(tree_cpu(os.getpid()) - cpu, 3),
              "wall_s": round(time.monotonic() - wall, 3)}
    with open(out / f"cpu-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def summary(directory: Path, top: int = 30) -> str:
    """The tests' CPU by file, largest first, and how much of the machine's busy CPU they account for."""
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for part in sorted(directory.glob("cpu-*.jsonl")):
        for line in part.read_text().splitlines():
            r = json.loads(line)
            f = files[r["test"].split("::")[0]]
            f[0] += r["cpu_s"]
            f[1] += r["wall_s"]
            f[2] += 1
    total = sum(f[0] for f in files.values())
    lines = [f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  file"]
    for name, (cpu, wall, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {n:6d}  {name}")
    lines.append(f"{total:8.1f} {'':8} {sum(f[2] for f in files.values()):6d}  all tests ({len(files)} files)")
    machine = directory / "machine.json"
    if machine.exists():
        m = json.loads(machine.read_text())
        lines.append(f"the machine: {m['busy_cpu_s']:.0f} busy CPU s over {m['wall_s']:.0f} s; the tests' process "
                     f"trees account for {total / max(m['busy_cpu_s'], 1e-9):.0%}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(f"usage: python tests/cpuprofile.py DIR   (DIR: what {ENV}=DIR make test wrote)")
    print(summary(Path(sys.argv[1])))
