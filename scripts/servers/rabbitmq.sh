#!/usr/bin/env bash
# RabbitMQ 3 (Debian package rabbitmq-server): AMQP on 127.0.0.1:5672 and the stream protocol
# (plugin rabbitmq_stream) on 127.0.0.1:5552, node sluice@localhost. Everything Erlang opens is on
# loopback too: epmd (ERL_EPMD_ADDRESS), the node's distribution port 25672 and the CLI tools'
# distribution ports. Mnesia, streams and the Erlang cookie live under
# $SLUICE_SERVERS_DIR/rabbitmq/data; /etc/rabbitmq is not read. guest/guest logs in from loopback.
NAME=rabbitmq
source "$(dirname "$0")/_lib.sh"
PORT=${SLUICE_AMQP_PORT:-5672}
STREAM_PORT=${SLUICE_RABBITMQ_STREAM_PORT:-5552}
DIST_PORT=${SLUICE_RABBITMQ_DIST_PORT:-25672}
EPMD_PORT=4369
RMQ=/usr/lib/rabbitmq/bin
PIDF=$RUN/rabbitmq.pid.ours
BEAM_PIDF=$RUN/beam.pid
OUT=$LOGS/rabbitmq.log

export RABBITMQ_NODENAME=sluice@localhost
export RABBITMQ_CONF_ENV_FILE=$RUN/rabbitmq-env.conf
export RABBITMQ_CONFIG_FILE=$RUN/rabbitmq.conf
export RABBITMQ_ENABLED_PLUGINS_FILE=$RUN/enabled_plugins
export RABBITMQ_MNESIA_BASE=$DATA/mnesia
export RABBITMQ_PLUGINS_EXPAND_DIR=$DATA/plugins-expand
export RABBITMQ_LOG_BASE=$LOGS
export RABBITMQ_PID_FILE=$BEAM_PIDF
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$PORT RABBITMQ_DIST_PORT=$DIST_PORT
export ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT=$EPMD_PORT
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
# the Erlang cookie ($HOME/.erlang.cookie) the node and the CLI tools share
export HOME=$DATA

have_bins() { [ -x "$RMQ/rabbitmq-server" ] && command -v epmd >/dev/null; }
listening() { port_busy "$PORT" && port_busy "$STREAM_PORT"; }
epmd_pid() { ss -Hltnp "sport = :$EPMD_PORT" 2>/dev/null | grep -oE '"epmd",pid=[0-9]+' | head -1 | grep -oE '[0-9]+$'; }

do_prepare() { have_bins || apt_ensure rabbitmq-server; }

do_up() {
    do_prepare
    have_bins || die 3 "no $RMQ/rabbitmq-server after installing rabbitmq-server"
    if pid_alive "$PIDF" rabbitmq-server && listening; then
        echo "rabbitmq up 127.0.0.1:$PORT already running"; return 0
    fi
    free_port_from_service "$PORT" beam.smp /etc/init.d/rabbitmq-server
    local p
    for p in "$STREAM_PORT" "$DIST_PORT"; do
        port_busy "$p" && die 5 "port $p is used by another process: $(ss -Hltnp "sport = :$p")"
    done
    # an epmd left by the package's own service (started at install) may listen on every address:
    # stopped when idle, so that ours starts on loopback; one that serves other nodes is an error
    if ss -Hltn "sport = :$EPMD_PORT" 2>/dev/null | awk '{print $4}' | grep -qvE '^(127\.[0-9.]+|\[::1\]):'; then
        epmd -names 2>/dev/null | grep -q '^name ' && die 4 "epmd on :$EPMD_PORT listens beyond loopback and serves other Erlang nodes: $(epmd -names | tr '\n' ' ')"
        log "stopping an idle epmd that listens beyond loopback"
        epmd -kill >/dev/null 2>&1 || true
        local _
        for _ in $(seq 1 40); do port_busy "$EPMD_PORT" || break; sleep 0.25; done
    fi
    # epmd is shared by every Erlang node of the machine: note whether this start brings it
    if port_busy "$EPMD_PORT"; then rm -f "$RUN/epmd.ours"; else touch "$RUN/epmd.ours"; fi
    : >"$RABBITMQ_CONF_ENV_FILE"
    echo '[rabbitmq_stream].' >"$RABBITMQ_ENABLED_PLUGINS_FILE"
    cat >"$RABBITMQ_CONFIG_FILE" <<CONF
listeners.tcp.1 = 127.0.0.1:$PORT
stream.listeners.tcp.1 = 127.0.0.1:$STREAM_PORT
stream.advertised_host = 127.0.0.1
stream.advertised_port = $STREAM_PORT
loopback_users.guest = true
log.console = true
log.console.level = info
log.file = false
CONF
    chmod 755 "$SERVERS_DIR" 2>/dev/null || true
    [ "$(id -u)" = 0 ] && chown -R rabbitmq:rabbitmq "$SERVERS_DIR/$NAME"
    rm -f "$BEAM_PIDF"
    local cmd=("$RMQ/rabbitmq-server")
    # as root, the node runs as the package's user (setpriv execs: no extra process)
    [ "$(id -u)" = 0 ] && cmd=(setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups -- "${cmd[@]}")
    # the script stays as the parent of the node and passes TERM on to it
    local from
    from=$(($(stat -c %s "$OUT" 2>/dev/null || echo 0) + 1))
    start_bg "$PIDF" "$OUT" "${cmd[@]}"
    wait_port "$PORT" "$PIDF" "$OUT" 180
    wait_port "$STREAM_PORT" "$PIDF" "$OUT" 60
    # the node logs this once every plugin and listener runs; asking it with the CLI tools
    # (`rabbitmqctl await_startup`) costs an Erlang VM boot, 2-30 s on a busy 2-core machine
    local _
    for _ in $(seq 1 240); do tail -c +"$from" "$OUT" | grep -q 'Server startup complete' && break; sleep 0.25; done
    tail -c +"$from" "$OUT" | grep -q 'Server startup complete' || { tail -n 30 "$OUT" >&2; die 5 "did not finish booting (log: $OUT)"; }
    [ -s "$BEAM_PIDF" ] || die 5 "no pid file $BEAM_PIDF after start (log: $OUT)"
    # shellcheck disable=SC2046
    assert_loopback "$(cat "$PIDF")" "$(cat "$BEAM_PIDF")" $(epmd_pid)
    echo "rabbitmq up 127.0.0.1:$PORT started"
}

do_down() {
    # TERM to the start script: it passes TERM on to the node, which shuts down cleanly (init:stop)
    pid_alive "$PIDF" rabbitmq-server && stop_pidfile "$PIDF" 60
    rm -f "$PIDF" "$BEAM_PIDF"
    # epmd outlives the node: stop it only if this script's start brought it and no node remains
    if [ -f "$RUN/epmd.ours" ] && [ -n "$(epmd_pid)" ] && ! epmd -names 2>/dev/null | grep -q '^name '; then
        epmd -kill >/dev/null 2>&1 || true
    fi
    rm -f "$RUN/epmd.ours"
    echo "rabbitmq down"
}

do_status() {
    if pid_alive "$PIDF" rabbitmq-server && listening; then
        echo "rabbitmq up 127.0.0.1:$PORT (stream 127.0.0.1:$STREAM_PORT)"
    else
        echo "rabbitmq down"; return 1
    fi
}

dispatch "$@"
