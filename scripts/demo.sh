#!/usr/bin/env bash
# The whole pipeline on one machine without Docker, in one command:
#   - starts PostgreSQL and Kafka with scripts/dev-services.sh (installing missing Debian
#     packages as it does), unless they already run: services that were running are left
#     running, and only what this script started is stopped at the end;
#   - builds the sink (release; --debug for a quicker debug build);
#   - creates the example topic `orders` (8 partitions) and table (examples/orders.sql),
#     runs `migrate` and `check` with examples/orders.toml;
#   - starts the demo producer (docker/demo-producer.sh, the one docker-compose.yml runs:
#     made-up orders at --rate records/s) and the sink;
#   - shows live progress every few seconds: rows in the table and rows/s, lag per partition
#     from the kafka_lag view, and now and then the newest rows;
#   - on Ctrl-C (or after --duration seconds) stops the producer, then the sink (SIGTERM: it
#     commits what it took), prints what arrived, and stops the services it started.
#
# Usage: scripts/demo.sh [--rate N] [--duration SECONDS] [--interval SECONDS] [--debug | --bin PATH]
#   --rate N            records per second from the producer (default 100)
#   --duration SECONDS  stop by itself after this long (default 0: run until Ctrl-C)
#   --interval SECONDS  progress every this many seconds (default 5)
#   --debug             build and run the debug binary (faster to build, slower to run)
#   --bin PATH          run this binary, build nothing (.ci/run: the one `cargo test` built)
# KPS_INSTANCE=NAME runs it on a named dev-services instance (its own PostgreSQL cluster and
# broker), which it starts and then stops again.
# Exits 1 if no row arrived. The data stays (table `orders`, topic `orders`, group
# `orders-sink`); a later run adds to it with new order ids.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=100
duration=0
interval=5
profile=release
while (($# > 0)); do
    case $1 in
    --rate) rate=${2:?--rate needs a number}; shift 2 ;;
    --duration) duration=${2:?--duration needs seconds}; shift 2 ;;
    --interval) interval=${2:?--interval needs seconds}; shift 2 ;;
    --debug) profile=debug; shift ;;
    --bin) profile=given; bin=${2:?--bin needs a path}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for n in "$rate" "$duration" "$interval"; do
    [[ $n =~ ^[0-9]+$ ]] || { echo "demo: '$n' is not a whole number" >&2; exit 2; }
done
((rate > 0 && interval > 0)) || { echo "demo: --rate and --interval must be above 0" >&2; exit 2; }

TOPIC=orders
PARTITIONS=8
CONFIG=examples/orders.toml
GROUP=$(sed -n 's/^group_id = "\(.*\)"/\1/p' "$CONFIG")
say() { printf 'demo: %s\n' "$*" >&2; }

work=$(mktemp -d -t kps-demo.XXXXXX)
started_services=()
producer_pid=
sink_pid=

# Everything this script started, in reverse order; shared services that were already
# running are never stopped.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $producer_pid ]] && kill -0 "$producer_pid" 2>/dev/null; then
        say "stopping the producer"
        kill -TERM -- "-$producer_pid" 2>/dev/null || true
        wait "$producer_pid" 2>/dev/null || true
    fi
    if [[ -n $sink_pid ]] && kill -0 "$sink_pid" 2>/dev/null; then
        say "stopping the sink (SIGTERM: it commits what it took and leaves the group)"
        kill -TERM "$sink_pid" 2>/dev/null || true
        wait "$sink_pid" 2>/dev/null || true
        grep -E 'summary|left the consumer group' "$work/sink.log" | tail -2 >&2 || true
    fi
    local service
    for service in "${started_services[@]}"; do
        say "stopping $service (this demo started it)"
        scripts/dev-services.sh down "$service" || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- services
status=$(scripts/dev-services.sh status 2>&1 || true)
for service in postgres kafka; do
    if grep -q "^$service: running" <<<"$status"; then
        say "$service is already running: using it, and leaving it running"
    else
        say "starting $service"
        started_services=("$service" "${started_services[@]}")
        scripts/dev-services.sh up "$service"
    fi
