//! PostgreSQL binary COPY framing and the one field encoding postgres-types lacks (numeric).
//!
//! Rows are encoded once, straight from the record into the buffer that is sent to the server:
//! no intermediate row structs, no second copy of the payload.

use bytes::{BufMut, Bytes, BytesMut};

/// `PGCOPY\n\xff\r\n\0`, then flags and header-extension length (both zero).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// A field count of -1 ends the data.
const TRAILER: [u8; 2] = (-1i16).to_be_bytes();

/// One COPY stream's worth of rows, all with the same column list.
pub struct CopyBuffer {
    buf: BytesMut,
    /// Where each row starts, so that a subset of rows can be sent again on its own.
    row_starts: Vec<usize>,
}

/// Same as `new`: a buffer is never without its header.
impl Default for CopyBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl CopyBuffer {
    /// The header goes in first, so `finish` only appends; 64 KiB spares the first reallocations.
    pub fn new() -> Self {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        buf.put_slice(HEADER);
        Self {
            buf,
            row_starts: Vec::new(),
        }
    }

    /// Completed rows only: a row begun and undone does not count.
    pub fn rows(&self) -> usize {
        self.row_starts.len()
    }

    /// Encoded bytes, header included: what the COPY would send.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// By rows, not bytes: a buffer holding only the header is not worth a COPY.
    pub fn is_empty(&self) -> bool {
        self.row_starts.is_empty()
    }

    /// The bytes so far (header and rows, no trailer), for inspection in tests.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Starts a row of `fields` fields and returns a mark to undo it if a field fails.
    pub fn begin_row(&mut self, fields: usize) -> RowMark {
        let mark = RowMark(self.buf.len());
        self.buf.put_i16(fields as i16);
        mark
    }

    /// Completes the row begun at `mark`.
    pub fn end_row(&mut self, mark: RowMark) {
        self.row_starts.push(mark.0);
    }

    /// Drops a partly written row, leaving the buffer as it was before `begin_row`.
    pub fn undo_row(&mut self, mark: RowMark) {
        self.buf.truncate(mark.0);
    }

    /// NULL is a length of -1 and no bytes, so it needs no `field` closure.
    pub fn null(&mut self) {
        self.buf.put_i32(-1);
    }

    /// Writes one field: `write` appends the value's binary form, its length is filled in after.
    pub fn field<E>(
        &mut self,
        write: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<(), E> {
        let at = self.buf.len();
        self.buf.put_i32(0);
        write(&mut self.buf)?;
        let len = (self.buf.len() - at - 4) as i32;
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }

    /// Writes a field whose bytes are already in binary form.
    pub fn bytes(&mut self, value: &[u8]) {
        self.buf.put_i32(value.len() as i32);
        self.buf.put_slice(value);
    }

    /// Ends the stream: the result is exactly what `COPY … FROM STDIN (FORMAT binary)` reads.
    pub fn finish(mut self) -> Bytes {
        self.buf.put_slice(&TRAILER);
        self.buf.freeze()
    }

    /// Ends the stream and keeps the row boundaries, for sending subsets later.
    pub fn finish_rows(mut self) -> CopyData {
        let row_starts = std::mem::take(&mut self.row_starts);
        CopyData {
            data: self.finish(),
            row_starts,
        }
    }
}

/// A finished COPY stream that still knows where its rows are.
#[derive(Debug, Clone)]
pub struct CopyData {
    pub data: Bytes,
    row_starts: Vec<usize>,
}

impl CopyData {
    /// The bound for `subset`, which splits a rejected batch into smaller COPYs.
    pub fn rows(&self) -> usize {
        self.row_starts.len()
    }

    /// Rows `from..to` as a COPY stream of their own (header, rows, trailer).
    pub fn subset(&self, from: usize, to: usize) -> Bytes {
        if from == 0 && to == self.rows() {
            return self.data.clone();
        }
        let start = self.row_starts[from];
        let end = if to == self.rows() {
            self.data.len() - TRAILER.len()
        } else {
            self.row_starts[to]
        };
        let mut out = BytesMut::with_capacity(HEADER.len() + end - start + TRAILER.len());
        out.put_slice(HEADER);
        out.put_slice(&self.data[start..end]);
        out.put_slice(&TRAILER);
        out.freeze()
    }

