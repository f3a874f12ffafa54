//! The idgen.* settings. The thresholds that holders compute their leases with
//! and claimants take ids back by are the same for every session of the
//! cluster (PGC_SIGHUP: postgresql.conf or ALTER SYSTEM, then a reload): one
//! claimant with shorter ones could take an id from a holder inside its lease.
//! `idgen.node_host` and `idgen.max_clock_backward` are superuser-only
//! (PGC_SUSET); `idgen.service` is any session's choice. Each has a range here,
//! and the core's `ClaimPolicy::validate` checks how they relate.

use idgen_core::fleet;
use idgen_core::policy::{InForce, DAY, HOUR};
use idgen_core::{input, messages, ClaimPolicy, IdgenError};
use pgrx::pg_guard;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{c_char, c_void, CString};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};

const DEFAULTS: ClaimPolicy = ClaimPolicy::DEFAULT;

pub static TAKEOVER_IDLE_7D: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.takeover_idle_7d_secs as i32);
pub static TAKEOVER_IDLE_1D: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.takeover_idle_1d_secs as i32);
pub static TAKEOVER_IDLE_1H: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.takeover_idle_1h_secs as i32);
pub static RELEASE_COOLDOWN: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.release_cooldown_secs as i32);
pub static HEARTBEAT_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.heartbeat_interval_secs as i32);
pub static LEASE_SAFETY_MARGIN: GucSetting<i32> = GucSetting::<i32>::new(DEFAULTS.lease_safety_margin_secs as i32);

pub static SERVICE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static NODE_HOST: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"127.0.0.1"));
pub static MAX_CLOCK_BACKWARD: GucSetting<i32> =
    GucSetting::<i32>::new(idgen_core::generator::MAX_CLOCK_BACKWARD_DEFAULT_MS as i32);
pub static CAPACITY_WARNING: GucSetting<f64> = GucSetting::<f64>::new(fleet::CAPACITY_WARNING_DEFAULT);
pub static CAPACITY_CRITICAL: GucSetting<f64> = GucSetting::<f64>::new(fleet::CAPACITY_CRITICAL_DEFAULT);
/// Before 0.6.0 the one capacity threshold; kept defined so that a value configured for it is
/// not dropped unseen: it has no effect, and `idgen_health()` reports `setting_deprecated`.
pub static CAPACITY_ALERT: GucSetting<f64> = GucSetting::<f64>::new(fleet::CAPACITY_ALERT_UNSET);
pub static CLOCK_SKEW_ALERT: GucSetting<i32> = GucSetting::<i32>::new(fleet::CLOCK_SKEW_ALERT_DEFAULT_MS as i32);
pub static RESTART_LOOP_WINDOW: GucSetting<i32> =
    GucSetting::<i32>::new(fleet::RESTART_LOOP_WINDOW_DEFAULT_SECS as i32);
pub static RESTART_LOOP_CLAIMS: GucSetting<i32> = GucSetting::<i32>::new(fleet::RESTART_LOOP_CLAIMS_DEFAULT as i32);
pub static MACHINE_ID_RANGE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static REQUIRE_SYNCHRONOUS_STANDBY: GucSetting<bool> = GucSetting::<bool>::new(false);
pub static HISTORY_RETENTION: GucSetting<i32> =
    GucSetting::<i32>::new(idgen_core::history::HISTORY_RETENTION_DEFAULT_SECS as i32);

