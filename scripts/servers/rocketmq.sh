#!/usr/bin/env bash
# Apache RocketMQ 5.x (one name server + one broker, remoting protocol) on 127.0.0.1 only, its jars
# resolved from Maven Central (org.apache.rocketmq:rocketmq-namesrv, rocketmq-broker, rocketmq-tools
# and what they need) and cached under $SLUICE_SERVERS_CACHE/rocketmq-VERSION; started with
# `java -cp`. Name server 127.0.0.1:9876, broker 127.0.0.1:10911 (+10909 "fast" channel, +10912 HA).
# autoCreateTopicEnable=true (8 queues) and autoCreateSubscriptionGroup=true, as the tests expect.
# timerWheelEnable=false: sluice sends no timer messages, and the timer wheel's threads took a third
# of the idle broker's CPU (~2 of 7 CPU-s a minute, `top -H`), on every machine that runs the suite.
#
#   rocketmq.sh up|down|status|logs|prepare|env|admin MQADMIN-ARGS...
#
# `prepare` only fetches the jars and builds the loopback shim; `env` prints, after `prepare`, the
# shell assignments ROCKETMQ_LIB=… ROCKETMQ_SHIM=… ROCKETMQ_VERSION=… (for tests that launch
# their own JVMs from the same jars); `admin` runs mqadmin (rocketmq-tools) with this cluster's
# classpath, e.g. `rocketmq.sh admin topicList -n 127.0.0.1:9876`.
#
# Env: SLUICE_ROCKETMQ_VERSION (5.3.3; other 5.x versions untested, 4.9.x would need its logback conf),
# SLUICE_ROCKETMQ_NAME (rocketmq: the folder under $SLUICE_SERVERS_DIR, so a second cluster can run
# beside this one), SLUICE_ROCKETMQ_NAMESRV_PORT (9876), SLUICE_ROCKETMQ_BROKER_PORT (10911),
# SLUICE_ROCKETMQ_BROKER_CONF (a file of extra broker.conf lines, e.g. ACL settings),
# SLUICE_ROCKETMQ_HOME_CONF (a folder copied to the RocketMQ home's conf/, e.g. plain_acl.yml),
# SLUICE_ROCKETMQ_NAMESRV_HEAP (128m), SLUICE_ROCKETMQ_BROKER_HEAP (384m).
#
# Loopback only: 5.x has `bindAddress` for its remoting servers, set to 127.0.0.1; the broker's HA
# service (and 4.9.x everywhere) binds the wildcard address, so the JVMs also run with the
# LD_PRELOAD shim of loopback_bind.c (built here with gcc) and `ss` checks every listening socket.
NAME=${SLUICE_ROCKETMQ_NAME:-rocketmq}
source "$(dirname "$0")/_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=${SLUICE_ROCKETMQ_VERSION:-5.3.3}
NS_PORT=${SLUICE_ROCKETMQ_NAMESRV_PORT:-9876}
BROKER_PORT=${SLUICE_ROCKETMQ_BROKER_PORT:-10911}
NS_HEAP=${SLUICE_ROCKETMQ_NAMESRV_HEAP:-128m}
BROKER_HEAP=${SLUICE_ROCKETMQ_BROKER_HEAP:-384m}
LIB=$SERVERS_CACHE/rocketmq-$VERSION
SHIM=$RUN/libloopback_bind.so
HOMEDIR=$DATA/home          # rocketmq.home.dir (conf/ for plain_acl.yml)
NS_PIDF=$RUN/namesrv.pid
BROKER_PIDF=$RUN/broker.pid
NS_OUT=$LOGS/namesrv.out
BROKER_OUT=$LOGS/broker.out
NS_ADDR=127.0.0.1:$NS_PORT
# -Duser.home decides where RocketMQ writes its own logs (${user.home}/logs/rocketmqlogs): $LOGS.
NS_MARK="-Duser.home=$LOGS/namesrv"
BROKER_MARK="-Duser.home=$LOGS/broker"

