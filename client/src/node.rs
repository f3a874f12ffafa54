//! The node: its claim, its heartbeat thread, and `next_id`.

use crate::call::{worth_retrying, Backend, CallError, Registry, Session};
use idgen_core::generator::{Clock, ClockEvents, Generator, Stop, MAX_CLOCK_BACKWARD_DEFAULT_MS};
use idgen_core::layout::{FieldOrder, Layout, Pool, ServiceLayout};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Called from the heartbeat thread (or `shutdown`) whenever the node's [`Status`] changes.
pub type StatusHook = Arc<dyn Fn(&Status) + Send + Sync>;

/// The wall clock IDs are stamped with, in Unix ms: the system clock unless replaced (a test's
/// clock that runs ahead, say).
pub type WallClockFn = Arc<dyn Fn() -> i64 + Send + Sync>;

/// How a node connects and who it is.
#[derive(Clone)]
pub struct Config {
    /// A libpq-style connection string. Give every server of the cluster and
    /// `target_session_attrs=read-write`, so that a reconnect finds the primary.
    pub conninfo: String,
    pub service: String,
    /// The node's address and port: its identity in the registry.
    pub host: String,
    pub port: i32,
    /// The machine id to claim, for a fleet whose nodes already use ids they compute (from the
    /// IP, as Sonyflake does) or pin in configuration; `None` (the default): any free id of the
    /// service's pool. Granted only if the id is free, the node's own, or takeable by the tiers;
    /// refused otherwise (`55006`, naming its holder; `22023` outside the pool or this server's
    /// `idgen.machine_id_range`), and a refusal is not retried. Needs idgen 0.7.0 on the server.
    pub machine_id: Option<i32>,
    /// How often to heartbeat; `None`: the server's `idgen.heartbeat_interval`.
    pub heartbeat_interval: Option<Duration>,
    /// How long `start` retries what is worth retrying (`55P03`, `40001`, `55000`, lost
    /// connections, calls without an answer) and waits for the claim's `not_before`. `start`
    /// returns within `start_timeout` plus one `call_timeout` plus a second.
    pub start_timeout: Duration,
    /// How long one registry call may take, connecting included (a claim, a heartbeat, a
    /// release). Past it the statement is cancelled and its connection dropped: the claim is
    /// retried (and, should it still commit, released), the heartbeat counts as failed and is
    /// retried on a new connection, the release is given up. `shutdown` returns within two of
    /// these. The connection gets TCP keepalives and a TCP user timeout of about this long
    /// unless the connection string sets them (`keepalives_idle`, `tcp_user_timeout`, ...).
    pub call_timeout: Duration,
    /// How far the wall clock may step back behind the last ID before `next_id` refuses
    /// ([`Error::Clock`]) instead of waiting until it is back; the same default as the
    /// backends' `idgen.max_clock_backward` (2 s). Both outcomes are counted
    /// ([`Metrics::clock`]) and reported with every heartbeat.
    pub max_clock_backward: Duration,
    /// Told about every change of [`Status`].
    pub on_status_change: Option<StatusHook>,
    /// The wall clock IDs are stamped with and watermarks are read from (the system clock).
    pub wall_clock: WallClockFn,
}

impl Config {
    pub fn new(conninfo: &str, service: &str, host: &str, port: i32) -> Config {
        Config {
            conninfo: conninfo.to_owned(),
            service: service.to_owned(),
            host: host.to_owned(),
            port,
            machine_id: None,
            heartbeat_interval: None,
            start_timeout: Duration::from_secs(60),
            call_timeout: Duration::from_secs(5),
            max_clock_backward: Duration::from_millis(MAX_CLOCK_BACKWARD_DEFAULT_MS as u64),
            on_status_change: None,
            wall_clock: Arc::new(system_unix_ms),
        }
    }
}

/// Where the node's lease stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Inside its lease: `next_id` issues.
    Live,
    /// No heartbeat succeeded before the lease's deadline: `next_id` refuses until one does.
    Expired,
    /// A heartbeat was refused: the id moved (`55000`), the watermark was refused (`22023`) or
    /// the role may no longer act for the service (`42501`). Stopped for good: the server's
    /// message and DETAIL, and its SQLSTATE.
    Lost { sqlstate: String, detail: String },
    /// `shutdown` was called.
    Stopped,
    /// The heartbeat thread died: stopped for good.
    HeartbeatDied,
}

impl Status {
    /// The status as one word, as the sidecar (`/status`, `/metrics`) and the Python package say it:
    /// `live`, `expired`, `lost`, `stopped`, `heartbeat_died`.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Live => "live",
            Status::Expired => "expired",
            Status::Lost { .. } => "lost",
            Status::Stopped => "stopped",
            Status::HeartbeatDied => "heartbeat_died",
        }
    }
}

