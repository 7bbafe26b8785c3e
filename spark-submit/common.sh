# shellcheck shell=bash disable=SC2034  # (variables set here are used by the sourcing scripts)
# Shared by local.sh, standalone.sh, yarn.sh and k8s.sh: sourced, never run.
#
# The caller sets `hepix_script` (its own name, for messages) before sourcing.
# Nothing here reads credentials: the only key material a job sees is the key
# directory the user passes with --keys.
#
# Environment understood by every submit script:
#   HEPIX_TRUSTED_CLUSTER=1  the cluster may hold the secret key (see hepix_refuse_secret_jobs)
#   HEPIX_VENV         the project's virtualenv (default: .venv beside spark-submit/)
#   HEPIX_DIST         where package.sh put its archives (default: dist/ beside spark-submit/)
#   HEPIX_ENV_ARCHIVE  standalone.sh and yarn.sh: the packed environment already on the
#                      cluster's file system (hdfs://..., s3a://...), shipped by URL
#                      instead of HEPIX_DIST's copy being uploaded with every application
#   HEPIX_NODE_ENV     standalone.sh, yarn.sh and k8s.sh: the packed environment already
#                      unpacked at this absolute path on every node (install-env.sh prints
#                      it; in the image for k8s.sh): nothing is shipped with --archives,
#                      the Python workers run HEPIX_NODE_ENV/bin/python (hepix_env_choice)
#   HEPIX_PROPERTIES   Spark properties file (default: conf/spark-hepix.conf)
#   HEPIX_DRIVER_MEMORY  driver memory (default 4g)
#   HEPIX_SPARK_OPTS   extra spark-submit options, split on whitespace
#                      (e.g. "--conf spark.executor.memory=8g --num-executors 4")
#   HEPIX_DRY_RUN=1    print the spark-submit command instead of running it

hepix_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hepix_root=$(cd "$hepix_here/.." && pwd)
hepix_venv=${HEPIX_VENV:-$hepix_root/.venv}
hepix_dist=${HEPIX_DIST:-$hepix_root/dist}
hepix_props=${HEPIX_PROPERTIES:-$hepix_root/conf/spark-hepix.conf}
hepix_main=$hepix_here/hepix_main.py
hepix_driver_memory=${HEPIX_DRIVER_MEMORY:-4g}
# The packed virtualenv, unpacked by Spark as ./env in every container (--archives ...#env),
# or already unpacked on every node (HEPIX_NODE_ENV; see hepix_env_choice).
hepix_env_python=./env/bin/python
hepix_node_env=''

hepix_die() {
  # shellcheck disable=SC2154  # set by the sourcing script
  echo "$hepix_script: $*" >&2
  exit 1
}

# hepix_usage SETTINGS_LINE...: the usage text, one extra line per argument.
hepix_usage() {
  echo "usage: spark-submit/$hepix_script COMMAND [ARGS...]"
  echo "  runs 'hepix COMMAND ARGS...' through spark-submit; COMMAND is encrypt, process, decrypt, ..."
  echo "  e.g. spark-submit/$hepix_script encrypt --keys PUBLIC_KEYS --input IMAGES --out CIPHERTEXTS"
  local line
  for line in "$@"; do
    echo "  $line"
  done
  echo "  HEPIX_SPARK_OPTS: extra spark-submit options; HEPIX_DRY_RUN=1: print the command only"
}

