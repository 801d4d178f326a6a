#!/usr/bin/env bash
# Start and stop the real services that kafka-pg-sink's integration tests need, on a
# machine without Docker:
#   - PostgreSQL 15: a Debian cluster (pg_ctlcluster); the default instance is 15/main on
#     127.0.0.1:5432. Plain and TLS connections (server cert from the script's own CA).
#   - Apache Kafka: a single-node KRaft broker+controller run from jars that Maven fetches
#     from Maven Central (no release tarball needed). Listeners on 127.0.0.1:
#       PLAINTEXT 9092 (also inter-broker), CONTROLLER 9093,
#       SASL_PLAINTEXT 9094 (PLAIN and SCRAM-SHA-512, user sink / sink-secret),
#       SSL 9095 (server cert from the same CA; no client auth).
#   - A Confluent-compatible Schema Registry: Apicurio Registry 2.4.2.Final, assembled once
#     from Maven Central jars with the Quarkus 2.16.4 Maven plugin (scripts/registry/; the
#     first build takes about 4 minutes, later ones reuse the cached app), in-memory storage
#     (empty at every start: schemas and their ids do not survive a stop), Confluent API
#     under http://127.0.0.1:18081/apis/ccompat/v7 (`env` prints SCHEMA_REGISTRY_URL).
#   - Kafka Connect's JsonConverter (org.apache.kafka:connect-json, the broker's Kafka version)
#     and Debezium's schema builders (debezium-core), fetched from Maven Central with
#     scripts/serializers/connect/pom.xml, and the tests' helper ConnectJson.java compiled
#     against them once: the Connect JSON bytes the tests feed (`env` prints
#     KPS_CONNECT_JSON_CP, the classpath to run `java -cp "$KPS_CONNECT_JSON_CP" ConnectJson`).
#   - The connect service (default instance only): a second PostgreSQL 15 cluster, 15/kps_cdc
#     on 127.0.0.1:5442, with wal_level = logical, 64 replication slots and WAL senders, and
#     role debezium (LOGIN REPLICATION CREATEDB, password debezium-secret), the source the
#     CDC tests change; and a Kafka Connect worker (standalone, Kafka 4.1.1 jars from Maven
#     Central, heap 512m, REST on 127.0.0.1:18083, offsets in a file, talking to the default
#     broker) with the real Debezium PostgreSQL connector 3.6.1.Final (its `plugin` tar.gz)
#     on plugin.path, plugin.discovery=service_load. Connectors are added and deleted through
#     the REST API (tests/it/helpers/debezium.rs). Jars come from scripts/connect/pom.xml into
#     $CACHE/connect-worker (refetched when the pom changes); `env` prints KAFKA_CONNECT_URL,
#     KPS_CDC_DATABASE_URL (the cluster's admin URL), KPS_CDC_ROLE, KPS_CDC_ROLE_PASSWORD.
#   - `up` also installs Debian's prometheus package (prometheus, promtool) when missing,
#     for the alert tests (it starts no Prometheus), and scripts/ops-tools.sh's helm and
#     kubernetes-validate for deploy/check.sh, and scripts/serializers.sh's venv with
#     confluent-kafka's Python serializers (the registry-format tests produce with them).
#
# Usage: [KPS_INSTANCE=NAME] scripts/dev-services.sh COMMAND
#   up [kafka|postgres|registry|connect]
#                           start Kafka, PostgreSQL, the registry and (default instance)
#                           connect, or one service (idempotent); returns once they answer
#   build [kafka|registry|connect-json|connect]
#                           fetch the Kafka jars, build the registry app and the JsonConverter
#                           helper, fetch the Connect worker and Debezium (or one), so a later
#                           up only starts them; nothing is started
#   down [kafka|postgres|registry|connect]
#                           stop all (the registry and connect too), or one (idempotent);
#                           data is kept; connect means the worker and its source cluster
#   env                     print exports; use: eval "$(scripts/dev-services.sh env)"
#   status                  say whether each service is running
#   start|stop|restart kafka|postgres|registry|connect
#                           one service, for fault-injection tests; data is kept
#   reset                   down, then wipe Kafka's data dir (next `up` formats anew);
#                           for a named instance, also drop its PostgreSQL cluster
#   destroy                 named instances only: stop, drop the PostgreSQL cluster and
#                           delete the instance's run dir (ports, logs, Kafka data)
#   list                    print the names of the named instances that exist
#   kafka-run CLASS [ARGS]  run a Kafka CLI class on the broker's classpath, e.g.
#                           kafka-run org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --list
#
# Instances. Without KPS_INSTANCE (or with KPS_INSTANCE=default) commands act on the
# default instance: cluster 15/main, run dirs $CACHE/run/kafka and $CACHE/run/registry,
# fixed default ports. KPS_INSTANCE=NAME (NAME: [a-z0-9][a-z0-9_]{0,31}, not "default",
# "kafka" or "registry") selects an independent instance for fault-injection tests: its own
# PostgreSQL cluster 15/kps_NAME (start.conf manual), its own broker (heap 384m) and its own
# registry (`start registry` alone gives a second registry: tests/it/helpers/registry.rs),
# with run dir $CACHE/run/NAME (broker data, logs, pid files, the ports in use). Data survives
# stop/start/down; `destroy` (or `reset`) removes it.
#
# Ports (environment; each one wins over everything else):
#   KPS_PG_PORT                default instance 5432
#   KPS_KAFKA_PORT             default instance 9092 (PLAINTEXT)
#   KPS_KAFKA_CONTROLLER_PORT  default instance 9093
#   KPS_KAFKA_SASL_PORT        default instance 9094 (SASL_PLAINTEXT)
#   KPS_KAFKA_SSL_PORT         default instance 9095 (SSL)
#   KPS_REGISTRY_PORT          default instance 18081 (Schema Registry, HTTP)
#   KPS_CDC_PG_PORT            5442 (the connect service's source cluster 15/kps_cdc)
#   KPS_CONNECT_PORT           18083 (the Kafka Connect worker's REST API)
# A named instance remembers the ports of its last up/start in $CACHE/run/NAME/ports.env,
# so later commands (env, status, stop, start) need not repeat them. A port neither set
# nor remembered is derived from the name alone: base = 20000 + 10 * (cksum(NAME) % 1000),
# then PG base, Kafka base+1, controller base+2, SASL base+3, SSL base+4, registry base+5. Two names can
# map to the same block, and nothing checks the ports are free before `up` does: tests
# that run instances side by side should pass explicit ports.
#
# Other environment: KPS_CACHE_DIR, KPS_KAFKA_START_TIMEOUT (s, default 120),
# KPS_CONNECT_HEAP (the Connect worker's -Xmx, default 512m),
# KPS_KAFKA_HEAP (broker -Xmx: default 1g, 384m for a named instance),
# KPS_PG_CLUSTER (cluster name override, to exercise this script on a scratch cluster),
# KPS_KAFKA_BROKER_PROPERTIES (named instances only: extra server.properties lines, one
# per line, appended after the template so they win, e.g.
# 'group.initial.rebalance.delay.ms=3000' for the broker's production default; remembered
# in $CACHE/run/NAME/broker-extra.properties like the ports, set it empty to drop them;
# refused for the default instance, whose broker others share).
#
# TLS: a CA and a server certificate (CN localhost; SAN DNS:localhost, IP:127.0.0.1,
# IP:::1) are generated once with openssl into $CACHE/tls (ca.crt, server.crt,
# server.key, and server.pem = key+chain, the broker's PEM keystore), and regenerated if
# missing, invalid or expiring within 30 days. `env` prints KPS_TLS_CA=$CACHE/tls/ca.crt.
# Each managed PostgreSQL cluster gets copies owned by postgres in
# /etc/postgresql/15/CLUSTER/kps-tls/. Kafka client configs for the CLI are written next
# to the broker's server.properties: client-sasl-plain.properties,
# client-sasl-scram.properties, client-ssl.properties.
#
# `up`/`start` on a running service bring it to the current settings: PostgreSQL is
# reloaded (restarted only for a new port, listen_addresses or max_connections), and a
# broker whose rendered server.properties differs (ports, template, TLS files) is
# restarted. SCRAM credentials go in at format time, or through ConfigCommand once for
# a data dir formatted without them.
#
# Jars and runtime state live outside the git tree, under
# ${KPS_CACHE_DIR:-$HOME/.cache/kafka-pg-sink} ($CACHE above).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_SRC_DIR=$SCRIPT_DIR/kafka # pom, log4j2 config, server.properties template
REGISTRY_SRC_DIR=$SCRIPT_DIR/registry # pom, Maven settings, Quarkus properties
CONNECT_SRC_DIR=$SCRIPT_DIR/serializers/connect # pom and ConnectJson.java, the tests' JsonConverter
CACHE_DIR=${KPS_CACHE_DIR:-${HOME:?HOME is not set}/.cache/kafka-pg-sink}

