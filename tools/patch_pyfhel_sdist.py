"""Patch an unpacked Pyfhel 3.5 sdist so that it builds offline.

Pyfhel's build asks SEAL's CMake to fetch Microsoft GSL, zlib and zstd from the
network.  On our machines those come from Debian packages instead
(libmsgsl-dev, zlib1g-dev, libzstd-dev), so we

1. turn ``SEAL_BUILD_DEPS`` off in ``[cpplibraries.SEAL.cmake_opts]``;
2. append ``-lzstd`` and ``-lz`` to the Linux ``extra_link_args`` of both
   ``[cpplibraries.Afhel]`` and ``[extensions.config]``.  (Appending them to
   ``libraries`` instead puts them before ``-lseal`` on the link line and the
   import then fails with ``undefined symbol: deflateInit_``.)

The edits are textual and exact: if the sdist's layout has changed so that
any expected line is missing (or found more than the expected number of
times), the script stops with an error naming the line, rather than
producing a build that silently goes online or links wrongly.

Usage: python patch_pyfhel_sdist.py UNPACKED_SDIST_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

EXPECTED_VERSION = 'version = "3.5.0"'
CMAKE_ANCHOR = "SEAL_USE_ZSTD\t= 'ON'"
LINUX_LINK = '{Linux = ["-Wl,-rpath=$ORIGIN/.", "-fopenmp"]}'
LINUX_LINK_PATCHED = '{Linux = ["-Wl,-rpath=$ORIGIN/.", "-fopenmp", "-lzstd", "-lz"]}'
MARKER = "# patched by hepix: offline build"


class LayoutChanged(SystemExit):
    pass


def _fail(path: Path, what: str) -> None:
    raise LayoutChanged(
        f"patch_pyfhel_sdist: {path}: {what}. The Pyfhel sdist layout is not the one "
        "this patch was written for (Pyfhel 3.5.0); update tools/patch_pyfhel_sdist.py."
    )


def patch(sdist_dir: Path) -> bool:
    """Patch ``sdist_dir/pyproject.toml`` in place; return False if already patched."""
    path = sdist_dir / "pyproject.toml"
    if not path.is_file():
        _fail(path, "file not found")
    text = path.read_text()
    if MARKER in text:
        return False
    if EXPECTED_VERSION not in text:
        _fail(path, f"expected the line {EXPECTED_VERSION!r}")
    if "SEAL_BUILD_DEPS" in text:
        _fail(path, "SEAL_BUILD_DEPS is already set; refusing to guess which value wins")
    if text.count(CMAKE_ANCHOR) != 1:
        _fail(path, f"expected exactly one line containing {CMAKE_ANCHOR!r}, found {text.count(CMAKE_ANCHOR)}")
    # Two occurrences: [cpplibraries.Afhel] and [extensions.config].
    if text.count(LINUX_LINK) != 2:
        _fail(path, f"expected the Linux link arguments {LINUX_LINK!r} twice, found {text.count(LINUX_LINK)}")

    lines = text.splitlines(keepends=True)
    out = []
    for line in lines:
        out.append(line)
        if CMAKE_ANCHOR in line:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}SEAL_BUILD_DEPS = 'OFF'  {MARKER}\n")
    text = "".join(out).replace(LINUX_LINK, LINUX_LINK_PATCHED)
    path.write_text(text)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    changed = patch(Path(argv[1]))
    print("patched" if changed else "already patched", argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
