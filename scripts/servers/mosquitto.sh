#!/usr/bin/env bash
# Mosquitto 2 (Debian package) MQTT broker on 127.0.0.1:1883, anonymous clients, persistence on,
# its store under $SLUICE_SERVERS_DIR/mosquitto/data. The generated $RUN/mosquitto.conf is the
# whole config.
NAME=mosquitto
source "$(dirname "$0")/_lib.sh"
PORT=${SLUICE_MQTT_PORT:-1883}
MOSQUITTO=/usr/sbin/mosquitto
PIDF=$RUN/mosquitto.pid.ours
OUT=$LOGS/mosquitto.log
CONF=$RUN/mosquitto.conf

have_bins() { [ -x "$MOSQUITTO" ]; }
# an MQTT CONNECT (clean session, anonymous) must be answered by CONNACK with return code 0
ready() {
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" 2>/dev/null || return 1
    printf '\x10\x12\x00\x04MQTT\x04\x02\x00\x0a\x00\x06sluice' >&3
    local ack
    ack=$(timeout 2 head -c 4 <&3 | od -An -tx1 | tr -d ' \n')
    exec 3<&-
    [ "$ack" = 20020000 ]
}

do_prepare() { have_bins || apt_ensure mosquitto; }

do_up() {
    do_prepare
    have_bins || die 3 "no $MOSQUITTO after installing mosquitto"
    if pid_alive "$PIDF" mosquitto && ready; then echo "mosquitto up 127.0.0.1:$PORT already running"; return 0; fi
    free_port_from_service "$PORT" mosquitto /etc/init.d/mosquitto
    local user
    user=$(id -un)
    # as root, mosquitto drops to the package's user: that user must own the store
    if [ "$(id -u)" = 0 ]; then user=mosquitto; chmod 755 "$SERVERS_DIR"; chown -R mosquitto "$DATA"; fi
    cat >"$CONF" <<CONF
user $user
per_listener_settings false
allow_anonymous true
listener $PORT 127.0.0.1
persistence true
persistence_location $DATA/
autosave_interval 30
# a persistent session (the MQTT source connector's) keeps what arrives while its client is away;
# the default bound (1000 messages) would drop the rest
max_queued_messages 1000000
log_dest stderr
log_type error
log_type warning
log_type notice
log_type information
connection_messages true
CONF
    start_bg "$PIDF" "$OUT" "$MOSQUITTO" -c "$CONF"
    wait_port "$PORT" "$PIDF" "$OUT" 30
    local _
    for _ in $(seq 1 40); do ready && break; sleep 0.25; done
    ready || { tail -n 30 "$OUT" >&2; die 5 "did not answer an MQTT CONNECT (log: $OUT)"; }
    assert_loopback "$(cat "$PIDF")"
    echo "mosquitto up 127.0.0.1:$PORT started"
}

do_down() {
    # TERM: mosquitto saves its persistence file and exits
    pid_alive "$PIDF" mosquitto && stop_pidfile "$PIDF" 30
    rm -f "$PIDF"
    echo "mosquitto down"
}

do_status() {
    if pid_alive "$PIDF" mosquitto && ready; then echo "mosquitto up 127.0.0.1:$PORT"; else echo "mosquitto down"; return 1; fi
}

dispatch "$@"
