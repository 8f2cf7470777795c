# Shared pieces of scripts/servers/*.sh (sourced, not run). Each server script defines
# do_up / do_down / do_status, optionally do_prepare (install packages, fetch jars, start nothing;
# without it `prepare` does nothing), and ends with `dispatch "$@"`.
set -euo pipefail

SERVERS_DIR=${SLUICE_SERVERS_DIR:-/tmp/sluice-servers}
SERVERS_CACHE=${SLUICE_SERVERS_CACHE:-$HOME/.cache/sluice-servers}
NAME=${NAME:-$(basename "$0" .sh)}
DATA=$SERVERS_DIR/$NAME/data
LOGS=$SERVERS_DIR/$NAME/log
RUN=$SERVERS_DIR/$NAME/run

log() { printf '[servers %s %s] %s\n' "$NAME" "$(date +%H:%M:%S)" "$*" >&2; }
die() { local code=$1; shift; echo "servers: $NAME: $*" >&2; exit "$code"; }

# apt_ensure PKG...: install the Debian packages that are missing (as root), else exit 3 naming them.
# Scripts may run side by side (pytest sessions, `servers.sh prepare`): apt runs under one lock, and
# `apt-get update` runs at most once per run ($SLUICE_SERVERS_RUN, set by servers.sh), only when the
# package lists are absent (a fresh image) or an install failed.
apt_ensure() {
    local missing=()
    _apt_missing "$@"
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || die 3 "missing Debian package(s): ${missing[*]} (apt-get install ${missing[*]})"
    mkdir -p "$SERVERS_DIR"
    local aptlog=$SERVERS_DIR/apt.log lock
    exec {lock}>"$SERVERS_DIR/apt.lock"
    flock -w 1800 "$lock" || die 3 "apt lock $SERVERS_DIR/apt.lock held for 30 min"
    _apt_missing "$@"  # another script may have installed them while this one waited
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || _apt_update "$aptlog"
        if ! _apt_install "$aptlog" "${missing[@]}"; then
            _apt_update "$aptlog"
            _apt_install "$aptlog" "${missing[@]}" || die 3 "apt-get install ${missing[*]} failed, see $aptlog"
        fi
    fi
    exec {lock}>&-
}
_apt_missing() {
    missing=()
    local p
    for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
}
_apt_install() {
    local aptlog=$1; shift
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >>"$aptlog" 2>&1
}
_apt_update() {
    local stamp=$SERVERS_DIR/apt.updated run=${SLUICE_SERVERS_RUN:-$$}
    [ "$(cat "$stamp" 2>/dev/null)" = "$run" ] && return 0
    log "apt-get update"
    apt-get update -qq >>"$1" 2>&1 || die 3 "apt-get update failed, see $1"
    echo "$run" >"$stamp"
}

# pid_alive PIDFILE [PATTERN]: the pid in PIDFILE runs (and its command line contains PATTERN).
pid_alive() {
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    [ -z "${2:-}" ] || tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2"
}

port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# free_port_from_service PORT PROCESS INITSCRIPT: the Debian package's own service may hold PORT
# after `apt-get install` (where services start): stop it through its init script, since ours has
# the settings the tests need; if the port is still taken, exit 5 naming the process.
free_port_from_service() {
    local port=$1 proc=$2 init=$3
    port_busy "$port" || return 0
    if ss -Hltnp "sport = :$port" 2>/dev/null | grep -qF "\"$proc\"" && [ -x "$init" ]; then
        log "stopping the Debian service ($init) that holds :$port"
        "$init" stop >&2 || true
    fi
    port_busy "$port" && die 5 "port $port is used by another process: $(ss -Hltnp "sport = :$port")"
    return 0
}

# start_bg PIDFILE LOGFILE CMD...: run CMD detached (own session), its pid written to PIDFILE.
start_bg() {
    local pidf=$1 out=$2; shift 2
    mkdir -p "$(dirname "$pidf")" "$(dirname "$out")"
    rm -f "$pidf"
    SERVERS_PIDFILE="$pidf" setsid bash -c 'echo $$ > "$SERVERS_PIDFILE"; exec "$@"' server "$@" \
        >>"$out" 2>&1 </dev/null &
    local _
    for _ in $(seq 1 100); do [ -s "$pidf" ] && return 0; sleep 0.05; done
    die 5 "could not start $1"
}