/// True while the settings are defined: Postgres then applies the values configured before idgen
/// was loaded, through the check hooks.
static REGISTERING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process defined the settings (`register`).
static DEFINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers the settings; called from `_PG_init`.
pub fn register() {
    DEFINED.store(true, Ordering::Relaxed);
    // What was configured before idgen was loaded (placeholders). Postgres may discard such a
    // value without a check hook seeing it (a connection's options for a cluster-wide setting:
    // "cannot be changed now"), and then keeps the compiled-in default, not the file's value.
    let configured: Vec<(&'static str, Option<String>)> =
        GUARDED_SETTINGS.iter().map(|(name, _)| (*name, placeholder_value(name))).collect();
    // Which of them the configuration files set, as their placeholders show it: Postgres does not
    // carry its mark over to the setting that replaces a placeholder (and the first reading of
    // the files, at the server's start, marks no placeholder: it makes them after marking), and
    // a file's refusal stands by that mark.
    let in_files = placeholders_set_by_the_files();
    REGISTERING.store(true, Ordering::Relaxed);
    define_settings();
    REGISTERING.store(false, Ordering::Relaxed);
    for name in &in_files {
        mark_set_by_the_files(name);
    }
    for ((name, same), (_, value)) in GUARDED_SETTINGS.iter().zip(configured) {
        // An empty placeholder was configured once and reset since (a removed line, ALTER SYSTEM RESET).
        let Some(value) = value.filter(|v| !v.is_empty()) else { continue };
        let now = placeholder_value(name).unwrap_or_default();
        let mut refused = REFUSED.lock();
        if !same(&value, &now) && !refused.iter().any(|r| r.setting == *name) {
            let why = IdgenError::new(
                idgen_core::SqlState::InvalidParameterValue,
                format!("it was not applied: the setting is {now:?}"),
            );
            refused.push(Refused { setting: name, source: NOT_APPLIED, value, why });
        }
    }
}

/// Whether two texts of a setting are the same value.
type SameValue = fn(&str, &str) -> bool;

/// The settings whose value decides which ids a claim may hand out, or whether it may: a value
/// configured but not in effect refuses claims. Each with how two of its values compare.
const GUARDED_SETTINGS: [(&str, SameValue); 3] = [
    ("idgen.machine_id_range", |a, b| input::machine_id_range(a).ok() == input::machine_id_range(b).ok()),
    ("idgen.node_host", |a, b| input::node_host_setting(a).ok() == input::node_host_setting(b).ok()),
    ("idgen.require_synchronous_standby", |a, b| parse_bool(a) == parse_bool(b)),
];

/// A boolean setting's text as Postgres reads it (its own parse_bool: on/off, true/false, yes/no, 1/0, prefixes).
fn parse_bool(text: &str) -> Option<bool> {
    let text = CString::new(text).ok()?;
    let mut value = false;
    // SAFETY: reads the C string, writes `value`.
    unsafe { pgrx::pg_sys::parse_bool(text.as_ptr(), &mut value) }.then_some(value)
}

/// The value of setting `name` as Postgres shows it, if it has one (a placeholder before idgen defines it).
fn placeholder_value(name: &str) -> Option<String> {
    let name = CString::new(name).expect("setting names have no NUL");
    // SAFETY: returns a pointer into the GUC's own storage, or NULL; copied at once.
    unsafe {
        let value = pgrx::pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| std::ffi::CStr::from_ptr(value).to_string_lossy().into_owned())
    }
}