/// Why `next_id`, `start` or `shutdown` failed.
#[derive(Debug)]
pub enum Error {
    /// The lease passed its deadline without a successful heartbeat. Not final: the node resumes
    /// if a heartbeat succeeds and it still owns its id.
    LeaseExpired,
    /// The node's clock reads at or past what the registry holds for it (`bound_unix_ms`: the
    /// watermark of its last answered report plus the lease granted with it): the clock jumped
    /// ahead since. Nothing was issued. Not final: the node reports its clock at once, and resumes
    /// when that report is answered.
    ClockAhead { bound_unix_ms: i64 },
    /// The lease ended for good: the id moved to another node (`55000`), or the server refused
    /// a heartbeat (see [`Status::Lost`]; `sqlstate` is the server's). Stop issuing and exit.
    OwnershipLost { sqlstate: String, detail: String },
    /// The node was shut down.
    Stopped,
    /// The heartbeat thread died; the node stopped issuing.
    HeartbeatDied,
    /// The clock is further behind the last ID than allowed, or reads a time outside the
    /// service's layout (`layout`: what the node mints with).
    Clock { stop: Stop, layout: Layout },
    /// The claim (or reading the policy) failed and was not worth retrying, or kept failing; a
    /// claim of [`Config::machine_id`] the server refused (`55006`, `22023`).
    Start(postgres::Error),
    /// The claim was granted, but the service's layout could not be read (the role does not see
    /// it in `idgen_layouts`) or is none the node can mint with: the claim was released, and no
    /// ID issued. The node never guesses a layout.
    Layout { service: String, machine_id: i32, why: String },
    /// [`Config::machine_id`] is set, and the server's idgen (`server_version`) is older than
    /// 0.7.0, which cannot claim a given machine id: nothing was claimed.
    MachineIdNotSupported { machine_id: i32, server_version: String },
    /// The release at shutdown failed (the id comes back by the tier rules).
    Release(postgres::Error),
    /// A claim (until `start_timeout`) or the release got no answer within `call_timeout` (the
    /// statement was cancelled), or its commit was not confirmed by the synchronous standby. A
    /// claim that still commits is released by the node; a release may have committed on the
    /// server it reached, or not (the id then comes back by the tiers).
    NoAnswer { call: &'static str, within: Duration },
    /// The claim's `not_before` was still ahead of the node's clock when `start_timeout` ran out
    /// (the node's clock is behind, or the id's earlier holder stamped ahead): the id was
    /// released with that watermark, and no ID issued.
    NotBeforeAhead { not_before_unix_ms: i64 },
    /// idgen is not installed in the database the connection string names.
    NotInstalled,
    /// The heartbeat's thread could not be started (a limit on processes or memory): the claim was
    /// released, and no ID issued.
    Thread(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::LeaseExpired => write!(f, "idgen: the lease passed its deadline without a successful heartbeat"),
            Error::ClockAhead { bound_unix_ms } => write!(
                f,
                "idgen: the clock reads past {} (what the registry holds for this node: its last report plus the \
                 lease): it jumped ahead; no ID was issued, and the node reports its clock now",
                idgen_core::format::iso_utc(*bound_unix_ms)
            ),
            Error::OwnershipLost { detail, .. } => write!(f, "idgen: the lease ended for good: {detail}"),
            Error::Stopped => write!(f, "idgen: the node was shut down"),
            Error::HeartbeatDied => write!(f, "idgen: the heartbeat thread died; the node stopped issuing"),
            Error::Clock { stop: Stop::ClockBehind { behind_ms, allowed_ms }, .. } => write!(
                f,
                "idgen: the clock is {behind_ms} ms behind the last ID, more than the {allowed_ms} ms the node waits \
                 out (Config::max_clock_backward); no ID was issued (IDs never reuse time: fix the clock, or wait)"
            ),
            Error::Clock { stop: Stop::ClockOutsideLayout { now_unix_ms }, layout } => write!(
                f,
                "idgen: the clock reads {} (Unix ms {now_unix_ms}), outside what the service's layout can stamp \
                 ({}: from {} to {}); no ID was issued",
                idgen_core::format::iso_utc(*now_unix_ms),
                idgen_core::messages::layout_summary(layout),
                idgen_core::format::iso_utc(layout.epoch_unix_ms),
                idgen_core::format::iso_utc(layout.last_unix_ms())
            ),
            Error::Clock { stop: Stop::LeaseCheckDue, .. } => write!(f, "idgen: the lease passed its deadline"),
            Error::Start(e) => write!(f, "idgen: could not claim a machine id: {}", describe(e)),
            Error::Layout { service, machine_id, why } => write!(
                f,
                "idgen: claimed machine id {machine_id} of service \"{service}\", but could not read the service's \
                 layout: {why}; the claim was released and no ID issued"
            ),
            Error::MachineIdNotSupported { machine_id, server_version } => write!(
                f,
                "idgen: Config::machine_id asks for machine id {machine_id}, but the server runs idgen \
                 {server_version}, which claims only ids it picks (0.7.0 claims a given one); nothing was claimed"
            ),
            Error::Release(e) => write!(f, "idgen: could not release the machine id: {}", describe(e)),
            Error::NoAnswer { call, within } => write!(
                f,
                "idgen: the {call} got no answer within {within:?} (Config::call_timeout), or its commit was not \
                 confirmed by the synchronous standby; it was cancelled, and may have committed on the server all the same"
            ),
            Error::NotBeforeAhead { not_before_unix_ms } => write!(
                f,
                "idgen: the claim's not_before ({}) was still ahead of the node's clock at Config::start_timeout; \
                 the id was released and no ID issued (check the node's clock)",
                idgen_core::format::iso_utc(*not_before_unix_ms)
            ),
            Error::NotInstalled => write!(f, "idgen: the extension idgen is not installed in that database"),
            Error::Thread(why) => write!(
                f,
                "idgen: could not start the heartbeat's thread ({why}); the claim was released and no ID issued"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// A database error with its SQLSTATE, message and DETAIL; other errors with their cause.
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({}) {detail}", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// What a service exports about its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metrics {
    pub machine_id: i32,
    pub version: i64,
    /// The service's layout and pool, as the registry recorded them: the layout IDs are minted with.
    pub layout: ServiceLayout,
    pub status: Status,
    pub ids_issued: u64,
    pub heartbeats_ok: u64,
    /// Heartbeats that failed (no connection, an error, no answer in time) and were retried.
    pub heartbeats_failed: u64,
    /// Of those, the ones that got no answer within `call_timeout`.
    pub heartbeats_timed_out: u64,
    /// Steps back of the clock waited out and refused, and exhausted sequences.
    pub clock: ClockEvents,
    /// Until the lease's deadline, on the monotonic clock; `None` once passed.
    pub time_to_deadline: Option<Duration>,
}

fn system_unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The node's wall clock ([`Config::wall_clock`]), the one IDs are stamped with, whose waits end
/// by `give_up` on the monotonic clock: a wall clock that keeps stepping back never gets back.
struct WallClock<'a> {
    now: &'a WallClockFn,
    give_up: Instant,
}

impl Clock for WallClock<'_> {
    fn now_unix_ms(&mut self) -> i64 {
        (self.now)()
    }

    fn wait_until(&mut self, unix_ms: i64) {
        let left = Duration::from_millis((unix_ms - self.now_unix_ms()).max(0) as u64);
        std::thread::sleep(left.min(self.give_up.saturating_duration_since(Instant::now())));
    }

    fn may_wait(&mut self) -> bool {
        Instant::now() < self.give_up
    }
}

/// How long `start` waits for a claim's not_before at least, however late in `start_timeout` the
/// claim was granted.
const NOT_BEFORE_LEAST_WAIT: Duration = Duration::from_secs(1);

/// What a wait for the clock may take beyond the step back it waits out: the sleep's own lateness.
const WAIT_SLACK: Duration = Duration::from_millis(100);
/// How near its deadline a lease may meet its wall bound and still count as having expired rather
/// than as a clock that jumped ahead: the bound starts from the watermark read just before the
/// report was sent, so a true clock meets it a little before the deadline (by that send delay,
/// and by any drift between the wall and monotonic clocks over one lease).
const BOUND_SLACK: Duration = Duration::from_secs(1);

struct Lease {
    status: Status,
    /// Last successful heartbeat's (or the claim's) send time plus the lease it granted.
    deadline: Instant,
    /// The latest time on the node's wall clock it may stamp: the watermark of the last answered
    /// report plus the lease granted with it. The registry bounds this holder by the same sum, so a
    /// wall clock that jumps ahead after a report stamps nothing past what the registry knows; the
    /// next report moves it. `i64::MIN` before the first report.
    wall_bound_ms: i64,
    /// `next_id` met the wall bound: the heartbeat thread reports now rather than at its interval.
    report_now: bool,
    stopping: bool,
}

struct Shared {
    config: Config,
    registry: Registry,
    machine_id: i32,
    version: i64,
    /// The service's layout and pool, read from the registry after the claim.
    layout: ServiceLayout,
    /// The claim's not_before (Unix ms): the watermark while no ID has been issued.
    not_before_ms: i64,
    interval: Duration,
    generator: Mutex<Generator>,
    state: Mutex<Lease>,
    wake: Condvar,
    heartbeats_ok: AtomicU64,
    heartbeats_failed: AtomicU64,
    heartbeats_timed_out: AtomicU64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, Lease> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A heartbeat sent at `sent` was answered with `lease`: the deadline and the wall bound move.
    fn answered(&self, sent: Instant, lease: Duration, wall_bound_ms: i64) {
        self.heartbeats_ok.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        state.deadline = sent + lease;
        state.wall_bound_ms = wall_bound_ms;
    }

