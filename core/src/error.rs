//! Errors as values: a SQLSTATE, a message, and the DETAIL and HINT a person reads.
//!
//! The core builds every user-facing error; the pgrx edge only raises it. That
//! keeps the wording unit-testable and in one place.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The SQLSTATEs idgen raises. Each is documented in the README's SQL reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SqlState {
    /// 22004: a required argument is NULL.
    NullValueNotAllowed,
    /// 22001: a text argument is longer than its column.
    StringDataRightTruncation,
    /// 22023: an argument or setting has a value idgen cannot use.
    InvalidParameterValue,
    /// 53000: every machine id of a service is held and none may be taken back; no background worker slot.
    InsufficientResources,
    /// 55000: the caller no longer owns the machine id (heartbeat fencing); a service's layout is fixed; no
    /// machine id of a service's pool is in this server's range.
    ObjectNotInPrerequisiteState,
    /// 55P03: another session holds the caller's own registry row right now.
    LockNotAvailable,
    /// 40001: a service's first claim in a transaction whose snapshot predates its guards.
    SerializationFailure,
    /// 55006: the registry cannot be dropped while it guards machine ids that may still be stamped; a
    /// machine id claimed by number is in use.
    ObjectInUse,
    /// 25006: the registry cannot be written here (read-only transaction or standby).
    ReadOnlySqlTransaction,
    /// 22003: an ID argument is negative; idgen IDs never are.
    NumericValueOutOfRange,
    /// 22008: a time the ID layout cannot stamp (before its epoch or past its end).
    DatetimeFieldOverflow,
    /// 58000: the server's clock stepped back further than idgen.max_clock_backward.
    SystemError,
    /// 0A000: PREPARE TRANSACTION after idgen wrote the registry in the transaction; idgen_next_id in a parallel
    /// worker or in single-user mode; a DROP or TRUNCATE of the registry above READ COMMITTED.
    FeatureNotSupported,
    /// 42501: the calling role may not act for the service.
    InsufficientPrivilege,
    /// 42704: a role named in an argument does not exist.
    UndefinedObject,
    /// XX001: a recorded layout that is no layout (a row of idgen_layouts changed by hand).
    DataCorrupted,
    /// 01000: a WARNING, not an error (for example a release of what is not held).
    Warning,
}

impl SqlState {
    pub fn code(self) -> &'static str {
        match self {
            SqlState::NullValueNotAllowed => "22004",
            SqlState::StringDataRightTruncation => "22001",
            SqlState::InvalidParameterValue => "22023",
            SqlState::InsufficientResources => "53000",
            SqlState::ObjectNotInPrerequisiteState => "55000",
            SqlState::LockNotAvailable => "55P03",
            SqlState::SerializationFailure => "40001",
            SqlState::ObjectInUse => "55006",
            SqlState::ReadOnlySqlTransaction => "25006",
            SqlState::NumericValueOutOfRange => "22003",
            SqlState::DatetimeFieldOverflow => "22008",
            SqlState::SystemError => "58000",
            SqlState::FeatureNotSupported => "0A000",
            SqlState::InsufficientPrivilege => "42501",
            SqlState::UndefinedObject => "42704",
            SqlState::DataCorrupted => "XX001",
            SqlState::Warning => "01000",
        }
    }
}

/// An error ready to be raised: nothing about it is decided at the edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdgenError {
    pub sqlstate: SqlState,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl IdgenError {
    pub fn new(sqlstate: SqlState, message: impl Into<String>) -> Self {
        IdgenError { sqlstate, message: message.into(), detail: None, hint: None }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The message and its DETAIL as one sentence-separated line, for a text column (an event's
    /// detail, `idgen_policy().problem`): "message. Detail." Messages end without a period.
    pub fn one_line(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{}. {detail}", self.message),
            None => self.message.clone(),
        }
    }
}

impl fmt::Display for IdgenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.sqlstate.code())?;
        if let Some(d) = &self.detail {
            write!(f, "; DETAIL: {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; HINT: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for IdgenError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_separates_the_message_from_its_detail() {
        let told =
            IdgenError::new(SqlState::ObjectNotInPrerequisiteState, "machine id 5 is no longer held at version 2")
                .detail("It was released at 2026-11-29T08:01:00Z and is at version 4 now.");
        assert_eq!(
            told.one_line(),
            "machine id 5 is no longer held at version 2. It was released at 2026-11-29T08:01:00Z and is at version 4 now."
        );
        assert_eq!(IdgenError::new(SqlState::InvalidParameterValue, "no detail").one_line(), "no detail");
    }
}
