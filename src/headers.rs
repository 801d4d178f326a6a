//! Record headers as Kafka defines them: a name is any byte string (not necessarily UTF-8, NUL
//! allowed), a value any byte string or null, names may repeat, and order is kept.
//!
//! rdkafka 0.39's `Headers` API reads a name with `CStr::to_str().unwrap()`: a name that is not
//! UTF-8 panics the consumer thread and a name holding NUL is cut at it; `OwnedHeaders::insert`
//! takes names as `&str`. So headers are read and written here through librdkafka's C API, and
//! this module also fixes the one JSON shape the sink stores them in.

use std::ffi::{c_char, c_void, CStr};
use std::mem::offset_of;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine as _;
use rdkafka::bindings::{self as rdsys, rd_kafka_headers_t, rd_kafka_resp_err_t};
use rdkafka::message::{BorrowedHeaders, Headers as _, OwnedHeaders};
use serde_json::Value;

/// One header, borrowed: its name and its value (`None` for a null value).
pub type Header<'a> = (&'a [u8], Option<&'a [u8]>);

/// One header, owned.
pub type OwnedHeader = (Vec<u8>, Option<Vec<u8>>);

// rdkafka hands out librdkafka's `rd_kafka_headers_t *` as `&BorrowedHeaders`: a reference to a
// zero-sized stand-in placed at the native address (its private `from_native_ptr` and
// `as_native_ptr` convert one into the other, and `OwnedHeaders::as_borrowed` does the same).
// `native` relies on that; should `BorrowedHeaders` ever gain a size, it is no longer such a
// stand-in, and this refuses to compile instead of passing a wrong pointer to C.
const _: () = assert!(std::mem::size_of::<BorrowedHeaders>() == 0);

/// The native headers behind rdkafka's stand-in (see the assertion above).
fn native(headers: &BorrowedHeaders) -> *mut rd_kafka_headers_t {
    (headers as *const BorrowedHeaders)
        .cast::<rd_kafka_headers_t>()
        .cast_mut()
}

/// Every header in order, names and values as the bytes that were sent. Borrowed from the
/// message (or `OwnedHeaders`) the headers belong to.
pub fn read(headers: &BorrowedHeaders) -> Result<Vec<Header<'_>>, String> {
    let native = native(headers);
    // SAFETY: `native` is the live header list `headers` stands for (see `native`); counting
    // only reads it.
    let count = unsafe { rdsys::rd_kafka_header_cnt(native) };
    let mut out = Vec::with_capacity(count);
    for idx in 0..count {
        let (mut name, mut value, mut size) = (ptr::null(), ptr::null(), 0usize);
        // SAFETY: as above; the out-parameters are valid locals.
        let err = unsafe {
            rdsys::rd_kafka_header_get_all(native, idx, &mut name, &mut value, &mut size)
        };
        if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return Err(format!(
                "librdkafka cannot read header {idx} of {count}: {err:?}"
            ));
        }
        // SAFETY: `name`, `value` and `size` were just returned for a header of `headers`,
        // which lives as long as the borrow of `headers`: the name is NUL-terminated (and
        // `name_len` bytes long, see there), a non-null value is `size` bytes long.
        let header = unsafe {
            let name_len = name_len(name, value, size);
            (
                std::slice::from_raw_parts(name.cast::<u8>(), name_len),
                (!value.is_null()).then(|| std::slice::from_raw_parts(value.cast::<u8>(), size)),
            )
        };
        out.push(header);
    }
    Ok(out)
}

/// librdkafka's `rd_kafka_header_t` (src/rdkafka_header.h), which its API does not expose:
/// one allocation per header, these fields, then the name and its NUL, then (for a non-null
/// value) the value and a NUL.
#[repr(C)]
struct NativeHeader {
    ser_size: usize,
    value_size: usize,
    name_size: usize,
    value: *const c_char,
    name: [c_char; 1],
}

/// Set once a header was found not laid out as `NativeHeader` says, so the warning is given once.
static LAYOUT_WARNED: AtomicBool = AtomicBool::new(false);

