#!/usr/bin/env bash
# Run a hepix job through spark-submit on this machine (master local[N]).
#
#   spark-submit/local.sh COMMAND [ARGS...]
#   spark-submit/local.sh encrypt --keys KEYS --input IMAGES --out CIPHERTEXTS
#   spark-submit/local.sh decrypt --keys KEYS --input CIPHERTEXTS --out RESULTS --images IMAGES
#
# Trust boundary: this is the script for the data owner's trusted machine.
# `decrypt` and `encrypt --encryption symmetric` need the key directory WITH
# secret.key (and broadcast the secret key to the local Python workers), so run
# them here, never on a shared cluster; hepix runs them with Spark's
# authentication, RPC and I/O encryption on and a private, removed-afterwards
# spark.local.dir.  `encrypt` (public-key, the default) needs only the public
# part of the keys; `process` must be given a public-only directory (`hepix
# export-public`) and refuses one with secret.key.
#
# Uses the spark-submit of the virtualenv's pyspark (no separate Spark install),
# the venv's Python for the driver and the workers, and conf/spark-hepix.conf.
# The code comes from the venv (hepix is installed there in editable mode), so
# nothing needs packaging.
#
# Environment:
#   HEPIX_CORES          worker threads, local[N] (default: all cores)
#   HEPIX_DRIVER_MEMORY  driver memory, which is all the memory local mode has (default 4g)
#   HEPIX_VENV, HEPIX_PROPERTIES, HEPIX_SPARK_OPTS, HEPIX_DRY_RUN: see common.sh
set -euo pipefail

hepix_script=local.sh
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "$0")/common.sh"

hepix_check_args \
  "master local[N]: HEPIX_CORES=N (default: all cores), driver memory HEPIX_DRIVER_MEMORY (default 4g)" \
  -- "$@"

py=$(hepix_venv_python)
submit=$(hepix_venv_spark_submit)
cores=${HEPIX_CORES:-$(nproc)}
[[ $cores =~ ^[1-9][0-9]*$ ]] || hepix_die "HEPIX_CORES must be a positive number of cores, got '$cores'"
[[ -f $hepix_props ]] || hepix_die "no properties file $hepix_props"
hepix_extra_opts

export PYSPARK_PYTHON=$py
export PYSPARK_DRIVER_PYTHON=$py
# One machine: keep Spark on the loopback interface (no hostname lookups).
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}

# Spark's own logging: warnings only (the same log4j2 file `hepix` uses when it
# starts Spark itself); hepix prints its own progress lines.
log4j=$hepix_root/jobs/resources/log4j2.properties

hepix_run "$submit" \
  --master "local[$cores]" \
  --name "hepix-$hepix_command" \
  --driver-memory "$hepix_driver_memory" \
  --properties-file "$hepix_props" \
  --driver-java-options "-Dlog4j2.configurationFile=file:$log4j" \
  --conf spark.ui.enabled=false \
  --conf spark.ui.showConsoleProgress=false \
  --conf spark.driver.bindAddress=127.0.0.1 \
  --conf spark.driver.host=127.0.0.1 \
  "${hepix_extra[@]}" \
  "$hepix_main" "$@"
