//! Who a row of `kafka_offsets` names as its owner (`owner_id`): a sink process or an operator's
//! reset. Informational only, for a person reading the table or `offsets show`: the protocol
//! reads epochs and `reset_from_epoch`, never this text.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use super::RESET_OWNER_PREFIX;

/// A typed owner, so the operator's spelling (`reset:user@host`) is made in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A sink process, by the name startup gives it (`host/pid/nonce`).
    Sink(String),
    /// An operator's `offsets reset`, run by `user` on `host`.
    Operator { user: String, host: String },
}

/// The text stored in `owner_id`: a sink's name as it is, an operator as `reset:user@host`.
impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Sink(name) => f.write_str(name),
            Owner::Operator { user, host } => write!(f, "{RESET_OWNER_PREFIX}{user}@{host}"),
        }
    }
}

/// Reads an `owner_id` back. Any text is some owner: what is not `reset:user@host` is a sink's
/// name. The host is taken after the last `@`, since a user name (from `USER`) may hold one.
impl FromStr for Owner {
    type Err = Infallible;

    fn from_str(s: &str) -> Result<Self, Infallible> {
        Ok(
            match s
                .strip_prefix(RESET_OWNER_PREFIX)
                .and_then(|rest| rest.rsplit_once('@'))
            {
                Some((user, host)) => Owner::Operator {
                    user: user.into(),
                    host: host.into(),
                },
                None => Owner::Sink(s.into()),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FromStr`, which never fails.
    fn parse(s: &str) -> Owner {
        s.parse().unwrap()
    }

    /// Each owner reads back as itself, and its text is what `kafka_offsets` held before the
    /// type existed (the integration tests look for `reset:` and for `/<pid>/`).
    #[test]
    fn owners_round_trip_through_their_text() {
        let owners = [
            (
                Owner::Sink("web-3/4242/1a2b3c4d".into()),
                "web-3/4242/1a2b3c4d",
            ),
            (
                Owner::Operator {
                    user: "ops".into(),
                    host: "bastion".into(),
                },
                "reset:ops@bastion",
            ),
            (
                Owner::Operator {
                    user: "jane@corp".into(),
                    host: "laptop".into(),
                },
                "reset:jane@corp@laptop",
            ),
            (
                Owner::Operator {
                    user: String::new(),
                    host: String::new(),
                },
                "reset:@",
            ),
        ];
        for (owner, text) in owners {
            assert_eq!(owner.to_string(), text);
            assert_eq!(parse(text), owner, "{text}");
        }
    }

    /// Text that is not an operator's spelling stays the sink name it is, unchanged.
    #[test]
    fn anything_else_is_a_sink_name() {
        for text in ["reset:no-at-sign", "resetting@host", "", "host/1/abc"] {
            assert_eq!(parse(text), Owner::Sink(text.into()));
            assert_eq!(parse(text).to_string(), text);
        }
    }
}