fn define_settings() {
    // SAFETY: the check hook only validates the text; the assign hook only bumps a counter.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.service",
            c"Service whose machine ids idgen_next_id() uses; empty means the current database's name.",
            c"Backends and service nodes that share a service name share one id space, so their IDs never collide.",
            &SERVICE,
            GucContext::Userset,
            GucFlags::default(),
            Some(check_service),
            Some(settings_assigned),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.node_host",
            c"Address under which this server's backends register in system_nodes.",
            c"A backend's identity is this address, the server's port and its backend slot. Give each server sharing a registry its own address.",
            &NODE_HOST,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_node_host),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"idgen.max_clock_backward",
        c"How far the clock may step back before idgen_next_id() refuses instead of waiting.",
        c"A smaller step back is waited out (interruptibly); IDs never reuse time.",
        &MAX_CLOCK_BACKWARD,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    // SAFETY: the check hook only parses the value and sets the check's DETAIL and HINT.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"idgen.machine_id_range",
            c"The machine ids this server's claims hand out, as first-last (e.g. 0-255), of every service's pool; empty means all.",
            c"Servers whose IDs meet in one table (shards, regions) each get a disjoint range; a claim hands out the ids of its service's pool inside it. Rows outside it are never handed out again by this server; their holders keep them until they stop.",
            &MACHINE_ID_RANGE,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_machine_id_range),
            None,
            None,
        );
    }
    GucRegistry::define_bool_guc(
        c"idgen.require_synchronous_standby",
        c"Refuse claims while no synchronous standby is streaming.",
        c"Without one, a failover can lose a claim's commit and the machine id can be handed out twice. Heartbeats and releases go on.",
        &REQUIRE_SYNCHRONOUS_STANDBY,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"idgen.capacity_warning",
        c"Fraction of a service's machine ids in use above which it is at the warning level.",
        c"In use: held or cooling down after a release. A claim that leaves a service above it raises an idgen_alert (level warning); idgen_capacity and idgen_health() use it too. Must not be above idgen.capacity_critical.",
        &CAPACITY_WARNING,
        0.0,
        1.0,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"idgen.capacity_critical",
        c"Fraction of a service's machine ids in use above which it is at the critical level.",
        c"A claim that leaves a service above it raises an idgen_alert (level critical); idgen_health() reports the service as critical.",
        &CAPACITY_CRITICAL,
        0.0,
        1.0,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"idgen.capacity_alert",
        c"Deprecated since 0.6.0, without effect: use idgen.capacity_warning and idgen.capacity_critical.",
        c"-1 means not set. A value set here changes nothing; idgen_health() reports it (setting_deprecated) until it is reset.",
        &CAPACITY_ALERT,
        -1.0,
        1.0,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"idgen.clock_skew_alert",
        c"How far a holder's clock may be off the server's before idgen_health() reports holder_clock_skew.",
        c"The offset is the watermark a service node's heartbeat reports minus the server clock at the heartbeat.",
        &CLOCK_SKEW_ALERT,
        1,
        DAY as i32 * 1000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"idgen.restart_loop_window",
        c"The window idgen_health() counts a node's claims and a machine id's moves in (restart_loop, id_flapping).",
        c"The history's events within this window are counted.",
        &RESTART_LOOP_WINDOW,
        1,
        DAY as i32,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"idgen.restart_loop_claims",
        c"More claims than this by one node, or moves of one machine id between holders, within idgen.restart_loop_window are a loop.",
        c"idgen_health() reports restart_loop and id_flapping above it.",
        &RESTART_LOOP_CLAIMS,
        1,
        1_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // The thresholds are checked against each other where they are used (a reload sets them one
    // at a time, through states in between): each change only bumps the settings' generation.
    let seconds = |name, short, long, setting, min: i64, max: i64| {
        // SAFETY: the assign hook only bumps a counter.
        unsafe {
            GucRegistry::define_int_guc_with_hooks(
                name,
                short,
                long,
                setting,
                min as i32,
                max as i32,
                GucContext::Sighup,
                GucFlags::UNIT_S,
                None,
                Some(threshold_assigned),
                None,
            );
        }
    };
    seconds(
        c"idgen.takeover_idle_7d",
        c"Idle age after which a claim takes back a machine id first (tier idle_7d).",
        c"When no machine id of a service is free, idgen_claim takes back the least recently seen one idle longer than this.",
        &TAKEOVER_IDLE_7D, 2, 365 * DAY,
    );
    seconds(
        c"idgen.takeover_idle_1d",
        c"Idle age for the second take-back tier (idle_1d).",
        c"Used when no machine id is idle longer than idgen.takeover_idle_7d. Must be shorter than it.",
        &TAKEOVER_IDLE_1D,
        2,
        365 * DAY,
    );
    seconds(
        c"idgen.takeover_idle_1h",
        c"Idle age for the last take-back tier (idle_1h), which also raises an alert.",
        c"Also the basis of every lease: a holder stops issuing IDs this long, less idgen.lease_safety_margin, after its last heartbeat.",
        &TAKEOVER_IDLE_1H, 2, 365 * DAY,
    );
    seconds(
        c"idgen.release_cooldown",
        c"How long a released machine id waits before another node may take it.",
        c"Covers clock skew between the releasing node and the next holder. The releasing node itself may claim it back at once.",
        &RELEASE_COOLDOWN, 0, DAY,
    );
    seconds(
        c"idgen.heartbeat_interval",
        c"How often a holder must heartbeat its machine id.",
        c"Must be shorter than the lease (idgen.takeover_idle_1h minus idgen.lease_safety_margin).",
        &HEARTBEAT_INTERVAL,
        1,
        DAY,
    );
    seconds(
        c"idgen.lease_safety_margin",
        c"How much earlier than the shortest take-back age a holder must stop issuing IDs.",
        c"lease_until = last heartbeat + idgen.takeover_idle_1h - this margin. Covers clock skew and heartbeat latency.",
        &LEASE_SAFETY_MARGIN, 0, DAY,
    );
    seconds(
        c"idgen.history_retention",
        c"How long idgen_purge_history() keeps ownership history events.",
        c"Events older than this are removed by idgen_purge_history(); idgen_health() reports when some are due.",
        &HISTORY_RETENTION,
        HOUR,
        10 * 365 * DAY,
    );
}