do_prepare() {
    command -v java >/dev/null || { apt_ensure openjdk-17-jre-headless; }
    local major
    major=$(java -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/ {print $2}')
    [ "${major%%.*}" -ge 11 ] 2>/dev/null || die 3 "RocketMQ needs Java >= 11, java on PATH is $major"
    [ -f "$LIB/.complete" ] || command -v mvn >/dev/null || apt_ensure maven
    maven_libs "$LIB" "org.apache.rocketmq:rocketmq-namesrv:$VERSION" \
        "org.apache.rocketmq:rocketmq-broker:$VERSION" "org.apache.rocketmq:rocketmq-tools:$VERSION"
    if [ ! -f "$SHIM" ] || [ "$HERE/loopback_bind.c" -nt "$SHIM" ]; then
        command -v gcc >/dev/null || apt_ensure gcc libc6-dev
        gcc -O2 -Wall -shared -fPIC -o "$SHIM.tmp" "$HERE/loopback_bind.c" -ldl \
            || die 3 "could not build the loopback shim from $HERE/loopback_bind.c"
        mv "$SHIM.tmp" "$SHIM"
    fi
}

# Java 17: RocketMQ's MappedFile reaches DirectByteBuffer.attachment()/cleaner() and
# jdk.internal.ref.Cleaner reflectively, and sun.nio.ch.DirectBuffer directly; without the opens
# the broker's shutdown hook dies and leaves the store's "abort" marker behind.
jvm() {  # HEAP MARK MAIN ARGS...: sets JVM to the command line of one RocketMQ process
    local heap=$1 mark=$2; shift 2
    JVM=(env "ROCKETMQ_HOME=$HOMEDIR" "LD_PRELOAD=$SHIM" java "-Xms$heap" "-Xmx$heap" -XX:+UseG1GC
        -XX:-OmitStackTraceInFastThrow -XX:MaxDirectMemorySize=256m -Djava.net.preferIPv4Stack=true
        "$mark" "-Drocketmq.home.dir=$HOMEDIR" --add-opens java.base/java.nio=ALL-UNNAMED
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
        -cp "$LIB/*" "$@")
}

mqadmin() {
    jvm 96m "-Duser.home=$LOGS/mqadmin" org.apache.rocketmq.tools.command.MQAdminStartup "$@"
    "${JVM[@]}"
}

write_conf() {
    mkdir -p "$HOMEDIR/conf" "$DATA/store" "$LOGS"
    [ -z "${SLUICE_ROCKETMQ_HOME_CONF:-}" ] || cp -r "$SLUICE_ROCKETMQ_HOME_CONF"/. "$HOMEDIR/conf/"
    printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$NS_PORT" >"$RUN/namesrv.conf"
    cat >"$RUN/broker.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
bindAddress=127.0.0.1
namesrvAddr=$NS_ADDR
listenPort=$BROKER_PORT
haListenPort=$((BROKER_PORT + 1))
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
storePathRootDir=$DATA/store
storePathCommitLog=$DATA/store/commitlog
mappedFileSizeCommitLog=134217728
deleteWhen=04
fileReservedTime=24
diskMaxUsedSpaceRatio=95
autoCreateTopicEnable=true
defaultTopicQueueNums=8
autoCreateSubscriptionGroup=true
timerWheelEnable=false
CONF
    [ -z "${SLUICE_ROCKETMQ_BROKER_CONF:-}" ] || cat "$SLUICE_ROCKETMQ_BROKER_CONF" >>"$RUN/broker.conf"
}

# registered: the name server's cluster table (request code 106, GET_BROKER_CLUSTER_INFO, one
# remoting frame: total length, header length, JSON header) lists our broker. A python3 one-shot
# answers in ~0.1 s where `mqadmin clusterList` starts a JVM (seconds on a loaded machine).
registered() {
    python3 - "$NS_PORT" "127.0.0.1:$BROKER_PORT" <<'PY' 2>/dev/null
import json, socket, struct, sys
head = json.dumps({"code": 106, "flag": 0, "language": "JAVA", "opaque": 1,
                   "serializeTypeCurrentRPC": "JSON", "version": 0}).encode()
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3) as s:
    s.sendall(struct.pack(">ii", 4 + len(head), len(head)) + head)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit(1)
        data += chunk
sys.exit(0 if f'"{sys.argv[2]}"'.encode() in data else 1)
PY
}