done
eval "$(scripts/dev-services.sh env)"
psql() { command psql -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL" "$@"; }

# ---------------------------------------------------------------- build
if [[ $profile == given ]]; then
    [[ -x $bin ]] || { say "$bin is not an executable"; exit 2; }
elif [[ $profile == release ]]; then
    say "building the release binary (the first build takes some minutes)"
    cargo build --release --quiet
    bin=target/release/kafka-pg-sink
else
    say "building the debug binary"
    cargo build --quiet --bin kafka-pg-sink
    bin=target/debug/kafka-pg-sink
fi

# ---------------------------------------------------------------- topic, table, migrate
say "creating topic $TOPIC ($PARTITIONS partitions) if it does not exist"
scripts/dev-services.sh kafka-run org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --create --if-not-exists \
    --topic "$TOPIC" --partitions "$PARTITIONS" --replication-factor 1 >/dev/null
psql -f examples/orders.sql
"$bin" migrate --config "$CONFIG"
"$bin" check --config "$CONFIG" >"$work/check.log" 2>&1 || {
    cat "$work/check.log" >&2
    say "check failed"
    exit 1
}

rows_before=$(psql -At -c "SELECT count(*) FROM orders")

# ---------------------------------------------------------------- producer and sink
# Each in a process group of its own, so stopping it reaches the JVM under the wrapper.
DEMO_RATE=$rate DEMO_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS DEMO_TOPIC=$TOPIC \
    setsid bash docker/demo-producer.sh \
    scripts/dev-services.sh kafka-run org.apache.kafka.tools.ConsoleProducer \
    >"$work/producer.log" 2>&1 &
producer_pid=$!

http_port=9464
if (: <>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null; then
    http_port=0 # taken: any free port (the sink logs which)
fi
"$bin" run --config "$CONFIG" --set "http.listen=\"127.0.0.1:$http_port\"" >"$work/sink.log" 2>&1 &
sink_pid=$!
say "producer: $rate records/s into $TOPIC; sink: $bin run --config $CONFIG (log $work/sink.log)"
if ((duration > 0)); then
    say "running for ${duration}s (Ctrl-C stops earlier)"
else
    say "running until Ctrl-C"
fi

# ---------------------------------------------------------------- progress
newest_rows() {
    psql -c "SELECT id, customer, amount, currency, status, created_at, kafka_partition AS p, kafka_offset AS off
               FROM orders ORDER BY inserted_at DESC, kafka_offset DESC LIMIT 3"
}

start=$SECONDS
last_rows=$rows_before
last_time=$SECONDS
ticks=0
while ((duration == 0 || SECONDS - start < duration)); do
    sleep "$interval"
    kill -0 "$sink_pid" 2>/dev/null || {
        tail -20 "$work/sink.log" >&2
        say "the sink stopped"
        sink_pid=
        exit 1
    }
    kill -0 "$producer_pid" 2>/dev/null || {
        tail -20 "$work/producer.log" >&2
        say "the producer stopped"
        producer_pid=
        exit 1
    }
    rows=$(psql -At -c "SELECT count(*) FROM orders")
    now=$SECONDS
    per_second=$(((rows - last_rows) / (now > last_time ? now - last_time : 1)))
    IFS='|' read -r lag_total lag_parts < <(psql -At -c "
        SELECT coalesce(sum(lag), 0), coalesce(string_agg('p' || partition || '=' || lag, ' ' ORDER BY partition), 'no watermarks yet')
          FROM kafka_lag WHERE consumer_group = '$GROUP' AND topic = '$TOPIC'")
    printf 'demo: [%4ss] %d rows (+%d this run), %d rows/s; lag %s (%s)\n' \
        $((now - start)) "$rows" $((rows - rows_before)) "$per_second" "$lag_total" "$lag_parts" >&2
    last_rows=$rows
    last_time=$now
    ticks=$((ticks + 1))
    if ((ticks % 6 == 1)); then
        newest_rows >&2
    fi
done

arrived=$(($(psql -At -c "SELECT count(*) FROM orders") - rows_before))
say "$arrived rows arrived in $((SECONDS - start))s"
((arrived > 0)) || exit 1
