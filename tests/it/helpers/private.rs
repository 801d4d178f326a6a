//! A PostgreSQL cluster or Kafka broker of one test's own, to stop and restart without
//! disturbing the tests that share the default services. `scripts/dev-services.sh` starts it
//! as a named instance on free ports, and destroys it when the test ends.

use std::net::TcpListener;
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/dev-services.sh");

/// One private instance.
pub struct Private {
    name: String,
    ports: [u16; 5],
}

/// Free ports, as the kernel hands them out (released before the script binds them).
fn free_ports() -> [u16; 5] {
    let listeners: Vec<TcpListener> = (0..5)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    ports.try_into().unwrap()
}

impl Private {
    /// Starts `service` ("postgres" or "kafka") as a new instance.
    pub fn up(service: &str) -> Self {
        Self::up_with(service, &[])
    }

    /// Starts `service` with extra environment for the script, e.g.
    /// `KPS_KAFKA_BROKER_PROPERTIES` for broker settings the shared broker does not have.
    pub fn up_with(service: &str, env: &[(&str, &str)]) -> Self {
        let private = Self {
            name: format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..10]),
            ports: free_ports(),
        };
        private.run_env(&["up", service], env);
        private
    }

    fn run(&self, args: &[&str]) {
        self.run_env(args, &[]);
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) {
        let [pg, kafka, controller, sasl, ssl] = self.ports;
        let out = Command::new(SCRIPT)
            .args(args)
            .env("KPS_INSTANCE", &self.name)
            .env("KPS_PG_PORT", pg.to_string())
            .env("KPS_KAFKA_PORT", kafka.to_string())
            .env("KPS_KAFKA_CONTROLLER_PORT", controller.to_string())
            .env("KPS_KAFKA_SASL_PORT", sasl.to_string())
            .env("KPS_KAFKA_SSL_PORT", ssl.to_string())
            .envs(env.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {SCRIPT}: {e}"));
        assert!(
            out.status.success(),
            "scripts/dev-services.sh {args:?} failed for instance {} (it needs Java 17, Maven and PostgreSQL 15):\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn stop(&self, service: &str) {
        self.run(&["stop", service]);
    }

    pub fn start(&self, service: &str) {
        self.run(&["start", service]);
    }

    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres:postgres@127.0.0.1:{}/postgres",
            self.ports[0]
        )
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.ports[1])
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| self.run(&["destroy"]));
    }
}