/// The policy the registry runs by now: the settings as set, or the last consistent ones while
/// they contradict each other; refused when none consistent are known (none since the server
/// started, or, without idgen preloaded, since a crash restart).
pub fn claim_policy() -> Result<ClaimPolicy, IdgenError> {
    in_force().policy()
}

/// The policy the views, `idgen_policy()` and the registry's triggers show and run by: the claim's,
/// or the settings as set when the claim has none.
pub fn policy_in_force() -> ClaimPolicy {
    in_force().policy().unwrap_or_else(|_| policy_as_set())
}

/// What claims run by now (`InForce`). Consistent settings as set are kept, for every process of
/// the server, as the last consistent ones.
pub fn in_force() -> InForce {
    let as_set = policy_as_set();
    let in_force = InForce::of(as_set, last_consistent());
    if let InForce::AsSet(policy) = &in_force {
        keep(policy);
    }
    in_force
}

/// From the postmaster once its shared memory is ready (preloaded): the settings the server
/// started with, when consistent, are the last consistent ones.
pub fn keep_if_consistent() {
    in_force();
}

/// This process's last consistent thresholds, for a process without idgen's shared memory.
static LAST_CONSISTENT_HERE: std::sync::Mutex<Option<ClaimPolicy>> = std::sync::Mutex::new(None);

fn last_consistent() -> Option<ClaimPolicy> {
    let here = *LAST_CONSISTENT_HERE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    crate::shared::area().and_then(|area| area.last_consistent.load()).map(|(kept, _)| kept).or(here)
}

fn keep(policy: &ClaimPolicy) {
    // A process that did not define the settings (a registry writer: it runs by its callers')
    // reads the compiled-in defaults, never to be kept.
    if !DEFINED.load(Ordering::Relaxed) {
        return;
    }
    *LAST_CONSISTENT_HERE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(*policy);
    if let Some(area) = crate::shared::area() {
        // SAFETY: this process's own time of its last reading of the configuration files.
        area.last_consistent.store(policy, unsafe { pgrx::pg_sys::PgReloadTime });
    }
}

pub use idgen_core::claim::ClaimSettings;

/// The settings as they are now, refused when the thresholds contradict each other or a
/// configured value was refused.
pub fn claim_settings() -> Result<ClaimSettings, IdgenError> {
    if let Some(refused) = configured_value_refused() {
        return Err(refused);
    }
    let range = machine_id_range();
    let policy = claim_policy()?;
    Ok(ClaimSettings {
        policy,
        machine_id_first: *range.start(),
        machine_id_last: *range.end(),
        capacity_warning: capacity_warning(),
        capacity_critical: capacity_critical(),
        require_synchronous_standby: require_synchronous_standby(),
        max_clock_backward_ms: max_clock_backward_ms(),
    })
}

/// The settings as they are, consistent or not (diagnostics show both).
pub fn policy_as_set() -> ClaimPolicy {
    ClaimPolicy {
        takeover_idle_7d_secs: TAKEOVER_IDLE_7D.get().into(),
        takeover_idle_1d_secs: TAKEOVER_IDLE_1D.get().into(),
        takeover_idle_1h_secs: TAKEOVER_IDLE_1H.get().into(),
        release_cooldown_secs: RELEASE_COOLDOWN.get().into(),
        heartbeat_interval_secs: HEARTBEAT_INTERVAL.get().into(),
        lease_safety_margin_secs: LEASE_SAFETY_MARGIN.get().into(),
    }
}

/// The machine ids this server's claims hand out (`idgen.machine_id_range`; checked when set).
pub fn machine_id_range() -> RangeInclusive<u16> {
    let text = MACHINE_ID_RANGE.get().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    input::machine_id_range(&text).unwrap_or(0..=u16::MAX)
}

