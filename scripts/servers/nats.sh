#!/usr/bin/env bash
# NATS (Debian package nats-server) with JetStream on 127.0.0.1:4222, its store under
# $SLUICE_SERVERS_DIR/nats/data; no monitoring, cluster, gateway or leaf-node listener.
NAME=nats
source "$(dirname "$0")/_lib.sh"
PORT=${SLUICE_NATS_PORT:-4222}
PIDF=$RUN/nats.pid.ours
OUT=$LOGS/nats.log

have_bins() { command -v nats-server >/dev/null; }
# the server's greeting (INFO {...}) says whether JetStream is on
ready() {
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" 2>/dev/null || return 1
    local info
    info=$(timeout 2 head -n 1 <&3)
    exec 3<&-
    grep -q '"jetstream":true' <<<"$info"
}

do_prepare() { have_bins || apt_ensure nats-server; }

do_up() {
    do_prepare
    have_bins || die 3 "no nats-server after installing nats-server"
    if pid_alive "$PIDF" nats-server && ready; then echo "nats up 127.0.0.1:$PORT already running"; return 0; fi
    port_busy "$PORT" && die 5 "port $PORT is used by another process: $(ss -Hltnp "sport = :$PORT")"
    start_bg "$PIDF" "$OUT" nats-server -n sluice -a 127.0.0.1 -p "$PORT" -js -sd "$DATA"
    wait_port "$PORT" "$PIDF" "$OUT" 30
    local _
    for _ in $(seq 1 40); do ready && break; sleep 0.25; done
    ready || { tail -n 30 "$OUT" >&2; die 5 "answers without JetStream (log: $OUT)"; }
    assert_loopback "$(cat "$PIDF")"
    echo "nats up 127.0.0.1:$PORT started"
}

do_down() {
    # TERM: nats-server flushes JetStream and exits (lame-duck mode is not needed for tests)
    pid_alive "$PIDF" nats-server && stop_pidfile "$PIDF" 30
    rm -f "$PIDF"
    echo "nats down"
}

do_status() {
    if pid_alive "$PIDF" nats-server && ready; then echo "nats up 127.0.0.1:$PORT"; else echo "nats down"; return 1; fi
}

dispatch "$@"
