//! Dates and timestamps: ISO-8601 strings and integer epochs in a unit, into PostgreSQL's
//! microsecond times within its own range.

use bytes::BytesMut;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use postgres_types::Type;

use super::number::is_json_number;
use super::{abbreviate, to_sql, Input};
use crate::config::TimeUnit;
use crate::schema::ColumnType;

/// `timestamp` without time zone stores the UTC wall-clock time, as offset-less input is read.
/// PostgreSQL keeps microseconds: finer digits are dropped toward the past (floor), the same
/// for times before and after 2000 (postgres-types alone would truncate toward 2000).
pub(super) fn write_time(
    ty: ColumnType,
    t: DateTime<Utc>,
    out: &mut BytesMut,
) -> Result<(), String> {
    if t.timestamp() < PG_EARLIEST_SECONDS {
        return Err(format!(
            "{} is before PostgreSQL's earliest time, 4714-11-24 BC",
            t.to_rfc3339()
        ));
    }
    let t = DateTime::from_timestamp_micros(t.timestamp_micros())
        .ok_or_else(|| format!("{} is out of range", t.to_rfc3339()))?;
    match ty {
        ColumnType::Timestamptz => to_sql(t, &Type::TIMESTAMPTZ, out),
        ColumnType::Timestamp => to_sql(t.naive_utc(), &Type::TIMESTAMP, out),
        ColumnType::Date => to_sql(t.date_naive(), &Type::DATE, out),
        _ => to_sql(t.timestamp_millis(), &Type::INT8, out),
    }
}

/// An integer time in `unit`; with no unit, epoch milliseconds, except that a date below
/// 10,000,000 in magnitude counts days (Kafka Connect's `Date`: no epoch-milliseconds value
/// that small names another day than 1970-01-01 or 1969-12-31).
pub(super) fn epoch_integer(
    ty: ColumnType,
    input: Input<'_>,
    unit: Option<TimeUnit>,
) -> Result<DateTime<Utc>, String> {
    let text = input
        .literal()
        .filter(|t| is_json_number(t))
        .ok_or_else(|| {
            format!(
                "expected an ISO-8601 string or an integer, got {}",
                input.shown()
            )
        })?;
    let n: i64 = text
        .parse()
        .map_err(|e: std::num::ParseIntError| match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                format!("{} is out of range", abbreviate(text))
            }
            _ => format!("expected an integer, got {}", abbreviate(text)),
        })?;
    let unit = unit.unwrap_or(if ty == ColumnType::Date && n.unsigned_abs() < 10_000_000 {
        TimeUnit::Days
    } else {
        TimeUnit::Ms
    });
    from_epoch(n, unit).ok_or_else(|| format!("{n} ({}) is out of range", unit.describe()))
}

/// `None` out of chrono's range, so the caller names the value instead of panicking; never
/// a multiplication that could wrap. Negative values count back from 1970 with a
/// non-negative sub-second part: -1 µs is 1969-12-31 23:59:59.999999.
pub(super) fn from_epoch(n: i64, unit: TimeUnit) -> Option<DateTime<Utc>> {
    match unit {
        TimeUnit::Days => NaiveDate::from_ymd_opt(1970, 1, 1)?
            .checked_add_signed(chrono::Duration::try_days(n)?)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc()),
        TimeUnit::S => DateTime::from_timestamp(n, 0),
        TimeUnit::Ms => DateTime::from_timestamp_millis(n),
        TimeUnit::Us => DateTime::from_timestamp_micros(n),
        TimeUnit::Ns => Some(DateTime::from_timestamp_nanos(n)),
    }
}

/// PostgreSQL's earliest timestamp and date, 4714-11-24 BC (Julian day 0), in Unix seconds.
/// Its latest lies beyond chrono's range, so only this end needs a check.
const PG_EARLIEST_SECONDS: i64 = -210_866_803_200;

/// An ISO-8601 timestamp: RFC 3339, a space instead of `T`, or no offset (UTC assumed).
pub(super) fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(t) = DateTime::parse_from_str(s, fmt) {
            return Ok(t.with_timezone(&Utc));
        }
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    Err(format!("{s:?} is not an ISO-8601 timestamp"))
}

/// Strict `YYYY-MM-DD`: a timestamp into a date column would silently lose its time.
pub(super) fn parse_date(s: &str) -> Result<DateTime<Utc>, String> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc())
        .map_err(|_| format!("{s:?} is not an ISO-8601 date (YYYY-MM-DD)"))
}
