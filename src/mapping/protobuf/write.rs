//! The JSON writers of the direct reader: each writes what serde_json writes for the value
//! prost-reflect's serializer hands it.

use std::ops::Range;

use super::program::Scalar;

/// The JSON of a scalar's zero value, as prost-reflect writes an unset one.
pub(super) fn default_of(kind: Scalar) -> &'static str {
    match kind {
        Scalar::Double | Scalar::Float => "0.0",
        Scalar::Bool => "false",
        Scalar::String | Scalar::Bytes => "\"\"",
        _ => "0",
    }
}

/// Whether two of the written map keys are the same text.
pub(super) fn has_duplicate_keys(out: &str, keys: &[Range<usize>]) -> bool {
    if keys.len() < 2 {
        return false;
    }
    let mut texts: Vec<&str> = keys
        .iter()
        .map(|r| {
            let entry = &out[r.clone()];
            // The key is everything up to the colon after its closing quote.
            key_of(entry)
        })
        .collect();
    texts.sort_unstable();
    texts.windows(2).any(|w| w[0] == w[1])
}

/// The JSON string at the start of `entry` (`"k":v`).
fn key_of(entry: &str) -> &str {
    let mut escaped = false;
    for (i, c) in entry.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return &entry[..=i],
            _ => {}
        }
    }
    entry
}

/// A finite float as serde_json writes it (`narrow`: an f32, written as one); NaN and the
/// infinities as the strings prost-reflect writes.
pub(super) fn write_float(wide: f64, narrow: Option<f32>, out: &mut String) {
    if wide.is_nan() {
        out.push_str("\"NaN\"");
    } else if wide.is_infinite() {
        out.push_str(if wide > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else {
        let _ = match narrow {
            Some(f) => serde_json::to_writer(Text(out), &f),
            None => serde_json::to_writer(Text(out), &wide),
        };
    }
}

pub(super) use crate::mapping::json_write::write_str;
use crate::mapping::json_write::Text;