    fn generator(&self) -> MutexGuard<'_, Generator> {
        self.generator.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_status(&self, status: Status) {
        if Shared::transition(&mut self.state(), &status) {
            self.announce(&status);
        }
    }

    /// Moves to `status` unless the node is in a final state; whether it changed.
    fn transition(state: &mut Lease, status: &Status) -> bool {
        let final_ = matches!(state.status, Status::Lost { .. } | Status::Stopped | Status::HeartbeatDied);
        let changed = !final_ && state.status != *status;
        if changed {
            state.status = status.clone();
        }
        changed
    }

    fn announce(&self, status: &Status) {
        if let Some(hook) = &self.config.on_status_change {
            hook(status);
        }
    }

    /// What the node tells the registry: the latest time it may have stamped or its clock,
    /// whichever is later (Unix ms), and its clock counts. An ID's tick is stamped until its end
    /// (10 ms for Sonyflake), so the latest stamp is the end of the last ID's tick; before the
    /// first ID, the claim's not_before. Read under the generator's lock: no ID minted before it
    /// is later.
    fn report(&self) -> Report {
        let generator = self.generator();
        let stamped = if generator.issued() > 0 { generator.last_tick_end_unix_ms() } else { self.not_before_ms };
        Report {
            service: self.config.service.clone(),
            machine_id: self.machine_id,
            host: self.config.host.clone(),
            port: self.config.port,
            version: self.version,
            watermark_ms: stamped.max((self.config.wall_clock)()) as f64,
            clock: generator.clock_events(),
        }
    }
}

/// A heartbeat's or a release's arguments, taken at the moment it is sent.
#[derive(Clone)]
struct Report {
    service: String,
    machine_id: i32,
    host: String,
    port: i32,
    version: i64,
    watermark_ms: f64,
    clock: ClockEvents,
}

/// A service node holding one machine id of its service. Share it between threads (in an `Arc`):
/// any of them may mint, and any may shut it down while others mint.
pub struct IdgenNode {
    shared: Arc<Shared>,
    heartbeat: Mutex<Option<Heartbeat>>,
}

/// The heartbeat thread, and where it hands back its connection when it stops.
struct Heartbeat {
    thread: JoinHandle<()>,
    stopped: mpsc::Receiver<Option<Session>>,
}

struct Claimed {
    machine_id: i32,
    version: i64,
    not_before_ms: i64,
    lease: Duration,
    interval: Duration,
    sent: Instant,
    /// The service's layout and pool, read after the claim in the same session.
    layout: ServiceLayout,
}

/// Who claims: the node's identity, and the machine id it asks for, if any.
#[derive(Clone)]
struct Identity {
    service: String,
    host: String,
    port: i32,
    machine_id: Option<i32>,
}

/// A claim the server answered that leaves the node nothing to mint with. Not retried.
enum Unusable {
    /// [`Config::machine_id`] against a server before 0.7.0: nothing was claimed.
    MachineIdNotSupported { server_version: String },
    /// Claimed, but the layout could not be read or used: the claim was released.
    Layout { machine_id: i32, why: String },
}

impl Unusable {
    fn into_error(self, who: &Identity) -> Error {
        match self {
            Unusable::MachineIdNotSupported { server_version } => {
                Error::MachineIdNotSupported { machine_id: who.machine_id.unwrap_or_default(), server_version }
            }
            Unusable::Layout { machine_id, why } => Error::Layout { service: who.service.clone(), machine_id, why },
        }
    }
}

/// Claims, after making sure that `abandoned` (the backend of an earlier attempt this node gave
/// up on) runs nothing more: a claim it still ran would fence the one this attempt gets. Then
/// reads the service's layout, which the claim has fixed (before 0.7.0: the default layout).
fn claim(
    session: &mut Session,
    who: &Identity,
    abandoned: Option<Backend>,
) -> Result<Result<Claimed, Unusable>, postgres::Error> {
    if let Some(Backend { pid, started }) = abandoned {
        let wait_ms = 2_000_i64;
        session.client.query(
            "SELECT pg_catalog.pg_terminate_backend(a.pid, $3)
               FROM pg_catalog.pg_stat_get_activity($1) a
              WHERE a.backend_start OPERATOR(pg_catalog.=) $2",
            &[&pid, &started, &wait_ms],
        )?;
    }
    if who.machine_id.is_some() && !session.layouts {
        return Ok(Err(Unusable::MachineIdNotSupported { server_version: session.version.clone() }));
    }
    // Only the cadence comes from the settings; the lease is the one this claim was granted.
    let policy = session.client.query_one(
        &format!(
            "SELECT extract(epoch FROM p.heartbeat_interval)::pg_catalog.float8 FROM {idgen}.idgen_policy() p",
            idgen = session.idgen
        ),
        &[],
    )?;
    // The machine id is smallint before 0.7.0: read as integer from every version.
    let columns = "c.machine_id::pg_catalog.int4, c.version,
                    (extract(epoch FROM c.not_before) OPERATOR(pg_catalog.*) 1000)::pg_catalog.float8,
                    extract(epoch FROM c.lease_until OPERATOR(pg_catalog.-) pg_catalog.now())::pg_catalog.float8";
    let sent = Instant::now();
    let row = match who.machine_id {
        None => session.client.query_one(
            &format!(
                "SELECT {columns}
                   FROM {idgen}.idgen_claim($1::pg_catalog.text, $2::pg_catalog.text::pg_catalog.inet,
                                             $3::pg_catalog.int4) c",
                idgen = session.idgen
            ),
            &[&who.service, &who.host, &who.port],
        )?,
        Some(machine_id) => session.client.query_one(
            &format!(
                "SELECT {columns}
                   FROM {idgen}.idgen_claim($1::pg_catalog.text, $2::pg_catalog.text::pg_catalog.inet,
                                             $3::pg_catalog.int4, $4::pg_catalog.int4) c",
                idgen = session.idgen
            ),
            &[&who.service, &who.host, &who.port, &machine_id],
        )?,
    };
    let claimed = Claimed {
        machine_id: row.get(0),
        version: row.get(1),
        not_before_ms: row.get::<_, f64>(2).floor() as i64,
        lease: granted(row.get(3)),
        interval: Duration::from_secs_f64(policy.get(0)),
        sent,
        layout: ServiceLayout::DEFAULT,
    };
    let layout = if session.layouts { read_layout(session, &who.service) } else { Ok(Ok(ServiceLayout::DEFAULT)) };
    let why = match layout {
        Ok(Ok(layout)) => match fits(&layout, claimed.machine_id) {
            Ok(()) => return Ok(Ok(Claimed { layout, ..claimed })),
            Err(why) => why,
        },
        Ok(Err(why)) => why,
        // The server refused the read (a privilege taken away, say): said as it said it.
        Err(e) if !worth_retrying(&e) => describe(&e),
        // The connection failed or the server is going away: the claim is retried (the release
        // may not get through, and the id then waits for the tiers, as after a crash).
        Err(e) => {
            let _ = run_release(session, &unused_report(who, &claimed));
            return Err(e);
        }
    };
    // No ID was stamped: the claim goes back at once, with its not_before as the watermark.
    if let Err(e) = run_release(session, &unused_report(who, &claimed)) {
        return Ok(Err(Unusable::Layout {
            machine_id: claimed.machine_id,
            why: format!("{why} (and its release failed: {})", describe(&e)),
        }));
    }
    Ok(Err(Unusable::Layout { machine_id: claimed.machine_id, why }))
}

/// The row of `idgen_layouts` for `service`, which the session's claim has just fixed; `Err` with
/// the reason when the role cannot see it or it is no layout the core can mint with. The view
/// shows a service only to roles that may read it, so the read names the role.
fn read_layout(session: &mut Session, service: &str) -> Result<Result<ServiceLayout, String>, postgres::Error> {
    let row = session.client.query_one(
        &format!(
            "SELECT CURRENT_USER::pg_catalog.text,
                    pg_catalog.round(extract(epoch FROM l.epoch) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8,
                    l.time_unit_ms, l.time_bits, l.machine_bits, l.sequence_bits, l.field_order::pg_catalog.text,
                    l.pool_first, l.pool_last
               FROM (VALUES (1)) AS one (x)
               LEFT JOIN {idgen}.idgen_layouts l
                      ON l.service::pg_catalog.text OPERATOR(pg_catalog.=) $1::pg_catalog.text",
            idgen = session.idgen
        ),
        &[&service],
    )?;
    let Some(epoch_unix_ms) = row.get::<_, Option<i64>>(1) else {
        let role: String = row.get(0);
        return Ok(Err(format!(
            "role \"{role}\" does not see its row in {idgen}.idgen_layouts (the view shows a service to roles \
             granted it with idgen_grant_service, the extension's owner, superusers and pg_monitor)",
            idgen = session.idgen
        )));
    };
    let int = |ordinal: usize| row.get::<_, Option<i32>>(ordinal);
    let width = |ordinal: usize| int(ordinal).and_then(|bits| u32::try_from(bits).ok());
    let (Some(unit), Some(time), Some(machine), Some(sequence), Some(first), Some(last)) =
        (int(2), width(3), width(4), width(5), int(7), int(8))
    else {
        return Ok(Err("its row in idgen_layouts has an empty or negative part".to_owned()));
    };
    let label: Option<String> = row.get(6);
    let Some(order) = label.as_deref().and_then(FieldOrder::from_label) else {
        return Ok(Err(format!("its field order {label:?} is none this client knows")));
    };
    let layout = match Layout::new(epoch_unix_ms, i64::from(unit), time, machine, sequence, order) {
        Ok(layout) => layout,
        Err(e) => return Ok(Err(format!("its row in idgen_layouts is no layout: {e}"))),
    };
    match Pool::new(&layout, i64::from(first), i64::from(last)) {
        Ok(pool) => Ok(Ok(ServiceLayout { layout, pool })),
        Err(e) => Ok(Err(format!("its pool in idgen_layouts is outside its layout: {e}"))),
    }
}

/// Whether `machine_id` fits the machine-id field of `layout` (the registry hands out no other).
fn fits(layout: &ServiceLayout, machine_id: i32) -> Result<(), String> {
    match u16::try_from(machine_id) {
        Ok(id) if id <= layout.layout.max_machine_id() => Ok(()),
        _ => {
            Err(format!("machine id {machine_id} does not fit its {}-bit machine-id field", layout.layout.machine_bits))
        }
    }
}

/// A lease as the server granted it: `lease_until` minus the server's clock, measured from when the
/// statement was sent (no later than that clock). A heartbeat's reads the clock after the call, so it
/// is never longer than the registry's own (`lease_until - last_seen`), by which the registry bounds
/// the node's report: the wall bound built on it is never past the registry's. Never negative.
fn granted(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO)
}

impl IdgenNode {
    /// Claims a machine id (any free one, or [`Config::machine_id`]; retrying `55P03`, `40001` and
    /// lost connections with backoff, up to `config.start_timeout`), reads the service's layout in
    /// the same session, waits until the clock is past its `not_before`, reports its clock with a
    /// first heartbeat, and starts the heartbeat thread.
    pub fn start(config: Config) -> Result<IdgenNode, Error> {
        let registry = Registry::new(&config.conninfo, config.call_timeout).map_err(Error::Start)?;
        let who = Identity {
            service: config.service.clone(),
            host: config.host.clone(),
            port: config.port,
            machine_id: config.machine_id,
        };
        let give_up = Instant::now() + config.start_timeout;
        let mut backoff = Duration::from_millis(50);
        let mut abandoned = None;
        let (client, claimed) = loop {
            let attempt = registry.call(
                None,
                registry.deadline(),
                {
                    let who = who.clone();
                    move |session| claim(session, &who, abandoned)
                },
                {
                    // A claim that commits after the node gave up on it: nobody will use it.
                    let (registry, who) = (registry.clone(), who.clone());
                    move |c, claimed: Result<Claimed, Unusable>| {
                        if let Ok(claimed) = claimed {
                            release_unused(&registry, c, &who, &claimed)
                        }
                    }
                },
            );
            match attempt {
                (client, Ok(Ok(claimed))) => break (client, claimed),
                (_, Ok(Err(unusable))) => return Err(unusable.into_error(&who)),
                (_, Err(e)) if e.retryable() && Instant::now() + backoff < give_up => {
                    if let CallError::Unanswered { backend: Some(backend) } = e {
                        abandoned = Some(backend);
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                (_, Err(e)) => {
                    return Err(match e {
                        CallError::NotConnected(e) | CallError::Failed(e) => Error::Start(e),
                        CallError::Unanswered { .. } => Error::NoAnswer { call: "claim", within: config.call_timeout },
                        CallError::NotInstalled => Error::NotInstalled,
                    })
                }
            }
        };
        // No ID at or before not_before: earlier holders may have stamped up to it. Waited for
        // within start_timeout (and a second at least, for a claim granted at its very end); past
        // it the claim goes back, with not_before as its watermark.
        let give_up = give_up.max(Instant::now() + NOT_BEFORE_LEAST_WAIT);
        let mut clock = WallClock { now: &config.wall_clock, give_up };
        while clock.now_unix_ms() <= claimed.not_before_ms {
            if !clock.may_wait() {
                let (registry, who) = (registry.clone(), who.clone());
                if let Some(session) = client {
                    release_unused(&registry, session, &who, &claimed);
                }
                return Err(Error::NotBeforeAhead { not_before_unix_ms: claimed.not_before_ms });
            }
            clock.wait_until(claimed.not_before_ms + 1);
        }
        let max_backward_ms = config.max_clock_backward.as_millis().min(i64::MAX as u128) as i64;
        // The layout is the registry's, read after the claim; `claim` checked that the id fits it.
        let generator =
            Generator::new(claimed.layout.layout, claimed.machine_id as u16, claimed.not_before_ms, max_backward_ms);
        let interval = config.heartbeat_interval.unwrap_or(claimed.interval);
        let shared = Arc::new(Shared {
            config,
            registry,
            machine_id: claimed.machine_id,
            version: claimed.version,
            layout: claimed.layout,
            not_before_ms: claimed.not_before_ms,
            interval,
            generator: Mutex::new(generator),
            state: Mutex::new(Lease {
                status: Status::Live,
                deadline: claimed.sent + claimed.lease,
                wall_bound_ms: i64::MIN,
                report_now: false,
                stopping: false,
            }),
            wake: Condvar::new(),
            heartbeats_ok: AtomicU64::new(0),
            heartbeats_failed: AtomicU64::new(0),
            heartbeats_timed_out: AtomicU64::new(0),
        });
        let client = first_report(&shared, client, give_up)?;
        let (hand_back, stopped) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new().name(format!("idgen-heartbeat-{}", shared.machine_id)).spawn({
            let shared = shared.clone();
            move || {
                let client = heartbeat_loop(shared, client);
                let _ = hand_back.send(client);
            }
        });
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                // No heartbeat, no IDs: the claim is released (with its not_before: nothing was
                // stamped), as far as a release can still run.
                let unused = Report { watermark_ms: shared.not_before_ms as f64, ..shared.report() };
                let _ = release(&shared.registry, None, shared.registry.deadline(), &unused);
                return Err(Error::Thread(e.to_string()));
            }
        };
        Ok(IdgenNode { shared, heartbeat: Mutex::new(Some(Heartbeat { thread, stopped })) })
    }

