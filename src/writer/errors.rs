//! How a database error is sorted and described: retry-worthy or not, caused by one row's
//! data or not, and PostgreSQL's message with what it names.

use super::Outcome;

/// Errors caused by one row's data (SQLSTATE classes 22 and 23), as opposed to errors of the
/// connection, the schema or the server.
pub(super) fn is_row_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("22") || c.starts_with("23")),
        _ => false,
    }
}

/// Whether PostgreSQL refused the row because its Debezium placeholder has no stored value to
/// keep (`Merge::toast_check`): a `toast_unavailable` dead letter, not a `rejected` one.
pub(crate) fn is_toast_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db.code().as_deref() == Some(crate::merge::TOAST_UNAVAILABLE),
        _ => false,
    }
}

/// PostgreSQL's message with its SQLSTATE, the table, column and constraint it names, and
/// its detail.
pub(super) fn describe_db_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let mut notes = vec![format!("SQLSTATE {code}")];
            let message = match db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                Some(pg) => {
                    match (pg.schema(), pg.table()) {
                        (Some(schema), Some(table)) => {
                            notes.push(format!("table {schema}.{table}"))
                        }
                        (None, Some(table)) => notes.push(format!("table {table}")),
                        _ => {}
                    }
                    notes.extend(pg.column().map(|c| format!("column {c}")));
                    notes.extend(pg.constraint().map(|c| format!("constraint {c}")));
                    notes.extend(pg.detail().map(str::to_string));
                    pg.message()
                }
                None => db.message(),
            };
            format!("{message} ({})", notes.join("; "))
        }
        other => other.to_string(),
    }
}

/// Sorts an error into retry-worthy or not, by SQLSTATE class where there is one.
pub(super) fn classify(e: sqlx::Error) -> Outcome {
    match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let message = describe_db_error(&e);
            match &code[..code.len().min(2)] {
                // data exception, integrity violation, syntax/access (missing table, column,
                // privilege), feature not supported (a truncate of a table foreign keys
                // reference): the same batch fails the same way every time.
                "0A" | "22" | "23" | "42" => Outcome::Permanent(message),
                _ => Outcome::Transient(message),
            }
        }
        _ => Outcome::Transient(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::error::Error as StdError;
    use std::fmt;

    use sqlx::error::{DatabaseError, ErrorKind};

    use super::*;

    /// A database error as a server would send it, reduced to what the sorting reads: the
    /// SQLSTATE and the message. (sqlx's `PgDatabaseError` cannot be built outside sqlx.)
    #[derive(Debug)]
    struct Synthetic {
        code: Option<&'static str>,
        message: &'static str,
    }

    impl fmt::Display for Synthetic {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.message)
        }
    }

    impl StdError for Synthetic {}

    impl DatabaseError for Synthetic {
        fn message(&self) -> &str {
            self.message
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            self.code.map(Cow::Borrowed)
        }
        fn as_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn StdError + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn StdError + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> ErrorKind {
            ErrorKind::Other
        }
    }

    /// `sqlx::Error::Database` carrying a synthetic error.
    fn db(code: Option<&'static str>, message: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Synthetic { code, message }))
    }

    /// Only data exceptions (22) and integrity violations (23) are one row's fault: those are
    /// the errors a range is split for.
    #[test]
    fn row_errors_are_sqlstate_classes_22_and_23() {
        for code in ["22003", "22P02", "23505", "23502", "23514"] {
            assert!(is_row_error(&db(Some(code), "bad row")), "{code}");
        }
        for code in [
            "42P01", "42703", "40001", "40P01", "57P01", "55P03", "08006", "2", "",
        ] {
            assert!(!is_row_error(&db(Some(code), "not a row")), "{code}");
        }
        assert!(!is_row_error(&db(None, "no code")));
        assert!(!is_row_error(&sqlx::Error::PoolTimedOut));
        assert!(!is_row_error(&sqlx::Error::Io(std::io::Error::other(
            "reset"
        ))));
    }

    /// Data, integrity and syntax/access errors fail the same batch every time: permanent.
    /// Everything else (serialization, deadlock, shutdown, lock timeout, a lost connection, an
    /// error without a SQLSTATE) may pass on a retry.
    #[test]
    fn classify_sorts_by_sqlstate_class() {
        for code in ["0A000", "22003", "23505", "42P01", "42501"] {
            match classify(db(Some(code), "refused")) {
                Outcome::Permanent(m) => assert_eq!(m, format!("refused (SQLSTATE {code})")),
                other => panic!("{code}: {other:?}"),
            }
        }
        for code in ["40001", "40P01", "57P01", "55P03", "53300", "08006", "4"] {
            match classify(db(Some(code), "try again")) {
                Outcome::Transient(m) => assert_eq!(m, format!("try again (SQLSTATE {code})")),
                other => panic!("{code}: {other:?}"),
            }
        }
        assert!(matches!(classify(db(None, "?")), Outcome::Transient(m) if m == "? (SQLSTATE )"));
        let timed_out = sqlx::Error::PoolTimedOut.to_string();
        assert!(
            matches!(classify(sqlx::Error::PoolTimedOut), Outcome::Transient(m) if m == timed_out)
        );
        assert!(matches!(
            classify(sqlx::Error::Io(std::io::Error::other("connection reset"))),
            Outcome::Transient(m) if m.contains("connection reset")
        ));
    }

    /// Without PostgreSQL's fields the message still carries its SQLSTATE; an error that is not
    /// the database's is its own text.
    #[test]
    fn describe_db_error_names_the_sqlstate() {
        assert_eq!(
            describe_db_error(&db(Some("23505"), "duplicate key value")),
            "duplicate key value (SQLSTATE 23505)"
        );
        assert_eq!(
            describe_db_error(&sqlx::Error::PoolClosed),
            sqlx::Error::PoolClosed.to_string()
        );
    }
}
