# kafka-pg-sink container image.
#
#   docker build -t kafka-pg-sink .
#   docker run --rm -e DATABASE_URL=postgres://... kafka-pg-sink migrate
#   docker run --rm -v "$PWD/examples/orders.toml:/etc/kafka-pg-sink/orders.toml:ro" \
#       kafka-pg-sink run --config /etc/kafka-pg-sink/orders.toml
#
# docker-compose.yml uses this file to run the whole pipeline.

############################# build #############################
FROM rust:1-bookworm AS build

# rdkafka-sys compiles librdkafka from its bundled source with ./configure and make: that
# needs a C and a C++ compiler, make, zlib's headers, and OpenSSL's (the sink enables
# rdkafka's `ssl` feature for SSL and SCRAM; zstd is built from source). sqlx's rustls
# (ring) needs the C compiler too. Naming them keeps this stage honest.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential pkg-config zlib1g-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# Dependencies first, against placeholder sources: this layer (librdkafka alone takes
# minutes) is reused until Cargo.toml, Cargo.lock or build.rs change.
COPY Cargo.toml Cargo.lock build.rs ./
# The benchmark target is declared in Cargo.toml, so it needs a file to exist; the image
# never builds it, so the placeholder stays.
RUN mkdir -p src migrations benches/throughput \
    && echo 'fn main() {}' > src/main.rs \
    && echo 'fn main() {}' > benches/throughput/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src

# The real sources. migrations/ is embedded into the binary at compile time, so it must be
# here before the build, and a new migration has to rebuild the crate.
COPY migrations ./migrations
COPY src ./src
# COPY keeps the files' own modification times, which can be older than the placeholder
# build above; dropping the crate's fingerprints makes cargo rebuild it (and rerun
# build.rs) whatever the timestamps say. Dependencies stay cached.
RUN rm -rf target/release/.fingerprint/kafka-pg-sink-* \
        target/release/deps/kafka_pg_sink-* \
        target/release/deps/libkafka_pg_sink-* \
    && cargo build --release --locked \
    && install -m 0755 target/release/kafka-pg-sink /usr/local/bin/kafka-pg-sink

############################# runtime #############################
FROM debian:bookworm-slim

# Same Debian release as the build stage, so the glibc the binary was linked against is
# there. librdkafka is linked statically; its zlib (libz.so.1) is part of the base image and
# OpenSSL (libssl3) is installed for it. ca-certificates: the system roots PostgreSQL TLS
# trusts (besides sslrootcert), and a default for Kafka SSL.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/*

# A fixed numeric id, so orchestrators that insist on non-root (runAsNonRoot) can verify it.
RUN groupadd --system --gid 10001 kafka-pg-sink \
    && useradd --system --uid 10001 --gid kafka-pg-sink --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin kafka-pg-sink

COPY --from=build /usr/local/bin/kafka-pg-sink /usr/local/bin/kafka-pg-sink

LABEL org.opencontainers.image.title="kafka-pg-sink" \
      org.opencontainers.image.description="Exactly-once Kafka to PostgreSQL sink" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 10001:10001

# Exec form: the sink is PID 1 and receives SIGTERM itself; it commits the batches that
# are complete and leaves the group, so give it a stop timeout of some seconds.
ENTRYPOINT ["kafka-pg-sink"]
CMD ["run"]