pub fn require_synchronous_standby() -> bool {
    REQUIRE_SYNCHRONOUS_STANDBY.get()
}

/// Refuses a value of `idgen.machine_id_range` that is not a range of machine ids.
#[pg_guard]
unsafe extern "C-unwind" fn check_machine_id_range(
    new_value: *mut *mut c_char,
    _extra: *mut *mut c_void,
    source: pgrx::pg_sys::GucSource::Type,
) -> bool {
    checked("idgen.machine_id_range", new_value, source, |text| input::machine_id_range(text).map(drop))
}

/// Refuses a value of `idgen.node_host` that is not one host's address.
#[pg_guard]
unsafe extern "C-unwind" fn check_node_host(
    new_value: *mut *mut c_char,
    _extra: *mut *mut c_void,
    source: pgrx::pg_sys::GucSource::Type,
) -> bool {
    checked("idgen.node_host", new_value, source, |text| input::node_host_setting(text).map(drop))
}

/// Refuses a value of `idgen.service` that is not a service name (empty: the database's name).
#[pg_guard]
unsafe extern "C-unwind" fn check_service(
    new_value: *mut *mut c_char,
    _extra: *mut *mut c_void,
    source: pgrx::pg_sys::GucSource::Type,
) -> bool {
    checked("idgen.service", new_value, source, |text| {
        if text.is_empty() {
            Ok(())
        } else {
            input::service_setting(text).map(drop)
        }
    })
}

/// Configured values (postgresql.conf, ALTER SYSTEM, ALTER DATABASE/ROLE ... SET, the connection's
/// options) that a check hook refused, by setting. Postgres then only warns and keeps the value
/// it had, the default at a backend's start, which is not what was configured: another
/// address, service or range of machine ids. Claims and renewals refuse while one is here.
/// Each with the source it came from ([`NOT_APPLIED`] for a value Postgres discarded unchecked).
static REFUSED: parking_lot::Mutex<Vec<Refused>> = parking_lot::Mutex::new(Vec::new());

struct Refused {
    setting: &'static str,
    source: pgrx::pg_sys::GucSource::Type,
    value: String,
    why: IdgenError,
}

/// The source of a configured value that was discarded without a check (see [`register`]).
const NOT_APPLIED: pgrx::pg_sys::GucSource::Type = pgrx::pg_sys::GucSource::PGC_S_DEFAULT;

/// The refusal of the first configured value a check hook refused, if any (see [`REFUSED`]).
pub fn configured_value_refused() -> Option<IdgenError> {
    let refused = REFUSED.lock();
    // A file's value stands refused while the files set the setting. Once its line is removed and
    // the files reloaded, the server runs by what they say now (the default, or the value it kept,
    // configured before), and no check hook sees that: a value that was refused never became the
    // setting's, so nothing is reset. With idgen preloaded, every new backend inherits the
    // refusals of the postmaster's reloads: without this, until a restart. (Kept, not dropped:
    // the line put back, the refusal stands again.)
    let file = pgrx::pg_sys::GucSource::PGC_S_FILE;
    refused
        .iter()
        .find(|r| r.source != file || set_by_the_files(r.setting) != Some(false))
        .map(|r| messages::configured_value_refused(r.setting, &r.value, &r.why))
}

/// Whether the configuration files set `name`, as this process last read them (a reload marks
/// each setting they name, whether its value was taken or refused); `None` for no such setting.
fn set_by_the_files(name: &str) -> Option<bool> {
    // SAFETY: a setting of this process's own table, read.
    guc_record(name).map(|setting| unsafe { (*setting).status } & pgrx::pg_sys::GUC_IS_IN_FILE as i32 != 0)
}

/// The names of idgen's settings that the configuration files set, as placeholders (before idgen
/// defines them): marked by a reload, or holding a file's value.
fn placeholders_set_by_the_files() -> Vec<String> {
    use pgrx::pg_sys::GucSource::PGC_S_FILE;
    let mut names = Vec::new();
    for_each_guc_record(|setting| {
        // SAFETY: a record of this process's own table, read.
        let (name, marked, from_file) = unsafe {
            let s = &*setting;
            (
                std::ffi::CStr::from_ptr(s.name),
                s.status & pgrx::pg_sys::GUC_IS_IN_FILE as i32 != 0,
                s.source == PGC_S_FILE || s.reset_source == PGC_S_FILE,
            )
        };
        let name = name.to_string_lossy();
        if name.to_ascii_lowercase().starts_with("idgen.") && (marked || from_file) {
            names.push(name.into_owned());
        }
        false
    });
    names
}

