//! What a registry's HTTP answer means for the sink: a schema, a permanent "not there"
//! (`40401`, `40402`, `40403`), or a failure worth retrying, perhaps at the next URL.

use serde::Deserialize;

use super::{Reference, RegisteredSchema, SchemaKind};

/// The registry's error codes that mean the subject, version or schema does not exist. Apicurio
/// answers `latest` of an unknown subject with `40402` where Confluent says `40401`.
const NOT_FOUND_CODES: [u64; 3] = [40401, 40402, 40403];

/// One URL's answer, before failover decides what to do with it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer<T> {
    Found(T),
    /// The registry says it does not have it: final, no other URL is asked.
    NotFound,
    /// This URL failed (the reason, without credentials): the next one may do better.
    Failed(String),
}

/// `GET /schemas/ids/{id}` and `GET /subjects/{s}/versions/{v}` share these fields.
#[derive(Deserialize)]
struct SchemaBody {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    /// Only in subject-version answers.
    id: Option<u32>,
    /// The schemas this one names (a `.proto`'s imports), fetched by the client.
    #[serde(default)]
    references: Vec<Reference>,
}

/// A schema as one answer carries it: its id (in subject-version answers), the schema, and
/// the references still to fetch.
pub(super) type Fetched = (Option<u32>, RegisteredSchema, Vec<Reference>);

/// The error body both Confluent and Apicurio send.
#[derive(Deserialize)]
struct ErrorBody {
    error_code: Option<u64>,
    message: Option<String>,
}

/// Reads an answer of status `status` and body `body` as a schema (and its id, when the body
/// carries one). `had_credentials` phrases a 401/403 for whoever has to fix it.
pub(super) fn read(status: u16, body: &[u8], had_credentials: bool) -> Answer<Fetched> {
    match status {
        200 => match serde_json::from_slice::<SchemaBody>(body) {
            Ok(b) => match kind(b.schema_type.as_deref()) {
                Some(kind) => Answer::Found((
                    b.id,
                    RegisteredSchema::new(kind, b.schema),
                    b.references,
                )),
                None => Answer::Failed(format!(
                    "answered with schemaType {:?}, which the sink does not read",
                    b.schema_type.unwrap_or_default()
                )),
            },
            Err(e) => Answer::Failed(format!("answered 200 with a body that is not a schema: {e}")),
        },
        401 | 403 if had_credentials => {
            Answer::Failed(format!("refused the credentials (HTTP {status})"))
        }
        401 | 403 => Answer::Failed(format!(
            "wants credentials (HTTP {status}); none are configured: set schema_registry.username and password, or bearer_token"
        )),
        404 => match serde_json::from_slice::<ErrorBody>(body) {
            Ok(ErrorBody {
                error_code: Some(code),
                ..
            }) if NOT_FOUND_CODES.contains(&code) => Answer::NotFound,
            _ => Answer::Failed(
                "answered 404 without a registry error code: is the URL the registry's API root (for Apicurio …/apis/ccompat/v7)?"
                    .into(),
            ),
        },
        _ => {
            let detail = match serde_json::from_slice::<ErrorBody>(body) {
                Ok(ErrorBody {
                    error_code,
                    message: Some(message),
                }) => format!(
                    ": {}{}",
                    error_code.map(|c| format!("{c} ")).unwrap_or_default(),
                    shorten(&message)
                ),
                _ => String::new(),
            };
            Answer::Failed(format!("answered HTTP {status}{detail}"))
        }
    }
}

/// `schemaType` as the registry spells it; absent means Avro (Confluent's rule).
fn kind(schema_type: Option<&str>) -> Option<SchemaKind> {
    match schema_type {
        None | Some("AVRO") => Some(SchemaKind::Avro),
        Some("PROTOBUF") => Some(SchemaKind::Protobuf),
        Some("JSON") => Some(SchemaKind::Json),
        Some(_) => None,
    }
}

/// An error message cut to a log line's worth.
fn shorten(message: &str) -> String {
    const MAX: usize = 200;
    match message.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &message[..at]),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(kind: SchemaKind, text: &str) -> Answer<Fetched> {
        Answer::Found((None, RegisteredSchema::new(kind, text), Vec::new()))
    }

    #[test]
    fn schema_types_map_and_absent_means_avro() {
        let body = br#"{"schema":"{\"type\":\"string\"}","references":[]}"#;
        assert_eq!(
            read(200, body, false),
            found(SchemaKind::Avro, r#"{"type":"string"}"#)
        );
        let body = br#"{"schema":"syntax = \"proto3\";","schemaType":"PROTOBUF"}"#;
        assert_eq!(
            read(200, body, false),
            found(SchemaKind::Protobuf, r#"syntax = "proto3";"#)
        );
        let body = br#"{"schema":"{}","schemaType":"JSON"}"#;
        assert_eq!(read(200, body, false), found(SchemaKind::Json, "{}"));
        let body = br#"{"schema":"{}","schemaType":"AVRO","id":7,"subject":"s","version":2}"#;
        assert_eq!(
            read(200, body, false),
            Answer::Found((
                Some(7),
                RegisteredSchema::new(SchemaKind::Avro, "{}"),
                Vec::new()
            ))
        );
        // A Protobuf schema that imports another lists it; the client fetches it.
        let body = br#"{"schema":"CgFh","schemaType":"PROTOBUF","references":[{"name":"common/money.proto","subject":"common/money.proto","version":1}]}"#;
        assert_eq!(
            read(200, body, false),
            Answer::Found((
                None,
                RegisteredSchema::new(SchemaKind::Protobuf, "CgFh"),
                vec![Reference {
                    name: "common/money.proto".into(),
                    subject: "common/money.proto".into(),
                    version: 1
                }]
            ))
        );
        let body = br#"{"schema":"<x/>","schemaType":"XML"}"#;
        assert!(matches!(read(200, body, false), Answer::Failed(m) if m.contains("\"XML\"")));
        assert!(
            matches!(read(200, b"<html>", false), Answer::Failed(m) if m.contains("not a schema"))
        );
    }

    #[test]
    fn only_the_registry_not_found_codes_are_final() {
        for code in [40401, 40402, 40403] {
            let body = format!(r#"{{"message":"No content","error_code":{code}}}"#);
            assert_eq!(
                read(404, body.as_bytes(), false),
                Answer::NotFound,
                "{code}"
            );
        }
        // A 404 from something that is not the registry (a wrong path) is a setup problem.
        for body in [&b"Not Found"[..], br#"{"error_code":404}"#] {
            assert!(matches!(read(404, body, false), Answer::Failed(m) if m.contains("API root")));
        }
    }

    #[test]
    fn refusals_and_server_errors_are_failures_that_say_why() {
        let refused = |status, creds| match read(status, b"", creds) {
            Answer::Failed(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(401, true), "refused the credentials (HTTP 401)");
        assert_eq!(refused(403, true), "refused the credentials (HTTP 403)");
        assert!(refused(401, false).contains("none are configured"));
        let body = br#"{"error_code":50001,"message":"Error in the backend data store"}"#;
        assert_eq!(
            read(500, body, false),
            Answer::Failed("answered HTTP 500: 50001 Error in the backend data store".into())
        );
        assert_eq!(
            read(503, b"busy", false),
            Answer::Failed("answered HTTP 503".into())
        );
        let long = format!(r#"{{"message":"{}"}}"#, "x".repeat(500));
        let Answer::Failed(m) = read(502, long.as_bytes(), false) else {
            panic!()
        };
        assert!(m.len() < 260 && m.ends_with('…'), "{m}");
    }
}
