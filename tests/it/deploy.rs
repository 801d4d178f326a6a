//! `deploy/`: the Helm chart and the KEDA examples, checked by `deploy/check.sh` with real
//! tools (helm, kubernetes-validate with the Kubernetes JSON schemas, promtool), and the
//! chart's rendered StatefulSet and hook read back for what README promises of them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// helm as scripts/ops-tools.sh installs it; missing, the test fails saying how to get it.
fn helm() -> PathBuf {
    let tools = std::env::var_os("KPS_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/kafka-pg-sink/tools")
        });
    let helm = tools.join("bin/helm");
    assert!(
        helm.is_file(),
        "{} is missing: run scripts/ops-tools.sh (scripts/dev-services.sh up runs it)",
        helm.display()
    );
    helm
}

/// The chart rendered with `args`; (success, stdout, stderr).
fn render(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm())
        .args([
            "template",
            "kafka-pg-sink",
            "deploy/helm/kafka-pg-sink",
            "--kube-version",
            "1.33.0",
        ])
        .args(args)
        .current_dir(root())
        .output()
        .expect("run helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One rendered manifest by kind (the chart renders one of each).
fn manifest<'a>(rendered: &'a str, kind: &str) -> &'a str {
    rendered
        .split("\n---")
        .find(|doc| doc.contains(&format!("\nkind: {kind}\n")))
        .unwrap_or_else(|| panic!("no {kind} in the chart:\n{rendered}"))
}

/// `deploy/check.sh` passes: lint, four renders each valid against the Kubernetes schemas
/// (strict: an unknown field is an error), more replicas than partitions refused, the KEDA
/// examples consistent with the chart and the `kafka_lag` view, the alert rules and their
/// unit tests.
#[test]
fn deploy_check_validates_the_chart_the_keda_examples_and_the_alerts() {
    helm();
    let out = Command::new(root().join("deploy/check.sh"))
        .current_dir(root())
        .output()
        .expect("run deploy/check.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "deploy/check.sh failed:\n{stdout}{stderr}"
    );
    for line in [
        "chart (defaults) renders and validates",
        "chart (everything) renders and validates",
        "chart (kafka-secret) renders and validates",
        "chart (no-hooks) renders and validates",
        "chart refuses more replicas than partitions",
        "KEDA examples match the chart and the kafka_lag view",
        "all of deploy/ is valid",
    ] {
        assert!(
            stdout.contains(line),
            "deploy/check.sh did not say {line:?}:\n{stdout}"
        );
    }
}

/// The rendered chart: the config as a ConfigMap mounted where `run --config` reads it,
/// secrets only through `secretKeyRef`, liveness on /health and readiness on /ready, a
/// PodDisruptionBudget, `migrate` as a pre-install/pre-upgrade hook Job with the database
/// URL alone, pods replaced in place one at a time (no surge pod), each pod's name its
/// `group_instance_id` (and none with `staticMembership=false`), and more replicas than
/// partitions refused.
#[test]
fn the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas() {
    let (ok, rendered, stderr) = render(&["--set", "serviceMonitor.enabled=true"]);
    assert!(ok, "{stderr}");

    let config = manifest(&rendered, "ConfigMap");
    assert!(config.contains("sink.toml: |"), "{config}");
    assert!(config.contains("url = \"${DATABASE_URL}\""), "{config}");

    let deployment = manifest(&rendered, "StatefulSet");
    for expected in [
        "args: [\"run\", \"--config\", \"/etc/kafka-pg-sink/sink.toml\"]",
        "mountPath: /etc/kafka-pg-sink",
        "path: /health",
        "path: /ready",
        "secretKeyRef:\n                  name: kafka-pg-sink-db\n                  key: url",
        "value: \"0.0.0.0:9464\"",
        "podManagementPolicy: Parallel",
        "updateStrategy:\n    type: RollingUpdate",
        "serviceName: kafka-pg-sink",
        "- name: KAFKA_PG_SINK_KAFKA__GROUP_INSTANCE_ID\n              valueFrom:\n                fieldRef:\n                  fieldPath: metadata.name",
        "runAsNonRoot: true",
        "checksum/config:",
    ] {
        assert!(
            deployment.contains(expected),
            "StatefulSet lacks {expected:?}:\n{deployment}"
        );
    }
    let liveness = deployment.split("livenessProbe:").nth(1).unwrap();
    assert!(liveness
        .split("readinessProbe:")
        .next()
        .unwrap()
        .contains("path: /health"));
    let readiness = deployment.split("readinessProbe:").nth(1).unwrap();
    assert!(readiness
        .split("resources:")
        .next()
        .unwrap()
        .contains("path: /ready"));
    // No secret value is written into any manifest: only references.
    assert!(
        !rendered.contains("kind: Secret\n"),
        "the chart must not create Secrets"
    );

    let job = manifest(&rendered, "Job");
    assert!(
        job.contains("\"helm.sh/hook\": pre-install,pre-upgrade"),
        "{job}"
    );
    assert!(job.contains("args: [\"migrate\"]"), "{job}");
    assert!(job.contains("name: DATABASE_URL"), "{job}");
    assert!(
        !job.contains("configMap"),
        "the hook runs before the ConfigMap exists: {job}"
    );

    let pdb = manifest(&rendered, "PodDisruptionBudget");
    assert!(pdb.contains("maxUnavailable: 1"), "{pdb}");
    let monitor = manifest(&rendered, "ServiceMonitor");
    assert!(monitor.contains("path: /metrics"), "{monitor}");

    let (ok, dynamic, stderr) = render(&["--set", "staticMembership=false"]);
    assert!(ok, "{stderr}");
    assert!(
        !dynamic.contains("GROUP_INSTANCE_ID"),
        "staticMembership=false still names an instance id:\n{dynamic}"
    );

    let (ok, _, stderr) = render(&["--set", "replicaCount=9", "--set", "partitions=8"]);
    assert!(!ok, "9 replicas for 8 partitions were accepted");
    assert!(stderr.contains("more than partitions"), "{stderr}");
    let (ok, _, stderr) = render(&["--set", "replicaCount=8", "--set", "partitions=8"]);
    assert!(ok, "as many replicas as partitions must render: {stderr}");
}