    /// The rows in `from..to` for which `keep` holds, as a COPY stream of their own: a batch
    /// applied again without the rows it must leave out.
    pub fn subset_where(&self, from: usize, to: usize, keep: impl Fn(usize) -> bool) -> Bytes {
        let end = |i: usize| match self.row_starts.get(i + 1) {
            Some(&next) => next,
            None => self.data.len() - TRAILER.len(),
        };
        let mut out = BytesMut::with_capacity(HEADER.len() + TRAILER.len());
        out.put_slice(HEADER);
        for i in (from..to).filter(|&i| keep(i)) {
            out.put_slice(&self.data[self.row_starts[i]..end(i)]);
        }
        out.put_slice(&TRAILER);
        out.freeze()
    }
}

impl CopyData {
    /// Appends row `row`'s fields at the positions `wanted`, in that order, each as its
    /// length and bytes (so `(a, bc)` and `(ab, c)` differ): the bytes that name a row's key,
    /// to tell the rows of one key apart from the others'. `None` when the row is shorter
    /// than a position, which only a bug upstream could make.
    pub fn fields_of(&self, row: usize, wanted: &[usize], out: &mut Vec<u8>) -> Option<()> {
        let start = *self.row_starts.get(row)?;
        let mut rest = self.data.get(start + 2..)?;
        let mut fields: Vec<&[u8]> = Vec::with_capacity(wanted.len());
        let last = wanted.iter().copied().max()?;
        for _ in 0..=last {
            let (len, after) = rest.split_first_chunk::<4>()?;
            let len = i32::from_be_bytes(*len);
            let size = len.max(0) as usize;
            // NULL (-1) has no bytes; its length tells it from an empty value.
            fields.push(rest.get(..4 + size)?);
            rest = after.get(size..)?;
        }
        for &i in wanted {
            out.extend_from_slice(fields[i]);
        }
        Some(())
    }
}

/// The rows of a COPY stream with only the fields `keep` marks, by position, as a stream of
/// their own: an upsert staging row (every column, then its ordinal and presence mask) as the
/// table's own COPY of the carried columns reads it. `None` when the stream is not rows of
/// `keep.len()` fields, which only a bug upstream could make.
pub fn project(stream: &[u8], keep: &[bool]) -> Option<Bytes> {
    let mut rest = stream.strip_prefix(HEADER)?;
    let kept = keep.iter().filter(|&&k| k).count();
    let mut out = BytesMut::with_capacity(stream.len());
    out.put_slice(HEADER);
    loop {
        let (count, fields) = rest.split_first_chunk::<2>()?;
        let count = i16::from_be_bytes(*count);
        rest = fields;
        if count == -1 {
            break;
        }
        if count as usize != keep.len() {
            return None;
        }
        out.put_i16(kept as i16);
        for &wanted in keep {
            let (len, after) = rest.split_first_chunk::<4>()?;
            // NULL (-1) has no bytes.
            let size = 4 + i32::from_be_bytes(*len).max(0) as usize;
            if rest.len() < size {
                return None;
            }
            if wanted {
                out.put_slice(&rest[..size]);
            }
            rest = &after[size - 4..];
        }
    }
    out.put_slice(&TRAILER);
    rest.is_empty().then(|| out.freeze())
}

/// Where a row started, so a failed row can be undone.
#[derive(Debug, Clone, Copy)]
pub struct RowMark(usize);

/// Why a decimal string is not a numeric value PostgreSQL can hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NumericError {
    #[error("{0:?} is not a decimal number")]
    Syntax(String),
    #[error("{0:?} is outside numeric's range")]
    Range(String),
}