    /// The next ID. Never waits on the network; refuses once the lease has passed its deadline,
    /// the lease ended, the node stopped, or its heartbeat died.
    pub fn next_id(&self) -> Result<i64, Error> {
        // The status is read under the generator's lock, which `shutdown` takes to stop the node:
        // an ID minted by a thread racing the shutdown is in the watermark it releases with.
        let mut generator = self.shared.generator();
        let deadline = {
            let state = self.shared.state();
            match &state.status {
                Status::Live | Status::Expired => state.deadline,
                Status::Lost { sqlstate, detail } => {
                    return Err(Error::OwnershipLost { sqlstate: sqlstate.clone(), detail: detail.clone() })
                }
                Status::Stopped => return Err(Error::Stopped),
                Status::HeartbeatDied => return Err(Error::HeartbeatDied),
            }
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::LeaseExpired);
        }
        // The generator stops at the same deadline on the wall clock it stamps with, and never at
        // or past the wall bound (what the registry holds for this node), and waits (for a step
        // back, or the next millisecond) no longer than it may wait out a step back, nor past them.
        let give_up = deadline.min(now + self.shared.config.max_clock_backward + WAIT_SLACK);
        let mut clock = WallClock { now: &self.shared.config.wall_clock, give_up };
        let wall_bound_ms = self.shared.state().wall_bound_ms;
        let wall_deadline_ms = (clock.now_unix_ms() + (deadline - now).as_millis() as i64).min(wall_bound_ms);
        let layout = self.shared.layout.layout;
        generator.next_id(&mut clock, wall_deadline_ms).map_err(|stop| match stop {
            Stop::LeaseCheckDue if clock.now_unix_ms() >= wall_bound_ms => {
                let now_unix_ms = clock.now_unix_ms();
                if now_unix_ms > layout.last_unix_ms() {
                    // Past what the layout can stamp: no report would help (the registry refuses it).
                    return Error::Clock { stop: Stop::ClockOutsideLayout { now_unix_ms }, layout };
                }
                // Report the clock now, and resume once answered.
                self.shared.state().report_now = true;
                self.shared.wake.notify_all();
                if Instant::now() + BOUND_SLACK >= deadline {
                    Error::LeaseExpired
                } else {
                    Error::ClockAhead { bound_unix_ms: wall_bound_ms }
                }
            }
            Stop::LeaseCheckDue => Error::LeaseExpired,
            other => Error::Clock { stop: other, layout },
        })
    }