do_up() {
    if pid_alive "$NS_PIDF" "$NS_MARK" && pid_alive "$BROKER_PIDF" "$BROKER_MARK"; then
        echo "$NAME up $NS_ADDR already running"; return 0
    fi
    do_prepare
    write_conf
    local t0 p
    t0=$(date +%s.%N)
    if ! pid_alive "$NS_PIDF" "$NS_MARK"; then
        port_busy "$NS_PORT" && die 5 "port $NS_PORT is used by another process: $(ss -Hltnp "sport = :$NS_PORT")"
        jvm "$NS_HEAP" "$NS_MARK" org.apache.rocketmq.namesrv.NamesrvStartup -c "$RUN/namesrv.conf"
        start_bg "$NS_PIDF" "$NS_OUT" "${JVM[@]}"
    fi
    wait_port "$NS_PORT" "$NS_PIDF" "$NS_OUT" 90
    if ! pid_alive "$BROKER_PIDF" "$BROKER_MARK"; then
        for p in "$BROKER_PORT" $((BROKER_PORT - 2)) $((BROKER_PORT + 1)); do
            port_busy "$p" && die 5 "port $p is used by another process: $(ss -Hltnp "sport = :$p")"
        done
        jvm "$BROKER_HEAP" "$BROKER_MARK" org.apache.rocketmq.broker.BrokerStartup -c "$RUN/broker.conf"
        start_bg "$BROKER_PIDF" "$BROKER_OUT" "${JVM[@]}"
    fi
    wait_port "$BROKER_PORT" "$BROKER_PIDF" "$BROKER_OUT" 120
    assert_loopback "$(cat "$NS_PIDF")" "$(cat "$BROKER_PIDF")"
    local _
    for _ in $(seq 1 240); do
        registered && break
        pid_alive "$BROKER_PIDF" || { tail -n 40 "$BROKER_OUT" >&2; die 5 "the broker exited (log: $BROKER_OUT)"; }
        sleep 0.25
    done
    registered || { do_down >&2; die 5 "the broker did not register with the name server (log: $LOGS)"; }
    log "namesrv $NS_ADDR + broker 127.0.0.1:$BROKER_PORT ($VERSION) registered in" \
        "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')s"
    echo "$NAME up $NS_ADDR started"
}

do_down() {
    # broker first: its shutdown hook flushes the store and removes the "abort" marker
    if pid_alive "$BROKER_PIDF" "$BROKER_MARK"; then stop_pidfile "$BROKER_PIDF" 60; fi
    if pid_alive "$NS_PIDF" "$NS_MARK"; then stop_pidfile "$NS_PIDF" 30; fi
    rm -f "$BROKER_PIDF" "$NS_PIDF"
    echo "$NAME down"
}

do_status() {
    if pid_alive "$NS_PIDF" "$NS_MARK" && pid_alive "$BROKER_PIDF" "$BROKER_MARK"; then
        echo "$NAME up $NS_ADDR"
    else
        echo "$NAME down"; return 1
    fi
}

case "${1:-}" in
    prepare) mkdir -p "$DATA" "$LOGS" "$RUN"; do_prepare; exit 0 ;;
    admin) shift; mkdir -p "$RUN"; do_prepare; mqadmin "$@"; exit ;;
    env) mkdir -p "$RUN"; do_prepare; printf 'ROCKETMQ_LIB=%s\nROCKETMQ_SHIM=%s\nROCKETMQ_VERSION=%s\n' "$LIB" "$SHIM" "$VERSION"; exit 0 ;;
esac
dispatch "$@"
