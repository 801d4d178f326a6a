#!/usr/bin/env bash
# The throughput benchmark against scripts/dev-services.sh:
#   scripts/bench.sh                                        # 1,000,000 records, a few minutes
#   scripts/bench.sh --records 20000 --trickle-secs 2 --json bench.json
#   scripts/bench.sh --only copy,insert --writers 4        # a subset of the scenarios
#   scripts/bench.sh --only copy,insert,avro,protobuf      # the registry formats against JSON
#   scripts/bench.sh --only copy,insert,avro --rounds 3    # medians of 3 rounds on a noisy machine
#   scripts/bench.sh --only copy,insert,connect-json,debezium  # the JSON envelopes (schema per record)
#   scripts/bench.sh --only sparse-upsert --records 200000     # upserts carrying different column subsets
#   scripts/bench.sh --only insert,upsert,connect-json,debezium,fetch-floor  # what receiving the envelopes' bytes costs
#   scripts/bench.sh --only tables --records 200000           # 1 / 50 / 200 topics of one pattern, a table each
#   scripts/bench.sh --only tables --tables 1,10 --records 20000  # fewer tables (CI's smoke size)
#   scripts/bench.sh --only partitions --records 3000000 --compression lz4  # 8 / 64 / 256 partitions: rows/s, peak RSS
#   scripts/bench.sh --only partitions --partition-counts 1,1024 --memory-budget 128MiB
#   scripts/bench.sh --only partitions --partitioner murmur2   # orders placed by key, as Kafka's Java producer
# BENCH_PROFILE=dev uses the debug build (CI's smoke run: it must finish, numbers mean nothing).
# Needs KAFKA_BOOTSTRAP_SERVERS and DATABASE_URL, and for avro and protobuf (in the default
# set) SCHEMA_REGISTRY_URL: eval "$(scripts/dev-services.sh env)"
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench --locked --profile "${BENCH_PROFILE:-bench}" --bench throughput -- "$@"
