#!/usr/bin/env bash
# Unpack package.sh's packed environment once on this node, for every later application.
#
#   spark-submit/install-env.sh [--root DIR] [--no-check] ARCHIVE
#   spark-submit/install-env.sh --root /opt/hepix/envs dist/hepix-env.tar.gz
#     -> /opt/hepix/envs/hepix-env-<first 16 hex digits of the archive's SHA-256>
#
# Run it on every worker node (and, for k8s.sh, in the image build) with the same
# archive and root: the directory it prints is then the same on every node, and is
# what HEPIX_NODE_ENV names for standalone.sh, yarn.sh and k8s.sh, which then ship
# no environment with --archives and point the Python workers at
# HEPIX_NODE_ENV/bin/python (spark.pyspark.python).  Without it every application
# copies and unpacks the archive again, on the driver and on each executor.
#
# The directory is named by the archive's content, so a new archive is a new
# directory beside the old ones, which stay until you remove them (a running
# application may still use one).  Idempotent: a directory already installed from
# the same archive is checked and printed, nothing is unpacked.  Safe when several
# runs race on one node: they take a lock (flock), and the environment is unpacked
# into a private temporary directory and renamed into place whole, so no run ever
# sees half an environment.
#
# Every Python worker runs code from this directory, so whoever may write to it may
# run code in every job: the root and each directory above it must belong to root or
# to the installing user, the root must not be writable by group or others, and a
# directory above it only with the sticky bit (as /tmp).  An environment is unpacked
# without the archive's owners and modes (files 0644 and 0755 whatever it says),
# and an installed one that someone else could write to is refused.
#
# Before it is put in place the unpacked environment is run once: its python must
# start (it links to the interpreter it was packed from: the same Python at the
# same path on every node, or package.sh with HEPIX_PYTHON_PREFIX) and import
# hepix's core and its main dependencies.  --no-check skips that (a build machine
# without the nodes' Python).
#
# Prints the environment's directory on stdout, and nothing else.
#
# Environment:
#   HEPIX_NODE_ENV_ROOT  the default of --root (default /opt/hepix/envs)
set -euo pipefail

umask 022
root=${HEPIX_NODE_ENV_ROOT:-/opt/hepix/envs}
check=1
archive=''

usage() {
  cat <<EOF
usage: spark-submit/install-env.sh [--root DIR] [--no-check] ARCHIVE
  unpacks ARCHIVE (spark-submit/package.sh's hepix-env.tar.gz) once into DIR/hepix-env-<its hash>
  and prints that directory: set HEPIX_NODE_ENV to it for standalone.sh, yarn.sh and k8s.sh
  --root DIR    where the environments go (default: \$HEPIX_NODE_ENV_ROOT, else /opt/hepix/envs)
  --no-check    do not run the unpacked environment's python before putting it in place
EOF
}

die() {
  echo "install-env.sh: $*" >&2
  exit 1
}

while (( $# )); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --root) (( $# >= 2 )) || die "--root needs a directory"; root=$2; shift ;;
    --root=*) root=${1#--root=} ;;
    --no-check) check=0 ;;
    -*) usage >&2; die "unknown argument '$1'" ;;
    *) [[ -z $archive ]] || { usage >&2; die "one archive only, got '$archive' and '$1'"; }; archive=$1 ;;
  esac
  shift
