//! The HTTP endpoint: `/metrics` for Prometheus, `/health` (the process answers) and `/ready`
//! (partitions assigned, PostgreSQL and Kafka reachable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;

use crate::health::Health;
use crate::shutdown::Shutdown;

/// What the handlers read; cheap to clone, as axum clones it per request.
#[derive(Clone)]
struct AppState {
    metrics: PrometheusHandle,
    health: Arc<Health>,
    pool: PgPool,
}

/// Binds `listen` and serves until shutdown; returns the address actually bound (port 0
/// picks a free one) and the serving task, to join at shutdown.
pub async fn serve(
    listen: SocketAddr,
    metrics: PrometheusHandle,
    health: Arc<Health>,
    pool: PgPool,
    shutdown: Shutdown,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen} for /metrics, /health and /ready: {e} (set http.listen, or http.enabled = false)"))?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .with_state(AppState {
            metrics,
            health,
            pool,
        });
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.triggered().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the HTTP endpoint stopped");
        }
    });
    tracing::info!(address = %bound, "serving /metrics, /health and /ready");
    Ok((bound, task))
}

/// The Prometheus text format's content type, so scrapers need not guess. Readiness is
/// checked first, so `kafka_pg_sink_ready` says what `/ready` would answer at this scrape:
/// an alert can then tell a process that owns partitions but cannot reach PostgreSQL or
/// Kafka, which the other series do not show.
async fn render_metrics(State(state): State<AppState>) -> impl IntoResponse {
    let (ready, _) = readiness(&state).await;
    metrics::gauge!(crate::meters::READY).set(f64::from(u8::from(ready)));
    (
        [("content-type", "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

/// 200 when ready, 503 with the reasons otherwise.
async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    let (ready, body) = readiness(&state).await;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// Partitions assigned, PostgreSQL answering and Kafka reachable (without an authentication
/// failure); the answer and the body `/ready` shows for it.
async fn readiness(state: &AppState) -> (bool, serde_json::Value) {
    let database = tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query("SELECT 1").execute(&state.pool),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    let assigned = state.health.assigned();
    let auth_failure = state.health.kafka_auth_failure();
    let kafka = state.health.kafka_up() && auth_failure.is_none();
    let ready = database && kafka && assigned > 0;
    let mut body = serde_json::json!({
        "ready": ready,
        "assigned_partitions": assigned,
        "database": database,
        "kafka": kafka,
    });
    if let Some((_, reason)) = auth_failure {
        body["kafka_error"] = serde_json::Value::String(reason);
    }
    (ready, body)
}