/// Marks setting `name` as set by the configuration files.
fn mark_set_by_the_files(name: &str) {
    if let Some(setting) = guc_record(name) {
        // SAFETY: a setting of this process's own table; only the reading of the files uses the mark.
        unsafe { (*setting).status |= pgrx::pg_sys::GUC_IS_IN_FILE as i32 };
    }
}

/// The record of setting (or placeholder) `name` in this process's table of settings.
fn guc_record(name: &str) -> Option<*mut pgrx::pg_sys::config_generic> {
    let mut found = None;
    for_each_guc_record(|setting| {
        // SAFETY: a record of this process's own table, read.
        let this = unsafe { std::ffi::CStr::from_ptr((*setting).name) };
        let matches = this.to_bytes().eq_ignore_ascii_case(name.as_bytes());
        if matches {
            found = Some(setting);
        }
        matches
    });
    found
}

/// Calls `visit` with each named record of this process's table of settings, until it says stop.
fn for_each_guc_record(mut visit: impl FnMut(*mut pgrx::pg_sys::config_generic) -> bool) {
    use pgrx::pg_sys;
    // SAFETY: the server's table of settings, read in the process that owns it.
    unsafe {
        #[cfg(not(feature = "pg18"))]
        let (settings, count) = (pg_sys::get_guc_variables(), pg_sys::GetNumConfigOptions());
        #[cfg(feature = "pg18")]
        let (settings, count) = {
            let mut count = 0;
            (pg_sys::get_guc_variables(&mut count), count)
        };
        if settings.is_null() {
            return;
        }
        for i in 0..usize::try_from(count).unwrap_or(0) {
            let setting = *settings.add(i);
            if !setting.is_null() && !(*setting).name.is_null() && visit(setting) {
                return;
            }
        }
    }
}

/// A string check hook's answer: the value's text passed to `check`; a refusal's DETAIL and
/// HINT go where Postgres shows them with its own "invalid value for parameter" message. A
/// refusal of a configured value, which Postgres does not report as an error, is kept.
unsafe fn checked(
    name: &'static str,
    new_value: *mut *mut c_char,
    source: pgrx::pg_sys::GucSource::Type,
    check: impl FnOnce(&str) -> Result<(), IdgenError>,
) -> bool {
    // SAFETY: Postgres passes the proposed value, a C string or NULL.
    let text = unsafe {
        if new_value.is_null() || (*new_value).is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(*new_value).to_string_lossy().into_owned()
        }
    };
    // Configured: a value from a configuration source applied now. ALTER SYSTEM checks its value
    // as a file's (inside its transaction), and refuses it as an error: not configured, nothing written.
    // (A reload handled while idle in a transaction block is a file's value too; ALTER SYSTEM never
    // runs in one.)
    let configured = source < pgrx::pg_sys::GucSource::PGC_S_INTERACTIVE
        && !(source == pgrx::pg_sys::GucSource::PGC_S_FILE
            && unsafe { pgrx::pg_sys::IsTransactionState() && !pgrx::pg_sys::IsTransactionBlock() }
            && !REGISTERING.load(Ordering::Relaxed));
    let result = check(&text);
    if configured {
        // A value from another source (a file's, below a role's) says nothing of this one; a
        // file's value checked now is what a discarded one left in effect.
        let mut refused = REFUSED.lock();
        let file = source == pgrx::pg_sys::GucSource::PGC_S_FILE;
        refused.retain(|r| r.setting != name || !(r.source == source || (file && r.source == NOT_APPLIED)));
        if let Err(err) = &result {
            refused.push(Refused { setting: name, source, value: text.clone(), why: err.clone() });
        }
    }
    match result {
        Ok(()) => true,
        Err(err) => {
            let copy = |text: Option<String>| {
                text.and_then(|t| CString::new(t).ok())
                    // SAFETY: copied into the current memory context, as Postgres expects.
                    .map_or(std::ptr::null_mut(), |t| unsafe { pgrx::pg_sys::pstrdup(t.as_ptr()) })
            };
            // The message names why; Postgres' own names the setting and the value.
            let detail = match err.detail {
                Some(detail) => format!("{}. {detail}", err.message),
                None => format!("{}.", err.message),
            };
            // SAFETY: the check hook's documented way to add a DETAIL and a HINT.
            unsafe {
                pgrx::pg_sys::GUC_check_errdetail_string = copy(Some(detail));
                pgrx::pg_sys::GUC_check_errhint_string = copy(err.hint);
            }
            false
        }
    }
}

