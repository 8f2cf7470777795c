#!/usr/bin/env bash
# Bring up, stop or report the servers the tests and benchmarks use, loopback only.
#
#   scripts/servers.sh prepare|up|down|status|logs NAME...
#
# `prepare` installs what the servers need (Debian packages, jars) without starting anything, so a
# CI run can do all its downloads first, in one place.
# NAME is one of the scripts in scripts/servers/ (postgres, mariadb, redis, rabbitmq, mosquitto,
# nats, kafka, kafka-cluster, rocketmq, ...); `all` means every one of them. Each is idempotent:
# `up` leaves a server that is already running alone and says so, `down` stops only what these
# scripts started. Data and logs live under $SLUICE_SERVERS_DIR (default /tmp/sluice-servers),
# one folder per server (NAME/data, NAME/log); downloaded jars are cached under
# $SLUICE_SERVERS_CACHE (default ~/.cache/sluice-servers). `up` prints one line per server:
#   NAME up ADDRESS [started|already running]
# Exit codes: 0 ok, 2 usage, 3 a prerequisite is missing (the message names the package),
# 4 a server listens on a non-loopback address, 5 a server did not come up (its log is named).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { echo "usage: $0 prepare|up|down|status|logs NAME... (names: $(names | tr '\n' ' ')all)" >&2; exit 2; }
names() { for f in "$here"/servers/*.sh; do b=$(basename "$f" .sh); [ "${b#_}" = "$b" ] && echo "$b"; done; }

[ $# -ge 2 ] || usage
action=$1; shift
case "$action" in prepare|up|down|status|logs) ;; *) usage ;; esac
# one run id for every script below: `apt-get update` runs at most once per run
servers_dir=${SLUICE_SERVERS_DIR:-/tmp/sluice-servers}
export SLUICE_SERVERS_RUN=${SLUICE_SERVERS_RUN:-$$.$(date +%s)}
targets=()
for n in "$@"; do
    if [ "$n" = all ]; then mapfile -t -O "${#targets[@]}" targets < <(names)
    elif [ -f "$here/servers/$n.sh" ]; then targets+=("$n")
    else echo "servers: unknown server '$n' (known: $(names | tr '\n' ' '))" >&2; exit 2
    fi
done
rc=0
for n in "${targets[@]}"; do
    # one up/down/prepare of a server at a time, machine-wide (two test runs may ask at once);
    # -o: the servers started under the lock do not hold it. status and logs do not wait.
    lock=()
    case "$action" in up|down|prepare) mkdir -p "$servers_dir"; lock=(flock -o -w 1800 "$servers_dir/.$n.lock") ;; esac
    "${lock[@]}" bash "$here/servers/$n.sh" "$action" || { rc=$?; case "$action" in up|prepare) exit $rc ;; esac; }
    # `up` by hand (make servers-up) keeps a server that a test run started: that run leaves it up
    if [ "$action" = up ] && [ "${SLUICE_SERVERS_CALLER:-}" != pytest ]; then rm -f "$servers_dir/$n/started-by-pytest"; fi
done
exit $rc
