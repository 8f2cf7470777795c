#!/usr/bin/env bash
# A Spark standalone cluster on this machine, loopback only: one master (spark://127.0.0.1:7077,
# web UI http://127.0.0.1:8080, JSON at /json/) and $SLUICE_SPARK_WORKERS workers (default 2),
# started with `spark-class` from the pip-installed pyspark of the repository's .venv (the same
# Spark version as the drivers, which sluice workers are). Worker i has web UI port 8090+i, a
# work dir $DATA/worker-i (its executors' stdout/stderr live there) and a pid file
# $RUN/worker-i.pid.ours; `up` starts only what is not running, so after a worker was killed it
# starts that one again.
#
# Sizes fit a small machine: each worker offers SLUICE_SPARK_WORKER_CORES (default 2: task
# slots, not real cores; sluice runs a source and a sink query at once) and
# SLUICE_SPARK_WORKER_MEMORY (default 2g) to executors. The Python of the executors is the
# driver's choice (spark.pyspark.python / PYSPARK_PYTHON, see docs/spark-cluster.md).
NAME=spark-cluster
source "$(dirname "$0")/_lib.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
MASTER_PORT=${SLUICE_SPARK_MASTER_PORT:-7077}
MASTER_UI=${SLUICE_SPARK_MASTER_UI_PORT:-8080}
WORKERS=${SLUICE_SPARK_WORKERS:-2}
CORES=${SLUICE_SPARK_WORKER_CORES:-2}
MEMORY=${SLUICE_SPARK_WORKER_MEMORY:-2g}
URL=spark://127.0.0.1:$MASTER_PORT
MPID=$RUN/master.pid.ours

python_bin() {
    local py=${SLUICE_SPARK_PYTHON:-$REPO/.venv/bin/python}
    [ -x "$py" ] || py=$(command -v python3 || true)
    echo "$py"
}

# SPARK_HOME of the pip-installed pyspark (it ships bin/spark-class and the jars).
spark_home() {
    local py home
    py=$(python_bin)
    home=$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null) \
        || die 3 "no pyspark importable by $py (run 'make venv', or set SLUICE_SPARK_PYTHON)"
    [ -x "$home/bin/spark-class" ] || die 3 "$home/bin/spark-class missing (pyspark install broken?)"
    echo "$home"
}

do_prepare() {
    command -v java >/dev/null || apt_ensure openjdk-17-jre-headless
    spark_home >/dev/null
}

# Every daemon binds 127.0.0.1: --host for RPC, SPARK_LOCAL_IP for the web UIs (they bind it,
# else 0.0.0.0). An empty conf dir: no spark-env.sh or spark-defaults.conf of the machine applies.
spark_env() {
    export SPARK_HOME=$1 SPARK_LOCAL_IP=127.0.0.1 SPARK_CONF_DIR=$RUN/conf SPARK_DAEMON_MEMORY=512m
    export SPARK_LOG_DIR=$LOGS SPARK_PID_DIR=$RUN
    # A dead worker is noticed when its connection drops; the timeout covers a hung one.
    export SPARK_MASTER_OPTS="-Dspark.worker.timeout=15"
    mkdir -p "$SPARK_CONF_DIR"
}

# alive_workers: how many workers the master lists as ALIVE (0 if it does not answer).
alive_workers() {
    local json
    json=$(curl -fsS --max-time 2 "http://127.0.0.1:$MASTER_UI/json/" 2>/dev/null) || { echo 0; return 0; }
    grep -o '"state" *: *"ALIVE"' <<<"$json" | wc -l || true
}

all_running() {
    local i
    pid_alive "$MPID" deploy.master.Master || return 1
    for i in $(seq 1 "$WORKERS"); do pid_alive "$RUN/worker-$i.pid.ours" deploy.worker.Worker || return 1; done
    [ "$(alive_workers)" -ge "$WORKERS" ]
}

do_up() {
    do_prepare
    command -v curl >/dev/null || apt_ensure curl
    if all_running; then echo "$NAME up $URL already running"; return 0; fi
    local home i pids=()
    home=$(spark_home)
    spark_env "$home"
    if ! pid_alive "$MPID" deploy.master.Master; then
        port_busy "$MASTER_PORT" && die 5 "port $MASTER_PORT is used by another process: $(ss -Hltnp "sport = :$MASTER_PORT")"
        log "starting the master on $URL"
        start_bg "$MPID" "$LOGS/master.log" "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
            --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$MASTER_UI"
        wait_port "$MASTER_PORT" "$MPID" "$LOGS/master.log" 90
        wait_port "$MASTER_UI" "$MPID" "$LOGS/master.log" 30
    fi
    pids+=("$(cat "$MPID")")
    for i in $(seq 1 "$WORKERS"); do
        local pidf=$RUN/worker-$i.pid.ours
        if ! pid_alive "$pidf" deploy.worker.Worker; then
            mkdir -p "$DATA/worker-$i"
            log "starting worker $i ($CORES cores, $MEMORY)"
            start_bg "$pidf" "$LOGS/worker-$i.log" "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
                --host 127.0.0.1 --webui-port $((8090 + i)) --cores "$CORES" --memory "$MEMORY" \
                --work-dir "$DATA/worker-$i" "$URL"
        fi
        pids+=("$(cat "$pidf")")
    done
    local _
    for _ in $(seq 1 240); do [ "$(alive_workers)" -ge "$WORKERS" ] && break; sleep 0.25; done
    [ "$(alive_workers)" -ge "$WORKERS" ] || { tail -n 30 "$LOGS"/worker-*.log >&2; die 5 "workers did not register with the master (logs: $LOGS)"; }
    # spark-class runs java as a child of its shell until exec: check the whole process trees
    assert_loopback $(for p in "${pids[@]}"; do echo "$p"; pgrep -P "$p" || true; done)
    echo "$NAME up $URL started"
}

do_down() {
    local i
    # workers first (each stops its executors), then the master
    for i in $(seq 1 "$WORKERS"); do stop_pidfile "$RUN/worker-$i.pid.ours" 30; done
    for f in "$RUN"/worker-*.pid.ours; do [ -e "$f" ] && stop_pidfile "$f" 30; done
    stop_pidfile "$MPID" 30
    echo "$NAME down"
}

do_status() {
    if all_running; then echo "$NAME up $URL ($(alive_workers) workers)"; else echo "$NAME down"; return 1; fi
}

dispatch "$@"
