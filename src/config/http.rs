//! The HTTP endpoint's settings: on or off, and the address it listens on.

use serde::Deserialize;

use super::default_true;

/// The HTTP endpoint: `/metrics` (Prometheus), `/health` and `/ready`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default = "default_listen")]
    pub listen: std::net::SocketAddr,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: default_listen(),
        }
    }
}

/// Loopback only: metrics are not exposed unless asked for (`0.0.0.0:9464` in containers).
fn default_listen() -> std::net::SocketAddr {
    ([127, 0, 0, 1], 9464).into()
}
