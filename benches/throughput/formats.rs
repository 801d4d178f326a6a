//! The benchmark's orders in Avro and Protobuf, framed as Confluent's serializers write them
//! (magic byte 0, the registry's schema id, for Protobuf the message-index array), so the
//! registry formats are measured on the rows the JSON scenarios write.

use anyhow::Context;
use apache_avro::types::Value as Avro;
use prost_reflect::prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, Value as Proto};

use crate::data::{self, Order};

/// Orders in Avro with the types an Avro producer would pick: a decimal for the amount, a
/// `timestamp-millis` for the time, a record for `attrs`.
pub const AVRO_SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "kps.bench",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "currency", "type": "string"},
    {"name": "status", "type": "string"},
    {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "attrs", "type": {"type": "record", "name": "Attrs", "fields": [
      {"name": "channel", "type": "string"},
      {"name": "items", "type": "int"},
      {"name": "coupon", "type": ["null", "string"], "default": null},
      {"name": "tags", "type": {"type": "array", "items": "string"}}
    ]}}
  ]
}"#;

/// Orders in Protobuf. The amount and the time are strings: proto3 has no decimal, and
/// `google.protobuf.Timestamp` needs an import, which the registry of the dev services cannot
/// register (see `tests/it/protobuf.rs`). For the same reason `coupon` cannot be a
/// `google.protobuf.Value` null: unset, it is left out of `attrs` (see [`expected_json`]).
pub const PROTO_SCHEMA: &str = r#"syntax = "proto3";
package kps.bench;

message Order {
  message Attrs {
    string channel = 1;
    int32 items = 2;
    optional string coupon = 3;
    repeated string tags = 4;
  }
  string id = 1;
  string customer = 2;
  string amount = 3;
  string currency = 4;
  string status = 5;
  string created_at = 6;
  Attrs attrs = 7;
}
"#;

/// A registry format the sink reads: its `format` setting and how it encodes an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Avro,
    Protobuf,
}

impl Format {
    /// The topic's `format` in the sink's configuration.
    pub fn setting(self) -> &'static str {
        match self {
            Format::Avro => "avro",
            Format::Protobuf => "protobuf",
        }
    }

    /// The registered schema's text.
    pub fn schema(self) -> &'static str {
        match self {
            Format::Avro => AVRO_SCHEMA,
            Format::Protobuf => PROTO_SCHEMA,
        }
    }

    /// `schemaType` in the registry's API (Avro is the default and has none).
    pub fn schema_type(self) -> Option<&'static str> {
        match self {
            Format::Avro => None,
            Format::Protobuf => Some("PROTOBUF"),
        }
    }
}

/// Encodes orders into framed payloads with the schema the registry numbered `id`.
pub enum Encoder {
    Avro {
        id: u32,
        schema: apache_avro::Schema,
    },
    Protobuf {
        id: u32,
        order: MessageDescriptor,
    },
}

impl Encoder {
    pub fn new(format: Format, id: u32) -> anyhow::Result<Self> {
        Ok(match format {
            Format::Avro => Self::Avro {
                id,
                schema: apache_avro::Schema::parse_str(AVRO_SCHEMA)?,
            },
            Format::Protobuf => Self::Protobuf {
                id,
                order: proto_pool()?
                    .get_message_by_name("kps.bench.Order")
                    .context("no kps.bench.Order in the schema")?,
            },
        })
    }

    /// Order `i` in the Confluent wire format.
    pub fn encode(&self, i: u64) -> anyhow::Result<Vec<u8>> {
        let o = Order::new(i);
        match self {
            Self::Avro { id, schema } => {
                let body = apache_avro::to_avro_datum(schema, avro_value(&o))
                    .with_context(|| format!("order {i} does not fit the Avro schema"))?;
                Ok(framed(*id, &[], &body))
            }
            // `Order` is the file's first message: Confluent writes the index array [0] as
            // the single byte 0.
            Self::Protobuf { id, order } => Ok(framed(*id, &[0], &proto_message(order, &o)?)),
        }
    }
}

