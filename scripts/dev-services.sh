#!/usr/bin/env bash
# Start and stop the real services that kafka-pg-sink's integration tests need, on a
# machine without Docker:
#   - PostgreSQL: the Debian cluster 15/main (pg_ctlcluster), on 127.0.0.1:5432.
#   - Apache Kafka: a single-node KRaft broker+controller on 127.0.0.1:9092, run from
#     jars that Maven fetches from Maven Central (no release tarball needed).
#
# Usage: scripts/dev-services.sh COMMAND
#   up                      start both (idempotent); returns once both answer
#   down                    stop both (idempotent); data is kept
#   env                     print exports; use: eval "$(scripts/dev-services.sh env)"
#   status                  say whether each service is running
#   start|stop|restart kafka|postgres
#                           one service, for fault-injection tests; data is kept
#   reset                   down, then wipe Kafka's data dir (next `up` formats anew)
#   kafka-run CLASS [ARGS]  run a Kafka CLI class on the broker's classpath, e.g.
#                           kafka-run org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --list
#
# Jars and runtime state live outside the git tree, under
# ${KPS_CACHE_DIR:-$HOME/.cache/kafka-pg-sink}.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_SRC_DIR=$SCRIPT_DIR/kafka # pom, log4j2 config, server.properties template
CACHE_DIR=${KPS_CACHE_DIR:-${HOME:?HOME is not set}/.cache/kafka-pg-sink}

# The Kafka version is pinned in the pom only; read it from there.
KAFKA_VERSION=$(sed -n 's:.*<kafka\.version>\([^<]*\)</kafka\.version>.*:\1:p' "$KAFKA_SRC_DIR/pom.xml")
KAFKA_LIBS=$CACHE_DIR/kafka-$KAFKA_VERSION/libs
KAFKA_LIBS_MARKER=$KAFKA_LIBS/.complete
KAFKA_RUN=$CACHE_DIR/run/kafka
KAFKA_DATA=$KAFKA_RUN/data
KAFKA_PROPS=$KAFKA_RUN/server.properties
KAFKA_PID_FILE=$KAFKA_RUN/kafka.pid
KAFKA_LOG=$KAFKA_RUN/broker.log
KAFKA_HOST=127.0.0.1
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093
KAFKA_START_TIMEOUT=${KPS_KAFKA_START_TIMEOUT:-120}
KAFKA_STOP_TIMEOUT=30

PG_VERSION=15
# Overridable only to exercise this script on a scratch cluster; the tests use 15/main.
PG_CLUSTER=${KPS_PG_CLUSTER:-main}
PG_HOST=127.0.0.1
PG_PORT=${KPS_PG_PORT:-5432}
PG_USER=postgres
PG_PASSWORD=postgres
PG_DB=postgres
PG_MAX_CONNECTIONS=400
PG_START_TIMEOUT=60
PG_LOG=/var/log/postgresql/postgresql-$PG_VERSION-$PG_CLUSTER.log

