//! Raising the core's errors through Postgres' ereport.

use idgen_core::{IdgenError, SqlState};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

fn error_code(state: SqlState) -> PgSqlErrorCode {
    match state {
        SqlState::NullValueNotAllowed => PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        SqlState::StringDataRightTruncation => PgSqlErrorCode::ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
        SqlState::InvalidParameterValue => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        SqlState::InsufficientResources => PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
        SqlState::ObjectNotInPrerequisiteState => PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        SqlState::LockNotAvailable => PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        SqlState::ReadOnlySqlTransaction => PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        SqlState::NumericValueOutOfRange => PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        SqlState::DatetimeFieldOverflow => PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
        SqlState::SystemError => PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
        SqlState::FeatureNotSupported => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        SqlState::InsufficientPrivilege => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        SqlState::UndefinedObject => PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        SqlState::Warning => PgSqlErrorCode::ERRCODE_WARNING,
    }
}

/// Reports `err` at `level` with its SQLSTATE, DETAIL and HINT.
pub fn report(err: IdgenError, level: PgLogLevel) {
    let mut report = ErrorReport::new(error_code(err.sqlstate), err.message, "idgen");
    if let Some(detail) = err.detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = err.hint {
        report = report.set_hint(hint);
    }
    report.report(level);
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