/// Encodes a decimal literal (`-12.50`, `1e3`, `0.000123`) as binary `numeric`:
/// digit count, weight, sign and display scale, then base-10000 digits.
pub fn encode_numeric(text: &str, out: &mut BytesMut) -> Result<(), NumericError> {
    let syntax = || NumericError::Syntax(text.to_string());
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => {
            let exp: i64 = rest[i + 1..].parse().map_err(|_| syntax())?;
            (&rest[..i], exp)
        }
        None => (rest, 0),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((i, f)) => (i, f),
        None => (mantissa, ""),
    };
    if int_part.is_empty() && frac_part.is_empty()
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(syntax());
    }
    // value = digits × 10^(point − digits.len())
    let digits: Vec<u8> = int_part
        .bytes()
        .chain(frac_part.bytes())
        .map(|b| b - b'0')
        .collect();
    let point = int_part.len() as i64 + exponent;
    let dscale = (digits.len() as i64 - point).max(0);
    // numeric holds up to 131072 digits before the point and 16383 after it.
    if dscale > 16383 || point > 131_072 {
        return Err(NumericError::Range(text.to_string()));
    }
    // Align to base-10000 groups: pad left so the point falls on a group boundary, pad right
    // to whole groups (and out to the point for large exponents).
    let left_pad = (4 - point.rem_euclid(4)) % 4;
    let aligned_point = point + left_pad;
    let mut padded: Vec<u8> = Vec::with_capacity(digits.len() + 8);
    padded.resize(left_pad as usize, 0);
    padded.extend_from_slice(&digits);
    if (padded.len() as i64) < aligned_point {
        padded.resize(aligned_point as usize, 0);
    }
    while padded.len() % 4 != 0 {
        padded.push(0);
    }
    let mut groups: Vec<i16> = padded
        .chunks(4)
        .map(|c| (c[0] as i16) * 1000 + (c[1] as i16) * 100 + (c[2] as i16) * 10 + c[3] as i16)
        .collect();
    let mut weight = aligned_point / 4 - 1;
    let leading = groups.iter().take_while(|&&g| g == 0).count();
    groups.drain(..leading);
    weight -= leading as i64;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    let sign: u16 = if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    };
    if groups.is_empty() {
        weight = 0;
    }
    if !(i16::MIN as i64..=i16::MAX as i64).contains(&weight) {
        return Err(NumericError::Range(text.to_string()));
    }
    out.put_i16(groups.len() as i16);
    out.put_i16(weight as i16);
    out.put_u16(sign);
    out.put_i16(dscale as i16);
    for g in groups {
        out.put_i16(g);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ndigits, weight, sign, dscale, digits)
    fn parts(text: &str) -> (i16, i16, u16, i16, Vec<i16>) {
        let mut out = BytesMut::new();
        encode_numeric(text, &mut out).unwrap();
        let w = |i: usize| i16::from_be_bytes([out[i], out[i + 1]]);
        let n = w(0);
        let digits = (0..n as usize).map(|i| w(8 + 2 * i)).collect();
        (n, w(2), w(4) as u16, w(6), digits)
    }

    #[test]
    fn numeric_matches_postgres_layout() {
        assert_eq!(parts("0"), (0, 0, 0, 0, vec![]));
        assert_eq!(parts("1"), (1, 0, 0, 0, vec![1]));
        assert_eq!(parts("12345.678"), (3, 1, 0, 3, vec![1, 2345, 6780]));
        assert_eq!(parts("-0.0001"), (1, -1, 0x4000, 4, vec![1]));
        assert_eq!(parts("10000"), (1, 1, 0, 0, vec![1]));
        assert_eq!(parts("1.50"), (2, 0, 0, 2, vec![1, 5000]));
        assert_eq!(parts("1e3"), (1, 0, 0, 0, vec![1000]));
        assert_eq!(parts("1.5e-3"), (1, -1, 0, 4, vec![15]));
        assert_eq!(parts("-0.00"), (0, 0, 0, 2, vec![]));
        assert_eq!(parts(".5"), (1, -1, 0, 1, vec![5000]));
    }

    #[test]
    fn numeric_rejects_what_is_not_a_number() {
        for bad in [
            "", "-", "1.2.3", "abc", "1e", "0x10", "1 ", "--1", "1e999999",
        ] {
            assert!(
                encode_numeric(bad, &mut BytesMut::new()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_failed_row_leaves_no_trace() {
        let mut copy = CopyBuffer::new();
        let before = copy.len();
        let mark = copy.begin_row(2);
        copy.bytes(b"abc");
        copy.undo_row(mark);
        assert_eq!(copy.len(), before);
        assert_eq!(copy.rows(), 0);
        let data = copy.finish();
        assert_eq!(&data[..], [HEADER, &TRAILER].concat().as_slice());
    }

    #[test]
    fn a_subset_of_rows_is_a_stream_of_its_own() {
        let mut copy = CopyBuffer::new();
        for v in [b"a", b"b", b"c"] {
            let mark = copy.begin_row(1);
            copy.bytes(v);
            copy.end_row(mark);
        }
        let data = copy.finish_rows();
        let row = |v: &[u8]| [&1i16.to_be_bytes()[..], &1i32.to_be_bytes(), v].concat();
        assert_eq!(
            &data.subset(1, 2)[..],
            [HEADER, &row(b"b"), &TRAILER].concat().as_slice()
        );
        assert_eq!(
            &data.subset(1, 3)[..],
            [HEADER, &row(b"b"), &row(b"c"), &TRAILER]
                .concat()
                .as_slice()
        );
        assert_eq!(data.subset(0, 3), data.data);
        assert_eq!(
            &data.subset_where(0, 3, |i| i != 1)[..],
            [HEADER, &row(b"a"), &row(b"c"), &TRAILER]
                .concat()
                .as_slice()
        );
        assert_eq!(
            &data.subset_where(1, 3, |i| i == 2)[..],
            [HEADER, &row(b"c"), &TRAILER].concat().as_slice()
        );
        assert_eq!(data.subset_where(0, 3, |_| true), data.data);
    }

    #[test]
    fn a_projection_keeps_the_marked_fields_of_every_row() {
        let rows: [[Option<&[u8]>; 3]; 2] = [
            [Some(b"k1"), None, Some(b"\x01")],
            [Some(b"k2"), Some(b"value"), Some(b"")],
        ];
        let encode = |keep: [bool; 3]| {
            let mut copy = CopyBuffer::new();
            for row in &rows {
                let fields: Vec<_> = row.iter().zip(keep).filter(|(_, k)| *k).collect();
                let mark = copy.begin_row(fields.len());
                for (field, _) in fields {
                    match field {
                        Some(v) => copy.bytes(v),
                        None => copy.null(),
                    }
                }
                copy.end_row(mark);
            }
            copy.finish()
        };
        let all = encode([true; 3]);
        for keep in [
            [true, true, false],
            [true, false, true],
            [false, true, false],
        ] {
            assert_eq!(project(&all, &keep), Some(encode(keep)), "{keep:?}");
        }
        assert_eq!(project(&all, &[true; 3]), Some(all.clone()));
        // Not rows of that many fields, or cut short: refused, never read past the end.
        assert_eq!(project(&all, &[true; 2]), None);
        assert_eq!(project(&all[..all.len() - 2], &[true; 3]), None);
        assert_eq!(project(&all[..all.len() - 5], &[true; 3]), None);
        assert_eq!(project(&[&all[..], b"x"].concat(), &[true; 3]), None);
        assert_eq!(project(b"not a copy stream", &[true]), None);
    }

    /// Prints the binary numeric back as decimal text with exactly `dscale` fraction digits.
    fn decode(text: &str) -> String {
        let (_, weight, sign, dscale, digits) = parts(text);
        // Integer digits and fraction digits from base-10000 groups.
        let mut int = String::new();
        let mut frac = String::new();
        for (i, g) in digits.iter().enumerate() {
            let power = weight as i64 - i as i64;
            let g = format!("{g:04}");
            if power >= 0 {
                int.push_str(&g);
            } else {
                frac.push_str(&g);
            }
        }
        // Groups between the last digit and the point, and leading zero groups after it.
        let last_power = weight as i64 - digits.len() as i64 + 1;
        if !digits.is_empty() && last_power > 0 {
            int.push_str(&"0000".repeat(last_power as usize));
        }
        if !digits.is_empty() && weight < -1 {
            frac.insert_str(0, &"0000".repeat((-1 - weight as i64) as usize));
        }
        let int = int.trim_start_matches('0');
        let int = if int.is_empty() { "0" } else { int };
        let mut frac: String = frac.chars().take(dscale as usize).collect();
        while frac.len() < dscale as usize {
            frac.push('0');
        }
        let sign = if sign == 0x4000 { "-" } else { "" };
        if dscale > 0 {
            format!("{sign}{int}.{frac}")
        } else {
            format!("{sign}{int}")
        }
    }

    /// The same canonical text computed by plain decimal-point shifting.
    fn canonical(negative: bool, int: &str, frac: &str, exp: i32) -> String {
        let digits = format!("{int}{frac}");
        let point = int.len() as i64 + exp as i64;
        let dscale = (digits.len() as i64 - point).max(0) as usize;
        let (mut ip, mut fp) = if point <= 0 {
            (
                String::new(),
                format!("{}{}", "0".repeat((-point) as usize), digits),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{}{}", digits, "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        ip = ip.trim_start_matches('0').to_string();
        if ip.is_empty() {
            ip = "0".into();
        }
        fp.truncate(dscale);
        while fp.len() < dscale {
            fp.push('0');
        }
        let zero = ip == "0" && fp.chars().all(|c| c == '0');
        let sign = if negative && !zero { "-" } else { "" };
        if dscale > 0 {
            format!("{sign}{ip}.{fp}")
        } else {
            format!("{sign}{ip}")
        }
    }

    proptest::proptest! {
        #[test]
        fn numeric_encoding_preserves_every_digit(
            negative: bool,
            int in "[0-9]{0,30}",
            frac in "[0-9]{0,30}",
            exp in -40i32..40,
            with_exp: bool,
        ) {
            proptest::prop_assume!(!(int.is_empty() && frac.is_empty()));
            let exp = if with_exp { exp } else { 0 };
            let mut text = String::new();
            if negative { text.push('-'); }
            text.push_str(&int);
            if !frac.is_empty() { text.push('.'); text.push_str(&frac); }
            if with_exp { text.push_str(&format!("e{exp}")); }
            proptest::prop_assert_eq!(decode(&text), canonical(negative, &int, &frac, exp), "{}", text);
        }

        #[test]
        fn numeric_encoding_never_panics(text in "\\PC{0,40}") {
            let _ = encode_numeric(&text, &mut BytesMut::new());
        }
    }
}