log() { printf 'dev-services: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

usage() {
    sed -n '8,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- helpers

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() {
    (: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Install Debian packages as a fallback, so a machine missing a tool still works.
apt_install() {
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        die "missing: $*; install these packages (needs root and apt-get)"
    fi
    log "installing Debian packages: $*"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

require_root() {
    [[ $(id -u) -eq 0 ]] || die "this needs root (pg_ctlcluster, runuser)"
}

# Serialise the commands that change state, so parallel test jobs calling `up`
# don't start two brokers: re-run this script under flock(1). -o closes the lock fd
# in the script, so daemons it spawns (postgres via pg_ctlcluster, the broker) do not
# inherit it: a lock fd held by postgres would block every later call forever.
run_locked() {
    [[ ${KPS_DEV_SERVICES_LOCKED:-} == 1 ]] && return 0
    mkdir -p "$CACHE_DIR"
    local rc=0
    KPS_DEV_SERVICES_LOCKED=1 flock -o -w 600 -E 75 "$CACHE_DIR/.lock" \
        bash "${BASH_SOURCE[0]}" "$@" || rc=$?
    [[ $rc -ne 75 ]] || die "another dev-services.sh held $CACHE_DIR/.lock for 600 s"
    exit "$rc"
}

# ---------------------------------------------------------------- Kafka

# Run a Kafka class on the broker's classpath (CLI tools, StorageTool).
# Short-lived JVM: small heap and C1 only, which starts noticeably faster.
kafka_java() {
    java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -cp "$KAFKA_LIBS/*" \
        -Dlog4j2.configurationFile="$KAFKA_SRC_DIR/log4j2.properties" \
        "$@"
}

# Fetch the broker and tools jars once per pom content; the marker holds the pom's
# checksum, so editing the pom (e.g. a version bump) refetches.
kafka_fetch_libs() {
    [[ -n $KAFKA_VERSION ]] || die "no <kafka.version> in $KAFKA_SRC_DIR/pom.xml"
    local want
    want=$(sha256sum "$KAFKA_SRC_DIR/pom.xml" | cut -d' ' -f1)
    if [[ -f $KAFKA_LIBS_MARKER && $(cat "$KAFKA_LIBS_MARKER") == "$want" ]]; then
        return 0
    fi
    command -v java >/dev/null || apt_install openjdk-17-jre-headless
    command -v mvn >/dev/null || apt_install maven
    log "fetching Kafka $KAFKA_VERSION jars with Maven into $KAFKA_LIBS"
    rm -rf "$KAFKA_LIBS"
    mkdir -p "$KAFKA_LIBS"
    local mvn_log=$CACHE_DIR/mvn.log
    # -q -B alone still prints ANSI resets on Maven 3.8; style.color=never stops that.
    if ! mvn -q -B -Dstyle.color=never -f "$KAFKA_SRC_DIR/pom.xml" \
        dependency:copy-dependencies -Dkps.libs.dir="$KAFKA_LIBS" >"$mvn_log" 2>&1; then
        tail -n 40 "$mvn_log" >&2
        die "mvn failed (full output: $mvn_log)"
    fi
    # Sanity: the jars we need by name are there.
    local jar
    for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" \
        log4j-core-*.jar log4j-slf4j-impl-*.jar; do
        compgen -G "$KAFKA_LIBS/$jar" >/dev/null || die "mvn did not produce $jar in $KAFKA_LIBS"
    done
    printf '%s\n' "$want" >"$KAFKA_LIBS_MARKER"
}

# kill -0 also succeeds on a zombie; on this kind of machine pid 1 may reap exited
# daemons late, so a zombie counts as dead.
pid_alive() {
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $state != Z* ]]
}

# Pid from the pid file if that process is alive and really our broker (guards
# against a stale pid file whose pid was reused).
kafka_pid() {
    local pid
    [[ -s $KAFKA_PID_FILE ]] || return 1
    pid=$(<"$KAFKA_PID_FILE")
    [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' kafka\.Kafka ' || return 1
    printf '%s\n' "$pid"
}

kafka_running() { kafka_pid >/dev/null; }

kafka_render_config() {
    mkdir -p "$KAFKA_DATA"
    sed "s|@DATA_DIR@|$KAFKA_DATA|g" "$KAFKA_SRC_DIR/server.properties.template" >"$KAFKA_PROPS"
}

# KRaft needs its log dir formatted once with a cluster id; later starts reuse it.
kafka_format_if_needed() {
    [[ -f $KAFKA_DATA/meta.properties ]] && return 0
    local cluster_id
    cluster_id=$(kafka_java kafka.tools.StorageTool random-uuid)
    log "formatting Kafka storage (cluster id $cluster_id)"
    kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_PROPS" >&2 ||
        die "kafka.tools.StorageTool format failed"
}

# Start the broker in the background, without waiting for it to be ready.
kafka_launch() {
    if kafka_running; then
        log "kafka already running (pid $(kafka_pid))"
        return 0
    fi
    rm -f "$KAFKA_PID_FILE"
    local port
    for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
        if port_open "$port"; then
            die "port $port is in use by another process (not started by this script): $(ss -ltnpH "sport = :$port" 2>/dev/null || true)"
        fi
    done
    kafka_fetch_libs
    kafka_render_config
    kafka_format_if_needed
    # Keep the previous run's log for post-mortems; the readiness check greps only this run's.
    if [[ -f $KAFKA_LOG ]]; then mv -f "$KAFKA_LOG" "$KAFKA_LOG.1"; fi
    log "starting Kafka $KAFKA_VERSION (log: $KAFKA_LOG)"
    # setsid+nohup: the broker outlives this shell and its terminal. The inner bash
    # writes its own pid and then execs java, so the pid file holds java's pid whether
    # or not setsid had to fork.
    # shellcheck disable=SC2016 # $$ and $@ are for the inner bash
    setsid nohup bash -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$KAFKA_PID_FILE" \
        java -Xmx1g -Xms256m \
        -cp "$KAFKA_LIBS/*" \
        -Dlog4j2.configurationFile="$KAFKA_SRC_DIR/log4j2.properties" \
        kafka.Kafka "$KAFKA_PROPS" \
        </dev/null >"$KAFKA_LOG" 2>&1 &
    # The pid file is written by the child: wait a moment for it.
    local _
    for _ in $(seq 50); do
        [[ -s $KAFKA_PID_FILE ]] && break
        sleep 0.1
    done
    [[ -s $KAFKA_PID_FILE ]] || die "Kafka did not write its pid file $KAFKA_PID_FILE"
}

# Ready = the process lives, the port accepts, and this run's log says it started.
kafka_wait_ready() {
    local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kafka_running; then
            log "Kafka exited during startup; last lines of $KAFKA_LOG:"
            tail -n 40 "$KAFKA_LOG" >&2 || true
            die "Kafka failed to start"
        fi
        if port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$KAFKA_LOG"; then
            log "kafka ready on $KAFKA_HOST:$KAFKA_PORT (pid $(kafka_pid))"
            return 0
        fi
        sleep 0.5
    done
    log "last lines of $KAFKA_LOG:"
    tail -n 40 "$KAFKA_LOG" >&2 || true
    die "Kafka not ready after ${KAFKA_START_TIMEOUT} s (still running as pid $(kafka_pid || echo '?'))"
}

kafka_start() {
    kafka_launch
    kafka_wait_ready
}

# SIGTERM (controlled shutdown keeps the log clean), SIGKILL after a grace period.
kafka_stop() {
    local pid
    if ! pid=$(kafka_pid); then
        rm -f "$KAFKA_PID_FILE"
        log "kafka not running"
        return 0
    fi
    log "stopping kafka (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
    while pid_alive "$pid" && ((SECONDS < deadline)); do
        sleep 0.5
    done
    if pid_alive "$pid"; then
        log "kafka still alive after ${KAFKA_STOP_TIMEOUT} s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
        ! pid_alive "$pid" || die "kafka (pid $pid) survived SIGKILL"
    fi
    rm -f "$KAFKA_PID_FILE"
    log "kafka stopped"
}

kafka_reset() {
    kafka_stop
    # Guard the rm: only ever our own data dir under the cache dir.
    [[ -n $CACHE_DIR && $KAFKA_DATA == "$CACHE_DIR"/run/kafka/data ]] || die "refusing to wipe $KAFKA_DATA"
    rm -rf "$KAFKA_DATA"
    log "kafka data wiped ($KAFKA_DATA)"
}

# ---------------------------------------------------------------- PostgreSQL

pg_installed() {
    command -v pg_ctlcluster >/dev/null && [[ -x /usr/lib/postgresql/$PG_VERSION/bin/postgres ]]
}

pg_cluster_exists() {
    [[ -f /etc/postgresql/$PG_VERSION/$PG_CLUSTER/postgresql.conf ]]
}

# pg_ctlcluster status checks the postmaster pid file and that the process lives.
pg_running() {
    pg_cluster_exists && pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" status >/dev/null 2>&1
}

# psql as the postgres OS user over the unix socket (peer auth, no password).
# cd / because runuser keeps root's cwd, which postgres may not be able to read.
pg_superuser_psql() {
    (cd / && runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PG_PORT" -d "$PG_DB" "$@")
}

# The check the tests depend on: password login over TCP.
pg_tcp_ok() {
    PGPASSWORD=$PG_PASSWORD PGCONNECT_TIMEOUT=5 psql -X -q -At -h "$PG_HOST" -p "$PG_PORT" \
        -U "$PG_USER" -d "$PG_DB" -c 'select 1' 2>/dev/null | grep -qx 1
}

# Settings are applied before start (listen_addresses and max_connections need a
# restart anyway). Durability settings are left at their defaults on purpose.
# listen_addresses/max_connections go into a conf.d drop-in, which Debian clusters
# include by default: pg_conftool would write 127.0.0.1 unquoted, which PostgreSQL
# rejects as a syntax error. Debian's tools read the port from postgresql.conf, so
# that one stays there.
pg_configure() {
    local conf_dir=/etc/postgresql/$PG_VERSION/$PG_CLUSTER
    local dropin=$conf_dir/conf.d/kafka-pg-sink.conf
    local want
    want=$(printf '%s\n' \
        '# Written by kafka-pg-sink scripts/dev-services.sh; local dev/test settings.' \
        "listen_addresses = '$PG_HOST'" \
        "max_connections = $PG_MAX_CONNECTIONS")
    pg_conftool "$PG_VERSION" "$PG_CLUSTER" set port "$PG_PORT"
    if ! grep -Eq "^[[:space:]]*include_dir[[:space:]]*=[[:space:]]*'conf\.d'" "$conf_dir/postgresql.conf"; then
        printf "\ninclude_dir = 'conf.d'\n" >>"$conf_dir/postgresql.conf"
    fi
    mkdir -p "$conf_dir/conf.d"
    if [[ ! -f $dropin || $(<"$dropin") != "$want" ]]; then
        printf '%s\n' "$want" >"$dropin"
        chown postgres:postgres "$dropin"
    fi
}

pg_log_tail() {
    log "last lines of $PG_LOG:"
    tail -n 30 "$PG_LOG" >&2 2>/dev/null || true
}

pg_start() {
    require_root
    pg_installed || apt_install "postgresql-$PG_VERSION"
    if ! pg_cluster_exists; then
        log "creating PostgreSQL cluster $PG_VERSION/$PG_CLUSTER"
        pg_createcluster -p "$PG_PORT" "$PG_VERSION" "$PG_CLUSTER" >&2
    fi
    pg_configure
    if pg_running; then
        # Running already, maybe started by someone else without our settings:
        # only restart if what is in effect is not what the tests need.
        local in_effect
        in_effect=$(pg_superuser_psql -At -c 'show max_connections' -c 'show listen_addresses' | paste -sd' ')
        if [[ $in_effect == "$PG_MAX_CONNECTIONS $PG_HOST" ]]; then
            log "postgres already running ($PG_VERSION/$PG_CLUSTER)"
        else
            log "postgres running with '$in_effect'; restarting to apply settings"
            pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" restart -m fast || { pg_log_tail; die "pg restart failed"; }
        fi
    else
        if port_open "$PG_PORT"; then
            die "port $PG_PORT is in use, but not by cluster $PG_VERSION/$PG_CLUSTER: $(ss -ltnpH "sport = :$PG_PORT" 2>/dev/null || true)"
        fi
        log "starting postgres $PG_VERSION/$PG_CLUSTER"
        pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start || { pg_log_tail; die "pg_ctlcluster start failed"; }
    fi
    local deadline=$((SECONDS + PG_START_TIMEOUT))
    until pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; do
        ((SECONDS < deadline)) || { pg_log_tail; die "postgres not ready after ${PG_START_TIMEOUT} s"; }
        sleep 0.5
    done
    if ! pg_tcp_ok; then
        # Fresh cluster: the postgres role has no password yet.
        log "setting the password of role $PG_USER"
        pg_superuser_psql -c "ALTER ROLE $PG_USER WITH PASSWORD '$PG_PASSWORD'"
        pg_tcp_ok || { pg_log_tail; die "password login as $PG_USER over TCP to $PG_HOST:$PG_PORT fails (check pg_hba.conf)"; }
    fi
    log "postgres ready on $PG_HOST:$PG_PORT"
}

pg_stop() {
    require_root
    if pg_running; then
        log "stopping postgres $PG_VERSION/$PG_CLUSTER"
        pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" stop -m fast
        log "postgres stopped"
    else
        log "postgres not running"
    fi
}

# ---------------------------------------------------------------- commands

cmd_up() {
    # Launch Kafka first so the JVM boots while PostgreSQL starts.
    kafka_launch
    pg_start
    kafka_wait_ready
}

cmd_down() {
    kafka_stop
    pg_stop
}

cmd_env() {
    printf 'export KAFKA_BOOTSTRAP_SERVERS=%s:%s\n' "$KAFKA_HOST" "$KAFKA_PORT"
    printf 'export DATABASE_URL=postgres://%s:%s@%s:%s/%s\n' \
        "$PG_USER" "$PG_PASSWORD" "$PG_HOST" "$PG_PORT" "$PG_DB"
}

cmd_status() {
    local pid
    if pid=$(kafka_pid); then
        echo "kafka: running (pid $pid, $KAFKA_HOST:$KAFKA_PORT, Kafka $KAFKA_VERSION)"
    else
        echo "kafka: stopped"
    fi
    if pg_running; then
        echo "postgres: running ($PG_VERSION/$PG_CLUSTER, $PG_HOST:$PG_PORT)"
    else
        echo "postgres: stopped"
    fi
}

# start|stop|restart for one service.
cmd_service() {
    local action=$1 service=${2:-}
    case $service in
    kafka | postgres) ;;
    *) usage ;;
    esac
    case $action in
    start) if [[ $service == kafka ]]; then kafka_start; else pg_start; fi ;;
    stop) if [[ $service == kafka ]]; then kafka_stop; else pg_stop; fi ;;
    restart)
        cmd_service stop "$service"
        cmd_service start "$service"
        ;;
    esac
}

main() {
    local cmd=${1:-}
    case $cmd in
    up | down | start | stop | restart | reset) run_locked "$@" ;;
    esac
    [[ $# -gt 0 ]] && shift
    case $cmd in
    up) cmd_up ;;
    down) cmd_down ;;
    env) cmd_env ;;
    status) cmd_status ;;
    start | stop | restart) cmd_service "$cmd" "$@" ;;
    reset)
        kafka_reset
        pg_stop
        ;;
    kafka-run)
        [[ $# -ge 1 ]] || usage
        kafka_fetch_libs
        kafka_java "$@"
        ;;
    *) usage ;;
    esac
}

main "$@"