    pub fn machine_id(&self) -> i32 {
        self.shared.machine_id
    }

    /// The service's layout (the one IDs are minted with) and pool, as the registry recorded them
    /// when the node claimed.
    pub fn layout(&self) -> ServiceLayout {
        self.shared.layout
    }

    pub fn version(&self) -> i64 {
        self.shared.version
    }

    pub fn status(&self) -> Status {
        self.shared.state().status.clone()
    }

    pub fn metrics(&self) -> Metrics {
        let (status, deadline) = {
            let state = self.shared.state();
            (state.status.clone(), state.deadline)
        };
        let (ids_issued, clock) = {
            let generator = self.shared.generator();
            (generator.issued(), generator.clock_events())
        };
        Metrics {
            machine_id: self.shared.machine_id,
            version: self.shared.version,
            layout: self.shared.layout,
            status,
            ids_issued,
            heartbeats_ok: self.shared.heartbeats_ok.load(Ordering::Relaxed),
            heartbeats_failed: self.shared.heartbeats_failed.load(Ordering::Relaxed),
            heartbeats_timed_out: self.shared.heartbeats_timed_out.load(Ordering::Relaxed),
            clock,
            time_to_deadline: deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()),
        }
    }

    /// Stops issuing (threads minting meanwhile get [`Error::Stopped`]), stops the heartbeat, then
    /// releases the id with the node's watermark, which bounds every ID it issued. Returns within
    /// two `call_timeout`s plus `max_clock_backward`, whatever the database and the clock do: a
    /// thread inside `next_id` may wait out a step back first, then the heartbeat gets one
    /// `call_timeout` to hand back its connection, the release the rest. `Ok(false)`: the id
    /// had already moved (nothing to release).
    pub fn shutdown(&self) -> Result<bool, Error> {
        let taken = self.heartbeat.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        let Some(heartbeat) = taken else { return Err(Error::Stopped) };
        // Stop issuing first (a final status stays as it is), under the generator's lock so that
        // no thread is between its status check and its stamp; then stop the heartbeat.
        let (lost, stopped, give_up) = {
            let _generator = self.shared.generator();
            let give_up = Instant::now() + 2 * self.shared.registry.timeout;
            let mut state = self.shared.state();
            let lost = matches!(state.status, Status::Lost { .. });
            let stopped = Shared::transition(&mut state, &Status::Stopped);
            state.stopping = true;
            (lost, stopped, give_up)
        };
        if stopped {
            self.shared.announce(&Status::Stopped);
        }
        self.shared.wake.notify_all();
        // A heartbeat in flight ends by its own deadline; one that does not hand back in time is
        // left to finish on its own (it mints nothing).
        let client = match heartbeat.stopped.recv_timeout(self.shared.registry.timeout) {
            Ok(client) => {
                let _ = heartbeat.thread.join();
                client
            }
            Err(_) => None,
        };
        if lost {
            return Ok(false);
        }
        let report = self.shared.report();
        let deadline = give_up.min(self.shared.registry.deadline());
        // The heartbeat's connection may have died unnoticed (a restart between heartbeats): a
        // connection error is worth one new connection (which finds the primary).
        let (_, released) = match client {
            Some(c) => match release(&self.shared.registry, Some(c), deadline, &report) {
                (_, Err(e)) if e.connection_lost() => release(&self.shared.registry, None, give_up, &report),
                done => done,
            },
            None => release(&self.shared.registry, None, give_up, &report),
        };
        released.map_err(|e| match e {
            CallError::NotConnected(e) | CallError::Failed(e) => Error::Release(e),
            CallError::Unanswered { .. } => Error::NoAnswer { call: "release", within: self.shared.registry.timeout },
            CallError::NotInstalled => Error::NotInstalled,
        })
    }
}

