//! How deep a value nests, checked before it is decoded: the limit and the scan.

/// Deeper JSON is refused before it is decoded: PostgreSQL's json parsers stop at their stack
/// limit with an error no retry can fix, and real records nest a handful of levels.
pub const MAX_JSON_DEPTH: usize = 64;

/// Whether `json` opens more than `limit` nested objects or arrays (strings are skipped), in
/// one pass without recursion.
///
/// Nothing can nest deeper than the number of `{` and `[` bytes it holds, and real records
/// hold a few: counting them with memchr's vector search settles almost every record at a
/// fraction of the cost of the exact byte-by-byte walk (which was 7% of the consumer thread
/// for Connect envelopes), and only a value with more openers than `limit` is walked.
pub(crate) fn nests_deeper_than(json: &[u8], limit: usize) -> bool {
    if memchr::memchr2_iter(b'{', b'[', json).nth(limit).is_none() {
        return false;
    }
    nests_deeper_than_exactly(json, limit)
}

/// The exact walk behind `nests_deeper_than`, for values with more openers than the limit.
pub(super) fn nests_deeper_than_exactly(json: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}
