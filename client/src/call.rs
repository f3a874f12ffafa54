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
//! A result that arrives after the caller gave up is not trusted (a commit cancelled while it
//! waited for a synchronous standby is committed here and possibly nowhere else): it goes to the
//! call's `late` handler, which undoes what it must (a claim is released).

use postgres::{CancelToken, Client, NoTls};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How a registry call ended, when it did not succeed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No connection could be made (refused, not permitted, no primary among the hosts).
    NotConnected(postgres::Error),
    /// The server answered with an error, or the connection failed.
    Failed(postgres::Error),
    /// No answer by the deadline: the statement was cancelled and its connection dropped.
    TimedOut,
}

impl CallError {
    /// Worth another try: a lock held elsewhere, a serialisation failure, a server shutting down
    /// or read-only, a lost connection (no SQLSTATE at all), or no answer in time.
    pub(crate) fn retryable(&self) -> bool {
        match self {
            CallError::TimedOut => true,
            CallError::NotConnected(e) | CallError::Failed(e) => match e.code() {
                Some(code) => matches!(code.code(), "55P03" | "40001" | "57P01" | "57P03" | "25006"),
                None => true,
            },
        }
    }

    /// No connection, or the connection itself failed (no SQLSTATE): a new one may work.
    pub(crate) fn connection_lost(&self) -> bool {
        matches!(self, CallError::NotConnected(_)) || matches!(self, CallError::Failed(e) if e.code().is_none())
    }

    /// The error, when there is one.
    pub(crate) fn into_error(self) -> Option<postgres::Error> {
        match self {
            CallError::NotConnected(e) | CallError::Failed(e) => Some(e),
            CallError::TimedOut => None,
        }
    }
}

/// Where the registry is and how long a call may take.
#[derive(Clone)]
pub(crate) struct Registry {
    config: postgres::Config,
    pub(crate) timeout: Duration,
}

/// The socket settings a registry connection gets unless the connection string sets them: a
/// connect no longer than a call, and a dead peer noticed within about a call's time.
fn bounded_sockets(conninfo: &str, config: &mut postgres::Config, timeout: Duration) {
    let given = |key: &str| conninfo.contains(key);
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

/// What the waiting caller and the call's thread share.
enum Slot<T> {
    Running(Option<CancelToken>),
    Done(Option<Client>, Result<T, CallError>),
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
    /// back when it is still usable. A result that comes after the deadline goes to `late`.
    pub(crate) fn call<T, W, L>(
        &self,
        session: Option<Client>,
        deadline: Instant,
        work: W,
        late: L,
    ) -> (Option<Client>, Result<T, CallError>)
    where
        T: Send + 'static,
        W: FnOnce(&mut Client) -> Result<T, postgres::Error> + Send + 'static,
        L: FnOnce(Client, T) + Send + 'static,
    {
        let slot = Arc::new((Mutex::new(Slot::Running(None)), Condvar::new()));
        let spawned = std::thread::Builder::new().name("idgen-registry-call".into()).spawn({
            let slot = slot.clone();
            let config = self.config.clone();
            move || run(&slot, session, &config, work, late)
        });
        if let Err(e) = spawned {
            // No thread: nothing ran.
            panic!("idgen: could not start a registry call's thread: {e}");
        }
        let (lock, done) = &*slot;
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if matches!(*state, Slot::Done(..)) {
                let Slot::Done(client, result) = std::mem::replace(&mut *state, Slot::Abandoned) else {
                    unreachable!()
                };
                return (client, result);
            }
            let now = Instant::now();
            if now >= deadline {
                let Slot::Running(token) = std::mem::replace(&mut *state, Slot::Abandoned) else { unreachable!() };
                drop(state);
                if let Some(token) = token {
                    // The cancel opens a connection of its own, which may hang as well.
                    let _ = std::thread::Builder::new()
                        .name("idgen-registry-cancel".into())
                        .spawn(move || drop(token.cancel_query(NoTls)));
                }
                return (None, Err(CallError::TimedOut));
            }
            state = done.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// The call's thread: connects if it must, runs the work, and hands over the result, or to
/// `late` when the caller has given up.
fn run<T, W, L>(slot: &(Mutex<Slot<T>>, Condvar), session: Option<Client>, config: &postgres::Config, work: W, late: L)
where
    W: FnOnce(&mut Client) -> Result<T, postgres::Error>,
    L: FnOnce(Client, T),
{
    let (lock, done) = slot;
    let connected = match session {
        Some(client) => Ok(client),
        None => config.connect(NoTls),
    };
    let mut client = match connected {
        Ok(client) => client,
        Err(e) => {
            let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
            if matches!(*state, Slot::Running(_)) {
                *state = Slot::Done(None, Err(CallError::NotConnected(e)));
                done.notify_all();
            }
            return;
        }
    };
    {
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            Slot::Running(token) => *token = Some(client.cancel_token()),
            // Given up while connecting: nothing was sent.
            _ => return,
        }
    }
    let result = work(&mut client);
    let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
    if matches!(*state, Slot::Running(_)) {
        let usable = !client.is_closed();
        *state = Slot::Done(usable.then_some(client), result.map_err(CallError::Failed));
        done.notify_all();
    } else {
        drop(state);
        if let Ok(value) = result {
            late(client, value);
        }
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
        let bounded = Registry::new("host=h", timeout).unwrap();
        assert_eq!(bounded.config.get_connect_timeout(), Some(&timeout));
        assert_eq!(bounded.config.get_tcp_user_timeout(), Some(&timeout));
        assert_eq!(bounded.config.get_keepalives_idle(), timeout);
        assert_eq!(bounded.config.get_keepalives_retries(), Some(3));
    }

    #[test]
    fn a_call_that_cannot_connect_ends_by_its_deadline() {
        // A port nothing listens on, on a host that answers: refused at once, or at the latest by
        // the deadline (the assertion is only that the call returns, with an error).
        let registry = Registry::new("host=127.0.0.1 port=1 user=nobody", Duration::from_secs(2)).unwrap();
        let (client, result) = registry.call(None, registry.deadline(), |_| Ok(()), |_, _| {});
        assert!(client.is_none());
        assert!(result.is_err());
    }
}