# wait_port PORT PIDFILE LOGFILE [SECONDS]: until PIDFILE's process listens on PORT.
wait_port() {
    local port=$1 pidf=$2 out=$3 secs=${4:-90} _
    for _ in $(seq 1 $((secs * 4))); do
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
        pid_alive "$pidf" || { tail -n 40 "$out" >&2 || true; die 5 "exited before listening on :$port (log: $out)"; }
        sleep 0.25
    done
    tail -n 40 "$out" >&2 || true
    die 5 "did not listen on :$port within ${secs}s (log: $out)"
}

# assert_loopback PID...: every listening socket of these processes is on a loopback address.
# A UDP socket on a port the kernel picked (in ip_local_port_range) is a client's, not a listener:
# Erlang's resolver opens one on 0.0.0.0 for each DNS query (seen in RabbitMQ's boot), so those
# are left out; TCP listeners and fixed-port UDP sockets must all be on loopback.
assert_loopback() {
    local pids bad lo hi
    pids=$(printf '%s|' "$@"); pids=${pids%|}
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768; hi=60999; }
    bad=$(ss -Hltnup 2>/dev/null | grep -E "pid=($pids)," | awk '{print $1, $5, $7}' \
        | grep -v -E '^[a-z]+ (127\.[0-9.]+|\[::1\]|\[::ffff:127\.[0-9.]+\]|\[?::1\]?):[0-9]+ ' \
        | awk -v lo="$lo" -v hi="$hi" '{ n = split($2, a, ":"); p = a[n] + 0 } !($1 == "udp" && p >= lo && p <= hi)' || true)
    [ -z "$bad" ] || { do_down >&2 || true; die 4 "listens on a non-loopback address: $bad (stopped)"; }
}

# stop_pidfile PIDFILE [SECONDS]: TERM, wait, then KILL the process of PIDFILE.
stop_pidfile() {
    local pidf=$1 secs=${2:-30} pid _
    pid_alive "$pidf" || { rm -f "$pidf"; return 0; }
    pid=$(cat "$pidf")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidf"
}

# maven_libs DIR GROUP:ARTIFACT:VERSION...: the jars of these artifacts and all they need, copied
# into DIR by `mvn dependency:copy-dependencies` once (cached; DIR/.complete marks a whole copy).
maven_libs() {
    local dir=$1; shift
    [ -f "$dir/.complete" ] && return 0
    command -v mvn >/dev/null || die 3 "Maven is needed to fetch jars (apt-get install maven)"
    local work=$dir.pom deps="" c g a v
    mkdir -p "$work"
    for c in "$@"; do
        IFS=: read -r g a v <<<"$c"
        deps+="<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
    done
    cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>sluice.servers</groupId><artifactId>$NAME-libs</artifactId><version>1</version>
<packaging>pom</packaging><dependencies>$deps</dependencies></project>
POM
    log "fetching $* from Maven Central into $dir"
    rm -rf "$dir"
    mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$dir" >"$work/mvn.log" 2>&1 || { tail -n 30 "$work/mvn.log" >&2; die 3 "mvn could not resolve $* (log: $work/mvn.log)"; }
    touch "$dir/.complete"
}

# dispatch ACTION: run do_up / do_down / do_status / do_prepare; `logs` prints where the logs are.
dispatch() {
    mkdir -p "$DATA" "$LOGS" "$RUN"
    case "${1:-}" in
        prepare) if declare -F do_prepare >/dev/null; then do_prepare; fi; echo "$NAME prepared" ;;
        up) do_up ;;
        down) do_down ;;
        status) do_status ;;
        logs) echo "$LOGS" ;;
        *) echo "usage: $0 prepare|up|down|status|logs" >&2; exit 2 ;;
    esac
}
