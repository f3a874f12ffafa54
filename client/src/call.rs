//! Registry calls that end by a deadline, whatever the database or the network does.
//!
//! A call runs on a thread of its own and the caller waits for it until the deadline. Past it, the
//! caller cancels the statement (a cancel request, as libpq's `PQcancel`), gives the connection up
//! and goes on; the thread ends when the server or the kernel lets go of it. That bounds what a
//! statement timeout cannot: a commit waiting for a synchronous standby that never answers, a
//! dead peer whose socket still reads as open, a connect to a host that does not answer. TCP
//! keepalives and a TCP user timeout (unless the connection string sets its own) let those
//! abandoned connections die soon after.
//!
//! A result the node cannot trust is not taken: one that arrives after the caller gave up, and
//! one whose commit waited for a synchronous standby until the wait was cancelled (by this node's
//! cancel or anybody's `pg_cancel_backend`: the server then commits locally, with a WARNING, and a
//! failover to the standby loses the write). It goes to the call's `late` handler, which undoes
//! what it must (a claim is released), and the caller sees the call as unanswered.
//!
//! Every session knows, from the moment it connects, where idgen is installed: calls name its
//! functions through that schema, so that nothing a lower role creates on the `search_path`
//! answers in their place.

use postgres::error::{DbError, SqlState};
use postgres::{CancelToken, Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How a registry call ended, when it did not succeed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No connection could be made (refused, not permitted, no primary among the hosts).
    NotConnected(postgres::Error),
    /// Connected, but idgen is not installed in that database.
    NotInstalled,
    /// The server answered with an error, or the connection failed.
    Failed(postgres::Error),
    /// No answer by the deadline (the statement was cancelled and its connection dropped), or
    /// an answer whose commit a standby never confirmed. `backend` may still run it.
    Unanswered { backend: Option<Backend> },
}

impl CallError {
    /// Worth another try: a lock held elsewhere, a serialisation failure, an id not usable yet
    /// (`55000` from a claim), a server shutting down or read-only, a lost connection (no
    /// SQLSTATE at all), or no answer.
    pub(crate) fn retryable(&self) -> bool {
        match self {
            CallError::Unanswered { .. } => true,
            CallError::NotInstalled => false,
            CallError::NotConnected(e) | CallError::Failed(e) => worth_retrying(e),
        }
    }

    /// No connection, or the connection itself failed (no SQLSTATE): a new one may work.
    pub(crate) fn connection_lost(&self) -> bool {
        matches!(self, CallError::NotConnected(_)) || matches!(self, CallError::Failed(e) if e.code().is_none())
    }
}

/// Whether a failed statement is worth another try: see [`CallError::retryable`].
pub(crate) fn worth_retrying(e: &postgres::Error) -> bool {
    match e.code() {
        Some(code) => matches!(code.code(), "55P03" | "40001" | "55000" | "57P01" | "57P03" | "25006"),
        None => true,
    }
}

/// A server process that ran a session, as the server names it (its pid alone may be reused, or
/// belong to another server after a failover).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backend {
    pub(crate) pid: i32,
    pub(crate) started: SystemTime,
}

/// A registry connection, and what it learnt when it connected.
pub(crate) struct Session {
    pub(crate) client: Client,
    /// The schema idgen is installed in, quoted for SQL: calls name idgen's functions through it.
    pub(crate) idgen: String,
    /// The installed idgen's version, as `pg_extension.extversion` reads ("0.7.0").
    pub(crate) version: String,
    /// The installed idgen's heartbeat takes the clock counts (0.6.0 and later).
    pub(crate) heartbeat_counts: bool,
    /// The installed idgen keeps a layout per service (`idgen_layouts`), takes and returns machine
    /// ids as `integer`, and claims a given machine id (0.7.0 and later).
    pub(crate) layouts: bool,
    pub(crate) backend: Backend,
    /// Set by the notice callback when a commit's wait for a synchronous standby was cancelled.
    unconfirmed: Arc<AtomicBool>,
}

impl Session {
    /// How a call casts a machine id bound as `int4` to the installed idgen's parameter type:
    /// `integer` from 0.7.0, `smallint` before.
    pub(crate) fn machine_id_type(&self) -> &'static str {
        if self.layouts {
            "pg_catalog.int4"
        } else {
            "pg_catalog.int4::pg_catalog.int2"
        }
    }
}

/// Where the registry is and how long a call may take.
#[derive(Clone)]
pub(crate) struct Registry {
    config: postgres::Config,
    pub(crate) timeout: Duration,
}

/// The keys a libpq-style connection string (`key=value ...`) or URL (`...?key=value&...`) sets.
fn given_keys(conninfo: &str) -> Vec<String> {
    conninfo
        .split(|c: char| c.is_whitespace() || c == '?' || c == '&')
        .filter_map(|word| word.split_once('=').map(|(key, _)| key.trim().to_owned()))
        .collect()
}

