#!/usr/bin/env bash
# A Spark standalone cluster on this machine, loopback only: one master (spark://127.0.0.1:7077,
# web UI http://127.0.0.1:8080, JSON at /json/) and $SLUICE_SPARK_WORKERS workers (default 2).
# The work is done by `sluice spark-cluster up|down|status` (src/sluice/cli/_spark_cluster.py, the
# one implementation) run by the repository's .venv Python (SLUICE_SPARK_PYTHON names another),
# with this server's folder as its state dir: pid files run/master.pid and run/worker-i.pid, logs
# log/master.log and log/worker-i.log, work dirs (executors' stdout/stderr) data/worker-i. `up`
# starts only what is not running, so after a worker was killed it starts that one again. This
# script adds what every test server does: Java installed by `prepare`, and the loopback check.
#
# Sizes fit a small machine: each worker offers SLUICE_SPARK_WORKER_CORES (default 2: task
# slots, not real cores; sluice runs a source and a sink query at once) and
# SLUICE_SPARK_WORKER_MEMORY (default 2g) to executors. The Python of the executors is the
# driver's choice (spark.pyspark.python / PYSPARK_PYTHON, see docs/spark-cluster.md).
NAME=spark-cluster
source "$(dirname "$0")/_lib.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

sluice_cluster() {
    local py=${SLUICE_SPARK_PYTHON:-$REPO/.venv/bin/python}
    [ -x "$py" ] || die 3 "no Python at $py (run 'make venv', or set SLUICE_SPARK_PYTHON)"
    PYTHONPATH=$REPO/src${PYTHONPATH:+:$PYTHONPATH} "$py" -m sluice.cli spark-cluster "$@" \
        --state-dir "$SERVERS_DIR/$NAME"
}

do_prepare() {
    command -v java >/dev/null || apt_ensure openjdk-17-jre-headless
}

do_up() {
    do_prepare
    local line pids=() f
    line=$(sluice_cluster up --workers "${SLUICE_SPARK_WORKERS:-2}" \
        --master-port "${SLUICE_SPARK_MASTER_PORT:-7077}" --ui-port "${SLUICE_SPARK_MASTER_UI_PORT:-8080}" \
        --cores "${SLUICE_SPARK_WORKER_CORES:-2}" --memory "${SLUICE_SPARK_WORKER_MEMORY:-2g}") \
        || die 5 "sluice spark-cluster up failed (logs: $LOGS)"
    for f in "$RUN"/*.pid; do pids+=("$(cat "$f")"); done
    assert_loopback "${pids[@]}"
    echo "$line"
}

do_down() { sluice_cluster down; }

do_status() {
    local line
    line=$(sluice_cluster status --ui-port "${SLUICE_SPARK_MASTER_UI_PORT:-8080}" \
        --master-port "${SLUICE_SPARK_MASTER_PORT:-7077}" --json 2>/dev/null) || { echo "$NAME down"; return 1; }
    echo "$NAME up spark://127.0.0.1:${SLUICE_SPARK_MASTER_PORT:-7077} ($(grep -c '"state": "ALIVE"' <<<"$line") workers)"
}

dispatch "$@"
