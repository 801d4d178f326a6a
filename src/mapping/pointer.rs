//! JSON pointers (RFC 6901) evaluated lazily over borrowed JSON: only the objects on the way
//! are scanned, and nothing is copied.

use foldhash::HashMap;
use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// One JSON value's text, known to be valid JSON and without whitespace around it (as
/// serde_json's raw values are, which the converters rely on): a value serde_json found, or
/// one the sink wrote itself (a transcoder's record field). Borrowed and `Copy`, like the
/// `&RawValue` it stands for, but it can also be made from text that is known good, which
/// lets a transcoder hand over its fields without the object being scanned again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonRef<'a>(&'a str);

impl<'a> JsonRef<'a> {
    /// The JSON text.
    pub fn get(self) -> &'a str {
        self.0
    }

    /// A value serde_json has found, so it is valid.
    pub(crate) fn of(raw: &'a RawValue) -> Self {
        JsonRef(raw.get())
    }

    /// Text known to be exactly one JSON value without surrounding whitespace: written by the
    /// sink, or just validated whole (the caller answers for that).
    pub(crate) fn written(text: &'a str) -> Self {
        JsonRef(text)
    }
}

/// Parses `""` (the whole document) or `/a/b~1c` into unescaped tokens.
pub fn parse(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("JSON pointer {pointer:?} must start with '/'"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// The value at `path` below `raw`, or `None` where the path leads nowhere (a missing field, an
/// index past the end, or a scalar on the way).
pub fn descend<'a>(mut raw: JsonRef<'a>, path: &[String]) -> Result<Option<JsonRef<'a>>, String> {
    for token in path {
        let text = raw.get();
        let next = if text.starts_with('{') {
            field(raw, token)?
        } else if text.starts_with('[') {
            match token.parse::<usize>() {
                Ok(index) => element(raw, index)?,
                Err(_) => None,
            }
        } else {
            None
        };
        match next {
            Some(n) => raw = n,
            None => return Ok(None),
        }
    }
    Ok(Some(raw))
}

/// The member `name` of an object (the last one, if repeated).
pub fn field<'a>(raw: JsonRef<'a>, name: &str) -> Result<Option<JsonRef<'a>>, String> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_map(FieldVisitor { name, found: None })
        .map(|found| found.map(JsonRef::of))
        .map_err(|e| e.to_string())
}

/// The members `names` of an object in one pass (the last of each, if repeated), for
/// envelopes whose few fields are all wanted: one scan instead of one per field. The whole
/// text must be the object: this is also its validation.
pub fn fields<'a, const N: usize>(
    text: &'a str,
    names: [&str; N],
) -> Result<[Option<JsonRef<'a>>; N], String> {
    /// Keeps the value of each wanted name, skips the rest.
    struct Fields<'n, 'a, const N: usize> {
        names: [&'n str; N],
        found: [Option<JsonRef<'a>>; N],
    }
    impl<'a, const N: usize> Visitor<'a> for Fields<'_, 'a, N> {
        type Value = [Option<JsonRef<'a>>; N];
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'a>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key_seed(KeySeed)? {
                match self.names.iter().position(|n| *n == key) {
                    Some(i) => {
                        self.found[i] = Some(JsonRef::of(map.next_value::<&'a RawValue>()?));
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(self.found)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(Fields {
        names,
        found: [None; N],
    })
    .and_then(|found| de.end().map(|()| found))
    .map_err(|e| e.to_string())
}

/// Reads on after a match, so a repeated name's last value wins, as in `parse_object`.
struct FieldVisitor<'n, 'a> {
    name: &'n str,
    found: Option<&'a RawValue>,
}

impl<'a> Visitor<'a> for FieldVisitor<'_, 'a> {
    type Value = Option<&'a RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'a>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if key == self.name {
                self.found = Some(map.next_value::<&'a RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(self.found)
    }
}

/// Element `index` of an array, or `None` past the end. Reads to the end of the array:
/// serde_json refuses a sequence left half-read.
fn element(raw: JsonRef<'_>, index: usize) -> Result<Option<JsonRef<'_>>, String> {
    struct ElementVisitor(usize);
    impl<'a> Visitor<'a> for ElementVisitor {
        type Value = Option<&'a RawValue>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'a>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            let mut i = 0;
            while let Some(v) = seq.next_element::<&'a RawValue>()? {
                if i == self.0 {
                    found = Some(v);
                }
                i += 1;
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_seq(ElementVisitor(index))
        .map(|found| found.map(JsonRef::of))
        .map_err(|e| e.to_string())
}

/// Reads an object key without allocating unless it contains escapes.
pub struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Fills `slots` with the document's top-level fields that columns read, borrowing from it.
pub(super) fn parse_object<'de>(
    doc: &'de str,
    fields: &HashMap<String, usize>,
    slots: &mut [Option<JsonRef<'de>>],
) -> Result<(), super::MapError> {
    let mut de = serde_json::Deserializer::from_str(doc);
    de.deserialize_map(ObjectVisitor { fields, slots })
        .and_then(|()| de.end())
        .map_err(|e| super::MapError::NotAnObject(e.to_string()))
}

/// Visits the top-level object; unknown fields are skipped without being decoded.
struct ObjectVisitor<'a, 'de> {
    fields: &'a HashMap<String, usize>,
    slots: &'a mut [Option<JsonRef<'de>>],
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match self.fields.get(key.as_ref()) {
                // Duplicate keys: the last one wins, as in most JSON readers.
                Some(&i) => self.slots[i] = Some(JsonRef::of(map.next_value::<&'de RawValue>()?)),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(doc: &'a RawValue, pointer: &str) -> Option<&'a str> {
        descend(JsonRef::of(doc), &parse(pointer).unwrap())
            .unwrap()
            .map(JsonRef::get)
    }

    #[test]
    fn fields_are_read_in_one_pass_and_the_text_must_be_one_object() {
        let [a, b, c] =
            fields(r#"{"a":1,"x":{"b":2},"b":[3],"a":"last"}"#, ["a", "b", "c"]).unwrap();
        assert_eq!(a.map(JsonRef::get), Some(r#""last""#));
        assert_eq!(b.map(JsonRef::get), Some("[3]"));
        assert_eq!(c, None);
        assert!(fields(r#"{"a":1} {"a":2}"#, ["a"]).is_err());
        assert!(fields(r#"{"a":1,"b":tru}"#, ["a"]).is_err());
        assert!(fields("[1]", ["a"]).unwrap_err().contains("object"));
    }

    #[test]
    fn pointers_reach_nested_fields_and_elements() {
        let doc: &RawValue =
            serde_json::from_str(r#"{"a":{"b":[10,{"c/d":"x","e~f":2}]},"n":null}"#).unwrap();
        assert_eq!(at(doc, "/a/b/0"), Some("10"));
        assert_eq!(at(doc, "/a/b/1/c~1d"), Some("\"x\""));
        assert_eq!(at(doc, "/a/b/1/e~0f"), Some("2"));
        assert_eq!(at(doc, "/n"), Some("null"));
        assert_eq!(at(doc, "/a/missing"), None);
        assert_eq!(at(doc, "/a/b/7"), None);
        assert_eq!(at(doc, "/n/deeper"), None);
        assert_eq!(at(doc, ""), Some(doc.get()));
        assert!(parse("a/b").is_err());
    }
}
