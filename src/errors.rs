//! Raising the core's errors through Postgres' ereport, and errors that cross
//! from a background worker to the backend that waits for it.

use idgen_core::{IdgenError, SqlState};
use pgrx::pg_sys::panic::{CaughtError, ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use serde::{Deserialize, Serialize};

fn error_code(state: SqlState) -> PgSqlErrorCode {
    match state {
        SqlState::NullValueNotAllowed => PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        SqlState::StringDataRightTruncation => PgSqlErrorCode::ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
        SqlState::InvalidParameterValue => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        SqlState::InsufficientResources => PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
        SqlState::ObjectNotInPrerequisiteState => PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        SqlState::LockNotAvailable => PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        SqlState::SerializationFailure => PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        SqlState::ObjectInUse => PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
        SqlState::ReadOnlySqlTransaction => PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        SqlState::NumericValueOutOfRange => PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        SqlState::DatetimeFieldOverflow => PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
        SqlState::SystemError => PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
        SqlState::FeatureNotSupported => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        SqlState::InsufficientPrivilege => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        SqlState::UndefinedObject => PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        SqlState::DataCorrupted => PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        SqlState::Warning => PgSqlErrorCode::ERRCODE_WARNING,
    }
}

/// Reports `err` at `level` with its SQLSTATE, DETAIL and HINT.
pub fn report(err: IdgenError, level: PgLogLevel) {
    emit(error_code(err.sqlstate), err.message, err.detail, err.hint, level);
}

fn emit(code: PgSqlErrorCode, message: String, detail: Option<String>, hint: Option<String>, level: PgLogLevel) {
    let mut report = ErrorReport::new(code, message, "idgen");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(level);
}

/// Reports the WARNING `err` to the client alone, not to the server log (an alert's WARNING: its LOG
/// line is the alert's one line there, `diagnostics::alerts::announce`).
pub fn warn_client_only(err: IdgenError) {
    // ereport(WARNING_CLIENT_ONLY, ...), as pgrx's ereport makes its calls: pgrx has no such level.
    unsafe extern "C-unwind" {
        fn errstart(elevel: std::ffi::c_int, domain: *const std::ffi::c_char) -> bool;
        fn errcode(sqlerrcode: std::ffi::c_int) -> std::ffi::c_int;
        fn errmsg(fmt: *const std::ffi::c_char, ...) -> std::ffi::c_int;
        fn errdetail(fmt: *const std::ffi::c_char, ...) -> std::ffi::c_int;
        fn errhint(fmt: *const std::ffi::c_char, ...) -> std::ffi::c_int;
        fn errfinish(filename: *const std::ffi::c_char, lineno: std::ffi::c_int, funcname: *const std::ffi::c_char);
    }
    let text = |s: &str| std::ffi::CString::new(s.replace('\0', "")).expect("no NUL left");
    let message = text(&err.message);
    let detail = err.detail.as_deref().map(text);
    let hint = err.hint.as_deref().map(text);
    // SAFETY: a report below ERROR returns; errmsg and the others copy their strings at once.
    unsafe {
        if errstart(pgrx::pg_sys::WARNING_CLIENT_ONLY as std::ffi::c_int, std::ptr::null()) {
            errcode(error_code(err.sqlstate) as std::ffi::c_int);
            errmsg(c"%s".as_ptr(), message.as_ptr());
            if let Some(detail) = &detail {
                errdetail(c"%s".as_ptr(), detail.as_ptr());
            }
            if let Some(hint) = &hint {
                errhint(c"%s".as_ptr(), hint.as_ptr());
            }
            errfinish(c"src/errors.rs".as_ptr(), line!() as std::ffi::c_int, c"warn_client_only".as_ptr());
        }
    }
}

/// Raises `err` as an ERROR; does not return.
pub fn raise(err: IdgenError) -> ! {
    report(err, PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

/// Unwraps a core result, raising its error.
pub fn or_raise<T>(result: Result<T, IdgenError>) -> T {
    result.unwrap_or_else(|err| raise(err))
}

/// An error raised where the caller cannot see it (a background worker's transaction), as
/// the caller raises it again: any SQLSTATE, not only idgen's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedError {
    pub sqlstate: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl CarriedError {
    /// What Postgres raised inside a transaction that was then aborted.
    pub fn caught(caught: &CaughtError) -> CarriedError {
        let report = match caught {
            CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) | CaughtError::RustPanic { ereport: r, .. } => {
                r
            }
        };
        CarriedError {
            sqlstate: sqlstate_text(report.sql_error_code()),
            message: report.message().to_owned(),
            detail: report.detail().map(str::to_owned),
            hint: report.hint().map(str::to_owned),
        }
    }

    /// Raises it in this session; does not return.
    pub fn raise(self) -> ! {
        emit(sqlstate_code(&self.sqlstate), self.message, self.detail, self.hint, PgLogLevel::ERROR);
        unreachable!("ereport(ERROR) returned")
    }
}

impl From<IdgenError> for CarriedError {
    fn from(err: IdgenError) -> CarriedError {
        CarriedError {
            sqlstate: err.sqlstate.code().to_owned(),
            message: err.message,
            detail: err.detail,
            hint: err.hint,
        }
    }
}

/// The five characters of a SQLSTATE, from Postgres' packed form (MAKE_SQLSTATE: six bits each).
fn sqlstate_text(code: PgSqlErrorCode) -> String {
    let packed = code as isize;
    (0..5).map(|k| char::from(b'0' + ((packed >> (6 * k)) & 0x3F) as u8)).collect()
}

/// Postgres' packed form of a five-character SQLSTATE; XX000 for anything else.
fn sqlstate_code(text: &str) -> PgSqlErrorCode {
    let bytes = text.as_bytes();
    if bytes.len() != 5 || !bytes.iter().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()) {
        return PgSqlErrorCode::ERRCODE_INTERNAL_ERROR;
    }
    let packed = bytes.iter().enumerate().fold(0i32, |acc, (k, b)| acc | ((i32::from(*b - b'0') & 0x3F) << (6 * k)));
    PgSqlErrorCode::from(packed)
}
