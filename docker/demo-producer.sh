#!/usr/bin/env bash
# Demo load for docker-compose.yml: writes made-up orders (the JSON that examples/orders.toml
# maps onto examples/orders.sql) to Kafka, DEMO_RATE records a second, until stopped.
#
# Runs in the apache/kafka image, so it needs nothing but bash and the Kafka CLI: lines of
# `key|json` are piped into kafka-console-producer.sh. The key is the order id, so all
# records of one id land in the same partition.
#
# Usage: demo-producer.sh [PRODUCER COMMAND...]
#   With a command, the lines go to it instead of kafka-console-producer.sh (scripts/demo.sh
#   passes the same console producer run from the jars scripts/dev-services.sh fetched); it
#   gets the same --bootstrap-server, --topic and key-parsing arguments.
#
# Environment:
#   DEMO_RATE               records per second (default 100)
#   DEMO_BOOTSTRAP_SERVERS  Kafka to write to (default kafka:9092)
#   DEMO_TOPIC              topic (default orders)
set -euo pipefail

rate=${DEMO_RATE:-100}
bootstrap=${DEMO_BOOTSTRAP_SERVERS:-kafka:9092}
topic=${DEMO_TOPIC:-orders}
if (($# > 0)); then
    producer=("$@")
else
    producer=("${KAFKA_HOME:-/opt/kafka}/bin/kafka-console-producer.sh")
fi

if [[ ! $rate =~ ^[1-9][0-9]*$ ]]; then
    echo "demo-producer: DEMO_RATE must be a positive integer, not '$rate'" >&2
    exit 2
fi

# orders.id is the primary key: a restarted producer must not reuse the ids of the last
# run, or the sink would hit a unique violation. The start time makes each run distinct.
run_id=$(date -u +%Y%m%d%H%M%S)
export TZ=UTC0 # POSIX spelling, understood by musl and glibc alike

customers=(acme globex initech umbrella hooli stark wayne wonka soylent tyrell)
statuses=(new paid paid paid shipped shipped delivered cancelled)
channels=(web web app app store phone)
bools=(false true)

# Prints one second's worth of records at a time and then sleeps out the rest of the
# second, so the rate holds whatever the generation costs. Apart from `sleep`, all of it
# is bash builtins (EPOCHREALTIME, printf -v, RANDOM): no process per record.
generate() {
    local n=0 i now us sec ms id cents created line batch left secs next
    now=${EPOCHREALTIME/[.,]/}
    next=$((10#$now))
    while true; do
        batch=
        for ((i = 0; i < rate; i++)); do
            n=$((n + 1))
            # Seconds and milliseconds from one clock reading, so they always agree.
            us=${EPOCHREALTIME/[.,]/}
            sec=${us:0:${#us}-6}
            ms=$((10#${us:${#us}-6} / 1000))
            id="o-$run_id-$n"
            cents=$((RANDOM % 50000 + 100))
            printf -v created '%(%Y-%m-%dT%H:%M:%S)T.%03dZ' "$sec" "$ms"
            # currency is left out on purpose: the column default ('EUR') applies.
            printf -v line '%s|{"id":"%s","customer":"%s","amount":"%d.%02d","status":"%s","created_at":"%s","attrs":{"channel":"%s","items":%d,"gift":%s}}\n' \
                "$id" "$id" \
                "${customers[RANDOM % ${#customers[@]}]}" \
                $((cents / 100)) $((cents % 100)) \
                "${statuses[RANDOM % ${#statuses[@]}]}" \
                "$created" \
                "${channels[RANDOM % ${#channels[@]}]}" \
                $((RANDOM % 5 + 1)) \
                "${bools[RANDOM % 10 == 0]}"
            batch+=$line
        done
        printf '%s' "$batch"
        if ((n % (rate * 60) == 0)); then
            echo "demo-producer: $n records sent" >&2
        fi

        next=$((next + 1000000))
        now=${EPOCHREALTIME/[.,]/}
        left=$((next - 10#$now))
        if ((left > 0)); then
            printf -v secs '%d.%06d' $((left / 1000000)) $((left % 1000000))
            # Whole seconds where this sleep does not take fractions.
            sleep "$secs" 2>/dev/null || sleep 1
        elif ((left < -5000000)); then
            # Far behind (the producer blocked for a while): start afresh rather than burst.
            next=$((10#$now))
        fi
    done
}

echo "demo-producer: $rate records/s to topic $topic at $bootstrap (ids o-$run_id-N)" >&2

# exec: the producer's JVM becomes the container's main process, so `docker compose stop`
# reaches it directly and it flushes before exiting; the generator then dies of SIGPIPE.
exec "${producer[@]}" \
    --bootstrap-server "$bootstrap" \
    --topic "$topic" \
    --property parse.key=true \
    --property 'key.separator=|' \
    < <(generate)
