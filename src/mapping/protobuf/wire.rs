//! The wire format as prost reads it: varints, field keys, fixed-width values, packed runs.
//! Each check prost makes is made here, so a payload refused here is refused by prost too.

use std::ops::Range;

use super::decode::Failure;
use super::program::Scalar;

/// Where a known field's value is in its message's bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Occurrence {
    pub(super) field: u32,
    pub(super) wire: u8,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// A varint from `bytes` at `pos`, as prost reads it: at most ten bytes, no bits past 64.
pub(super) fn varint(bytes: &[u8], pos: &mut usize) -> Result<u64, Failure> {
    let mut value = 0u64;
    for i in 0..10 {
        let &b = bytes
            .get(*pos + i)
            .ok_or(Failure::Bad("a varint is cut off"))?;
        if i == 9 && b >= 0x02 {
            break;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *pos += i + 1;
            return Ok(value);
        }
    }
    Err(Failure::Bad("a varint is longer than 64 bits"))
}

/// The next field of a message: its number, wire type and value bytes.
pub(super) fn next_field(
    bytes: &[u8],
    pos: &mut usize,
) -> Result<(u32, u8, Range<usize>), Failure> {
    let (number, wire) = field_key(bytes, pos)?;
    Ok((number, wire, field_value(bytes, pos, wire)?))
}

/// A field's key: its number and wire type, with prost's checks.
pub(super) fn field_key(bytes: &[u8], pos: &mut usize) -> Result<(u32, u8), Failure> {
    let key = varint(bytes, pos)?;
    let key = u32::try_from(key).map_err(|_| Failure::Bad("a field key is past 32 bits"))?;
    let (number, wire) = (key >> 3, (key & 7) as u8);
    match wire {
        _ if number == 0 => Err(Failure::Bad("field number 0")),
        6 | 7 => Err(Failure::Bad("an invalid wire type")),
        _ => Ok((number, wire)),
    }
}

/// Where the value of a field of wire type `wire` is, skipping it.
pub(super) fn field_value(
    bytes: &[u8],
    pos: &mut usize,
    wire: u8,
) -> Result<Range<usize>, Failure> {
    let start = *pos;
    let len = match wire {
        0 => {
            varint(bytes, pos)?;
            0
        }
        1 => 8,
        5 => 4,
        2 => {
            let n = varint(bytes, pos)?;
            usize::try_from(n).map_err(|_| Failure::Bad("a length past the payload"))?
        }
        _ => return Err(Failure::Fallback), // groups
    };
    let start = if wire == 2 { *pos } else { start };
    let end = (*pos)
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or(Failure::Bad("a value is cut off"))?;
    *pos = end;
    Ok(start..end)
}

/// Refuses a value whose wire type is not its kind's (prost checks each one).
pub(super) fn check_wire(kind: Scalar, wire: u8) -> Result<(), Failure> {
    if kind.wire_type() == wire {
        Ok(())
    } else {
        Err(Failure::Bad("a field of the wrong wire type"))
    }
}

/// The next element of a packed run.
pub(super) fn packed_item<'a>(
    kind: Scalar,
    run: &'a [u8],
    pos: &mut usize,
) -> Result<&'a [u8], Failure> {
    let start = *pos;
    let end = match kind.wire_type() {
        0 => {
            varint(run, pos)?;
            *pos
        }
        1 => start + 8,
        _ => start + 4,
    };
    let one = run
        .get(start..end)
        .ok_or(Failure::Bad("a packed run is cut off"))?;
    *pos = end;
    Ok(one)
}

/// Exactly `N` bytes (a fixed-width value).
pub(super) fn fixed<const N: usize>(b: &[u8]) -> Result<[u8; N], Failure> {
    b.try_into()
        .map_err(|_| Failure::Bad("a fixed-width value is cut off"))
}

/// The value of a `FloatValue`/`DoubleValue` (`Float` or `Double`), wide and as the `f32` it
/// was. prost-reflect re-encodes a wrapper before writing it, which drops a value equal to
/// the default: -0.0 comes back as 0.0, so it is written as 0.0 here too.
pub(super) fn wrapped_float(kind: Scalar, b: &[u8]) -> Result<(f64, Option<f32>), Failure> {
    let (wide, narrow) = if kind == Scalar::Float {
        let f = f32::from_le_bytes(fixed(b)?);
        (f64::from(f), Some(f))
    } else {
        (f64::from_le_bytes(fixed(b)?), None)
    };
    Ok(if wide == 0.0 {
        (0.0, narrow.map(|_| 0.0))
    } else {
        (wide, narrow)
    })
}

/// Fields 1 and 2 of a message of two varints (`Timestamp`), the last of each winning.
pub(super) fn flat_pair(bytes: &[u8]) -> Result<(Option<u64>, Option<u64>), Failure> {
    let (mut one, mut two) = (None, None);
    let mut pos = 0;
    while pos < bytes.len() {
        let (number, wire, range) = next_field(bytes, &mut pos)?;
        if number == 1 || number == 2 {
            if wire != 0 {
                return Err(Failure::Bad("a field of the wrong wire type"));
            }
            let v = varint(&bytes[range], &mut 0)?;
            *(if number == 1 { &mut one } else { &mut two }) = Some(v);
        }
    }
    Ok((one, two))
}