/// The length of a header name. librdkafka's API gives the name only as a NUL-terminated
/// string, which is cut at a NUL the name holds, but it stores the real length
/// (`rkhdr_name_size`) right before the name. That field is trusted only when the fields
/// around it agree with what the API returned and with how librdkafka fills them
/// (`rd_kafka_header_add`); otherwise (another librdkafka layout) the C-string length is the
/// answer, and a warning says names holding NUL may be cut.
///
/// # Safety
///
/// `name`, `value` and `size` are what `rd_kafka_header_get_all` returned for a header that is
/// still alive.
unsafe fn name_len(name: *const c_char, value: *const c_void, size: usize) -> usize {
    // SAFETY: librdkafka NUL-terminates every header name.
    let c_len = unsafe { CStr::from_ptr(name) }.count_bytes();
    let field = |offset: usize| {
        let at = name.wrapping_byte_sub(offset_of!(NativeHeader, name) - offset);
        // SAFETY: with librdkafka's layout the header's fields precede its name in the same
        // allocation, so this reads inside it; the values read are only used once they agree
        // with each other and with the API's answer.
        unsafe { at.cast::<usize>().read_unaligned() }
    };
    let ser_size = field(offset_of!(NativeHeader, ser_size));
    let value_size = field(offset_of!(NativeHeader, value_size));
    let name_size = field(offset_of!(NativeHeader, name_size));
    let value_field = field(offset_of!(NativeHeader, value));
    let serialized = || {
        name_size
            .checked_add(value_size)?
            .checked_add(zigzag_varint_len(name_size)?)?
            .checked_add(zigzag_varint_len(value_size)?)
    };
    let value_follows_name = value.is_null()
        || (name as usize)
            .checked_add(name_size)
            .and_then(|n| n.checked_add(1))
            == Some(value as usize);
    let consistent = value_field == value as usize
        && value_size == size
        && name_size >= c_len
        && value_follows_name
        && serialized() == Some(ser_size)
        // SAFETY: all of the above hold, so the name is `name_size` bytes and its NUL.
        && (name_size == c_len || unsafe { *name.add(name_size) } == 0);
    if consistent {
        return name_size;
    }
    if !LAYOUT_WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!("librdkafka's header layout is not the one this build knows: header names are read up to their first NUL");
    }
    c_len
}

/// Bytes of a zigzag varint, as librdkafka counts a header's serialized size.
fn zigzag_varint_len(n: usize) -> Option<usize> {
    let n = i64::try_from(n).ok()?;
    let mut zigzag = ((n << 1) ^ (n >> 63)) as u64;
    let mut len = 1;
    while zigzag >= 0x80 {
        zigzag >>= 7;
        len += 1;
    }
    Some(len)
}

/// What librdkafka may copy zero bytes from: an empty slice's pointer dangles.
static EMPTY: u8 = 0;

/// A pointer to `bytes` that is valid even when they are empty.
fn copy_source(bytes: &[u8]) -> *const u8 {
    if bytes.is_empty() {
        &EMPTY
    } else {
        bytes.as_ptr()
    }
}

/// Headers for a record to produce, names and values exactly as given.
pub fn to_owned<'a>(headers: impl IntoIterator<Item = Header<'a>>) -> Result<OwnedHeaders, String> {
    let owned = OwnedHeaders::new();
    let list = native(owned.as_borrowed());
    let mut added = 0;
    for (name, value) in headers {
        let too_long = |what| format!("a header {what} of more than {} bytes", isize::MAX);
        let name_len = isize::try_from(name.len()).map_err(|_| too_long("name"))?;
        let (value_ptr, value_len) = match value {
            None => (ptr::null(), 0),
            Some(v) => (
                copy_source(v),
                isize::try_from(v.len()).map_err(|_| too_long("value"))?,
            ),
        };
        // SAFETY: `list` is the header list `owned` owns (see `native`), and nothing else
        // uses it meanwhile; librdkafka copies `name_len` bytes from the name and `value_len`
        // from the value (none when it is null), which are valid for that long.
        let err = unsafe {
            rdsys::rd_kafka_header_add(
                list,
                copy_source(name).cast::<c_char>(),
                name_len,
                value_ptr.cast::<c_void>(),
                value_len,
            )
        };
        if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("librdkafka refused a header: {err:?}"));
        }
        added += 1;
    }
    // Counted through rdkafka's own pointer: the headers went where rdkafka will send them from.
    if owned.count() != added {
        return Err(format!(
            "added {added} headers but the record has {}",
            owned.count()
        ));
    }
    Ok(owned)
}

/// A name or value as JSON text, when PostgreSQL's json and jsonb accept it as text: UTF-8
/// without NUL (they refuse `\u0000`).
fn as_text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.contains('\0'))
}

fn base64(bytes: &[u8]) -> Value {
    base64::engine::general_purpose::STANDARD
        .encode(bytes)
        .into()
}

/// Headers as the sink stores them (`meta:headers` columns, the `headers` of dead letters): a
/// JSON array in record order, one object per header, holding its name as `"name"` (text) or
/// `"name_base64"`, and its value as `"value"` (text, or null for a null value) or
/// `"value_base64"`. Text is what is UTF-8 without NUL; anything else is base64 (standard
/// alphabet). Nothing is lost: repeated names, order, binary names and values all survive.
pub fn to_json<'a>(headers: impl IntoIterator<Item = Header<'a>>) -> Value {
    let list = headers
        .into_iter()
        .map(|(name, value)| {
            let mut entry = serde_json::Map::with_capacity(2);
            match as_text(name) {
                Some(text) => entry.insert("name".into(), text.into()),
                None => entry.insert("name_base64".into(), base64(name)),
            };
            match value {
                None => entry.insert("value".into(), Value::Null),
                Some(v) => match as_text(v) {
                    Some(text) => entry.insert("value".into(), text.into()),
                    None => entry.insert("value_base64".into(), base64(v)),
                },
            };
            Value::Object(entry)
        })
        .collect();
    Value::Array(list)
}

