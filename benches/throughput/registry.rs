//! The HTTP the benchmark itself speaks: registering its schemas in the Schema Registry, and
//! reading the sink's registry request counter from `/metrics` (the proof that no request is
//! made per record).
//!
//! ureq (blocking, plain HTTP) rather than the sink's reqwest: the dev services' registry and
//! the sink's endpoint are plain HTTP, and reqwest would need a TLS provider set up first.

use std::time::Duration;

use anyhow::Context;

use crate::formats::Format;

/// The counter the sink increments for every HTTP request to the registry.
const REQUESTS_METRIC: &str = "kafka_pg_sink_schema_registry_requests_total";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// Registers `format`'s schema under `subject` at the registry whose API root is `base`; the
/// id it assigned (the same id again when the schema is already there).
pub async fn register(base: &str, subject: &str, format: Format) -> anyhow::Result<u32> {
    let mut body = serde_json::json!({ "schema": format.schema() });
    if let Some(kind) = format.schema_type() {
        body["schemaType"] = kind.into();
    }
    let mut url = url::Url::parse(base).with_context(|| format!("registry URL {base}"))?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("registry URL {base} cannot have a path"))?
        .pop_if_empty()
        .extend(["subjects", subject, "versions"]);
    let subject = subject.to_string();
    let (status, answer) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let mut response = agent()
            .post(url.as_str())
            .header("content-type", "application/vnd.schemaregistry.v1+json")
            .send(body.to_string())
            .with_context(|| format!("registering {subject} at {url}"))?;
        Ok((response.status(), response.body_mut().read_to_string()?))
    })
    .await??;
    anyhow::ensure!(
        status.is_success(),
        "registering the {} schema: {status} {answer}",
        format.setting()
    );
    let answer: serde_json::Value = serde_json::from_str(&answer)?;
    answer["id"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .with_context(|| format!("no schema id in the registry's answer {answer}"))
}

/// The sink's registry requests so far, from its `/metrics` at `address` (`host:port`); 0
/// when the counter was never incremented (the exporter leaves it out until then).
pub async fn requests(address: &str) -> anyhow::Result<u64> {
    let url = format!("http://{address}/metrics");
    let text = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut response = agent()
            .get(&url)
            .call()
            .with_context(|| format!("scraping {url}"))?;
        anyhow::ensure!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        Ok(response.body_mut().read_to_string()?)
    })
    .await??;
    Ok(counter(&text, REQUESTS_METRIC))
}

/// The sum of `name`'s samples (every label set) in Prometheus text.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