/// The warning level in force, a fraction: `idgen.capacity_warning`, or the critical level when
/// it is set above that (`idgen_health()` reports `capacity_levels_inverted`).
pub fn capacity_warning() -> f64 {
    fleet::effective_capacity_warning(CAPACITY_WARNING.get(), capacity_critical())
}

/// `idgen.capacity_warning` when it is set above `idgen.capacity_critical` (it is taken as that).
pub fn inverted_capacity_warning() -> Option<f64> {
    Some(CAPACITY_WARNING.get()).filter(|warning| *warning > capacity_critical())
}

/// `idgen.capacity_critical`, a fraction.
pub fn capacity_critical() -> f64 {
    CAPACITY_CRITICAL.get()
}

/// `idgen.capacity_alert` when it is set: it has had no effect since 0.6.0.
pub fn deprecated_capacity_alert() -> Option<f64> {
    Some(CAPACITY_ALERT.get()).filter(|v| *v != fleet::CAPACITY_ALERT_UNSET)
}

pub fn clock_skew_alert_ms() -> i64 {
    CLOCK_SKEW_ALERT.get().into()
}

pub fn restart_loop_window_secs() -> i64 {
    RESTART_LOOP_WINDOW.get().into()
}

pub fn restart_loop_claims() -> i32 {
    RESTART_LOOP_CLAIMS.get()
}

pub fn history_retention_secs() -> i64 {
    HISTORY_RETENTION.get().into()
}

/// Bumped whenever `idgen.service` or a threshold takes a new value (SET, RESET, rollback,
/// end of a function's SET clause, a reload), so the hot path compares one integer.
static SETTINGS_GENERATION: AtomicU64 = AtomicU64::new(0);

#[pg_guard]
unsafe extern "C-unwind" fn settings_assigned(_new_value: *const c_char, _extra: *mut c_void) {
    SETTINGS_GENERATION.fetch_add(1, Ordering::Relaxed);
}

#[pg_guard]
unsafe extern "C-unwind" fn threshold_assigned(_new_value: i32, _extra: *mut c_void) {
    SETTINGS_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Changes whenever `idgen.service` or a threshold may have changed.
#[inline]
pub fn settings_generation() -> u64 {
    SETTINGS_GENERATION.load(Ordering::Relaxed)
}

/// The generation last checked for contradictions by [`warn_if_contradictory`].
static CHECKED_GENERATION: AtomicU64 = AtomicU64::new(u64::MAX);

/// Once per change of the settings (a reload, a SET in this session): a WARNING when the
/// thresholds contradict each other (the last consistent ones stay in force; with none, every
/// claim and renewal is refused until they are corrected). A reload assigns the settings one at a
/// time, so they are checked here, at the backend's next use of idgen, when all of them are in;
/// consistent ones are kept then, for every process.
pub fn warn_if_contradictory() {
    let generation = settings_generation();
    if CHECKED_GENERATION.swap(generation, Ordering::Relaxed) == generation {
        return;
    }
    let warning = match in_force() {
        InForce::AsSet(_) => return,
        InForce::Kept { kept, contradiction } => {
            messages::settings_contradict_kept(&messages::settings_kept(&contradiction, &kept))
        }
        InForce::Refused(refusal) => messages::settings_contradict(&refusal),
    };
    crate::errors::report(warning, pgrx::PgLogLevel::WARNING);
}

/// `idgen.service` as set (empty when unset).
pub fn service_setting() -> String {
    SERVICE.get().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `idgen.node_host` as text.
pub fn node_host() -> String {
    NODE_HOST.get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}

pub fn max_clock_backward_ms() -> i64 {
    MAX_CLOCK_BACKWARD.get().into()
}
