//! The plan: which schema positions carry Connect and Debezium types, read from the schema
//! JSON (apache-avro drops the attributes of primitive schemas), with named types resolved.

use apache_avro::schema::{Name, NamesRef, Namespace, Schema, UnionSchema};
use serde_json::Value as Json;

use super::write::write_str;
use super::{Node, Unit, PLAIN};

/// The deepest a schema may nest once its references are inlined: deeper than any record the
/// JSON depth bound (`MAX_JSON_DEPTH`) lets through, and shallow enough for every recursive
/// walk of it.
const MAX_INLINED_DEPTH: usize = 256;

/// Builds the plan from the schema JSON, resolving named types as Avro does.
pub(super) struct Planner {
    pub(super) nodes: Vec<Node>,
    /// Full name of each named type → its plan node.
    pub(super) names: std::collections::HashMap<String, usize>,
}

impl Planner {
    fn push(&mut self, node: Node) -> usize {
        if node == Node::Plain {
            return PLAIN;
        }
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// The plan node of schema `s` in namespace `ns`. apache-avro has already checked the
    /// schema, so whatever is not understood here is simply written plainly.
    pub(super) fn compile(&mut self, s: &Json, ns: &str) -> usize {
        match s {
            Json::String(name) => self.named(name, ns),
            Json::Array(branches) => {
                let branches = branches.iter().map(|b| self.compile(b, ns)).collect();
                self.push(Node::Union(branches))
            }
            Json::Object(o) => match o.get("type") {
                Some(Json::String(ty)) => self.compile_object(ty, o, ns),
                Some(nested @ (Json::Object(_) | Json::Array(_))) => self.compile(nested, ns),
                _ => PLAIN,
            },
            _ => PLAIN,
        }
    }

    /// A reference to a named type (or a primitive type's name).
    fn named(&self, name: &str, ns: &str) -> usize {
        if name.contains('.') || ns.is_empty() {
            return self.names.get(name).copied().unwrap_or(PLAIN);
        }
        self.names
            .get(&format!("{ns}.{name}"))
            .or_else(|| self.names.get(name))
            .copied()
            .unwrap_or(PLAIN)
    }

    fn compile_object(&mut self, ty: &str, o: &serde_json::Map<String, Json>, ns: &str) -> usize {
        let connect = o.get("connect.name").and_then(Json::as_str).unwrap_or("");
        let logical = o.get("logicalType").and_then(Json::as_str).unwrap_or("");
        match ty {
            "record" | "error" | "enum" | "fixed" => {
                let (full, inner_ns) = full_name(o, ns);
                // Registered before the fields, so a recursive reference finds it.
                self.nodes.push(Node::Plain);
                let id = self.nodes.len() - 1;
                self.names.insert(full.clone(), id);
                self.nodes[id] = match ty {
                    "fixed" if connect == "org.apache.kafka.connect.data.Decimal" => {
                        Node::Decimal {
                            scale: connect_scale(o),
                            bytes_too: true,
                        }
                    }
                    "fixed"
                        if logical == "uuid"
                            && o.get("size").and_then(Json::as_u64) == Some(16) =>
                    {
                        Node::UuidFixed
                    }
                    "fixed" if logical == "decimal" => Node::Decimal {
                        scale: int_attribute(o.get("scale")).unwrap_or(0),
                        bytes_too: false,
                    },
                    "record" | "error" => {
                        let mut keys = Vec::new();
                        let mut fields = Vec::new();
                        for f in o
                            .get("fields")
                            .and_then(Json::as_array)
                            .into_iter()
                            .flatten()
                        {
                            let name = f.get("name").and_then(Json::as_str).unwrap_or_default();
                            let mut key = String::new();
                            write_str(name, &mut key);
                            key.push(':');
                            keys.push(key);
                            fields
                                .push(f.get("type").map_or(PLAIN, |t| self.compile(t, &inner_ns)));
                        }
                        if connect == "io.debezium.data.VariableScaleDecimal"
                            || full == "io.debezium.data.VariableScaleDecimal"
                        {
                            Node::VariableDecimal
                        } else {
                            Node::Record { keys, fields }
                        }
                    }
                    _ => Node::Plain,
                };
                id
            }
            "array" => {
                let items = o.get("items").map_or(PLAIN, |s| self.compile(s, ns));
                self.push(Node::Array(items))
            }
            "map" => {
                let values = o.get("values").map_or(PLAIN, |s| self.compile(s, ns));
                self.push(Node::Map(values))
            }
            "null" | "boolean" | "int" | "long" | "float" | "double" | "bytes" | "string" => {
                self.push(primitive(connect, logical, o))
            }
            name => self.named(name, ns),
        }
    }
}

/// A primitive type's node, from its Connect name (or, for decimals, its logical type).
pub(super) fn primitive(connect: &str, logical: &str, o: &serde_json::Map<String, Json>) -> Node {
    match connect {
        "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => Node::Days,
        // Debezium's timestamps are wall-clock times of a column without a zone; Connect's
        // is a java.util.Date, an instant.
        "io.debezium.time.Timestamp" => Node::Epoch {
            unit: Unit::Millis,
            zone: false,
        },
        "io.debezium.time.MicroTimestamp" => Node::Epoch {
            unit: Unit::Micros,
            zone: false,
        },
        "io.debezium.time.NanoTimestamp" => Node::Epoch {
            unit: Unit::Nanos,
            zone: false,
        },
        "org.apache.kafka.connect.data.Timestamp" => Node::Epoch {
            unit: Unit::Millis,
            zone: true,
        },
        "io.debezium.time.Time" | "org.apache.kafka.connect.data.Time" => {
            Node::TimeOfDay(Unit::Millis)
        }
        "io.debezium.time.MicroTime" => Node::TimeOfDay(Unit::Micros),
        "io.debezium.time.NanoTime" => Node::TimeOfDay(Unit::Nanos),
        "io.debezium.time.MicroDuration" => Node::MicroDuration,
        "io.debezium.data.Json" => Node::JsonText,
        "org.apache.kafka.connect.data.Decimal" => Node::Decimal {
            scale: connect_scale(o),
            bytes_too: true,
        },
        _ if logical == "decimal" => Node::Decimal {
            scale: int_attribute(o.get("scale")).unwrap_or(0),
            bytes_too: false,
        },
        _ => Node::Plain,
    }
}

/// Connect's decimal scale: `connect.parameters.scale` (a string), else Avro's `scale`.
pub(super) fn connect_scale(o: &serde_json::Map<String, Json>) -> i64 {
    int_attribute(o.get("connect.parameters").and_then(|p| p.get("scale")))
        .or_else(|| int_attribute(o.get("scale")))
        .unwrap_or(0)
}

/// An integer attribute written as a number or as a string of one.
pub(super) fn int_attribute(v: Option<&Json>) -> Option<i64> {
    match v? {
        Json::Number(n) => n.as_i64(),
        Json::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A named type's full name and the namespace its fields resolve names in.
pub(super) fn full_name(o: &serde_json::Map<String, Json>, ns: &str) -> (String, String) {
    let name = o.get("name").and_then(Json::as_str).unwrap_or_default();
    if let Some((space, _)) = name.rsplit_once('.') {
        return (name.to_string(), space.to_string());
    }
    let space = o.get("namespace").and_then(Json::as_str).unwrap_or(ns);
    if space.is_empty() {
        (name.to_string(), String::new())
    } else {
        (format!("{space}.{name}"), space.to_string())
    }
}

/// `schema` with every named reference replaced by a copy of its definition, resolved in the
/// enclosing namespace as apache-avro's decoder does. A type that holds itself is an error.
pub(super) fn inline_refs(
    schema: &Schema,
    names: &NamesRef<'_>,
    ns: &Namespace,
    open: &mut Vec<Name>,
    budget: &mut usize,
    depth: usize,
) -> Result<Schema, String> {
    // Each reference gets its own copy, so a few named types that each refer twice to the
    // next would grow into an exponential number of copies: bound the work.
    *budget = budget.checked_sub(1).ok_or(
        "the Avro schema expands into too many nested types (named types referred to again and again)",
    )?;
    // References can chain far deeper than the schema text nests (each type defined beside
    // the last, each holding the one before); every walk of the schema recurses that deep.
    if depth > MAX_INLINED_DEPTH {
        return Err(format!(
            "the Avro schema nests deeper than {MAX_INLINED_DEPTH} types once its named types are resolved"
        ));
    }
    let depth = depth + 1;
    Ok(match schema {
        Schema::Ref { name } => {
            let full = name.fully_qualified_name(ns);
            if open.contains(&full) {
                return Err(format!(
                    "the Avro schema is recursive ({} holds itself), which is not supported: \
                     a record could nest without bound",
                    full.fullname(None)
                ));
            }
            let definition = names.get(&full).ok_or_else(|| {
                format!(
                    "invalid Avro schema: {} is not defined",
                    full.fullname(None)
                )
            })?;
            inline_refs(definition, names, &full.namespace, open, budget, depth)?
        }
        Schema::Record(record) => {
            let full = record.name.fully_qualified_name(ns);
            open.push(full.clone());
            let mut copy = record.clone();
            for field in &mut copy.fields {
                field.schema =
                    inline_refs(&field.schema, names, &full.namespace, open, budget, depth)?;
            }
            open.pop();
            Schema::Record(copy)
        }
        Schema::Array(array) => {
            let mut copy = array.clone();
            copy.items = Box::new(inline_refs(&array.items, names, ns, open, budget, depth)?);
            Schema::Array(copy)
        }
        Schema::Map(map) => {
            let mut copy = map.clone();
            copy.types = Box::new(inline_refs(&map.types, names, ns, open, budget, depth)?);
            Schema::Map(copy)
        }
        Schema::Union(union) => {
            let branches = union
                .variants()
                .iter()
                .map(|b| inline_refs(b, names, ns, open, budget, depth))
                .collect::<Result<Vec<_>, _>>()?;
            Schema::Union(
                UnionSchema::new(branches).map_err(|e| format!("invalid Avro schema: {e}"))?,
            )
        }
        other => other.clone(),
    })
}

/// The largest `fixed` size found in the schema JSON: apache-avro allocates a fixed value's
/// bytes at its declared size before reading them, without its allocation limit.
pub(super) fn largest_fixed(v: &Json) -> u64 {
    match v {
        Json::Object(o) => {
            let own = if o.get("type").is_some_and(|t| t == "fixed") {
                o.get("size").and_then(Json::as_u64).unwrap_or(0)
            } else {
                0
            };
            o.values().map(largest_fixed).fold(own, u64::max)
        }
        Json::Array(a) => a.iter().map(largest_fixed).max().unwrap_or(0),
        _ => 0,
    }
}