impl Drop for IdgenNode {
    fn drop(&mut self) {
        let running = self.heartbeat.get_mut().map(|h| h.is_some()).unwrap_or(true);
        if running {
            let _ = self.shutdown();
        }
    }
}

/// Marks the node dead if the heartbeat thread unwinds: no generator outlives its heartbeat.
struct DeathWatch(Arc<Shared>);

impl Drop for DeathWatch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.set_status(Status::HeartbeatDied);
        }
    }
}

/// Reports to the registry before the node issues its first ID: a heartbeat with its watermark (its
/// clock). The claim took no report from the node, so until one is answered the registry bounds
/// what this holder may stamp by the server's clock; a node whose clock is far ahead would stamp
/// past that bound, and a later holder of the id, cut off from this one, would repeat its IDs.
/// Retries what is worth retrying until `give_up`; on any other failure the claim is released
/// (with its `not_before`: nothing was stamped) and the node does not start.
fn first_report(shared: &Shared, mut client: Option<Session>, give_up: Instant) -> Result<Option<Session>, Error> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let sent = Instant::now();
        let (session, result) = heartbeat(shared, client.take(), sent + shared.registry.timeout);
        client = session;
        let failed = match result {
            Ok((lease, wall_bound_ms)) => {
                shared.answered(sent, lease, wall_bound_ms);
                return Ok(client);
            }
            Err(e) if e.retryable() && Instant::now() + backoff < give_up => {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
            Err(CallError::Failed(e)) if lease_ended(&e) => {
                Error::OwnershipLost { sqlstate: code(&e), detail: refusal(&e) }
            }
            Err(CallError::NotConnected(e) | CallError::Failed(e)) => Error::Start(e),
            Err(CallError::Unanswered { .. }) => {
                Error::NoAnswer { call: "first heartbeat", within: shared.config.call_timeout }
            }
            Err(CallError::NotInstalled) => Error::NotInstalled,
        };
        let unused = Report { watermark_ms: shared.not_before_ms as f64, ..shared.report() };
        let _ = release(&shared.registry, client, shared.registry.deadline(), &unused);
        return Err(failed);
    }
}

