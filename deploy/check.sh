#!/usr/bin/env bash
# Validates everything under deploy/ with real tools (.ci/run runs it):
#   - the Helm chart: `helm lint --strict`, and `helm template` with the default values, with
#     every optional part on, and with a Kafka secret; each render is validated against the
#     Kubernetes JSON schemas by kubernetes-validate --strict (unknown fields are errors);
#   - the chart refuses more replicas than partitions;
#   - the KEDA examples: core kinds against the schemas; ScaledObject and
#     TriggerAuthentication are CRDs without a bundled schema, so their fields are checked
#     here against the chart (target name, replica cap = partitions, the consumer group,
#     the kafka_lag view's columns);
#   - the alert rules: `promtool check rules` and `promtool test rules`.
# Tools: scripts/ops-tools.sh (helm, kubernetes-validate), Debian's prometheus (promtool).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/ops-tools.sh env)"

KUBE_VERSION=${KPS_KUBE_VERSION:-1.33.0}
CHART=deploy/helm/kafka-pg-sink
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for tool in helm kubernetes-validate promtool; do
    command -v "$tool" >/dev/null || {
        echo "deploy/check.sh: $tool is missing: run scripts/ops-tools.sh (promtool: apt-get install -y prometheus)" >&2
        exit 1
    }
done

helm lint --strict --kube-version "$KUBE_VERSION" "$CHART"

render() { # name, helm args...
    local name=$1
    shift
    helm template kafka-pg-sink "$CHART" --kube-version "$KUBE_VERSION" "$@" >"$out/$name.yaml"
    kubernetes-validate --strict --quiet -k "$KUBE_VERSION" "$out/$name.yaml" 2>&1 |
        grep -v "Couldn't find schema for kind ServiceMonitor" || true
    # kubernetes-validate's exit status, not grep's.
    kubernetes-validate --strict --quiet --no-warn -k "$KUBE_VERSION" "$out/$name.yaml" >/dev/null
    echo "deploy/check.sh: chart ($name) renders and validates"
}
render defaults
render everything --set serviceMonitor.enabled=true --set replicaCount=8 \
    --set migrate.databaseUrlSecret.name=db-owner --set migrate.databaseUrlSecret.key=url
render kafka-secret --set-json 'secretEnv=[{"name":"DATABASE_URL","secretName":"db","key":"url"},{"name":"KAFKA_SASL_PASSWORD","secretName":"kafka","key":"password"}]'
render no-hooks --set migrate.enabled=false --set podDisruptionBudget.enabled=false

if helm template kafka-pg-sink "$CHART" --kube-version "$KUBE_VERSION" --set replicaCount=9 >/dev/null 2>"$out/refused"; then
    echo "deploy/check.sh: the chart accepted replicaCount=9 with 8 partitions" >&2
    exit 1
fi
grep -q 'more than partitions' "$out/refused" || {
    cat "$out/refused" >&2
    exit 1
}
echo "deploy/check.sh: chart refuses more replicas than partitions"

kubernetes-validate --strict --quiet --no-warn -k "$KUBE_VERSION" deploy/keda/*.yaml >/dev/null
# The CRDs' fields, against the chart's defaults and the migrations.
"$(dirname "$(command -v kubernetes-validate)")/python" - "$out/defaults.yaml" "$CHART/values.yaml" deploy/keda/*.yaml <<'PY'
import re, sys, yaml, pathlib

rendered, values_path, *keda = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
deployment = next(d for d in docs if d["kind"] == "StatefulSet")["metadata"]["name"]
values = yaml.safe_load(open(values_path))
partitions = values["partitions"]
group = re.search(r'group_id\s*=\s*"([^"]+)"', values["config"]).group(1)
lag_view = pathlib.Path("migrations/V3__lag.sql").read_text()
problems = []
for path in keda:
    for doc in yaml.safe_load_all(open(path)):
        if not doc or doc["kind"] != "ScaledObject":
            continue
        spec = doc["spec"]
        where = f"{path}: "
        if spec["scaleTargetRef"]["name"] != deployment or spec["scaleTargetRef"].get("kind") != "StatefulSet":
            problems.append(where + f"scaleTargetRef {spec['scaleTargetRef']} is not the chart's StatefulSet {deployment}")
        if spec["maxReplicaCount"] > partitions:
            problems.append(where + f"maxReplicaCount {spec['maxReplicaCount']} exceeds the {partitions} partitions")
        for trigger in spec["triggers"]:
            meta = trigger["metadata"]
            if trigger["type"] == "postgresql":
                if spec["minReplicaCount"] < 1:
                    problems.append(where + "the PostgreSQL scaler needs a running sink to observe the lag: minReplicaCount >= 1")
                query = meta["query"]
                if f"consumer_group = '{group}'" not in query:
                    problems.append(where + f"the query does not select the chart's group {group}: {query}")
                for column in re.findall(r"\b(lag|consumer_group)\b", query):
                    if not re.search(rf"\b{column}\b", lag_view):
                        problems.append(where + f"kafka_lag has no column {column}")
                if "FROM kafka_lag" not in query:
                    problems.append(where + "the query does not read kafka_lag")
            elif trigger["type"] == "kafka":
                if meta["consumerGroup"] != group:
                    problems.append(where + f"consumerGroup {meta['consumerGroup']} is not {group}")
                if meta.get("allowIdleConsumers") != "false":
                    problems.append(where + "allowIdleConsumers must be false (no more processes than partitions)")
            else:
                problems.append(where + f"unexpected trigger {trigger['type']}")
if problems:
    sys.exit("deploy/check.sh: " + "\n".join(problems))
print("deploy/check.sh: KEDA examples match the chart and the kafka_lag view")
PY

(cd deploy/prometheus && promtool check rules alerts.yml && promtool test rules alerts.test.yml)
echo "deploy/check.sh: all of deploy/ is valid"