/// The inverse of `to_json`. Also reads the shape dead letters were stored in before it,
/// `{"key": <name>, "value": <base64 or null>}`.
pub fn from_json(json: &Value) -> Result<Vec<OwnedHeader>, String> {
    let decode = |v: &Value, what: &str| {
        let text = v
            .as_str()
            .ok_or_else(|| format!("{what} is not a string: {v}"))?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("{what} is not base64: {e}"))
    };
    let text = |v: &Value, what: &str| {
        v.as_str()
            .map(|s| s.as_bytes().to_vec())
            .ok_or_else(|| format!("{what} is not a string: {v}"))
    };
    let list = json
        .as_array()
        .ok_or_else(|| format!("headers are not a JSON array: {json}"))?;
    list.iter()
        .map(|h| {
            let field = |name: &str| h.get(name);
            if let Some(key) = field("key") {
                let value = match field("value") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(decode(v, "value")?),
                };
                return Ok((text(key, "key")?, value));
            }
            let name = match (field("name"), field("name_base64")) {
                (Some(n), None) => text(n, "name")?,
                (None, Some(n)) => decode(n, "name_base64")?,
                _ => return Err(format!("a header needs one of name, name_base64: {h}")),
            };
            let value = match (field("value"), field("value_base64")) {
                (Some(Value::Null), None) => None,
                (Some(v), None) => Some(text(v, "value")?),
                (None, Some(v)) => Some(decode(v, "value_base64")?),
                _ => return Err(format!("a header needs one of value, value_base64: {h}")),
            };
            Ok((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and values that rdkafka's own API cuts, refuses or panics on, with null and
    /// non-null values, empty ones, and a long name whose length needs a two-byte varint.
    fn awkward() -> Vec<OwnedHeader> {
        vec![
            (b"x\0y".to_vec(), Some(b"v".to_vec())),
            (b"x\0y".to_vec(), None),
            (vec![0xff, b'n', 0xfe], Some(vec![0, 0, 0, 0x2a])),
            (vec![0xff, b'n', 0xfe], None),
            (b"\0".to_vec(), Some(Vec::new())),
            (Vec::new(), None),
            (b"plain".to_vec(), Some("h\u{e9}llo".as_bytes().to_vec())),
            (b"plain".to_vec(), Some(vec![0xe9])),
            (
                [b"long\0".as_slice(), &[b'n'; 200]].concat(),
                Some(b"v".to_vec()),
            ),
        ]
    }

    fn borrowed(list: &[OwnedHeader]) -> Vec<Header<'_>> {
        list.iter().map(|(n, v)| (&n[..], v.as_deref())).collect()
    }

    /// Pins librdkafka's header layout: with another one, names holding NUL come back cut.
    #[test]
    fn every_name_and_value_round_trips_through_librdkafka_byte_for_byte() {
        let headers = awkward();
        let owned = to_owned(borrowed(&headers)).unwrap();
        assert_eq!(read(owned.as_borrowed()).unwrap(), borrowed(&headers));
        // A copy is built by librdkafka itself, as a consumed message's headers are.
        let copy = owned.clone();
        assert_eq!(read(copy.as_borrowed()).unwrap(), borrowed(&headers));
        assert!(!LAYOUT_WARNED.load(Ordering::Relaxed));
    }

    #[test]
    fn json_keeps_text_as_text_and_marks_everything_else_as_base64() {
        let headers = [
            (&b"trace"[..], Some(&b"t-1"[..])),
            (b"int", Some(&[0, 0, 0, 0x2a][..])),
            (b"none", None),
            (b"x\0y", Some(b"")),
            (&[0xff][..], Some(&[0xe9][..])),
        ];
        let json = to_json(headers);
        assert_eq!(
            json,
            serde_json::json!([
                {"name": "trace", "value": "t-1"},
                {"name": "int", "value_base64": "AAAAKg=="},
                {"name": "none", "value": null},
                {"name_base64": "eAB5", "value": ""},
                {"name_base64": "/w==", "value_base64": "6Q=="},
            ])
        );
        assert!(!json.to_string().contains("\\u0000"));
        let back = from_json(&json).unwrap();
        assert_eq!(borrowed(&back), headers);
        let all = awkward();
        assert_eq!(from_json(&to_json(borrowed(&all))).unwrap(), all);
    }

    #[test]
    fn dead_letters_stored_in_the_earlier_shape_still_read() {
        let old = serde_json::json!([{"key": "a", "value": "AAE="}, {"key": "b", "value": null}]);
        assert_eq!(
            from_json(&old).unwrap(),
            vec![(b"a".to_vec(), Some(vec![0, 1])), (b"b".to_vec(), None)]
        );
        assert!(from_json(&serde_json::json!({"a": "b"})).is_err());
        assert!(from_json(&serde_json::json!([{"name": "a"}])).is_err());
        assert!(from_json(&serde_json::json!([{"name": "a", "value_base64": "%"}])).is_err());
    }
}