/// The socket settings a registry connection gets unless the connection string sets them: a
/// connect no longer than a call, and a dead peer noticed within about a call's time.
fn bounded_sockets(conninfo: &str, config: &mut postgres::Config, timeout: Duration) {
    let keys = given_keys(conninfo);
    let given = |key: &str| keys.iter().any(|k| k == key);
    if !given("connect_timeout") {
        config.connect_timeout(timeout);
    }
    if !given("keepalives_idle") {
        config.keepalives_idle(timeout.max(Duration::from_secs(1)));
    }
    if !given("keepalives_interval") {
        config.keepalives_interval(Duration::from_secs(1));
    }
    if !given("keepalives_retries") {
        config.keepalives_retries(3);
    }
    if !given("tcp_user_timeout") {
        config.tcp_user_timeout(timeout);
    }
}

/// The WARNING a server sends when a commit's wait for a synchronous standby is cancelled: the
/// transaction committed here and may be lost by a failover. Matched on the server's English
/// text (`lc_messages` is the superuser's to set): its SQLSTATE is the generic 01000.
fn commit_unconfirmed(notice: &DbError) -> bool {
    *notice.code() == SqlState::WARNING
        && (notice.message().contains("wait for synchronous replication")
            || notice.detail().is_some_and(|d| d.contains("committed locally")))
}

/// What a session reads when it connects: where idgen is, its version, and which server process
/// serves it. Every name is pg_catalog's.
const CONNECTED: &str = "\
SELECT pg_catalog.quote_ident(n.nspname), e.extversion, a.pid, a.backend_start
  FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a
  LEFT JOIN (pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace)
         ON e.extname OPERATOR(pg_catalog.=) 'idgen'";

/// Whether idgen `version` ("0.6.0") is `major.minor` or later.
fn at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Whether idgen `version` takes the heartbeat's clock counts.
fn has_heartbeat_counts(version: &str) -> bool {
    at_least(version, 0, 6)
}

/// Whether idgen `version` has layouts per service, integer machine ids and the claim of a given id.
fn has_layouts(version: &str) -> bool {
    at_least(version, 0, 7)
}

fn connect(config: &postgres::Config) -> Result<Session, CallError> {
    let unconfirmed = Arc::new(AtomicBool::new(false));
    let mut config = config.clone();
    config.notice_callback({
        let unconfirmed = unconfirmed.clone();
        move |notice| {
            if commit_unconfirmed(&notice) {
                unconfirmed.store(true, Ordering::SeqCst);
            }
        }
    });
    let mut client = config.connect(NoTls).map_err(CallError::NotConnected)?;
    let row = client.query_one(CONNECTED, &[]).map_err(CallError::Failed)?;
    let (Some(idgen), Some(version)) = (row.get::<_, Option<String>>(0), row.get::<_, Option<String>>(1)) else {
        return Err(CallError::NotInstalled);
    };
    let backend = Backend { pid: row.get(2), started: row.get(3) };
    Ok(Session {
        client,
        heartbeat_counts: has_heartbeat_counts(&version),
        layouts: has_layouts(&version),
        version,
        idgen,
        backend,
        unconfirmed,
    })
}

/// What the waiting caller and the call's thread share. One per call, behind its mutex, written
/// twice at most: the size of its largest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Slot<T> {
    Running(Option<(CancelToken, Backend)>),
    Done(Option<Session>, Result<T, CallError>),
    /// The caller gave up: the thread hands a late result to `late`.
    Abandoned,
}

impl Registry {
    pub(crate) fn new(conninfo: &str, timeout: Duration) -> Result<Registry, postgres::Error> {
        let mut config: postgres::Config = conninfo.parse()?;
        bounded_sockets(conninfo, &mut config, timeout);
        Ok(Registry { config, timeout })
    }