/// Heartbeats every interval; on failure reconnects and retries (every quarter interval, at most a
/// second apart) until it succeeds. Returns its connection for the release.
fn heartbeat_loop(shared: Arc<Shared>, mut client: Option<Session>) -> Option<Session> {
    let _watch = DeathWatch(shared.clone());
    let retry = (shared.interval / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut next = Instant::now() + shared.interval;
    loop {
        {
            let mut state = shared.state();
            while !state.stopping && !state.report_now {
                let now = Instant::now();
                if now >= next {
                    break;
                }
                state = shared.wake.wait_timeout(state, next - now).unwrap_or_else(|p| p.into_inner()).0;
            }
            if state.stopping {
                return client;
            }
            state.report_now = false;
        }
        let sent = Instant::now();
        // Only the server's answer to the heartbeat itself can end the lease: a connection that
        // cannot be made (refused, or not permitted) is retried like one that broke, and so is a
        // heartbeat that got no answer in time (whatever it did on the server, the node's deadline
        // only moves on an answer).
        let (session, result) = heartbeat(&shared, client.take(), sent + shared.registry.timeout);
        client = session;
        match result {
            Ok((lease, wall_bound_ms)) => {
                shared.answered(sent, lease, wall_bound_ms);
                shared.set_status(Status::Live);
                next = sent + shared.interval;
            }
            Err(CallError::Failed(e)) if lease_ended(&e) => {
                shared.set_status(Status::Lost { sqlstate: code(&e), detail: refusal(&e) });
                return client;
            }
            Err(e) => {
                shared.heartbeats_failed.fetch_add(1, Ordering::Relaxed);
                if matches!(e, CallError::Unanswered { .. }) {
                    shared.heartbeats_timed_out.fetch_add(1, Ordering::Relaxed);
                }
                client = None;
                if Instant::now() >= shared.state().deadline {
                    shared.set_status(Status::Expired);
                }
                next = Instant::now() + retry;
            }
        }
    }
}

/// Whether a heartbeat's error ends the lease for good: the id moved (`55000`), the server refused
/// the watermark (`22xxx`: the node must not go on stamping past what it could report), or the role
/// may no longer act for the service (`42501`). Anything else (a lost connection, a busy server) is
/// retried until the deadline.
fn lease_ended(e: &postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        let code = code.code();
        code == "55000" || code == "42501" || code.starts_with("22")
    })
}