done
[[ -n $archive ]] || { usage >&2; exit 2; }
[[ -f $archive && -r $archive ]] || die "no readable archive $archive (spark-submit/package.sh builds dist/hepix-env.tar.gz)"
[[ $root == /* ]] || die "--root must be an absolute path, got '$root'"
[[ $root =~ ^[^[:space:]=,#]+$ ]] || die "--root must not contain spaces, '=', ',' or '#' (it ends up in Spark settings), got '$root'"

me=$(id -u)

# owner_and_mode PATH: "UID OCTAL-MODE" of PATH itself (not of a link's target).
owner_and_mode() {
  stat -c '%u %a' -- "$1"
}

# safe_dir PATH WHAT: PATH is a real directory that only root or this user may change.
safe_dir() {
  local path=$1 what=$2 owner mode
  [[ -d $path && ! -L $path ]] || die "$what $path is not a directory"
  read -r owner mode < <(owner_and_mode "$path")
  [[ $owner == 0 || $owner == "$me" ]] \
    || die "$what $path belongs to uid $owner, neither root nor you (uid $me): refused"
  (( (8#$mode & 8#022) == 0 )) \
    || die "$what $path may be written by group or others (mode $mode): refused (chmod go-w $path)"
}

# safe_from DIR: DIR and every directory above it are root's or this user's, and writable by others only
# when sticky (/tmp).
safe_from() {
  local dir=$1 owner mode
  while :; do
    read -r owner mode < <(owner_and_mode "$dir")
    [[ $owner == 0 || $owner == "$me" ]] \
      || die "$dir (on the way to $root) belongs to uid $owner, neither root nor you (uid $me): refused"
    if (( (8#$mode & 8#022) != 0 && (8#$mode & 8#1000) == 0 )); then
      die "$dir (on the way to $root) may be written by group or others without the sticky bit (mode $mode): refused"
    fi
    [[ $dir == / ]] && break
    dir=$(dirname "$dir")
  done
}

# What exists of the way to the root is checked before anything is created on it, the whole way after.
existing=$root
while [[ ! -e $existing ]]; do
  existing=$(dirname "$existing")
done
safe_from "$(cd -P -- "$existing" && pwd)"
mkdir -p -- "$root" || die "cannot create $root"
root=$(cd -P -- "$root" && pwd) || die "cannot enter $root"
safe_from "$(dirname "$root")"
safe_dir "$root" "the root"

hash=$(sha256sum -- "$archive" | cut -c1-16)
[[ $hash =~ ^[0-9a-f]{16}$ ]] || die "could not hash $archive"
name=hepix-env-$hash
target=$root/$name
marker=.hepix-env-installed

# installed: the target is there, complete (its marker names this archive) and safe; dies when it is there
# but someone else's or incomplete.
installed() {
  [[ -e $target || -L $target ]] || return 1
  [[ -f $target/$marker && ! -L $target/$marker ]] && [[ $(head -n 1 "$target/$marker") == "$hash" ]] \
    || die "$target exists but was not installed from this archive by install-env.sh: remove it and run again"
  safe_dir "$target" "the environment"
  local writable
  writable=$(find "$target" -xdev ! -type l -perm /022 -print -quit)
  [[ -z $writable ]] || die "$writable may be written by group or others: refused (remove $target and run again)"
  [[ -x $target/bin/python ]] || die "$target has no bin/python: remove it and run again"
}

if installed; then
  echo "install-env.sh: $target is installed already" >&2
  echo "$target"
  exit 0
fi

# One unpacking at a time per archive on this node; a run that waited finds it installed.
exec {lock}>>"$root/.$name.lock"
flock "$lock" || die "could not lock $root/.$name.lock"
if installed; then
  echo "install-env.sh: $target was installed meanwhile" >&2
  echo "$target"
  exit 0
fi

work=$(mktemp -d "$root/.$name.XXXXXX") || die "cannot create a temporary directory in $root"
trap 'rm -rf -- "$work"' EXIT
echo "install-env.sh: unpacking $archive into $target" >&2
tar -xzf "$archive" -C "$work" --no-same-owner --no-same-permissions \
  || die "$archive does not unpack (is it package.sh's hepix-env.tar.gz?)"
chmod -R go-w,ug-s -- "$work"
chmod 755 -- "$work"
[[ -e $work/bin/python ]] \
  || die "$archive has no bin/python at its top: not a packed environment of spark-submit/package.sh"

if (( check )); then
  # -B: the check leaves no bytecode behind (the archive has its own, compiled where it was packed).
  (cd "$work" && ./bin/python -B -c 'import numpy, pyarrow, Pyfhel, hecore, schemas.tables') >&2 \
    || die "the unpacked environment does not run (see above): the nodes need the Python it was packed from" \
           "(the same version at the same path, or package.sh with HEPIX_PYTHON_PREFIX); --no-check skips this"
fi

printf '%s\n%s\n' "$hash" "$(basename "$archive")" >"$work/$marker"
chmod 644 -- "$work/$marker"
# Renamed whole: a directory that is there is complete.  -T: never into an existing directory.
mv -T -- "$work" "$target" || die "could not rename $work to $target"
trap - EXIT
echo "$target"