    /// The deadline of a call started now.
    pub(crate) fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// Runs `work` on `session` (on a new connection if `None`), by `deadline`. Gives the session
    /// back when it is still usable. A result that comes after the deadline, or whose commit was
    /// not confirmed, goes to `late`.
    pub(crate) fn call<T, W, L>(
        &self,
        session: Option<Session>,
        deadline: Instant,
        work: W,
        late: L,
    ) -> (Option<Session>, Result<T, CallError>)
    where
        T: Send + 'static,
        W: FnOnce(&mut Session) -> Result<T, postgres::Error> + Send + 'static,
        L: FnOnce(Session, T) + Send + 'static,
    {
        let slot = Arc::new((Mutex::new(Slot::Running(None)), Condvar::new()));
        let spawned = std::thread::Builder::new().name("idgen-registry-call".into()).spawn({
            let slot = slot.clone();
            let config = self.config.clone();
            move || run(&slot, session, &config, work, late)
        });
        if spawned.is_err() {
            // No thread (a process or memory limit): the call never ran, as if unanswered; the
            // session went with the closure.
            return (None, Err(CallError::Unanswered { backend: None }));
        }
        let (lock, done) = &*slot;
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if matches!(*state, Slot::Done(..)) {
                let Slot::Done(session, result) = std::mem::replace(&mut *state, Slot::Abandoned) else {
                    unreachable!()
                };
                return (session, result);
            }
            let now = Instant::now();
            if now >= deadline {
                let Slot::Running(running) = std::mem::replace(&mut *state, Slot::Abandoned) else { unreachable!() };
                drop(state);
                let backend = running.map(|(token, backend)| {
                    // The cancel opens a connection of its own, which may hang as well.
                    let _ = std::thread::Builder::new()
                        .name("idgen-registry-cancel".into())
                        .spawn(move || drop(token.cancel_query(NoTls)));
                    backend
                });
                return (None, Err(CallError::Unanswered { backend }));
            }
            state = done.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// The call's thread: connects if it must, runs the work, and hands over the result, or to
/// `late` when the caller has given up or the commit was not confirmed.
fn run<T, W, L>(slot: &(Mutex<Slot<T>>, Condvar), session: Option<Session>, config: &postgres::Config, work: W, late: L)
where
    W: FnOnce(&mut Session) -> Result<T, postgres::Error>,
    L: FnOnce(Session, T),
{
    let (lock, done) = slot;
    let finish = |session: Option<Session>, result: Result<T, CallError>| {
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, Slot::Running(_)) {
            *state = Slot::Done(session, result);
            done.notify_all();
        }
    };
    let mut session = match session.map_or_else(|| connect(config), Ok) {
        Ok(session) => session,
        Err(e) => return finish(None, Err(e)),
    };
    {
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            Slot::Running(running) => *running = Some((session.client.cancel_token(), session.backend)),
            // Given up while connecting: nothing was sent.
            _ => return,
        }
    }
    session.unconfirmed.store(false, Ordering::SeqCst);
    let result = work(&mut session);
    let unconfirmed = session.unconfirmed.load(Ordering::SeqCst);
    let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
    let abandoned = !matches!(*state, Slot::Running(_));
    if !abandoned && !unconfirmed {
        let usable = !session.client.is_closed();
        *state = Slot::Done(usable.then_some(session), result.map_err(CallError::Failed));
        done.notify_all();
        return;
    }
    if !abandoned {
        let backend = Some(session.backend);
        *state = Slot::Done(None, Err(CallError::Unanswered { backend }));
        done.notify_all();
    }
    drop(state);
    if let Ok(value) = result {
        late(session, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_string_wins_over_the_bounded_defaults() {
        let timeout = Duration::from_secs(3);
        let own = Registry::new("host=h connect_timeout=9 tcp_user_timeout=7", timeout).unwrap();
        assert_eq!(own.config.get_connect_timeout(), Some(&Duration::from_secs(9)));
        assert_eq!(own.config.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
        let bounded = Registry::new("host=h application_name=x_connect_timeout", timeout).unwrap();
        assert_eq!(bounded.config.get_connect_timeout(), Some(&timeout), "a key is a key, not a substring");
        assert_eq!(bounded.config.get_tcp_user_timeout(), Some(&timeout));
        assert_eq!(bounded.config.get_keepalives_idle(), timeout);
        assert_eq!(bounded.config.get_keepalives_retries(), Some(3));
        let url = Registry::new("postgresql://u@h/db?connect_timeout=4&application_name=a", timeout).unwrap();
        assert_eq!(url.config.get_connect_timeout(), Some(&Duration::from_secs(4)));
    }

    #[test]
    fn the_heartbeat_counts_come_with_0_6_0() {
        assert!(!has_heartbeat_counts("0.5.1"));
        assert!(!has_heartbeat_counts("0.4.0"));
        assert!(has_heartbeat_counts("0.6.0"));
        assert!(has_heartbeat_counts("0.10.0"));
        assert!(has_heartbeat_counts("1.0.0"));
    }

    #[test]
    fn layouts_and_integer_machine_ids_come_with_0_7_0() {
        assert!(!has_layouts("0.6.0"));
        assert!(!has_layouts("0.5.1"));
        assert!(has_layouts("0.7.0"));
        assert!(has_layouts("0.10.0"));
        assert!(has_layouts("1.0.0"));
    }

    #[test]
    fn a_call_that_cannot_connect_ends_by_its_deadline() {
        // A port nothing listens on: refused at once, or at the latest by the deadline (the
        // assertion is only that the call returns, with an error).
        let registry = Registry::new("host=127.0.0.1 port=1 user=nobody", Duration::from_secs(2)).unwrap();
        let (session, result) = registry.call(None, registry.deadline(), |_| Ok(()), |_, _| {});
        assert!(session.is_none());
        assert!(result.is_err());
    }
}
