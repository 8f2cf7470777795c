#!/usr/bin/env bash
# Apache Kafka 4 (KRaft, one combined broker+controller) on 127.0.0.1:9092, controller on
# 127.0.0.1:9093; jars from Maven Central (cached under $SLUICE_SERVERS_CACHE), started with
# `java -cp`; data and log under $SLUICE_SERVERS_DIR/kafka. Internal topics have one copy.
NAME=kafka
source "$(dirname "$0")/_lib.sh"
source "$(dirname "$0")/_kafka.sh"
PORT=${SLUICE_KAFKA_PORT:-9092}
CPORT=${SLUICE_KAFKA_CONTROLLER_PORT:-9093}
PIDF=$RUN/kafka.pid
OUT=$LOGS/kafka.log
PROPS=$RUN/server.properties

running() { pid_alive "$PIDF" "kafka.Kafka" && port_busy "$PORT"; }

do_prepare() { kafka_libs; echo "kafka prepared $KAFKA_LIBS"; }

do_up() {
    if running; then echo "kafka up 127.0.0.1:$PORT already running"; return 0; fi
    kafka_libs
    kafka_java
    port_busy "$PORT" && die 5 "port $PORT is used by another process: $(ss -Hltnp "sport = :$PORT")"
    port_busy "$CPORT" && die 5 "port $CPORT is used by another process: $(ss -Hltnp "sport = :$CPORT")"
    kafka_props "$PROPS" 1 "$PORT" "$CPORT" "1@127.0.0.1:$CPORT" "$DATA/kraft" 1
    kafka_format "$PROPS" "$(kafka_cluster_id)"
    # the previous run's log is kept beside, so "started" below is this start's line
    [ -s "$OUT" ] && mv -f "$OUT" "$OUT.prev"
    start_bg "$PIDF" "$OUT" "${KJAVA[@]}" kafka.Kafka "$PROPS"
    kafka_wait_started "$PIDF" "$OUT" "$PORT"
    assert_loopback "$(cat "$PIDF")"
    echo "kafka up 127.0.0.1:$PORT started"
}

do_down() {
    stop_pidfile "$PIDF" 60
    echo "kafka down"
}

do_status() {
    if running; then echo "kafka up 127.0.0.1:$PORT"; else echo "kafka down"; return 1; fi
}

# `prepare` (fetch the jars only) until _lib.sh dispatches it itself
[ "${1:-}" = prepare ] && { mkdir -p "$DATA" "$LOGS" "$RUN"; do_prepare; exit 0; }
dispatch "$@"
