#!/usr/bin/env bash
# Installs the tools deploy/check.sh needs, from the package registries this project can
# reach, into a cache outside the git tree so reruns take a second:
#   - helm, built from the Go module proxy (helm.sh/helm/v3, pinned below) with `go install`;
#   - kubernetes-validate from PyPI (pinned), which bundles the Kubernetes JSON schemas that
#     kubeconform would download from GitHub, in a virtualenv of its own.
# Prometheus and promtool are Debian packages: scripts/dev-services.sh up installs them.
#
# Usage: scripts/ops-tools.sh [env]
#   (no argument)  install what is missing, then print where the tools are
#   env            print `export PATH=...` for the tools; use: eval "$(scripts/ops-tools.sh env)"
set -euo pipefail

HELM_VERSION=v3.22.0
KUBERNETES_VALIDATE_VERSION=1.37.0
TOOLS=${KPS_TOOLS_DIR:-${HOME:?HOME is not set}/.cache/kafka-pg-sink/tools}
BIN=$TOOLS/bin
VENV=$TOOLS/venv

log() { printf 'ops-tools: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

if [[ ${1:-} == env ]]; then
    printf 'export PATH=%q:%q:"$PATH"\n' "$BIN" "$VENV/bin"
    exit 0
fi
[[ $# -eq 0 ]] || die "usage: scripts/ops-tools.sh [env]"

mkdir -p "$BIN"
# One installer at a time (CI and a developer, or two worktrees).
exec 9>"$TOOLS/.lock"
flock -w 1800 9 || die "another ops-tools.sh holds $TOOLS/.lock"

# helm: the version is part of the binary's name, so a new pin builds anew.
if [[ ! -x $BIN/helm-$HELM_VERSION ]]; then
    command -v go >/dev/null || die "go is needed to build helm (Debian: golang, or the Go toolchain)"
    log "building helm $HELM_VERSION from the Go module proxy (a few minutes, once)"
    build=$(mktemp -d)
    # nice: CI builds this while cargo compiles; cargo should keep the CPU.
    (cd "$build" && GOBIN=$build GOFLAGS=-mod=mod nice -n 10 go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") ||
        die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
    mv -f "$build/helm" "$BIN/helm-$HELM_VERSION"
    rm -rf "$build"
fi
ln -sfn "helm-$HELM_VERSION" "$BIN/helm"

if ! "$VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -qF "$KUBERNETES_VALIDATE_VERSION"; then
    log "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION from PyPI"
    python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: python3-venv)"
    "$VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" ||
        die "pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION failed"
fi
log "helm: $BIN/helm ($("$BIN/helm" version --short)), kubernetes-validate: $VENV/bin/kubernetes-validate"
