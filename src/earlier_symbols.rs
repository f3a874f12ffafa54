//! The C symbols earlier versions' SQL declared functions under with other arguments, for a
//! database whose `ALTER EXTENSION idgen UPDATE` has not run yet. pgrx reads every argument
//! before a function's body runs, so a declaration with fewer arguments (0.1.0's heartbeat
//! and release had five, 0.3.0's idgen_node_state two) would fail inside it with an internal
//! error. These check the installed version and the argument count first: an old
//! installation gets 55000 and the HINT to update; 0.4.0's declarations, which match, reach
//! the functions. Since 0.5.0 the SQL binds those functions to their own symbols; 0.6.0's
//! heartbeat, with nine arguments, is `node_heartbeat_reporting_wrapper`, and
//! `node_heartbeat_wrapper` keeps serving 0.5.x's six (`registry::api`). 0.4.0 to 0.5.1 declare
//! `idgen_policy()` with their own columns under `idgen_policy_wrapper` (`policy_of_0_5`).

use pgrx::pg_sys;

unsafe fn refuse_other_declarations(fcinfo: pg_sys::FunctionCallInfo, function: &str, arguments: i16) {
    crate::privilege::checked_installation();
    // SAFETY: the caller's fcinfo.
    let nargs = unsafe { (*fcinfo).nargs };
    if nargs != arguments {
        crate::errors::raise(idgen_core::messages::declared_otherwise(function, nargs.into(), arguments.into()));
    }
}

macro_rules! guarded {
    ($finfo:ident, $symbol:ident, $function:literal, $arguments:literal, $target:path) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        #[unsafe(no_mangle)]
        #[doc(hidden)]
        #[pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn $symbol(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            // SAFETY: called by the server with a valid fcinfo, passed on unchanged.
            unsafe {
                refuse_other_declarations(fcinfo, $function, $arguments);
                $target(fcinfo)
            }
        }
    };
}

guarded!(
    pg_finfo_idgen_heartbeat_wrapper,
    idgen_heartbeat_wrapper,
    "idgen_heartbeat",
    6,
    crate::registry::api::node_heartbeat_wrapper
);
guarded!(
    pg_finfo_idgen_release_wrapper,
    idgen_release_wrapper,
    "idgen_release",
    6,
    crate::registry::api::node_release_wrapper
);
guarded!(
    pg_finfo_idgen_node_state_wrapper,
    idgen_node_state_wrapper,
    "idgen_node_state",
    4,
    crate::diagnostics::nodes::node_state_wrapper
);
guarded!(
    pg_finfo_idgen_policy_wrapper,
    idgen_policy_wrapper,
    "idgen_policy",
    0,
    crate::diagnostics::nodes::policy_of_0_5_wrapper
);