# hepix_check_args USAGE_LINES... -- "$@": usage and exit 2 without a command,
# usage and exit 0 for -h/--help as the first argument.  Sets hepix_command to
# the hepix command (hepix's own -v/-vv/--verbose may come before it).
hepix_check_args() {
  local lines=()
  while (( $# )) && [[ $1 != -- ]]; do
    lines+=("$1")
    shift
  done
  shift   # the --
  if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    hepix_usage "${lines[@]}"
    exit 0
  fi
  while [[ ${1:-} =~ ^(-v+|--verbose)$ ]]; do
    shift
  done
  if (( $# == 0 )); then
    hepix_usage "${lines[@]}" >&2
    exit 2
  fi
  if [[ $1 == -* ]]; then
    hepix_usage "${lines[@]}" >&2
    hepix_die "expected a hepix command, not the option '$1' (spark-submit options go in HEPIX_SPARK_OPTS)"
  fi
  hepix_command=$1
}

# The trust boundary.  The jobs that hold the secret key -- `decrypt` and
# `encrypt --encryption symmetric`, which ship it to their executors -- and
# `keygen` (which writes one) and `export-public` (which reads the directory
# holding one) belong on the data owner's machine (local.sh), not on a shared
# cluster.  HEPIX_TRUSTED_CLUSTER=1 says this cluster may hold the secret key;
# it is then passed on to the driver (hepix checks it again there: the same
# switch as `hepix --trusted-cluster`), and `hepix_trusted` is set to 1.
#   hepix_refuse_secret_jobs COMMAND [ARGS...]
hepix_trusted=0
hepix_refuse_secret_jobs() {
  local command=$1 secret=0 prev='' arg opt
  shift
  case $command in
    decrypt|keygen|export-public) secret=1 ;;
    encrypt)
      # --encryption symmetric, --encryption=symmetric, or an abbreviation argparse accepts (--encr ...)
      for arg in "$@"; do
        opt=${arg%%=*}
        if [[ ${#opt} -ge 3 && --encryption == "$opt"* && $arg == *=symmetric ]]; then
          secret=1
        elif [[ ${#prev} -ge 3 && --encryption == "$prev"* && $arg == symmetric ]]; then
          secret=1
        fi
        prev=$arg
      done
      ;;
  esac
  (( secret )) || return 0
  if [[ ${HEPIX_TRUSTED_CLUSTER:-0} == 1 ]]; then
    export HEPIX_TRUSTED_CLUSTER=1
    hepix_trusted=1
    return 0
  fi
  local what="'$command'"
  [[ $command == encrypt ]] && what="'encrypt --encryption symmetric'"
  hepix_die "$what handles the secret key; run it on the data owner's machine with spark-submit/local.sh" \
    "(or set HEPIX_TRUSTED_CLUSTER=1 if this cluster may hold the secret key)"
}

hepix_venv_python() {
  [[ -x $hepix_venv/bin/python ]] \
    || hepix_die "no virtualenv at $hepix_venv: run 'make setup' first (or set HEPIX_VENV)"
  echo "$hepix_venv/bin/python"
}

# The spark-submit of the venv's pyspark installation.
hepix_venv_spark_submit() {
  local py pyspark_dir
  py=$(hepix_venv_python)
  pyspark_dir=$("$py" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))') \
    || hepix_die "$py cannot import pyspark: run 'make setup' first"
  [[ -x $pyspark_dir/bin/spark-submit ]] || hepix_die "no spark-submit in $pyspark_dir/bin"
  echo "$pyspark_dir/bin/spark-submit"
}

# For a cluster: $SPARK_SUBMIT, else the cluster's $SPARK_HOME/bin/spark-submit,
# else the venv's (pyspark's pip package submits to YARN and Kubernetes too).
hepix_cluster_spark_submit() {
  if [[ -n ${SPARK_SUBMIT:-} ]]; then
    echo "$SPARK_SUBMIT"
  elif [[ -n ${SPARK_HOME:-} && -x $SPARK_HOME/bin/spark-submit ]]; then
    echo "$SPARK_HOME/bin/spark-submit"
  else
    hepix_venv_spark_submit
  fi
}

# Where the Python workers' environment comes from.  With HEPIX_NODE_ENV, from a
# directory already unpacked on every node (spark-submit/install-env.sh): sets
# `hepix_node_env` and `hepix_env_python` (its bin/python) and ships nothing; Spark's
# spark.pyspark.python then names that interpreter.  Else from the packed archive,
# which every application ships with --archives ...#env and every container unpacks
# as ./env.  Sets `hepix_archive_opts` to the --archives words (none with a node env).
hepix_env_choice() {
  hepix_archive_opts=()
  if [[ -n ${HEPIX_NODE_ENV:-} ]]; then
    [[ -z ${HEPIX_ENV_ARCHIVE:-} ]] \
      || hepix_die "set HEPIX_NODE_ENV (an environment unpacked on every node) or HEPIX_ENV_ARCHIVE" \
                   "(an archive shipped with each application), not both"
    [[ $HEPIX_NODE_ENV =~ ^/[^[:space:]=,#]*$ ]] \
      || hepix_die "HEPIX_NODE_ENV must be the absolute path of the environment on every node" \
                   "(what spark-submit/install-env.sh printed), without spaces, '=', ',' or '#', got '$HEPIX_NODE_ENV'"
    hepix_node_env=${HEPIX_NODE_ENV%/}
    hepix_env_python=$hepix_node_env/bin/python
  else
    hepix_archive_opts=(--archives "$1#env")
  fi
}

# The archives package.sh builds; a cluster run needs both, or with HEPIX_NODE_ENV only
# the zip.  Sets `hepix_env_archive`: HEPIX_ENV_ARCHIVE when it is set (a URL the
# cluster reads; YARN localizes an archive that everyone may read, in directories
# everyone may enter, once per node and shares it between applications), else
# HEPIX_DIST's local copy (empty with HEPIX_NODE_ENV); then hepix_env_choice.
hepix_need_dist() {
  local f files=()
  hepix_env_archive=''
  if [[ -n ${HEPIX_NODE_ENV:-} ]]; then
    :
  elif [[ -n ${HEPIX_ENV_ARCHIVE:-} ]]; then
    [[ $HEPIX_ENV_ARCHIVE =~ ^[A-Za-z][A-Za-z0-9+.-]*://[^[:space:]#]+$ ]] \
      || hepix_die "HEPIX_ENV_ARCHIVE must be the URL of the archive on the cluster's file system" \
                   "(hdfs://..., s3a://...), without spaces or '#', got '$HEPIX_ENV_ARCHIVE'"
    hepix_env_archive=$HEPIX_ENV_ARCHIVE
  else
    files+=(hepix-env.tar.gz)
    hepix_env_archive=$hepix_dist/hepix-env.tar.gz
  fi
  files+=(hepix-src.zip)
  for f in "${files[@]}"; do
    [[ -f $hepix_dist/$f ]] || hepix_die "$hepix_dist/$f is missing: run spark-submit/package.sh first"
  done
  hepix_env_choice "$hepix_env_archive"
}

# hepix_conf_args FILE: the properties of FILE (spark-defaults format) as
# "--conf key=value" words in the array `hepix_confs`.  The cluster scripts use
# this instead of --properties-file, which would stop spark-submit from loading
# the cluster's own spark-defaults.conf.
hepix_conf_args() {
  local file=$1 raw line key value
  hepix_confs=()
  [[ -f $file ]] || hepix_die "no properties file $file"
  while IFS= read -r raw || [[ -n $raw ]]; do
    line=${raw%%#*}
    line=$(echo "$line" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
    [[ -z $line ]] && continue
    if [[ $line =~ ^([^[:space:]=]+)[[:space:]]*[=[:space:]][[:space:]]*(.+)$ ]]; then
      key=${BASH_REMATCH[1]}
      value=${BASH_REMATCH[2]}
    else
      hepix_die "$file: expected 'spark.key value', got '$raw'"
    fi
    hepix_confs+=(--conf "$key=$value")
  done <"$file"
}

# HEPIX_SPARK_OPTS as words in the array `hepix_extra`.
hepix_extra_opts() {
  hepix_extra=()
  if [[ -n ${HEPIX_SPARK_OPTS:-} ]]; then
    read -r -a hepix_extra <<<"$HEPIX_SPARK_OPTS"
  fi
}

# --executor-memory and --executor-cores from HEPIX_EXECUTOR_MEMORY and
# HEPIX_EXECUTOR_CORES (yarn.sh, k8s.sh), as words in the array `hepix_executor`.
hepix_executor_opts() {
  hepix_executor=()
  [[ -z ${HEPIX_EXECUTOR_MEMORY:-} ]] || hepix_executor+=(--executor-memory "$HEPIX_EXECUTOR_MEMORY")
  [[ -z ${HEPIX_EXECUTOR_CORES:-} ]] || hepix_executor+=(--executor-cores "$HEPIX_EXECUTOR_CORES")
}

# The spark-submit words yarn.sh and k8s.sh end with, where the driver may run in
# the cluster too and every container runs the packed env (hepix_env_choice):
#   hepix_packed_opts DRIVER_ENV SRC_ZIP MAIN NODE_ENV_CONF...
# sets the array `hepix_packed` to hepix_archive_opts, SRC_ZIP on the Python path
# (--py-files), PYSPARK_PYTHON for the driver and the executors, the script's
# NODE_ENV_CONF words (its spark.pyspark.* with HEPIX_NODE_ENV), XDG_CACHE_HOME for
# both, the properties (hepix_confs), HEPIX_TRUSTED_CLUSTER=1 for the driver when
# hepix_refuse_secret_jobs let a secret job through, HEPIX_SPARK_OPTS (hepix_extra)
# and MAIN; hepix's own arguments follow.  DRIVER_ENV is the prefix of the driver's
# environment properties: spark.yarn.appMasterEnv or spark.kubernetes.driverEnv.
# Call it after hepix_conf_args and hepix_extra_opts.
#
# XDG_CACHE_HOME: hecore's numba kernels cache their machine code; imported
# from the --py-files zip, numba caches under $XDG_CACHE_HOME/numba (default
# ~/.cache), which the container's user may not be able to write.  Keep it in
# the container's working directory.
hepix_packed_opts() {
  local driver_env=$1 src_zip=$2 main=$3
  shift 3
  hepix_packed=(
    "${hepix_archive_opts[@]}"
    --py-files "$src_zip"
    --conf "$driver_env.PYSPARK_PYTHON=$hepix_env_python"
    --conf "spark.executorEnv.PYSPARK_PYTHON=$hepix_env_python"
    "$@"
    --conf "$driver_env.XDG_CACHE_HOME=.cache"
    --conf spark.executorEnv.XDG_CACHE_HOME=.cache
    "${hepix_confs[@]}"
  )
  if (( hepix_trusted )); then
    hepix_packed+=(--conf "$driver_env.HEPIX_TRUSTED_CLUSTER=1")
  fi
  hepix_packed+=("${hepix_extra[@]}" "$main")
}

# hepix_run COMMAND...: run it, or print it (shell-quoted) under HEPIX_DRY_RUN=1.
hepix_run() {
  if [[ ${HEPIX_DRY_RUN:-0} == 1 ]]; then
    local env_var
    for env_var in PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON SPARK_LOCAL_IP HEPIX_TRUSTED_CLUSTER; do
      [[ -n ${!env_var:-} ]] && printf '%s=%q ' "$env_var" "${!env_var}"
    done
    printf '%q ' "$@"
    echo
    exit 0
  fi
  exec "$@"
}
