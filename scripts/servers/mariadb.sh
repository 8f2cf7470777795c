#!/usr/bin/env bash
# MariaDB 10.11 (Debian package) on 127.0.0.1:3306, its own datadir under $SLUICE_SERVERS_DIR/mariadb:
# `root` logs in from 127.0.0.1 with an empty password, database `test`; row-based binlog
# (log_bin, binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL, server_id=1)
# for change data capture.
# The Debian config files (/etc/mysql) are not read: the generated $RUN/my.cnf is the whole config.
NAME=mariadb
source "$(dirname "$0")/_lib.sh"
PORT=${SLUICE_MARIADB_PORT:-3306}
MARIADBD=/usr/sbin/mariadbd
PIDF=$RUN/mariadbd.pid.ours
OUT=$LOGS/mariadb.log
CNF=$RUN/my.cnf
SOCK=$RUN/mariadb.sock

have_bins() { [ -x "$MARIADBD" ] && command -v mariadb-install-db >/dev/null && command -v mariadb-admin >/dev/null; }
# the client tools, over the socket as the database's root (empty password)
admin() { mariadb-admin --no-defaults -S "$SOCK" -u root --connect-timeout=2 "$@"; }
sql() { mariadb --no-defaults -S "$SOCK" -u root -N -B -e "$1"; }
ready() { admin ping >/dev/null 2>&1; }

do_prepare() { have_bins || apt_ensure mariadb-server mariadb-client; }

write_cnf() {
    local user=$1
    cat >"$CNF" <<CNF
[mariadbd]
user = $user
datadir = $DATA/db
socket = $SOCK
pid-file = $RUN/mariadbd.pid
port = $PORT
bind-address = 127.0.0.1
skip-networking = 0
skip-name-resolve = 1
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
max_connections = 300
# change data capture reads a row-based binlog with full before/after images
log_bin = $DATA/binlog/mariadb-bin
binlog_format = ROW
binlog_row_image = FULL
binlog_row_metadata = FULL
server_id = 1
binlog_expire_logs_seconds = 86400
# a test server: durability traded for speed, as the PostgreSQL one does (fsync=off)
sync_binlog = 0
innodb_flush_log_at_trx_commit = 2
innodb_buffer_pool_size = 128M
innodb_log_file_size = 64M
CNF
}

do_up() {
    do_prepare
    have_bins || die 3 "no MariaDB binaries after installing mariadb-server"
    if pid_alive "$PIDF" mariadbd && ready; then echo "mariadb up 127.0.0.1:$PORT already running"; return 0; fi
    free_port_from_service "$PORT" mariadbd /etc/init.d/mariadb
    local user
    user=$(id -un)
    if [ "$(id -u)" = 0 ]; then
        # mariadbd refuses to run as root without being told to: run it as the package's user
        user=mysql
        id mysql >/dev/null 2>&1 || die 3 "user 'mysql' is missing (reinstall mariadb-server)"
    fi
    chmod 755 "$SERVERS_DIR" 2>/dev/null || true
    mkdir -p "$DATA/binlog"
    write_cnf "$user"
    [ "$(id -u)" = 0 ] && chown -R mysql:mysql "$SERVERS_DIR/$NAME"
    if [ ! -d "$DATA/db/mysql" ]; then
        log "mariadb-install-db $DATA/db"
        rm -rf "$DATA/db"
        # normal: root@localhost gets an empty mysql_native_password, not unix_socket authentication
        mariadb-install-db --defaults-file="$CNF" --auth-root-authentication-method=normal \
            --skip-test-db >>"$OUT" 2>&1 || die 5 "mariadb-install-db failed (log: $OUT)"
    fi
    rm -f "$RUN/mariadbd.pid" "$SOCK"
    start_bg "$PIDF" "$OUT" "$MARIADBD" --defaults-file="$CNF"
    local _
    for _ in $(seq 1 240); do ready && break; pid_alive "$PIDF" || break; sleep 0.25; done
    ready || { tail -n 30 "$OUT" >&2; die 5 "did not come up (log: $OUT)"; }
    assert_loopback "$(cat "$PIDF")"
    # TCP logins from 127.0.0.1 do not match root@localhost under skip-name-resolve: a root of their own
    sql "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
         GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
         CREATE DATABASE IF NOT EXISTS test;" || die 5 "could not create the root@127.0.0.1 login (log: $OUT)"
    echo "mariadb up 127.0.0.1:$PORT started"
}

do_down() {
    if pid_alive "$PIDF" mariadbd; then
        admin shutdown >>"$OUT" 2>&1 || true
        stop_pidfile "$PIDF" 60
    fi
    rm -f "$PIDF"
    echo "mariadb down"
}

do_status() {
    if pid_alive "$PIDF" mariadbd && ready; then echo "mariadb up 127.0.0.1:$PORT"; else echo "mariadb down"; return 1; fi
}

dispatch "$@"
