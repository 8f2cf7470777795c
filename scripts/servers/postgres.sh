#!/usr/bin/env bash
# PostgreSQL 15 (Debian package) on 127.0.0.1:5432, its own cluster under $SLUICE_SERVERS_DIR/postgres:
# trust logins from loopback; roles `postgres` and `root` (superusers), databases `test` and `root`;
# wal_level=logical with replication slots for change data capture.
NAME=postgres
source "$(dirname "$0")/_lib.sh"
PORT=${SLUICE_PG_PORT:-5432}
PGBIN=
PIDF=$RUN/postmaster.pid.ours
OUT=$LOGS/postgres.log

find_bin() {
    local d
    for d in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
        [ -x "$d/postgres" ] && { PGBIN=$d; return 0; }
    done
    return 1
}
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
ready() { "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; }
psql_do() { "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qtAc "$1"; }

do_prepare() { find_bin || apt_ensure postgresql; }

do_up() {
    do_prepare
    find_bin || die 3 "no PostgreSQL server binaries after installing postgresql"
    if pid_alive "$PIDF" postgres && ready; then echo "postgres up 127.0.0.1:$PORT already running"; return 0; fi
    if port_busy "$PORT"; then
        # The Debian package's own cluster may hold the port: stop it, ours has the settings tests need.
        command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | awk -v p="$PORT" '$3 == p && $4 == "online" {print $1, $2}' |
            while read -r v c; do log "stopping Debian cluster $v/$c on :$PORT"; pg_ctlcluster --skip-systemctl-redirect "$v" "$c" stop || true; done
        port_busy "$PORT" && die 5 "port $PORT is used by another process: $(ss -Hltnp "sport = :$PORT")"
    fi
    local pgdata=$DATA/pgdata
    [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$SERVERS_DIR/$NAME"
    chmod 755 "$SERVERS_DIR" 2>/dev/null || true
    if [ ! -f "$pgdata/PG_VERSION" ]; then
        log "initdb $pgdata"
        as_owner "$PGBIN/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >>"$OUT" 2>&1 \
            || die 5 "initdb failed (log: $OUT)"
    fi
    cat >"$pgdata/postgresql.auto.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$RUN'
wal_level = logical
max_wal_senders = 16
max_replication_slots = 16
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
    printf 'local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n' >"$pgdata/pg_hba.conf"
    [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$SERVERS_DIR/$NAME"
    rm -f "$pgdata/postmaster.pid"
    local cmd=("$PGBIN/postgres" -D "$pgdata")
    [ "$(id -u)" = 0 ] && cmd=(runuser -u postgres -- "${cmd[@]}")
    start_bg "$PIDF" "$OUT" "${cmd[@]}"
    local _
    for _ in $(seq 1 240); do ready && break; pid_alive "$PIDF" || break; sleep 0.25; done
    ready || { tail -n 30 "$OUT" >&2; die 5 "did not come up (log: $OUT)"; }
    # the postmaster, not the wrapper, is what listens
    echo "$(head -1 "$pgdata/postmaster.pid")" >"$PIDF"
    assert_loopback "$(cat "$PIDF")"
    psql_do "SELECT 1 FROM pg_roles WHERE rolname = 'root'" | grep -q 1 || psql_do "CREATE ROLE root SUPERUSER LOGIN REPLICATION"
    local db
    for db in test root; do
        psql_do "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 || psql_do "CREATE DATABASE \"$db\""
    done
    echo "postgres up 127.0.0.1:$PORT started"
}

do_down() {
    find_bin || return 0
    if pid_alive "$PIDF" postgres; then
        as_owner "$PGBIN/pg_ctl" -D "$DATA/pgdata" -m fast -w stop >>"$OUT" 2>&1 || stop_pidfile "$PIDF"
    fi
    rm -f "$PIDF"
    echo "postgres down"
}

do_status() {
    if find_bin && pid_alive "$PIDF" postgres && ready; then echo "postgres up 127.0.0.1:$PORT"; else echo "postgres down"; return 1; fi
}

dispatch "$@"
