#!/usr/bin/env bash
# Build hepix's TFHE extension (native/tfhe: hepix_tfhe, a PyO3 module over tfhe-rs) with maturin
# and cache the wheel outside the tracked tree.
#
#   tools/build_tfhe.sh PYTHON CACHE_DIR
#
# Prints the path of the cached wheel, CACHE_DIR/tfhe/<key>/hepix_tfhe-*.whl.  The key covers the
# crate's sources, Cargo.toml and Cargo.lock, pyproject.toml, this script, `rustc -V`, `cargo -V`
# and the Python tag, so a second run with nothing changed returns at once.  Cargo's target
# directory is kept in CACHE_DIR/tfhe-target: a change to the crate's own sources recompiles the
# crate only, not tfhe-rs (whose cold release build takes several minutes and about 4 GB of
# compiler memory).  Needs a Rust toolchain >= 1.91.1 (tfhe-rs 1.8's minimum; rustup's stable
# is fine, Debian's rustc is too old) and crates.io; maturin comes from PyPI into PYTHON's
# environment.
set -euo pipefail

py=${1:?usage: build_tfhe.sh PYTHON CACHE_DIR}
cache=${2:?usage: build_tfhe.sh PYTHON CACHE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
crate="$root/native/tfhe"

# rustup installs into ~/.cargo/bin, which a non-login shell (make) may not have on PATH.
if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 || {
  echo "build_tfhe: no Rust toolchain (cargo, rustc) on PATH; install one >= 1.91.1 with rustup" >&2
  exit 1
}

tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
key=$( { cat "$crate"/Cargo.toml "$crate"/Cargo.lock "$crate"/pyproject.toml "$crate"/src/*.rs "$0"; \
         rustc -V; cargo -V; echo "$tag"; } | sha256sum | cut -c1-16)
dest="$cache/tfhe/$key"
shopt -s nullglob
found=("$dest"/hepix_tfhe-*.whl)
if (( ${#found[@]} )); then
  echo "${found[0]}"
  exit 0
fi

"$py" -m pip install --quiet "maturin>=1.8,<2" >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build_tfhe: building hepix_tfhe (tfhe-rs; the first build takes several minutes)" >&2
start=$(date +%s)
# One build at a time: tfhe-rs alone needs about 4 GB of compiler memory.
mkdir -p "$cache"
exec 9>"$cache/tfhe-build.lock"
flock 9
CARGO_TARGET_DIR="$cache/tfhe-target" HEPIX_BUILD_KEY="$key" \
  "$py" -m maturin build --release --locked --interpreter "$py" \
  --manifest-path "$crate/Cargo.toml" --out "$work/dist" >&2
built=("$work"/dist/hepix_tfhe-*.whl)
[[ -f "${built[0]}" ]] || { echo "build_tfhe: maturin produced no wheel" >&2; exit 1; }
mkdir -p "$dest"
cp "${built[0]}" "$dest/.partial"
mv "$dest/.partial" "$dest/$(basename "${built[0]}")"
echo "build_tfhe: built in $(( $(date +%s) - start )) s" >&2
echo "$dest/$(basename "${built[0]}")"
