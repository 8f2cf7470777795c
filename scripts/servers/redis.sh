#!/usr/bin/env bash
# Redis 7 (Debian package redis-server) on 127.0.0.1:6379, append-only file on, data under
# $SLUICE_SERVERS_DIR/redis/data. The generated $RUN/redis.conf is the whole config.
NAME=redis
source "$(dirname "$0")/_lib.sh"
PORT=${SLUICE_REDIS_PORT:-6379}
PIDF=$RUN/redis.pid.ours
OUT=$LOGS/redis.log
CONF=$RUN/redis.conf

have_bins() { command -v redis-server >/dev/null && command -v redis-cli >/dev/null; }
ready() { [ "$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null)" = PONG ]; }

do_prepare() { have_bins || apt_ensure redis-server redis-tools; }

do_up() {
    do_prepare
    have_bins || die 3 "no redis-server after installing redis-server"
    if pid_alive "$PIDF" redis-server && ready; then echo "redis up 127.0.0.1:$PORT already running"; return 0; fi
    free_port_from_service "$PORT" redis-server /etc/init.d/redis-server
    cat >"$CONF" <<CONF
bind 127.0.0.1
port $PORT
protected-mode yes
daemonize no
logfile ""
dir $DATA
appendonly yes
appendfsync everysec
CONF
    start_bg "$PIDF" "$OUT" redis-server "$CONF"
    wait_port "$PORT" "$PIDF" "$OUT" 60
    local _
    for _ in $(seq 1 120); do ready && break; sleep 0.25; done
    ready || { tail -n 30 "$OUT" >&2; die 5 "did not answer PING (log: $OUT)"; }
    assert_loopback "$(cat "$PIDF")"
    echo "redis up 127.0.0.1:$PORT started"
}

do_down() {
    # TERM: redis writes its append-only file and exits cleanly
    pid_alive "$PIDF" redis-server && stop_pidfile "$PIDF" 30
    rm -f "$PIDF"
    echo "redis down"
}

do_status() {
    if pid_alive "$PIDF" redis-server && ready; then echo "redis up 127.0.0.1:$PORT"; else echo "redis down"; return 1; fi
}

dispatch "$@"
