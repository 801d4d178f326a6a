//! Text the sink builds from record data for PostgreSQL text columns.

use std::borrow::Cow;

/// PostgreSQL text cannot hold NUL (`invalid byte sequence for encoding "UTF8": 0x00`), and
/// one such value fails its whole transaction, good rows included. Text built from record data
/// (an error message quoting a value, a name) shows NUL as `\u0000`, the way JSON writes it,
/// so it stays readable and always fits.
pub(crate) fn escape_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\\u0000"))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_shown_as_a_json_escape_and_other_text_is_untouched() {
        assert_eq!(
            escape_nul("expected an integer, got 1\0"),
            "expected an integer, got 1\\u0000"
        );
        assert_eq!(escape_nul("\0a\0"), "\\u0000a\\u0000");
        assert!(matches!(escape_nul("héllo"), Cow::Borrowed("héllo")));
    }
}
