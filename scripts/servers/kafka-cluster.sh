#!/usr/bin/env bash
# Three Apache Kafka 4 nodes (KRaft, each a combined broker+controller, a quorum of 3) on
# 127.0.0.1:19092/19093/19094 (controllers :19192/19193/19194), for the tests that need
# replication; internal topics have 3 copies. Same jars as kafka.sh; heap 384m per node.
NAME=kafka-cluster
source "$(dirname "$0")/_lib.sh"
KAFKA_HEAP=${SLUICE_KAFKA_HEAP:-384m}
source "$(dirname "$0")/_kafka.sh"
IDS=(1 2 3)
port() { echo $((19091 + $1)); }
cport() { echo $((19191 + $1)); }
VOTERS="1@127.0.0.1:$(cport 1),2@127.0.0.1:$(cport 2),3@127.0.0.1:$(cport 3)"
ADDR="127.0.0.1:$(port 1),127.0.0.1:$(port 2),127.0.0.1:$(port 3)"

running() {
    local i
    for i in "${IDS[@]}"; do pid_alive "$RUN/node$i.pid" "kafka.Kafka" && port_busy "$(port "$i")" || return 1; done
}

do_prepare() { kafka_libs; echo "kafka-cluster prepared $KAFKA_LIBS"; }

do_up() {
    if running; then echo "kafka-cluster up $ADDR already running"; return 0; fi
    do_down >/dev/null
    kafka_libs
    OUT=$LOGS/format.log
    kafka_java
    local i cid p
    for i in "${IDS[@]}"; do
        for p in "$(port "$i")" "$(cport "$i")"; do
            port_busy "$p" && die 5 "port $p is used by another process: $(ss -Hltnp "sport = :$p")"
        done
    done
    cid=$(kafka_cluster_id)
    for i in "${IDS[@]}"; do
        kafka_props "$RUN/node$i.properties" "$i" "$(port "$i")" "$(cport "$i")" "$VOTERS" "$DATA/node$i" 3
        kafka_format "$RUN/node$i.properties" "$cid"
    done
    # all three start together: a controller quorum needs a majority before any broker is ready
    for i in "${IDS[@]}"; do
        [ -s "$LOGS/node$i.log" ] && mv -f "$LOGS/node$i.log" "$LOGS/node$i.log.prev"
        start_bg "$RUN/node$i.pid" "$LOGS/node$i.log" "${KJAVA[@]}" kafka.Kafka "$RUN/node$i.properties"
    done
    local pids=()
    for i in "${IDS[@]}"; do
        OUT=$LOGS/node$i.log
        kafka_wait_started "$RUN/node$i.pid" "$OUT" "$(port "$i")"
        pids+=("$(cat "$RUN/node$i.pid")")
    done
    assert_loopback "${pids[@]}"
    echo "kafka-cluster up $ADDR started"
}

do_down() {
    local i
    for i in "${IDS[@]}"; do stop_pidfile "$RUN/node$i.pid" 60 & done
    wait
    echo "kafka-cluster down"
}

do_status() {
    if running; then echo "kafka-cluster up $ADDR"; else echo "kafka-cluster down"; return 1; fi
}

# `prepare` (fetch the jars only) until _lib.sh dispatches it itself
[ "${1:-}" = prepare ] && { mkdir -p "$DATA" "$LOGS" "$RUN"; do_prepare; exit 0; }
dispatch "$@"