log() { printf 'dev-services: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

usage() {
    sed -n '/^# Usage:/,/^#$/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- instance and ports

INSTANCE=${KPS_INSTANCE:-default}
[[ $INSTANCE =~ ^[a-z0-9][a-z0-9_]{0,31}$ ]] ||
    die "KPS_INSTANCE='$INSTANCE': use 1-32 characters from [a-z0-9_], starting with a letter or digit"
# kafka, registry, connect: run dirs of the default instance; cdc: its cluster 15/kps_cdc.
[[ $INSTANCE != kafka && $INSTANCE != registry && $INSTANCE != connect && $INSTANCE != cdc ]] ||
    die "KPS_INSTANCE=$INSTANCE is reserved (a run dir or cluster of the default instance)"

is_default() { [[ $INSTANCE == default ]]; }

if is_default; then
    INSTANCE_DIR=$CACHE_DIR/run
    KAFKA_RUN=$CACHE_DIR/run/kafka # unchanged from before instances existed
    LOCK_FILE=$CACHE_DIR/.lock
    PG_CLUSTER=${KPS_PG_CLUSTER:-main}
    KAFKA_HEAP=${KPS_KAFKA_HEAP:-1g}
    KAFKA_HEAP_MIN=256m
else
    INSTANCE_DIR=$CACHE_DIR/run/$INSTANCE
    KAFKA_RUN=$INSTANCE_DIR/kafka
    LOCK_FILE=$CACHE_DIR/locks/$INSTANCE.lock # outside the run dir, which destroy deletes
    PG_CLUSTER=${KPS_PG_CLUSTER:-kps_$INSTANCE}
    KAFKA_HEAP=${KPS_KAFKA_HEAP:-384m}
    KAFKA_HEAP_MIN=128m
fi
PORTS_FILE=$INSTANCE_DIR/ports.env # named instances only

# Sets PG_PORT KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_SASL_PORT KAFKA_SSL_PORT.
resolve_ports() {
    local -A fallback=()
    if is_default; then
        fallback=([pg]=5432 [kafka]=9092 [controller]=9093 [sasl]=9094 [ssl]=9095 [registry]=18081)
    else
        local sum base key value
        sum=$(printf '%s' "$INSTANCE" | cksum | cut -d' ' -f1)
        base=$((20000 + 10 * (sum % 1000)))
        fallback=([pg]=$base [kafka]=$((base + 1)) [controller]=$((base + 2))
            [sasl]=$((base + 3)) [ssl]=$((base + 4)) [registry]=$((base + 5)))
        if [[ -f $PORTS_FILE ]]; then
            while IFS='=' read -r key value; do
                [[ -n $key && -n ${fallback[$key]+x} && $value =~ ^[0-9]+$ ]] && fallback[$key]=$value
            done <"$PORTS_FILE"
        fi
    fi
    PG_PORT=${KPS_PG_PORT:-${fallback[pg]}}
    KAFKA_PORT=${KPS_KAFKA_PORT:-${fallback[kafka]}}
    KAFKA_CONTROLLER_PORT=${KPS_KAFKA_CONTROLLER_PORT:-${fallback[controller]}}
    KAFKA_SASL_PORT=${KPS_KAFKA_SASL_PORT:-${fallback[sasl]}}
    KAFKA_SSL_PORT=${KPS_KAFKA_SSL_PORT:-${fallback[ssl]}}
    REGISTRY_PORT=${KPS_REGISTRY_PORT:-${fallback[registry]}}
    local name port
    local -A seen=()
    for name in PG_PORT KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_SASL_PORT KAFKA_SSL_PORT REGISTRY_PORT; do
        port=${!name}
        if ! [[ $port =~ ^[0-9]{1,5}$ ]] || ((10#$port < 1 || 10#$port > 65535)); then
            die "KPS_$name=$port is not a port number"
        fi
        [[ -z ${seen[$port]:-} ]] || die "KPS_$name and KPS_${seen[$port]} are both $port"
        seen[$port]=$name
    done
}
resolve_ports

# Remember a named instance's ports, for later commands that don't pass them.
save_ports() {
    is_default && return 0
    mkdir -p "$INSTANCE_DIR"
    printf 'pg=%s\nkafka=%s\ncontroller=%s\nsasl=%s\nssl=%s\nregistry=%s\n' "$PG_PORT" "$KAFKA_PORT" \
        "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_SSL_PORT" "$REGISTRY_PORT" >"$PORTS_FILE.tmp"
    mv -f "$PORTS_FILE.tmp" "$PORTS_FILE"
    printf '%s' "$BROKER_EXTRA" >"$BROKER_EXTRA_FILE"
}

# A named instance's extra broker settings (KPS_KAFKA_BROKER_PROPERTIES): set (even empty)
# wins and is remembered; unset reuses what was remembered. The default instance has none:
# a broker others share must not change under them.
BROKER_EXTRA_FILE=$INSTANCE_DIR/broker-extra.properties
if is_default; then
    [[ -z ${KPS_KAFKA_BROKER_PROPERTIES:-} ]] ||
        die "KPS_KAFKA_BROKER_PROPERTIES is for named instances (KPS_INSTANCE=NAME): the default broker is shared"
    BROKER_EXTRA=
elif [[ -n ${KPS_KAFKA_BROKER_PROPERTIES+x} ]]; then
    BROKER_EXTRA=$KPS_KAFKA_BROKER_PROPERTIES
elif [[ -f $BROKER_EXTRA_FILE ]]; then
    BROKER_EXTRA=$(<"$BROKER_EXTRA_FILE")
else
    BROKER_EXTRA=
fi
while IFS= read -r line; do
    [[ -z $line || $line == '#'* || $line =~ ^[A-Za-z0-9._-]+=.* ]] ||
        die "KPS_KAFKA_BROKER_PROPERTIES: '$line' is not a key=value line"
done <<<"$BROKER_EXTRA"

# ---------------------------------------------------------------- settings

# The Kafka version is pinned in the pom only; read it from there.
KAFKA_VERSION=$(sed -n 's:.*<kafka\.version>\([^<]*\)</kafka\.version>.*:\1:p' "$KAFKA_SRC_DIR/pom.xml")
KAFKA_LIBS=$CACHE_DIR/kafka-$KAFKA_VERSION/libs
KAFKA_LIBS_MARKER=$KAFKA_LIBS/.complete
KAFKA_DATA=$KAFKA_RUN/data
KAFKA_PROPS=$KAFKA_RUN/server.properties
KAFKA_PID_FILE=$KAFKA_RUN/kafka.pid
KAFKA_LOG=$KAFKA_RUN/broker.log
# Which SCRAM credentials the broker's metadata holds (see kafka_ensure_scram).
KAFKA_SCRAM_MARKER=$KAFKA_RUN/scram-users
KAFKA_HOST=127.0.0.1
KAFKA_START_TIMEOUT=${KPS_KAFKA_START_TIMEOUT:-120}
KAFKA_STOP_TIMEOUT=30
KAFKA_SASL_USER=sink
KAFKA_SASL_PASSWORD=sink-secret

# The JsonConverter helper: its jars and its compiled class, rebuilt when the pom or the
# helper's source changes (the marker holds their checksum).
CONNECT_JSON_DIR=$CACHE_DIR/connect-json
CONNECT_JSON_LIBS=$CONNECT_JSON_DIR/libs
CONNECT_JSON_CLASSES=$CONNECT_JSON_DIR/classes
CONNECT_JSON_MARKER=$CONNECT_JSON_DIR/.complete

REGISTRY_VERSION=$(sed -n 's:.*<apicurio\.version>\([^<]*\)</apicurio\.version>.*:\1:p' "$REGISTRY_SRC_DIR/pom.xml")
REGISTRY_APP=$CACHE_DIR/registry-$REGISTRY_VERSION
REGISTRY_MARKER=$REGISTRY_APP/.complete
REGISTRY_RUN=$INSTANCE_DIR/registry
REGISTRY_PID_FILE=$REGISTRY_RUN/registry.pid
REGISTRY_LOG=$REGISTRY_RUN/registry.log
REGISTRY_HOST=127.0.0.1
REGISTRY_START_TIMEOUT=90

# The CDC source (default instance only): a second PostgreSQL cluster with logical decoding,
# captured by the real Debezium PostgreSQL connector in a Kafka Connect worker. The worker
# jars and the connector's plugin dir are fetched once per content of scripts/connect/.
CONNECT_SRC_DIR_WORKER=$SCRIPT_DIR/connect # pom (worker + Debezium plugin), log4j2 config
DEBEZIUM_VERSION=$(sed -n 's:.*<debezium\.version>\([^<]*\)</debezium\.version>.*:\1:p' "$CONNECT_SRC_DIR_WORKER/pom.xml")
CONNECT_HOME=$CACHE_DIR/connect-worker
CONNECT_LIBS=$CONNECT_HOME/libs
CONNECT_PLUGINS=$CONNECT_HOME/plugins
CONNECT_MARKER=$CONNECT_HOME/.complete
CONNECT_RUN=$CACHE_DIR/run/connect
CONNECT_PROPS=$CONNECT_RUN/worker.properties
CONNECT_PID_FILE=$CONNECT_RUN/connect.pid
CONNECT_LOG=$CONNECT_RUN/connect.log
CONNECT_HOST=127.0.0.1
CONNECT_PORT=${KPS_CONNECT_PORT:-18083}
CONNECT_HEAP=${KPS_CONNECT_HEAP:-512m}
CONNECT_START_TIMEOUT=120
CDC_PG_CLUSTER=kps_cdc
CDC_PG_PORT=${KPS_CDC_PG_PORT:-5442}
CDC_PG_CONF_DIR=/etc/postgresql/15/$CDC_PG_CLUSTER
CDC_PG_LOG=/var/log/postgresql/postgresql-15-$CDC_PG_CLUSTER.log
# The connector's login: LOGIN REPLICATION, no superuser. Test databases are owned by it, so
# it may create the publications of its own tables.
CDC_ROLE=debezium
CDC_ROLE_PASSWORD=debezium-secret
# Slots many tests hold at once; each test drops its own.
CDC_MAX_SLOTS=64
for name in CONNECT_PORT CDC_PG_PORT; do
    port=${!name}
    if ! [[ $port =~ ^[0-9]{1,5}$ ]] || ((10#$port < 1 || 10#$port > 65535)); then
        die "KPS_$name=$port is not a port number"
    fi
done
unset name port

PG_VERSION=15
PG_HOST=127.0.0.1
PG_USER=postgres
PG_PASSWORD=postgres
PG_DB=postgres
PG_MAX_CONNECTIONS=400
PG_START_TIMEOUT=60
PG_CONF_DIR=/etc/postgresql/$PG_VERSION/$PG_CLUSTER
PG_TLS_DIR=$PG_CONF_DIR/kps-tls # copies of the server cert and key, owned by postgres
PG_TLS_CERT=$PG_TLS_DIR/server.crt
PG_TLS_KEY=$PG_TLS_DIR/server.key
PG_LOG=/var/log/postgresql/postgresql-$PG_VERSION-$PG_CLUSTER.log

TLS_DIR=$CACHE_DIR/tls
TLS_CA=$TLS_DIR/ca.crt
TLS_CA_KEY=$TLS_DIR/ca.key
TLS_CERT=$TLS_DIR/server.crt
TLS_KEY=$TLS_DIR/server.key
TLS_PEM=$TLS_DIR/server.pem # key, server cert, CA cert: the broker's PEM keystore

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

# Serialise the commands that change an instance's state, so parallel test jobs calling
# `up` don't start two brokers: re-run this script under flock(1) on the instance's
# lock file. -o closes the lock fd in the script, so daemons it spawns (postgres via
# pg_ctlcluster, the broker) do not inherit it: a lock fd held by postgres would block
# every later call forever. Each instance has its own lock, so a test stopping its
# instance never waits for another instance's `up`.
run_locked() {
    [[ ${KPS_DEV_SERVICES_LOCKED:-} == 1 ]] && return 0
    mkdir -p "$(dirname "$LOCK_FILE")"
    local rc=0
    KPS_DEV_SERVICES_LOCKED=1 flock -o -w 600 -E 75 "$LOCK_FILE" \
        bash "${BASH_SOURCE[0]}" "$@" || rc=$?
    [[ $rc -ne 75 ]] || die "another dev-services.sh held $LOCK_FILE for 600 s"
    exit "$rc"
}

# Run "$@" (a function that fetches, installs or generates something all instances
# share: apt packages, Kafka jars, TLS files, PostgreSQL cluster creation) under one
# machine-wide lock. The lock fd is closed for "$@" itself (bash keeps a close-on-exec
# copy to hold the lock), so nothing it spawns can keep the lock alive.
with_setup_lock() {
    mkdir -p "$CACHE_DIR"
    (
        flock -w 600 9 || die "another dev-services.sh held $CACHE_DIR/.setup.lock for 600 s"
        "$@" 9>&-
    ) 9>"$CACHE_DIR/.setup.lock"
}

# Escape a value for the replacement side of sed's s|||.
sed_escape() {
    printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'
}

# kill -0 also succeeds on a zombie; on this kind of machine pid 1 may reap exited
# daemons late, so a zombie counts as dead.
pid_alive() {
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $state != Z* ]]
}

# ---------------------------------------------------------------- TLS

tls_ok() {
    [[ -s $TLS_CA && -s $TLS_CA_KEY && -s $TLS_CERT && -s $TLS_KEY && -s $TLS_PEM ]] || return 1
    openssl x509 -in "$TLS_CERT" -noout -checkend $((30 * 86400)) >/dev/null 2>&1 || return 1
    openssl verify -CAfile "$TLS_CA" "$TLS_CERT" >/dev/null 2>&1 || return 1
    [[ $(openssl pkey -in "$TLS_KEY" -pubout 2>/dev/null) == "$(openssl x509 -in "$TLS_CERT" -noout -pubkey)" ]]
}

# The CA and server files, made in the (empty) dir $1. Every step is chained with &&:
# the caller tests the result, and set -e does not apply inside a tested function.
tls_make_files() {
    local dir=$1
    cat >"$dir/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
EOF
    # RSA 2048 and unencrypted PKCS#8 keys: what PostgreSQL, the Kafka broker's PEM
    # keystore, OpenSSL-based clients (librdkafka) and rustls all accept.
    (
        umask 077 && cd "$dir" &&
            openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out ca.key &&
            openssl req -config openssl.cnf -new -x509 -key ca.key -subj '/CN=kafka-pg-sink dev CA' \
                -days 3650 -extensions v3_ca -set_serial "0x$(openssl rand -hex 16)" -out ca.crt &&
            openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out server.key &&
            openssl req -config openssl.cnf -new -key server.key -subj '/CN=localhost' -out server.csr &&
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key \
                -set_serial "0x$(openssl rand -hex 16)" -days 3650 \
                -extfile openssl.cnf -extensions v3_server -out server.crt 2>/dev/null &&
            cat server.key server.crt ca.crt >server.pem &&
            rm -f server.csr openssl.cnf &&
            chmod 0644 ca.crt server.crt
    )
}

# Generate the CA and server certificate into a temporary dir, then swap it in.
tls_generate() {
    tls_ok && return 0 # made by another process while we waited for the lock
    command -v openssl >/dev/null || apt_install openssl
    log "generating a CA and a server certificate for localhost/127.0.0.1 in $TLS_DIR"
    local tmp
    tmp=$(mktemp -d "$CACHE_DIR/.tls.XXXXXX")
    if ! tls_make_files "$tmp"; then
        rm -rf "$tmp"
        die "openssl failed to generate the TLS files"
    fi
    chmod 0755 "$tmp"
    rm -rf "$TLS_DIR.old"
    if [[ -e $TLS_DIR ]]; then mv "$TLS_DIR" "$TLS_DIR.old"; fi
    mv "$tmp" "$TLS_DIR"
    rm -rf "$TLS_DIR.old"
    tls_ok || die "generated TLS files in $TLS_DIR do not check out"
}

tls_ensure() {
    command -v openssl >/dev/null || with_setup_lock apt_install openssl
    tls_ok || with_setup_lock tls_generate
}

# ---------------------------------------------------------------- Connect JSON helper

connect_json_sum() {
    cat "$CONNECT_SRC_DIR/pom.xml" "$CONNECT_SRC_DIR/ConnectJson.java" | sha256sum | cut -d' ' -f1
}

connect_json_built() {
    [[ -f $CONNECT_JSON_MARKER && $(cat "$CONNECT_JSON_MARKER") == "$(connect_json_sum)" ]]
}

# The tests' JsonConverter must be the broker's Kafka version: one place to bump it, checked.
connect_json_build() {
    local version
    version=$(sed -n 's:.*<kafka\.version>\([^<]*\)</kafka\.version>.*:\1:p' "$CONNECT_SRC_DIR/pom.xml")
    [[ $version == "$KAFKA_VERSION" ]] ||
        die "$CONNECT_SRC_DIR/pom.xml has Kafka '$version', the broker $KAFKA_VERSION: make them equal"
    connect_json_built || with_setup_lock connect_json_build_locked
}

connect_json_build_locked() {
    connect_json_built && return 0
    local want
    want=$(connect_json_sum)
    command -v javac >/dev/null || apt_install openjdk-17-jdk-headless
    command -v mvn >/dev/null || apt_install maven
    log "fetching connect-json $KAFKA_VERSION and debezium-core with Maven into $CONNECT_JSON_LIBS"
    rm -rf "$CONNECT_JSON_LIBS" "$CONNECT_JSON_CLASSES"
    mkdir -p "$CONNECT_JSON_LIBS" "$CONNECT_JSON_CLASSES"
    local mvn_log=$CACHE_DIR/mvn-connect-json.log
    if ! mvn -q -B -Dstyle.color=never -f "$CONNECT_SRC_DIR/pom.xml" \
        dependency:copy-dependencies -Dkps.libs.dir="$CONNECT_JSON_LIBS" >"$mvn_log" 2>&1; then
        tail -n 40 "$mvn_log" >&2
        die "mvn failed (full output: $mvn_log)"
    fi
    compgen -G "$CONNECT_JSON_LIBS/connect-json-$KAFKA_VERSION.jar" >/dev/null ||
        die "mvn did not produce connect-json-$KAFKA_VERSION.jar in $CONNECT_JSON_LIBS"
    # --release 17: the JDK may be newer than the java that runs the tests.
    javac -nowarn --release 17 -d "$CONNECT_JSON_CLASSES" -cp "$CONNECT_JSON_LIBS/*" \
        "$CONNECT_SRC_DIR/ConnectJson.java" 2>&1 | grep -v '^Note: ' >&2 || true
    [[ -f $CONNECT_JSON_CLASSES/ConnectJson.class ]] || die "javac did not compile $CONNECT_SRC_DIR/ConnectJson.java"
    printf '%s\n' "$want" >"$CONNECT_JSON_MARKER"
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
kafka_libs_current() {
    [[ -f $KAFKA_LIBS_MARKER && $(cat "$KAFKA_LIBS_MARKER") == "$(sha256sum "$KAFKA_SRC_DIR/pom.xml" | cut -d' ' -f1)" ]]
}

kafka_fetch_libs() {
    [[ -n $KAFKA_VERSION ]] || die "no <kafka.version> in $KAFKA_SRC_DIR/pom.xml"
    kafka_libs_current || with_setup_lock kafka_fetch_libs_locked
}

kafka_fetch_libs_locked() {
    kafka_libs_current && return 0
    local want
    want=$(sha256sum "$KAFKA_SRC_DIR/pom.xml" | cut -d' ' -f1)
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

# The broker config for this instance, on stdout. The keystore's checksum is part of it,
# so new TLS files count as a config change (which `up`/`start` apply by restarting).
kafka_config_text() {
    sed -e "s|@DATA_DIR@|$(sed_escape "$KAFKA_DATA")|g" \
        -e "s|@HOST@|$KAFKA_HOST|g" \
        -e "s|@PORT@|$KAFKA_PORT|g" \
        -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
        -e "s|@SASL_PORT@|$KAFKA_SASL_PORT|g" \
        -e "s|@SSL_PORT@|$KAFKA_SSL_PORT|g" \
        -e "s|@SASL_USER@|$(sed_escape "$KAFKA_SASL_USER")|g" \
        -e "s|@SASL_PASSWORD@|$(sed_escape "$KAFKA_SASL_PASSWORD")|g" \
        -e "s|@KEYSTORE@|$(sed_escape "$TLS_PEM")|g" \
        "$KAFKA_SRC_DIR/server.properties.template"
    if [[ -n $BROKER_EXTRA ]]; then
        printf '\n# KPS_KAFKA_BROKER_PROPERTIES of this instance (later lines win)\n%s\n' "$BROKER_EXTRA"
    fi
    printf '# sha256 of the keystore when this file was written: %s\n' \
        "$(sha256sum <"$TLS_PEM" | cut -d' ' -f1)"
}

# Client configs for the Kafka CLI (--command-config), one per secured listener.
kafka_write_client_configs() {
    local jaas_plain jaas_scram
    jaas_plain="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$KAFKA_SASL_USER\" password=\"$KAFKA_SASL_PASSWORD\";"
    jaas_scram="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$KAFKA_SASL_USER\" password=\"$KAFKA_SASL_PASSWORD\";"
    printf '%s\n' "# bootstrap: $KAFKA_HOST:$KAFKA_SASL_PORT" 'security.protocol=SASL_PLAINTEXT' \
        'sasl.mechanism=PLAIN' "sasl.jaas.config=$jaas_plain" >"$KAFKA_RUN/client-sasl-plain.properties"
    printf '%s\n' "# bootstrap: $KAFKA_HOST:$KAFKA_SASL_PORT" 'security.protocol=SASL_PLAINTEXT' \
        'sasl.mechanism=SCRAM-SHA-512' "sasl.jaas.config=$jaas_scram" >"$KAFKA_RUN/client-sasl-scram.properties"
    printf '%s\n' "# bootstrap: $KAFKA_HOST:$KAFKA_SSL_PORT" 'security.protocol=SSL' \
        'ssl.truststore.type=PEM' "ssl.truststore.location=$TLS_CA" >"$KAFKA_RUN/client-ssl.properties"
}

kafka_scram_want() {
    printf 'SCRAM-SHA-512 %s %s' "$KAFKA_SASL_USER" \
        "$(printf '%s' "$KAFKA_SASL_PASSWORD" | sha256sum | cut -d' ' -f1)"
}

# KRaft needs its log dir formatted once with a cluster id; later starts reuse it.
# The SCRAM user goes into the initial metadata, so it exists from the first start.
kafka_format_if_needed() {
    [[ -f $KAFKA_DATA/meta.properties ]] && return 0
    local cluster_id
    cluster_id=$(kafka_java kafka.tools.StorageTool random-uuid)
    log "formatting Kafka storage (cluster id $cluster_id)"
    rm -f "$KAFKA_SCRAM_MARKER"
    kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_PROPS" \
        --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" >&2 ||
        die "kafka.tools.StorageTool format failed"
    kafka_scram_want >"$KAFKA_SCRAM_MARKER"
}

# A data dir formatted before SCRAM was configured (or with another password) gets the
# credential through the running broker, once; the marker file records it.
kafka_ensure_scram() {
    [[ -f $KAFKA_SCRAM_MARKER && $(<"$KAFKA_SCRAM_MARKER") == "$(kafka_scram_want)" ]] && return 0
    log "adding the SCRAM-SHA-512 credential of user $KAFKA_SASL_USER"
    kafka_java kafka.admin.ConfigCommand --bootstrap-server "$KAFKA_HOST:$KAFKA_PORT" --alter \
        --entity-type users --entity-name "$KAFKA_SASL_USER" \
        --add-config "SCRAM-SHA-512=[password=$KAFKA_SASL_PASSWORD]" >&2 ||
        die "kafka.admin.ConfigCommand could not add the SCRAM credential"
    kafka_scram_want >"$KAFKA_SCRAM_MARKER"
}

# Start the broker in the background, without waiting for it to be ready. A broker
# already running with another config (ports, listeners, TLS files) is restarted.
kafka_launch() {
    kafka_fetch_libs
    tls_ensure
    local config
    config=$(kafka_config_text)
    if kafka_running; then
        if [[ -f $KAFKA_PROPS && $(<"$KAFKA_PROPS") == "$config" ]]; then
            log "kafka already running (pid $(kafka_pid))"
            return 0
        fi
        log "kafka is running with an outdated config; restarting it to apply $KAFKA_PROPS"
        kafka_stop
    fi
    rm -f "$KAFKA_PID_FILE"
    local port
    for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_SSL_PORT"; do
        if port_open "$port"; then
            die "port $port is in use by another process (another instance, or not started by this script): $(ss -ltnpH "sport = :$port" 2>/dev/null || true)"
        fi
    done
    save_ports
    mkdir -p "$KAFKA_DATA"
    printf '%s\n' "$config" >"$KAFKA_PROPS"
    kafka_write_client_configs
    kafka_format_if_needed
    # Keep the previous run's log for post-mortems; the readiness check greps only this run's.
    if [[ -f $KAFKA_LOG ]]; then mv -f "$KAFKA_LOG" "$KAFKA_LOG.1"; fi
    log "starting Kafka $KAFKA_VERSION, instance $INSTANCE, heap $KAFKA_HEAP (log: $KAFKA_LOG)"
    # setsid+nohup: the broker outlives this shell and its terminal. The inner bash
    # writes its own pid and then execs java, so the pid file holds java's pid whether
    # or not setsid had to fork.
    # shellcheck disable=SC2016 # $$ and $@ are for the inner bash
    setsid nohup bash -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$KAFKA_PID_FILE" \
        java "-Xmx$KAFKA_HEAP" "-Xms$KAFKA_HEAP_MIN" \
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
# Then the SCRAM credential is made sure of (needs the broker).
kafka_wait_ready() {
    local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kafka_running; then
            log "Kafka exited during startup; last lines of $KAFKA_LOG:"
            tail -n 40 "$KAFKA_LOG" >&2 || true
            die "Kafka failed to start"
        fi
        if port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$KAFKA_LOG"; then
            kafka_ensure_scram
            log "kafka ready on $KAFKA_HOST:$KAFKA_PORT (SASL :$KAFKA_SASL_PORT, SSL :$KAFKA_SSL_PORT; pid $(kafka_pid))"
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
    # Guard the rm: only ever an instance's own data dir under the cache dir.
    local ok=0
    if is_default; then
        [[ $KAFKA_DATA == "$CACHE_DIR"/run/kafka/data ]] && ok=1
    else
        [[ $KAFKA_DATA == "$CACHE_DIR/run/$INSTANCE/kafka/data" ]] && ok=1
    fi
    [[ -n $CACHE_DIR && $ok == 1 ]] || die "refusing to wipe $KAFKA_DATA"
    rm -rf "$KAFKA_DATA"
    rm -f "$KAFKA_SCRAM_MARKER"
    log "kafka data wiped ($KAFKA_DATA)"
}

# ---------------------------------------------------------------- Schema Registry

# The app is built once per content of scripts/registry/ (the marker holds its checksum).
registry_sources_sum() {
    (cd "$REGISTRY_SRC_DIR" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

registry_built() {
    [[ -f $REGISTRY_MARKER && $(cat "$REGISTRY_MARKER") == "$(registry_sources_sum)" ]]
}

registry_build() {
    [[ -n $REGISTRY_VERSION ]] || die "no <apicurio.version> in $REGISTRY_SRC_DIR/pom.xml"
    registry_built || with_setup_lock registry_build_locked
}

registry_build_locked() {
    registry_built && return 0
    local want
    want=$(registry_sources_sum)
    command -v java >/dev/null || apt_install openjdk-17-jre-headless
    command -v mvn >/dev/null || apt_install maven
    log "assembling Apicurio Registry $REGISTRY_VERSION with Maven into $REGISTRY_APP (first time: a few minutes)"
    local work=$CACHE_DIR/registry-build
    rm -rf "$REGISTRY_APP" "$work"
    mkdir -p "$REGISTRY_APP"
    cp -r "$REGISTRY_SRC_DIR" "$work"
    local mvn_log=$CACHE_DIR/mvn-registry.log
    if ! (cd "$work" && mvn -q -B -Dstyle.color=never -s settings.xml package \
        -Dkps.registry.dir="$REGISTRY_APP") >"$mvn_log" 2>&1; then
        tail -n 40 "$mvn_log" >&2
        die "mvn failed building the registry (full output: $mvn_log)"
    fi
    rm -rf "$work"
    compgen -G "$REGISTRY_APP/*-runner.jar" >/dev/null || die "mvn did not produce a runner jar in $REGISTRY_APP"
    printf '%s\n' "$want" >"$REGISTRY_MARKER"
}

registry_pid() {
    local pid
    [[ -s $REGISTRY_PID_FILE ]] || return 1
    pid=$(<"$REGISTRY_PID_FILE")
    [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- '-runner\.jar' || return 1
    printf '%s\n' "$pid"
}

registry_running() { registry_pid >/dev/null; }

registry_url() { printf 'http://%s:%s/apis/ccompat/v7' "$REGISTRY_HOST" "$REGISTRY_PORT"; }

registry_launch() {
    registry_build
    if registry_running; then
        log "registry already running (pid $(registry_pid))"
        return 0
    fi
    port_open "$REGISTRY_PORT" &&
        die "port $REGISTRY_PORT is in use by another process: $(ss -ltnpH "sport = :$REGISTRY_PORT" 2>/dev/null || true)"
    save_ports
    mkdir -p "$REGISTRY_RUN"
    rm -f "$REGISTRY_PID_FILE"
    if [[ -f $REGISTRY_LOG ]]; then mv -f "$REGISTRY_LOG" "$REGISTRY_LOG.1"; fi
    local jar
    jar=$(compgen -G "$REGISTRY_APP/*-runner.jar" | head -n 1)
    log "starting Apicurio Registry $REGISTRY_VERSION, instance $INSTANCE, port $REGISTRY_PORT (log: $REGISTRY_LOG)"
    # Small heap, serial GC and C1 only: it starts in seconds on two cores.
    # shellcheck disable=SC2016 # $$ and $@ are for the inner bash
    HTTP_PORT=$REGISTRY_PORT QUARKUS_HTTP_HOST=$REGISTRY_HOST \
        setsid nohup bash -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$REGISTRY_PID_FILE" \
        java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$jar" \
        </dev/null >"$REGISTRY_LOG" 2>&1 &
    local _
    for _ in $(seq 50); do
        [[ -s $REGISTRY_PID_FILE ]] && break
        sleep 0.1
    done
    [[ -s $REGISTRY_PID_FILE ]] || die "the registry did not write its pid file $REGISTRY_PID_FILE"
}

registry_wait_ready() {
    local deadline=$((SECONDS + REGISTRY_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! registry_running; then
            tail -n 40 "$REGISTRY_LOG" >&2 || true
            die "the registry exited during startup"
        fi
        if curl -sf -o /dev/null "$(registry_url)/subjects"; then
            log "registry ready at $(registry_url) (pid $(registry_pid))"
            return 0
        fi
        sleep 0.5
    done
    tail -n 40 "$REGISTRY_LOG" >&2 || true
    die "the registry is not ready after ${REGISTRY_START_TIMEOUT} s"
}

registry_start() {
    registry_launch
    registry_wait_ready
}

registry_stop() {
    local pid
    if ! pid=$(registry_pid); then
        rm -f "$REGISTRY_PID_FILE"
        log "registry not running"
        return 0
    fi
    log "stopping registry (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.3; done
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$REGISTRY_PID_FILE"
    log "registry stopped"
}

# ---------------------------------------------------------------- PostgreSQL

pg_installed() {
    command -v pg_ctlcluster >/dev/null && [[ -x /usr/lib/postgresql/$PG_VERSION/bin/postgres ]]
}

pg_install() {
    pg_installed || apt_install "postgresql-$PG_VERSION"
}

pg_cluster_exists() {
    [[ -f $PG_CONF_DIR/postgresql.conf ]]
}

# Named instances' clusters don't start at boot (start.conf manual); pg_ctlcluster
# starts them all the same.
pg_create() {
    pg_cluster_exists && return 0
    local opts=(-p "$PG_PORT")
    is_default || opts+=(--start-conf manual)
    log "creating PostgreSQL cluster $PG_VERSION/$PG_CLUSTER"
    pg_createcluster "${opts[@]}" "$PG_VERSION" "$PG_CLUSTER" >&2
}

# Drop a named instance's cluster, with the files pg_dropcluster leaves behind (our
# conf.d drop-in and TLS copies keep the config dir, which blocks a later re-create).
pg_drop() {
    require_root
    [[ $PG_CLUSTER == kps_* ]] || die "refusing to drop cluster $PG_VERSION/$PG_CLUSTER (not kps_*)"
    if pg_cluster_exists; then
        log "dropping PostgreSQL cluster $PG_VERSION/$PG_CLUSTER"
        pg_dropcluster --stop "$PG_VERSION" "$PG_CLUSTER" >&2
    fi
    if [[ -d $PG_CONF_DIR ]]; then rm -rf "$PG_CONF_DIR"; fi
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

# The same over TLS, verifying the server certificate against our CA.
pg_tls_ok() {
    PGPASSWORD=$PG_PASSWORD PGCONNECT_TIMEOUT=5 psql -X -q -At \
        "host=$PG_HOST port=$PG_PORT user=$PG_USER dbname=$PG_DB sslmode=verify-full sslrootcert=$TLS_CA" \
        -c 'select ssl from pg_stat_ssl where pid = pg_backend_pid()' 2>/dev/null | grep -qx t
}

# The settings a running server must show, one line (see pg_in_effect).
pg_want_in_effect() {
    printf '%s' "$PG_MAX_CONNECTIONS $PG_HOST on $PG_TLS_CERT $PG_TLS_KEY"
}

pg_in_effect() {
    local got
    got=$(pg_superuser_psql -At -c 'show max_connections' -c 'show listen_addresses' \
        -c 'show ssl' -c 'show ssl_cert_file' -c 'show ssl_key_file' 2>/dev/null | paste -sd' ') || return 1
    [[ $got == "$(pg_want_in_effect)" ]]
}

# Settings are applied before start (listen_addresses and max_connections need a
# restart anyway). Durability settings are left at their defaults on purpose.
# listen_addresses/max_connections/ssl* go into a conf.d drop-in, which Debian clusters
# include by default (after their own ssl_* lines, so ours win): pg_conftool would write
# 127.0.0.1 unquoted, which PostgreSQL rejects as a syntax error. Debian's tools read
# the port from postgresql.conf, so that one stays there.
# Sets PG_CONF_CHANGED=1 if a file changed, PG_PORT_CHANGED=1 if the port did.
pg_configure() {
    local dropin=$PG_CONF_DIR/conf.d/kafka-pg-sink.conf
    local want
    want=$(printf '%s\n' \
        '# Written by kafka-pg-sink scripts/dev-services.sh; local dev/test settings.' \
        "listen_addresses = '$PG_HOST'" \
        "max_connections = $PG_MAX_CONNECTIONS" \
        'ssl = on' \
        "ssl_cert_file = '$PG_TLS_CERT'" \
        "ssl_key_file = '$PG_TLS_KEY'")
    PG_CONF_CHANGED=0 PG_PORT_CHANGED=0
    if [[ $(pg_conftool -s "$PG_VERSION" "$PG_CLUSTER" show port 2>/dev/null || true) != "$PG_PORT" ]]; then
        pg_conftool "$PG_VERSION" "$PG_CLUSTER" set port "$PG_PORT"
        PG_CONF_CHANGED=1 PG_PORT_CHANGED=1
    fi
    if ! grep -Eq "^[[:space:]]*include_dir[[:space:]]*=[[:space:]]*'conf\.d'" "$PG_CONF_DIR/postgresql.conf"; then
        printf "\ninclude_dir = 'conf.d'\n" >>"$PG_CONF_DIR/postgresql.conf"
        PG_CONF_CHANGED=1
    fi
    mkdir -p "$PG_CONF_DIR/conf.d"
    if [[ ! -f $dropin || $(<"$dropin") != "$want" ]]; then
        printf '%s\n' "$want" >"$dropin"
        chown postgres:postgres "$dropin"
        PG_CONF_CHANGED=1
    fi
    # Copies of the server cert and key that the postgres user can read; PostgreSQL
    # refuses a key file that is not 0600 (or 0640 root-owned).
    install -d -o postgres -g postgres -m 0700 "$PG_TLS_DIR"
    local src dst mode
    for src in "$TLS_CERT" "$TLS_KEY"; do
        if [[ $src == "$TLS_KEY" ]]; then dst=$PG_TLS_KEY mode=600; else dst=$PG_TLS_CERT mode=644; fi
        if ! cmp -s "$src" "$dst" || [[ $(stat -c '%U:%G %a' "$dst") != "postgres:postgres $mode" ]]; then
            install -o postgres -g postgres -m "$mode" "$src" "$dst"
            PG_CONF_CHANGED=1
        fi
    done
}

pg_log_tail() {
    log "last lines of $PG_LOG:"
    tail -n 30 "$PG_LOG" >&2 2>/dev/null || true
}

pg_start() {
    require_root
    pg_installed || with_setup_lock pg_install
    tls_ensure
    pg_cluster_exists || with_setup_lock pg_create
    save_ports
    pg_configure
    if pg_running; then
        # Running already, maybe started by someone else without our settings, or our
        # files changed: reload (enough for the TLS settings, and sessions survive it);
        # restart only if what is in effect is still not what the tests need.
        if [[ $PG_PORT_CHANGED == 1 ]]; then
            log "postgres running on another port; restarting $PG_VERSION/$PG_CLUSTER on $PG_PORT"
            pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" restart -m fast || { pg_log_tail; die "pg restart failed"; }
        elif [[ $PG_CONF_CHANGED == 1 ]] || ! pg_in_effect; then
            log "postgres running with other settings; reloading $PG_VERSION/$PG_CLUSTER"
            pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" reload || { pg_log_tail; die "pg reload failed"; }
            local _
            for _ in $(seq 20); do
                pg_in_effect && break
                sleep 0.25
            done
            if ! pg_in_effect; then
                log "settings not in effect after reload; restarting $PG_VERSION/$PG_CLUSTER"
                pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" restart -m fast || { pg_log_tail; die "pg restart failed"; }
            fi
        else
            log "postgres already running ($PG_VERSION/$PG_CLUSTER)"
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
    deadline=$((SECONDS + 10))
    until pg_tls_ok; do
        ((SECONDS < deadline)) || { pg_log_tail; die "TLS login (sslmode=verify-full, CA $TLS_CA) to $PG_HOST:$PG_PORT fails"; }
        sleep 0.25
    done
    log "postgres ready on $PG_HOST:$PG_PORT (plain and TLS)"
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

# ---------------------------------------------------------------- CDC source and Kafka Connect

default_only() {
    is_default || die "the connect service (CDC source cluster and Kafka Connect worker) belongs to the default instance"
}

# psql as the postgres OS user on the CDC cluster (peer auth over the unix socket).
cdc_psql() {
    (cd / && runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$CDC_PG_PORT" -d postgres "$@")
}

cdc_pg_running() {
    [[ -f $CDC_PG_CONF_DIR/postgresql.conf ]] &&
        pg_ctlcluster "$PG_VERSION" "$CDC_PG_CLUSTER" status >/dev/null 2>&1
}

# The source cluster: logical decoding, enough slots and WAL senders for many tests at once,
# and a cap on the WAL a forgotten slot may hold (a test that dies before its teardown must
# not fill the disk). Like the main cluster, settings live in a conf.d drop-in.
cdc_pg_configure() {
    local dropin=$CDC_PG_CONF_DIR/conf.d/kafka-pg-sink.conf
    local want
    want=$(printf '%s\n' \
        '# Written by kafka-pg-sink scripts/dev-services.sh: the CDC source of the Debezium tests.' \
        "listen_addresses = '$PG_HOST'" \
        'max_connections = 300' \
        'wal_level = logical' \
        "max_replication_slots = $CDC_MAX_SLOTS" \
        "max_wal_senders = $CDC_MAX_SLOTS" \
        "max_slot_wal_keep_size = '2GB'")
    CDC_PG_CHANGED=0
    if [[ $(pg_conftool -s "$PG_VERSION" "$CDC_PG_CLUSTER" show port 2>/dev/null || true) != "$CDC_PG_PORT" ]]; then
        pg_conftool "$PG_VERSION" "$CDC_PG_CLUSTER" set port "$CDC_PG_PORT"
        CDC_PG_CHANGED=1
    fi
    if ! grep -Eq "^[[:space:]]*include_dir[[:space:]]*=[[:space:]]*'conf\.d'" "$CDC_PG_CONF_DIR/postgresql.conf"; then
        printf "\ninclude_dir = 'conf.d'\n" >>"$CDC_PG_CONF_DIR/postgresql.conf"
        CDC_PG_CHANGED=1
    fi
    mkdir -p "$CDC_PG_CONF_DIR/conf.d"
    if [[ ! -f $dropin || $(<"$dropin") != "$want" ]]; then
        printf '%s\n' "$want" >"$dropin"
        chown postgres:postgres "$dropin"
        CDC_PG_CHANGED=1
    fi
}

cdc_pg_create() {
    [[ -f $CDC_PG_CONF_DIR/postgresql.conf ]] && return 0
    log "creating PostgreSQL cluster $PG_VERSION/$CDC_PG_CLUSTER (the CDC source) on port $CDC_PG_PORT"
    pg_createcluster -p "$CDC_PG_PORT" "$PG_VERSION" "$CDC_PG_CLUSTER" >&2
}

# wal_level and the slot limits need a restart, so a changed drop-in restarts the cluster;
# only the Debezium tests use it.
cdc_pg_start() {
    default_only
    require_root
    pg_installed || with_setup_lock pg_install
    with_setup_lock cdc_pg_create
    cdc_pg_configure
    if cdc_pg_running; then
        if [[ $CDC_PG_CHANGED == 1 ]]; then
            log "CDC source settings changed; restarting $PG_VERSION/$CDC_PG_CLUSTER"
            pg_ctlcluster "$PG_VERSION" "$CDC_PG_CLUSTER" restart -m fast ||
                { tail -n 30 "$CDC_PG_LOG" >&2; die "pg restart of $CDC_PG_CLUSTER failed"; }
        else
            log "CDC source postgres already running ($PG_VERSION/$CDC_PG_CLUSTER)"
        fi
    else
        if port_open "$CDC_PG_PORT"; then
            die "port $CDC_PG_PORT is in use, but not by cluster $PG_VERSION/$CDC_PG_CLUSTER (set KPS_CDC_PG_PORT)"
        fi
        log "starting postgres $PG_VERSION/$CDC_PG_CLUSTER (the CDC source)"
        pg_ctlcluster "$PG_VERSION" "$CDC_PG_CLUSTER" start ||
            { tail -n 30 "$CDC_PG_LOG" >&2; die "pg_ctlcluster start of $CDC_PG_CLUSTER failed"; }
    fi
    local deadline=$((SECONDS + PG_START_TIMEOUT))
    until pg_isready -q -h "$PG_HOST" -p "$CDC_PG_PORT"; do
        ((SECONDS < deadline)) || { tail -n 30 "$CDC_PG_LOG" >&2; die "CDC postgres not ready after ${PG_START_TIMEOUT} s"; }
        sleep 0.5
    done
    # The admin password (tests create their databases with it) and the connector's role.
    cdc_psql -c "ALTER ROLE $PG_USER WITH PASSWORD '$PG_PASSWORD'" \
        -c "DO \$\$ BEGIN
                IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$CDC_ROLE') THEN
                    CREATE ROLE $CDC_ROLE LOGIN REPLICATION;
                END IF;
            END \$\$" \
        -c "ALTER ROLE $CDC_ROLE WITH LOGIN REPLICATION NOSUPERUSER CREATEDB PASSWORD '$CDC_ROLE_PASSWORD'" >&2
    [[ $(cdc_psql -At -c 'show wal_level') == logical ]] || die "$CDC_PG_CLUSTER: wal_level is not logical"
    log "CDC source postgres ready on $PG_HOST:$CDC_PG_PORT (wal_level logical, $CDC_MAX_SLOTS slots, role $CDC_ROLE)"
}

cdc_pg_stop() {
    is_default || return 0
    require_root
    if cdc_pg_running; then
        log "stopping postgres $PG_VERSION/$CDC_PG_CLUSTER (the CDC source)"
        pg_ctlcluster "$PG_VERSION" "$CDC_PG_CLUSTER" stop -m fast
    else
        log "CDC source postgres not running"
    fi
}

connect_sources_sum() {
    cat "$CONNECT_SRC_DIR_WORKER/pom.xml" | sha256sum | cut -d' ' -f1
}

connect_built() {
    [[ -f $CONNECT_MARKER && $(cat "$CONNECT_MARKER") == "$(connect_sources_sum)" ]]
}

# The worker's classpath and the connector's plugin dir, once per pom content.
connect_build() {
    local version
    version=$(sed -n 's:.*<kafka\.version>\([^<]*\)</kafka\.version>.*:\1:p' "$CONNECT_SRC_DIR_WORKER/pom.xml")
    [[ $version == "$KAFKA_VERSION" ]] ||
        die "$CONNECT_SRC_DIR_WORKER/pom.xml has Kafka '$version', the broker $KAFKA_VERSION: make them equal"
    [[ -n $DEBEZIUM_VERSION ]] || die "no <debezium.version> in $CONNECT_SRC_DIR_WORKER/pom.xml"
    connect_built || with_setup_lock connect_build_locked
}

connect_build_locked() {
    connect_built && return 0
    local want
    want=$(connect_sources_sum)
    command -v java >/dev/null || apt_install openjdk-17-jre-headless
    command -v mvn >/dev/null || apt_install maven
    log "fetching Kafka Connect $KAFKA_VERSION and Debezium $DEBEZIUM_VERSION's PostgreSQL connector with Maven into $CONNECT_HOME"
    rm -rf "$CONNECT_LIBS" "$CONNECT_PLUGINS"
    mkdir -p "$CONNECT_LIBS" "$CONNECT_PLUGINS"
    local mvn_log=$CACHE_DIR/mvn-connect.log
    if ! mvn -q -B -Dstyle.color=never -f "$CONNECT_SRC_DIR_WORKER/pom.xml" \
        dependency:copy-dependencies dependency:unpack \
        -Dkps.libs.dir="$CONNECT_LIBS" -Dkps.plugin.dir="$CONNECT_PLUGINS" >"$mvn_log" 2>&1; then
        tail -n 40 "$mvn_log" >&2
        die "mvn failed (full output: $mvn_log)"
    fi
    compgen -G "$CONNECT_LIBS/connect-runtime-$KAFKA_VERSION.jar" >/dev/null ||
        die "mvn did not produce connect-runtime-$KAFKA_VERSION.jar in $CONNECT_LIBS"
    compgen -G "$CONNECT_PLUGINS/debezium-connector-postgres/debezium-connector-postgres-$DEBEZIUM_VERSION.jar" >/dev/null ||
        die "mvn did not unpack debezium-connector-postgres $DEBEZIUM_VERSION into $CONNECT_PLUGINS"
    printf '%s\n' "$want" >"$CONNECT_MARKER"
}

connect_pid() {
    local pid
    [[ -s $CONNECT_PID_FILE ]] || return 1
    pid=$(<"$CONNECT_PID_FILE")
    [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' org\.apache\.kafka\.connect\.cli\.ConnectStandalone ' || return 1
    printf '%s\n' "$pid"
}

connect_running() { connect_pid >/dev/null; }

connect_url() { printf 'http://%s:%s' "$CONNECT_HOST" "$CONNECT_PORT"; }

# Standalone: connectors are added and deleted at run time through the REST API (POST/DELETE
# /connectors), offsets in a local file; no internal topics on the shared broker.
connect_config_text() {
    printf '%s\n' \
        '# Written by kafka-pg-sink scripts/dev-services.sh: the dev/test Kafka Connect worker.' \
        "bootstrap.servers=$KAFKA_HOST:$KAFKA_PORT" \
        "listeners=http://$CONNECT_HOST:$CONNECT_PORT" \
        "plugin.path=$CONNECT_PLUGINS" \
        'plugin.discovery=service_load' \
        'key.converter=org.apache.kafka.connect.json.JsonConverter' \
        'value.converter=org.apache.kafka.connect.json.JsonConverter' \
        "offset.storage.file.filename=$CONNECT_RUN/offsets" \
        'offset.flush.interval.ms=1000' \
        'task.shutdown.graceful.timeout.ms=5000'
}

connect_launch() {
    default_only
    connect_build
    local config
    config=$(connect_config_text)
    if connect_running; then
        if [[ -f $CONNECT_PROPS && $(<"$CONNECT_PROPS") == "$config" ]]; then
            log "connect already running (pid $(connect_pid))"
            return 0
        fi
        log "connect is running with an outdated config; restarting it"
        connect_stop
    fi
    port_open "$CONNECT_PORT" &&
        die "port $CONNECT_PORT is in use by another process (set KPS_CONNECT_PORT): $(ss -ltnpH "sport = :$CONNECT_PORT" 2>/dev/null || true)"
    mkdir -p "$CONNECT_RUN"
    printf '%s\n' "$config" >"$CONNECT_PROPS"
    rm -f "$CONNECT_PID_FILE"
    if [[ -f $CONNECT_LOG ]]; then mv -f "$CONNECT_LOG" "$CONNECT_LOG.1"; fi
    log "starting Kafka Connect $KAFKA_VERSION (standalone, Debezium $DEBEZIUM_VERSION), heap $CONNECT_HEAP, REST $(connect_url) (log: $CONNECT_LOG)"
    # shellcheck disable=SC2016 # $$ and $@ are for the inner bash
    setsid nohup bash -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$CONNECT_PID_FILE" \
        java "-Xmx$CONNECT_HEAP" -XX:+UseSerialGC \
        -cp "$CONNECT_LIBS/*" \
        -Dlog4j2.configurationFile="$CONNECT_SRC_DIR_WORKER/log4j2.properties" \
        org.apache.kafka.connect.cli.ConnectStandalone "$CONNECT_PROPS" \
        </dev/null >"$CONNECT_LOG" 2>&1 &
    local _
    for _ in $(seq 50); do
        [[ -s $CONNECT_PID_FILE ]] && break
        sleep 0.1
    done
    [[ -s $CONNECT_PID_FILE ]] || die "Kafka Connect did not write its pid file $CONNECT_PID_FILE"
}

# Ready = the REST API lists the Debezium PostgreSQL connector among its plugins.
connect_wait_ready() {
    local deadline=$((SECONDS + CONNECT_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! connect_running; then
            tail -n 40 "$CONNECT_LOG" >&2 || true
            die "Kafka Connect exited during startup"
        fi
        if curl -sf "$(connect_url)/connector-plugins" 2>/dev/null |
            grep -q 'io.debezium.connector.postgresql.PostgresConnector'; then
            log "connect ready at $(connect_url) (pid $(connect_pid))"
            return 0
        fi
        sleep 0.5
    done
    tail -n 40 "$CONNECT_LOG" >&2 || true
    die "Kafka Connect is not ready after ${CONNECT_START_TIMEOUT} s"
}

# The whole connect service: its source cluster, then the worker (which needs the broker).
connect_start() {
    default_only
    cdc_pg_start
    kafka_running || die "connect needs the broker: run scripts/dev-services.sh up"
    connect_launch
    connect_wait_ready
}

connect_stop() {
    local pid
    if ! pid=$(connect_pid); then
        rm -f "$CONNECT_PID_FILE"
        log "connect not running"
        return 0
    fi
    log "stopping connect (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.3; done
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$CONNECT_PID_FILE"
    log "connect stopped"
}

# `down connect` stops the worker and its source cluster.
connect_down() {
    is_default || return 0
    connect_stop
    cdc_pg_stop
}

# ---------------------------------------------------------------- commands

# Prometheus and promtool (Debian's prometheus package) for the alerts:: tests and
# deploy/check.sh; nothing is started, the tests run their own server.
prometheus_install() {
    command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
    with_setup_lock apt_install prometheus
}

# helm and kubernetes-validate for deploy/check.sh (the deploy:: tests), cached under
# ~/.cache; building helm takes minutes once. Not fatal: without them only deploy:: fails,
# saying how to get them.
ops_tools_install() {
    "$SCRIPT_DIR/ops-tools.sh" || log "WARNING: scripts/ops-tools.sh failed: the deploy:: tests will fail"
}

# confluent-kafka's Python serializers (PyPI, pinned) in a venv under ~/.cache: the tests
# that prove the registry formats produce with them. Not fatal: without them only those
# tests fail, saying how to get them.
serializers_install() {
    "$SCRIPT_DIR/serializers.sh" || log "WARNING: scripts/serializers.sh failed: the registry-format tests will fail"
}

cmd_up() {
    case ${1:-} in
    kafka) kafka_start ;;
    postgres) pg_start ;;
    registry) registry_start ;;
    connect) connect_start ;;
    '')
        # Launch both JVMs first so they boot while PostgreSQL starts.
        kafka_launch
        registry_launch
        prometheus_install
        connect_json_build
        # The connect service (default instance only): its jars and source cluster while
        # the broker boots; the worker once the broker answers.
        if is_default; then connect_build; fi
        pg_start
        if is_default; then cdc_pg_start; fi
        kafka_wait_ready
        if is_default; then connect_launch; fi
        registry_wait_ready
        if is_default; then connect_wait_ready; fi
        ops_tools_install
        serializers_install
        ;;
    *) usage ;;
    esac
}

# What `up` would download or build, without starting anything: CI runs it while it compiles.
cmd_build() {
    case ${1:-} in
    kafka) kafka_fetch_libs ;;
    registry) registry_build ;;
    connect-json) connect_json_build ;;
    connect) connect_build ;;
    '')
        kafka_fetch_libs
        registry_build
        connect_json_build
        connect_build
        ;;
    *) usage ;;
    esac
}

cmd_down() {
    case ${1:-} in
    kafka) kafka_stop ;;
    postgres) pg_stop ;;
    registry) registry_stop ;;
    connect) connect_down ;;
    '')
        connect_down
        registry_stop
        kafka_stop
        pg_stop
        ;;
    *) usage ;;
    esac
}

cmd_env() {
    printf 'export KAFKA_BOOTSTRAP_SERVERS=%s:%s\n' "$KAFKA_HOST" "$KAFKA_PORT"
    printf 'export DATABASE_URL=postgres://%s:%s@%s:%s/%s\n' \
        "$PG_USER" "$PG_PASSWORD" "$PG_HOST" "$PG_PORT" "$PG_DB"
    printf 'export KPS_TLS_CA=%s\n' "$TLS_CA"
    printf 'export KPS_KAFKA_SASL_BOOTSTRAP=%s:%s\n' "$KAFKA_HOST" "$KAFKA_SASL_PORT"
    printf 'export KPS_KAFKA_SSL_BOOTSTRAP=%s:%s\n' "$KAFKA_HOST" "$KAFKA_SSL_PORT"
    printf 'export KPS_KAFKA_SASL_USER=%s\n' "$KAFKA_SASL_USER"
    printf 'export KPS_KAFKA_SASL_PASSWORD=%s\n' "$KAFKA_SASL_PASSWORD"
    printf 'export SCHEMA_REGISTRY_URL=%s\n' "$(registry_url)"
    printf 'export KPS_CONNECT_JSON_CP=%q\n' "$CONNECT_JSON_CLASSES:$CONNECT_JSON_LIBS/*"
    if is_default; then
        printf 'export KAFKA_CONNECT_URL=%s\n' "$(connect_url)"
        printf 'export KPS_CDC_DATABASE_URL=postgres://%s:%s@%s:%s/postgres\n' \
            "$PG_USER" "$PG_PASSWORD" "$PG_HOST" "$CDC_PG_PORT"
        printf 'export KPS_CDC_ROLE=%s\n' "$CDC_ROLE"
        printf 'export KPS_CDC_ROLE_PASSWORD=%s\n' "$CDC_ROLE_PASSWORD"
    fi
    "$SCRIPT_DIR/serializers.sh" env
}

cmd_status() {
    local pid
    is_default || echo "instance: $INSTANCE (run dir $INSTANCE_DIR)"
    if pid=$(kafka_pid); then
        local stale=''
        if [[ ! -f $TLS_PEM || ! -f $KAFKA_PROPS || $(<"$KAFKA_PROPS") != "$(kafka_config_text)" ]]; then
            stale='; config outdated: up restarts it'
        fi
        echo "kafka: running (pid $pid, $KAFKA_HOST:$KAFKA_PORT, SASL :$KAFKA_SASL_PORT, SSL :$KAFKA_SSL_PORT, Kafka $KAFKA_VERSION$stale)"
    else
        echo "kafka: stopped"
    fi
    if pg_running; then
        echo "postgres: running ($PG_VERSION/$PG_CLUSTER, $PG_HOST:$PG_PORT)"
    else
        echo "postgres: stopped"
    fi
    if pid=$(registry_pid); then
        echo "registry: running (pid $pid, $(registry_url))"
    else
        echo "registry: stopped"
    fi
    if is_default; then
        if cdc_pg_running; then
            echo "cdc postgres: running ($PG_VERSION/$CDC_PG_CLUSTER, $PG_HOST:$CDC_PG_PORT)"
        else
            echo "cdc postgres: stopped"
        fi
        if pid=$(connect_pid); then
            echo "connect: running (pid $pid, $(connect_url), Kafka Connect $KAFKA_VERSION, Debezium $DEBEZIUM_VERSION)"
        else
            echo "connect: stopped"
        fi
    fi
}

# Named instances: a run dir, or a kps_* cluster (e.g. left by a failed destroy).
cmd_list() {
    {
        local dir
        for dir in "$CACHE_DIR"/run/*/; do
            dir=${dir%/}
            dir=${dir##*/}
            [[ $dir != kafka && $dir != registry && $dir != connect && $dir != '*' ]] && printf '%s\n' "$dir"
        done
        for dir in /etc/postgresql/"$PG_VERSION"/kps_*/; do
            [[ -f $dir/postgresql.conf && $dir != */"$CDC_PG_CLUSTER"/ ]] || continue
            dir=${dir%/}
            printf '%s\n' "${dir##*/kps_}"
        done
    } | sort -u
}

cmd_destroy() {
    is_default && die "destroy works on named instances only (set KPS_INSTANCE); the default instance has reset"
    registry_stop
    kafka_stop
    pg_drop
    [[ -n $CACHE_DIR && $INSTANCE_DIR == "$CACHE_DIR/run/$INSTANCE" ]] || die "refusing to delete $INSTANCE_DIR"
    rm -rf "$INSTANCE_DIR"
    log "instance $INSTANCE destroyed"
}

cmd_reset() {
    connect_down
    registry_stop
    kafka_reset
    if is_default; then pg_stop; else pg_drop; fi
}

# start|stop|restart for one service.
cmd_service() {
    local action=$1 service=${2:-}
    case $service in
    kafka | postgres | registry | connect) ;;
    *) usage ;;
    esac
    case $action in
    start) "${service/postgres/pg}_start" ;;
    stop) if [[ $service == connect ]]; then connect_down; else "${service/postgres/pg}_stop"; fi ;;
    restart)
        cmd_service stop "$service"
        cmd_service start "$service"
        ;;
    esac
}

main() {
    local cmd=${1:-}
    case $cmd in
    up | down | start | stop | restart | reset | destroy) run_locked "$@" ;;
    esac
    [[ $# -gt 0 ]] && shift
    case $cmd in
    up) cmd_up "$@" ;;
    build) cmd_build "$@" ;;
    down) cmd_down "$@" ;;
    env) cmd_env ;;
    status) cmd_status ;;
    list) cmd_list ;;
    start | stop | restart) cmd_service "$cmd" "$@" ;;
    reset) cmd_reset ;;
    destroy) cmd_destroy ;;
    kafka-run)
        [[ $# -ge 1 ]] || usage
        kafka_fetch_libs
        kafka_java "$@"
        ;;
    *) usage ;;
    esac
}

main "$@"