/// Magic byte 0, the schema id big-endian, `indexes` (Protobuf's message-index array), `body`.
fn framed(id: u32, indexes: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + indexes.len() + body.len());
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(indexes);
    out.extend_from_slice(body);
    out
}

fn avro_value(o: &Order) -> Avro {
    let strings = |s: &[&str]| Avro::Array(s.iter().map(|t| Avro::String(t.to_string())).collect());
    Avro::Record(vec![
        ("id".into(), Avro::String(o.id.clone())),
        ("customer".into(), Avro::String(o.customer.clone())),
        (
            "amount".into(),
            Avro::Decimal(apache_avro::Decimal::from(unscaled(o.cents))),
        ),
        ("currency".into(), Avro::String(o.currency.into())),
        ("status".into(), Avro::String(o.status.into())),
        ("created_at".into(), Avro::TimestampMillis(o.created_ms)),
        (
            "attrs".into(),
            Avro::Record(vec![
                ("channel".into(), Avro::String(o.channel.into())),
                ("items".into(), Avro::Int(o.items as i32)),
                ("coupon".into(), Avro::Union(0, Box::new(Avro::Null))),
                ("tags".into(), strings(&o.tags)),
            ]),
        ),
    ])
}

/// `cents` as Avro's decimal carries it: big-endian two's complement, without the leading
/// zero bytes a non-negative number does not need.
fn unscaled(cents: u64) -> Vec<u8> {
    let bytes = cents.to_be_bytes();
    let mut start = 0;
    while start < bytes.len() - 1 && bytes[start] == 0 && bytes[start + 1] & 0x80 == 0 {
        start += 1;
    }
    bytes[start..].to_vec()
}

/// Compiles [`PROTO_SCHEMA`] as the sink compiles what the registry hands it.
fn proto_pool() -> anyhow::Result<DescriptorPool> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("order.proto"), PROTO_SCHEMA)?;
    let mut compiler = protox::Compiler::new([dir.path()])?;
    compiler.open_file("order.proto")?;
    Ok(compiler.descriptor_pool())
}

fn proto_message(order: &MessageDescriptor, o: &Order) -> anyhow::Result<Vec<u8>> {
    let attrs_desc = order
        .get_field_by_name("attrs")
        .and_then(|f| f.kind().as_message().cloned())
        .context("no message field attrs in the schema")?;
    let mut attrs = DynamicMessage::new(attrs_desc);
    attrs.set_field_by_name("channel", Proto::String(o.channel.into()));
    attrs.set_field_by_name("items", Proto::I32(o.items as i32));
    attrs.set_field_by_name(
        "tags",
        Proto::List(
            o.tags
                .iter()
                .map(|t| Proto::String(t.to_string()))
                .collect(),
        ),
    );
    let mut m = DynamicMessage::new(order.clone());
    m.set_field_by_name("id", Proto::String(o.id.clone()));
    m.set_field_by_name("customer", Proto::String(o.customer.clone()));
    m.set_field_by_name("amount", Proto::String(o.amount()));
    m.set_field_by_name("currency", Proto::String(o.currency.into()));
    m.set_field_by_name("status", Proto::String(o.status.into()));
    m.set_field_by_name("created_at", Proto::String(o.created_at()));
    m.set_field_by_name("attrs", Proto::Message(attrs));
    Ok(m.encode_to_vec())
}

/// The JSON the row of order `i` must equal (compared as jsonb, so key order is free): the
/// JSON scenarios' order, except that Protobuf's `attrs` has no `coupon` (unset, not null).
pub fn expected_json(format: Option<Format>, i: u64) -> String {
    let json = data::order(i);
    match format {
        Some(Format::Protobuf) => json.replace(r#""coupon":null,"#, ""),
        _ => json,
    }
}