/// The StatefulSet's `KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET`, if it sets one.
fn memory_budget(deployment: &str) -> Option<String> {
    let after = deployment
        .split("- name: KAFKA_PG_SINK_KAFKA__MEMORY_BUDGET\n")
        .nth(1)?;
    let value = after.lines().next()?.trim().strip_prefix("value: ")?;
    Some(value.trim_matches('"').to_string())
}

/// The chart sets the sink's memory budget from the pod's memory limit: the limit minus
/// `memoryBudget.headroomPercent` (25 by default) or minus `memoryBudget.headroom` when that
/// is set, in whole MiB, for binary and decimal quantities alike; nothing without a limit or
/// with `fromLimit: false`; a headroom that leaves nothing, or a quantity it cannot read, is
/// refused.
#[test]
fn the_chart_sets_the_memory_budget_from_the_memory_limit() {
    let budget_of = |args: &[&str]| {
        let (ok, rendered, stderr) = render(args);
        assert!(ok, "{args:?}: {stderr}");
        memory_budget(manifest(&rendered, "StatefulSet"))
    };
    // The default limit, 512Mi, less 25%.
    assert_eq!(budget_of(&[]).as_deref(), Some("384MiB"));
    for (args, expected) in [
        (
            &[
                "--set",
                "resources.limits.memory=1Gi",
                "--set",
                "memoryBudget.headroom=256Mi",
            ][..],
            "768MiB",
        ),
        (&["--set", "resources.limits.memory=2G"][..], "1430MiB"),
        (
            &[
                "--set",
                "resources.limits.memory=1.5Gi",
                "--set",
                "memoryBudget.headroomPercent=10",
            ][..],
            "1382MiB",
        ),
        (
            &["--set", "resources.limits.memory=536870912"][..],
            "384MiB",
        ),
    ] {
        assert_eq!(budget_of(args).as_deref(), Some(expected), "{args:?}");
        // The sink reads the value as `kafka.memory_budget` does: a size in MiB.
        let mib: u64 = expected.trim_end_matches("MiB").parse().unwrap();
        assert_eq!(
            expected.parse::<bytesize::ByteSize>(),
            Ok(bytesize::ByteSize::mib(mib)),
            "{expected}"
        );
    }
    assert_eq!(budget_of(&["--set", "memoryBudget.fromLimit=false"]), None);
    assert_eq!(budget_of(&["--set", "resources.limits.memory=null"]), None);

    let (ok, _, stderr) = render(&["--set", "memoryBudget.headroom=600Mi"]);
    assert!(!ok, "a headroom above the limit was accepted");
    assert!(stderr.contains("leaves no budget"), "{stderr}");
    let (ok, _, stderr) = render(&["--set", "resources.limits.memory=lots"]);
    assert!(!ok, "an unreadable limit was accepted");
    assert!(stderr.contains("memory quantity \"lots\""), "{stderr}");
}
