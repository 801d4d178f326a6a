//! The registry connection's TLS: rustls with the ring provider, the same stack sqlx uses, so
//! the binary carries one TLS implementation for HTTP and PostgreSQL (librdkafka keeps its own
//! OpenSSL). Roots are the system's unless `ca_file` names others; `client_cert_file` and
//! `client_key_file` add a client certificate.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::config::{ConfigError, RegistrySettings};

/// The rustls configuration `settings` ask for. Errors name the file and the problem.
pub(super) fn client_config(settings: &RegistrySettings) -> Result<ClientConfig, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(format!("schema_registry.{m}"));
    let mut roots = RootCertStore::empty();
    match &settings.ca_file {
        Some(path) => {
            let certs = certificates(path).map_err(|e| invalid(format!("ca_file {e}")))?;
            let (added, _ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(invalid(format!(
                    "ca_file {} holds no usable CA certificate",
                    path.display()
                )));
            }
        }
        None => {
            // Unreadable system certificates are skipped, as sqlx's native roots do.
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    Ok(
        match (&settings.client_cert_file, &settings.client_key_file) {
            (Some(cert), Some(key)) => {
                let chain =
                    certificates(cert).map_err(|e| invalid(format!("client_cert_file {e}")))?;
                if chain.is_empty() {
                    return Err(invalid(format!(
                        "client_cert_file {} holds no certificate",
                        cert.display()
                    )));
                }
                // The key's own parse error could quote key material; say only where.
                let key = PrivateKeyDer::from_pem_file(key).map_err(|_| {
                    invalid(format!(
                        "client_key_file {}: not a readable PEM private key",
                        key.display()
                    ))
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| invalid(format!("client certificate and key: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        },
    )
}

/// Every certificate in a PEM file.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_missing_or_empty_are_named() {
        let mut s = RegistrySettings::with_urls(["https://r"]);
        s.ca_file = Some("/nonexistent/ca.pem".into());
        let err = client_config(&s).unwrap_err().to_string();
        assert!(err.contains("ca_file /nonexistent/ca.pem"), "{err}");

        let empty = tempfile::NamedTempFile::new().unwrap();
        s.ca_file = Some(empty.path().into());
        let err = client_config(&s).unwrap_err().to_string();
        assert!(err.contains("holds no usable CA certificate"), "{err}");

        let mut s = RegistrySettings::with_urls(["https://r"]);
        s.client_cert_file = Some(empty.path().into());
        s.client_key_file = Some(empty.path().into());
        let err = client_config(&s).unwrap_err().to_string();
        assert!(
            err.contains("client_cert_file") && err.contains("no certificate"),
            "{err}"
        );
    }

    #[test]
    fn system_roots_serve_when_no_ca_is_given() {
        let s = RegistrySettings::with_urls(["https://r"]);
        client_config(&s).unwrap();
    }
}
