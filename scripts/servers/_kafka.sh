# Shared pieces of kafka.sh and kafka-cluster.sh (sourced after _lib.sh, not run): the jars of
# Apache Kafka 4 from Maven Central, one KRaft node's settings, formatting and starting a node.
KAFKA_VERSION=${SLUICE_KAFKA_VERSION:-4.3.1}
KAFKA_LIBS=$SERVERS_CACHE/kafka-$KAFKA_VERSION
KAFKA_HEAP=${SLUICE_KAFKA_HEAP:-512m}

# The broker (kafka_2.13 brings clients, raft, metadata, storage and the StorageTool) and a log4j2
# binding for its slf4j logging; slf4j-api 2 is named because kafka_2.13's pom resolves 1.7, which
# has no provider mechanism for the log4j2 binding (the broker would log nothing).
kafka_libs() {
    maven_libs "$KAFKA_LIBS" \
        "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
        "org.slf4j:slf4j-api:2.0.17" \
        "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.4"
}

kafka_java() {
    command -v java >/dev/null || { apt_ensure openjdk-17-jre-headless; }
    local log4j=$RUN/log4j2.properties
    cat >"$log4j" <<'L4J'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
L4J
    KJAVA=(java -Xms128m "-Xmx$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
        "-Dlog4j2.configurationFile=$log4j" -cp "$KAFKA_LIBS/*")
}

# kafka_props FILE NODE_ID CLIENT_PORT CONTROLLER_PORT VOTERS LOGDIR: one combined broker+controller.
# Settings for tests: single-copy internal topics unless a cluster (RF follows the node count), few
# partitions for the internal topics (first use is faster), no rebalance delay.
kafka_props() {
    local f=$1 id=$2 port=$3 cport=$4 voters=$5 dir=$6 rf=$7
    local isr=$(( rf > 1 ? 2 : 1 ))
    cat >"$f" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir
num.partitions=1
default.replication.factor=$rf
auto.create.topics.enable=true
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
log.retention.hours=24
log.segment.bytes=268435456
num.network.threads=2
num.io.threads=4
PROPS
}

# kafka_format PROPS CLUSTER_ID: the StorageTool's `format` (what bin/kafka-storage.sh runs), once.
kafka_format() {
    local props=$1 cid=$2 dir
    dir=$(sed -n 's/^log.dirs=//p' "$props")
    [ -f "$dir/meta.properties" ] && return 0
    "${KJAVA[@]}" kafka.tools.StorageTool format -t "$cid" -c "$props" --ignore-formatted >>"$OUT" 2>&1 \
        || { tail -n 20 "$OUT" >&2; die 5 "kafka-storage format failed (log: $OUT)"; }
}

kafka_cluster_id() {
    local f=$DATA/cluster.id
    [ -s "$f" ] || "${KJAVA[@]}" kafka.tools.StorageTool random-uuid 2>>"$OUT" | tail -n 1 >"$f"
    [ -s "$f" ] || die 5 "could not make a cluster id (log: $OUT)"
    cat "$f"
}

# kafka_wait_started PIDFILE LOGFILE PORT: the node listens and logged that it finished starting.
kafka_wait_started() {
    local pidf=$1 out=$2 port=$3 _
    wait_port "$port" "$pidf" "$out" 120
    for _ in $(seq 1 480); do
        grep -q "Kafka Server started" "$out" 2>/dev/null && return 0
        pid_alive "$pidf" || { tail -n 40 "$out" >&2; die 5 "exited while starting (log: $out)"; }
        sleep 0.25
    done
    tail -n 40 "$out" >&2
    die 5 "did not finish starting within 120s (log: $out)"
}
