//! Writing JSON text straight into a `String`, for the transcoders that build a record's JSON
//! themselves (Avro, Protobuf): strings escaped exactly as serde_json escapes them, so every
//! format writes the same text for the same string.

use std::io;

/// A JSON string, escaped by serde_json straight into `out`.
pub(crate) fn write_str(s: &str, out: &mut String) {
    // Most strings need no escape: copied as they are.
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    // Writing a `str` into a `String` cannot fail.
    let _ = serde_json::to_writer(Text(out), s);
}

/// serde_json's output into a `String`: it writes UTF-8 in pieces split only at the ASCII
/// characters it escapes, so every piece is UTF-8.
pub(crate) struct Text<'a>(pub(crate) &'a mut String);

impl io::Write for Text<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let piece =
            std::str::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.0.push_str(piece);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
