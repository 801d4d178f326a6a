//! The sink's HTTP endpoint as a test reads it: plain GETs and the Prometheus text format.

use std::collections::HashMap;

/// GET `path` from `address`; (status, body).
pub fn get(address: &str, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(format!("http://{address}{path}"))
        .call()
        .expect("HTTP request");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// Prometheus text format: `name{labels} value` lines into a map.
pub fn parse_metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// A metric's value, 0 when the series does not exist (a counter never incremented).
pub fn metric(metrics: &HashMap<String, f64>, series: &str) -> f64 {
    metrics.get(series).copied().unwrap_or(0.0)
}
