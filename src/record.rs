//! A Kafka record, borrowed from the consumer's buffers while it is mapped, or owned once it
//! must outlive them (a dead letter, a replay). Both the mapping and the dead letters use
//! them, so they live apart from either.

use bytes::Bytes;

use crate::headers::{self, Header};

/// A Kafka record as the mapping sees it, borrowed from the consumer's buffers.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the Unix epoch, when the record carries a timestamp.
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// In record order, names and values as sent; only filled when a column maps headers or
    /// the record may become a dead letter (`TopicMapper::needs_headers`).
    pub headers: &'a [Header<'a>],
}

/// A record kept whole, to be dead-lettered or replayed later.
#[derive(Debug, Clone)]
pub struct OwnedRecord {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// In record order, names and values byte for byte.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

impl OwnedRecord {
    /// Copies out of the consumer's buffer: a dead letter outlives the message it came from.
    pub fn from_view(r: &RecordView<'_>) -> Self {
        Self {
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(Bytes::copy_from_slice),
            value: r.value.map(Bytes::copy_from_slice),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (Bytes::copy_from_slice(k), v.map(Bytes::copy_from_slice)))
                .collect(),
        }
    }

    /// The headers borrowed, as a `RecordView` and the producer take them.
    pub fn header_views(&self) -> Vec<Header<'_>> {
        self.headers
            .iter()
            .map(|(k, v)| (&k[..], v.as_deref()))
            .collect()
    }

    /// Headers as stored, in the shape of `headers::to_json`: lossless for repeated names and
    /// binary names and values.
    pub fn headers_json(&self) -> String {
        headers::to_json(self.header_views()).to_string()
    }

    /// The inverse of `headers_json`.
    pub fn headers_from_json(
        json: &serde_json::Value,
    ) -> Result<Vec<(Bytes, Option<Bytes>)>, String> {
        Ok(headers::from_json(json)?
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), v.map(Bytes::from)))
            .collect())
    }
}
