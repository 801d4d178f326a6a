#!/usr/bin/env bash
# Installs confluent-kafka's Python serializers (Avro, Protobuf, JSON Schema; PyPI, every
# package pinned in scripts/serializers/requirements.txt) into a virtualenv outside the git
# tree. The integration tests drive scripts/serializers/confluent_produce.py with it, so the
# registry-format bytes they feed the sink are the ones users' producers write.
# scripts/dev-services.sh up runs it; a rerun with an unchanged requirements file takes a second.
#
# Usage: scripts/serializers.sh [env]
#   (no argument)  install when missing or when the pins changed, then print the interpreter
#   env            print `export KPS_SERIALIZERS_PYTHON=...`; use: eval "$(scripts/serializers.sh env)"
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REQUIREMENTS=$SCRIPT_DIR/serializers/requirements.txt
DIR=${KPS_SERIALIZERS_DIR:-${HOME:?HOME is not set}/.cache/kafka-pg-sink/serializers}
VENV=$DIR/venv
PYTHON=$VENV/bin/python

log() { printf 'serializers: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

if [[ ${1:-} == env ]]; then
    printf 'export KPS_SERIALIZERS_PYTHON=%q\n' "$PYTHON"
    exit 0
fi
[[ $# -eq 0 ]] || die "usage: scripts/serializers.sh [env]"

mkdir -p "$DIR"
# One installer at a time (CI and a developer, or two worktrees).
exec 9>"$DIR/.lock"
flock -w 1800 9 || die "another serializers.sh holds $DIR/.lock"

# The venv records which pins it holds: a changed requirements file installs anew.
want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [[ ! -x $PYTHON || $(cat "$VENV/.requirements" 2>/dev/null) != "$want" ]]; then
    log "installing confluent-kafka's serializers from PyPI into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: python3-venv)"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQUIREMENTS" ||
        die "pip install -r $REQUIREMENTS failed"
    printf '%s\n' "$want" >"$VENV/.requirements"
fi
"$PYTHON" -c 'import confluent_kafka, fastavro, jsonschema, grpc_tools, google.protobuf' ||
    die "$VENV is incomplete: delete it and run scripts/serializers.sh again"
log "python with confluent-kafka $("$PYTHON" -c 'import confluent_kafka; print(confluent_kafka.version())'): $PYTHON"
