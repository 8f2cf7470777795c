#!/usr/bin/env bash
# Kafka Connect itself, from its published jars on Maven Central, for bench/peers.py.
#
#   scripts/kafka-connect.sh jars                     # fetch (once) and print the jar folder
#   scripts/kafka-connect.sh standalone WORKER.properties [CONNECTOR.properties...]
#
# `jars` resolves org.apache.kafka:connect-runtime and connect-file (version $KAFKA_CONNECT_VERSION,
# default 4.3.1) and everything they need with `mvn dependency:copy-dependencies` into
# $SLUICE_SERVERS_CACHE/kafka-connect-VERSION (default ~/.cache/sluice-servers); the repository
# holds none of Kafka Connect's code. `standalone` execs the JVM (same pid, so a caller can stop
# it and measure it) on org.apache.kafka.connect.cli.ConnectStandalone with the heap and GC flags
# Kafka's own bin/connect-standalone.sh gives a user who sets nothing (-Xms256M -Xmx2G, G1 with
# 20 ms pauses); KAFKA_HEAP_OPTS and KAFKA_OPTS override or add, as with Kafka's scripts.
# Logs go to stderr at INFO through slf4j-simple (KAFKA_CONNECT_LOG_LEVEL changes it): the
# Maven artifacts bring slf4j-api without a binding, which would drop every log line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NAME=kafka-connect
# shellcheck source=servers/_lib.sh
source "$here/servers/_lib.sh"

VERSION=${KAFKA_CONNECT_VERSION:-4.3.1}
SLF4J_VERSION=1.7.36 # the slf4j-api version connect-runtime 4.3.1 depends on
LIBS=$SERVERS_CACHE/kafka-connect-$VERSION

fetch() {
    maven_libs "$LIBS" "org.apache.kafka:connect-runtime:$VERSION" "org.apache.kafka:connect-file:$VERSION" \
        "org.slf4j:slf4j-simple:$SLF4J_VERSION"
}

case "${1:-}" in
    jars)
        fetch
        echo "$LIBS"
        ;;
    standalone)
        shift
        [ $# -ge 1 ] || { echo "usage: $0 standalone WORKER.properties [CONNECTOR.properties...]" >&2; exit 2; }
        command -v java >/dev/null || die 3 "Java 17+ is needed (apt-get install openjdk-17-jre-headless)"
        fetch
        # shellcheck disable=SC2086 # the *_OPTS variables are word lists, as in Kafka's scripts
        exec java ${KAFKA_HEAP_OPTS:--Xms256M -Xmx2G} \
            -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
            -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
            -Dorg.slf4j.simpleLogger.defaultLogLevel="${KAFKA_CONNECT_LOG_LEVEL:-info}" \
            -Dorg.slf4j.simpleLogger.showDateTime=true ${KAFKA_OPTS:-} \
            -cp "$LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone "$@"
        ;;
    *)
        echo "usage: $0 jars | standalone WORKER.properties [CONNECTOR.properties...]" >&2
        exit 2
        ;;
esac