/// The SQLSTATE of a refusal (`lease_ended`'s errors all have one).
fn code(e: &postgres::Error) -> String {
    e.code().map(|c| c.code().to_owned()).unwrap_or_default()
}

/// What the server said when it refused a heartbeat: its DETAIL when the id moved (it names the new
/// holder), its message and DETAIL otherwise.
fn refusal(e: &postgres::Error) -> String {
    let Some(db) = e.as_db_error() else { return e.to_string() };
    match (db.code().code(), db.detail()) {
        ("55000", Some(detail)) => detail.to_owned(),
        (code, Some(detail)) => format!("{} ({code}) {detail}", db.message()),
        (code, None) => format!("{} ({code})", db.message()),
    }
}

/// Releases the id with the node's watermark; false when it had already moved.
fn release(
    registry: &Registry,
    session: Option<Session>,
    deadline: Instant,
    report: &Report,
) -> (Option<Session>, Result<bool, CallError>) {
    let r = report.clone();
    registry.call(session, deadline, move |session| run_release(session, &r), |_, _| {})
}

/// The release statement, on `session`.
fn run_release(session: &mut Session, r: &Report) -> Result<bool, postgres::Error> {
    let row = session.client.query_one(
        &format!(
            "SELECT {idgen}.idgen_release($1::pg_catalog.text, $2::{machine_id},
                    $3::pg_catalog.text::pg_catalog.inet, $4::pg_catalog.int4, $5::pg_catalog.int8,
                    pg_catalog.to_timestamp($6::pg_catalog.float8 OPERATOR(pg_catalog./) 1000))",
            idgen = session.idgen,
            machine_id = session.machine_id_type()
        ),
        &[&r.service, &r.machine_id, &r.host, &r.port, &r.version, &r.watermark_ms],
    )?;
    Ok(row.get(0))
}

/// What a claim nobody used is released with: its not_before as the watermark (no ID was
/// stamped, and none at or before it).
fn unused_report(who: &Identity, claimed: &Claimed) -> Report {
    Report {
        service: who.service.clone(),
        machine_id: claimed.machine_id,
        host: who.host.clone(),
        port: who.port,
        version: claimed.version,
        watermark_ms: claimed.not_before_ms as f64,
        clock: ClockEvents::default(),
    }
}

/// Releases a claim nobody used (it committed after the node gave up on it, or the node gave up
/// waiting for its not_before). Bounded like any call; if it fails, the id comes back by the tiers.
fn release_unused(registry: &Registry, session: Session, who: &Identity, claimed: &Claimed) {
    let _ = release(registry, Some(session), registry.deadline(), &unused_report(who, claimed));
}

/// A heartbeat with the node's watermark (and, from idgen 0.6.0 on, its clock counts); the lease
/// it granted (a reload may have shortened it) and the wall bound that answer sets: the watermark
/// reported plus that lease.
fn heartbeat(
    shared: &Shared,
    session: Option<Session>,
    deadline: Instant,
) -> (Option<Session>, Result<(Duration, i64), CallError>) {
    let r = shared.report();
    let reported_ms = r.watermark_ms as i64;
    let counts = [r.clock.backward_waits, r.clock.backward_refusals, r.clock.sequence_exhaustions]
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    shared.registry.call(
        session,
        deadline,
        move |session| {
            let row = if session.heartbeat_counts {
                session.client.query_one(
                    &format!(
                        "SELECT extract(epoch FROM {idgen}.idgen_heartbeat($1::pg_catalog.text, $2::{machine_id},
                                $3::pg_catalog.text::pg_catalog.inet, $4::pg_catalog.int4, $5::pg_catalog.int8,
                                pg_catalog.to_timestamp($6::pg_catalog.float8 OPERATOR(pg_catalog./) 1000),
                                $7::pg_catalog.int8, $8::pg_catalog.int8, $9::pg_catalog.int8)
                                OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())::pg_catalog.float8",
                        idgen = session.idgen,
                        machine_id = session.machine_id_type()
                    ),
                    &[
                        &r.service,
                        &r.machine_id,
                        &r.host,
                        &r.port,
                        &r.version,
                        &r.watermark_ms,
                        &counts[0],
                        &counts[1],
                        &counts[2],
                    ],
                )?
            } else {
                session.client.query_one(
                    &format!(
                        "SELECT extract(epoch FROM {idgen}.idgen_heartbeat($1::pg_catalog.text, $2::{machine_id},
                                $3::pg_catalog.text::pg_catalog.inet, $4::pg_catalog.int4, $5::pg_catalog.int8,
                                pg_catalog.to_timestamp($6::pg_catalog.float8 OPERATOR(pg_catalog./) 1000))
                                OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())::pg_catalog.float8",
                        idgen = session.idgen,
                        machine_id = session.machine_id_type()
                    ),
                    &[&r.service, &r.machine_id, &r.host, &r.port, &r.version, &r.watermark_ms],
                )?
            };
            let lease = granted(row.get(0));
            Ok((lease, reported_ms.saturating_add(lease.as_millis() as i64)))
        },
        |_, _| {},
    )
}
