#!/usr/bin/env bash
# Build the Pyfhel wheel offline and cache it outside the tracked tree.
#
#   tools/build_pyfhel.sh PYTHON CACHE_DIR
#
# Prints the path of the cached wheel.  A second run finds the wheel and
# returns at once.  The sdist comes from the package registry through pip;
# tools/patch_pyfhel_sdist.py makes its build use Debian's GSL, zlib and zstd
# instead of downloading them (Pyfhel's own build fetches them from the network).
set -euo pipefail

PYFHEL_VERSION=3.5.0
py=${1:?usage: build_pyfhel.sh PYTHON CACHE_DIR}
cache=${2:?usage: build_pyfhel.sh PYTHON CACHE_DIR}
here=$(cd "$(dirname "$0")" && pwd)

tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
mkdir -p "$cache/wheels"
shopt -s nullglob
found=("$cache"/wheels/pyfhel-${PYFHEL_VERSION}-${tag}-*.whl "$cache"/wheels/Pyfhel-${PYFHEL_VERSION}-${tag}-*.whl)
if (( ${#found[@]} )); then
  echo "${found[0]}"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build_pyfhel: downloading the Pyfhel ${PYFHEL_VERSION} sdist" >&2
"$py" -m pip download --quiet --no-deps --no-binary Pyfhel "Pyfhel==${PYFHEL_VERSION}" -d "$work" >&2
sdist=("$work"/[Pp]yfhel-${PYFHEL_VERSION}.tar.gz)
[[ -f "${sdist[0]}" ]] || { echo "build_pyfhel: no sdist downloaded into $work" >&2; exit 1; }
tar -xzf "${sdist[0]}" -C "$work"
src=("$work"/[Pp]yfhel-${PYFHEL_VERSION}/)
"$py" "$here/patch_pyfhel_sdist.py" "${src[0]}" >&2
echo "build_pyfhel: compiling SEAL and Pyfhel (about 5 minutes on 2 cores)" >&2
"$py" -m pip wheel --quiet --no-deps -w "$work/dist" "${src[0]}" >&2
built=("$work"/dist/*.whl)
[[ -f "${built[0]}" ]] || { echo "build_pyfhel: pip wheel produced no wheel" >&2; exit 1; }
# Copy then rename, so a half-written wheel is never taken for a cached one.
cp "${built[0]}" "$cache/wheels/.partial"
mv "$cache/wheels/.partial" "$cache/wheels/$(basename "${built[0]}")"
echo "$cache/wheels/$(basename "${built[0]}")"
