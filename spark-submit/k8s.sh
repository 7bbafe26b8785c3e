#!/usr/bin/env bash
# Run a hepix job on Kubernetes (cluster mode: the driver runs in a pod).
#
#   K8S_API=https://HOST:6443 HEPIX_IMAGE=REGISTRY/spark-py:4.x \
#   HEPIX_ARTIFACTS=s3a://BUCKET/hepix/0.1.0 \
#     spark-submit/k8s.sh process --keys /keys/public --input s3a://BUCKET/ct --out s3a://BUCKET/bright \
#       --op brightness:20
#
# Before the first run: spark-submit/package.sh, then upload
# dist/hepix-env.tar.gz, dist/hepix-src.zip and dist/hepix_main.py to the URI
# HEPIX_ARTIFACTS names (s3a://, hdfs://, https:// -- any scheme the image's
# Spark can fetch).  The pods fetch them from there: the env archive is
# unpacked as ./env (--archives ...#env, PYSPARK_PYTHON=./env/bin/python) and
# the zip goes on the Python path (--py-files).
#
# HEPIX_IMAGE is a Spark 4.x image with Python support whose Python has the
# same version and path as the one the env was packed from (or pack with
# HEPIX_PYTHON_PREFIX, see package.sh), plus the zlib and zstd libraries.
#
# Every pod fetches and unpacks the env archive again, for every application.
# Unpack it into the image instead (spark-submit/install-env.sh in the image's
# build, or a volume every pod mounts) and name that directory in HEPIX_NODE_ENV:
# hepix-env.tar.gz is then neither fetched nor unpacked, the driver and the Python
# workers run HEPIX_NODE_ENV/bin/python (spark.pyspark.python), and only
# hepix-src.zip and hepix_main.py need uploading.
#
# Paths: the driver pod reads --keys (the key material reaches the executors as
# a broadcast): bake the PUBLIC key directory into the image or mount it into
# the driver pod (spark.kubernetes.driver.volumes.* through HEPIX_SPARK_OPTS).
# --input and --out are read and written by the executors: use object storage
# or a volume every pod mounts.  spark-submit talks to the API server with
# your kubeconfig, as kubectl does; this script reads no credentials.
#
# Trust boundary: the cluster is where the secret key must never be.
# `encrypt` (public-key, the default) reads only the public part of a key
# directory; `process` must be given a public-only directory (`hepix
# export-public`) and refuses one that holds secret.key.  `decrypt` and
# `encrypt --encryption symmetric` read secret.key and send it to every
# executor: run them on the data owner's trusted machine with
# spark-submit/local.sh.  This script refuses decrypt, encrypt --encryption
# symmetric, keygen and export-public unless HEPIX_TRUSTED_CLUSTER=1, which it
# then hands to the driver (hepix refuses a non-local master for those jobs
# without it, wherever the driver runs).
#
# Environment:
#   K8S_API              the API server, https://HOST:PORT (required; master k8s://$K8S_API)
#   HEPIX_IMAGE          the container image (required)
#   HEPIX_ARTIFACTS      URI of the uploaded dist/ files (required)
#   HEPIX_K8S_NAMESPACE  namespace (default: default)
#   HEPIX_K8S_SERVICE_ACCOUNT  the driver's service account, allowed to create
#                        executor pods (default: spark)
#   HEPIX_IMAGE_PULL_POLICY  IfNotPresent (default), Always or Never
#   HEPIX_EXECUTORS      executor pods (default 2)
#   HEPIX_EXECUTOR_MEMORY / HEPIX_EXECUTOR_CORES  per executor pod (default: Spark's)
#   HEPIX_NODE_ENV       the environment already unpacked in the image (see above)
#   SPARK_HOME / SPARK_SUBMIT  the Spark to submit with (default: the venv's pyspark)
#   HEPIX_DRIVER_MEMORY, HEPIX_VENV, HEPIX_PROPERTIES, HEPIX_SPARK_OPTS,
#   HEPIX_DRY_RUN: see common.sh
set -euo pipefail

hepix_script=k8s.sh
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "$0")/common.sh"

hepix_check_args \
  "needs K8S_API=https://HOST:PORT, HEPIX_IMAGE and HEPIX_ARTIFACTS (the URI holding dist/'s files)" \
  "decrypt runs on the data owner's machine (spark-submit/local.sh), not here" \
  -- "$@"

[[ -n ${K8S_API:-} ]] || hepix_die "set K8S_API to the Kubernetes API server, https://HOST:PORT"
[[ -n ${HEPIX_IMAGE:-} ]] || hepix_die "set HEPIX_IMAGE to a Spark 4.x image with Python"
[[ -n ${HEPIX_ARTIFACTS:-} ]] \
  || hepix_die "set HEPIX_ARTIFACTS to the URI you uploaded dist/hepix-env.tar.gz (unless HEPIX_NODE_ENV)," \
               "dist/hepix-src.zip and dist/hepix_main.py to"
[[ $HEPIX_ARTIFACTS == *://* ]] \
  || hepix_die "HEPIX_ARTIFACTS must be a URI the pods can fetch (s3a://, hdfs://, https://), got '$HEPIX_ARTIFACTS'"
hepix_refuse_secret_jobs "$hepix_command" "$@"
master=${K8S_API#k8s://}
artifacts=${HEPIX_ARTIFACTS%/}
hepix_env_choice "$artifacts/hepix-env.tar.gz"
node_env_confs=()
[[ -n $hepix_node_env ]] && node_env_confs=(--conf "spark.pyspark.python=$hepix_env_python"
                                            --conf "spark.pyspark.driver.python=$hepix_env_python")
executors=${HEPIX_EXECUTORS:-2}
[[ $executors =~ ^[1-9][0-9]*$ ]] || hepix_die "HEPIX_EXECUTORS must be a positive number, got '$executors'"
submit=$(hepix_cluster_spark_submit)
hepix_conf_args "$hepix_props"
hepix_extra_opts
hepix_executor_opts

# Nothing of this machine's Python goes to the pods.
unset PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON

# The packed env in the driver's and the executors' pods, and the job (common.sh).
hepix_packed_opts spark.kubernetes.driverEnv "$artifacts/hepix-src.zip" "$artifacts/hepix_main.py" \
  "${node_env_confs[@]}"
hepix_run "$submit" \
  --master "k8s://$master" \
  --deploy-mode cluster \
  --name "hepix-$hepix_command" \
  --driver-memory "$hepix_driver_memory" \
  "${hepix_executor[@]}" \
  --conf "spark.kubernetes.container.image=$HEPIX_IMAGE" \
  --conf "spark.kubernetes.container.image.pullPolicy=${HEPIX_IMAGE_PULL_POLICY:-IfNotPresent}" \
  --conf "spark.kubernetes.namespace=${HEPIX_K8S_NAMESPACE:-default}" \
  --conf "spark.kubernetes.authenticate.driver.serviceAccountName=${HEPIX_K8S_SERVICE_ACCOUNT:-spark}" \
  --conf "spark.executor.instances=$executors" \
  "${hepix_packed[@]}" "$@"
