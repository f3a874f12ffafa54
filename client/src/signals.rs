//! The shutdown signals a service node releases on: SIGINT (Ctrl-C), SIGTERM (what Kubernetes,
//! systemd and `docker stop` send) and SIGHUP (its terminal went away), caught by `ctrlc` with its
//! `termination` feature.
//!
//! ```no_run
//! use idgen_client::{Config, IdgenNode, ShutdownSignal};
//! let signal = ShutdownSignal::install()?;     // before the claim: no signal is missed
//! let node = IdgenNode::start(Config::new("host=db1 dbname=shop", "orders", "10.0.0.5", 8080))?;
//! // ... mint with node.next_id() on any thread, until:
//! signal.wait();
//! node.shutdown()?;                             // stops issuing, then releases with the watermark
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The handler only counts signals and wakes the waiters: it never exits the process. So a second
//! signal while the release runs does not cut it short; the process finishes its release (one
//! statement) and exits as after the first. Only SIGKILL stops it midway, and then the release is
//! either committed whole or not at all (it is one statement): the row is then left held, as after
//! a crash, and the take-back tiers return it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The process's shutdown signals: how many have arrived, and a way to wait for them. Clone it to
/// any thread; every clone sees the same signals.
#[derive(Clone)]
pub struct ShutdownSignal(Arc<Received>);

struct Received {
    count: Mutex<u64>,
    arrived: Condvar,
}

/// Why [`ShutdownSignal::install`] failed: another handler for these signals is installed (by
/// `ctrlc::set_handler` elsewhere in the process), or the system refused one.
#[derive(Debug)]
pub struct SignalError(String);

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "idgen: could not install the shutdown signal handler: {}", self.0)
    }
}

impl std::error::Error for SignalError {}

static INSTALLED: OnceLock<Result<ShutdownSignal, String>> = OnceLock::new();

impl ShutdownSignal {
    /// Installs the process's handler for SIGINT, SIGTERM and SIGHUP. A process has one: later calls
    /// return the same handle. Install it before `IdgenNode::start`, so that a signal that comes
    /// during the claim is not missed (the default action would kill the process unreleased).
    pub fn install() -> Result<ShutdownSignal, SignalError> {
        INSTALLED
            .get_or_init(|| {
                let signal = ShutdownSignal(Arc::new(Received { count: Mutex::new(0), arrived: Condvar::new() }));
                let handler = signal.clone();
                ctrlc::set_handler(move || {
                    *handler.count() += 1;
                    handler.0.arrived.notify_all();
                })
                .map(|()| signal)
                .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(SignalError)
    }

    /// How many shutdown signals have arrived.
    pub fn received(&self) -> u64 {
        *self.count()
    }

    /// Whether a shutdown signal has arrived.
    pub fn requested(&self) -> bool {
        self.received() > 0
    }

    /// Waits until a shutdown signal has arrived (returns at once if one has).
    pub fn wait(&self) {
        let mut count = self.count();
        while *count == 0 {
            count = self.0.arrived.wait(count).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until more than `seen` signals have arrived, or `timeout` has passed; how many have
    /// arrived. `wait_beyond(0, t) > 0`: a shutdown was requested within `t`.
    pub fn wait_beyond(&self, seen: u64, timeout: Duration) -> u64 {
        let give_up = Instant::now() + timeout;
        let mut count = self.count();
        while *count <= seen {
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            count = self.0.arrived.wait_timeout(count, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        *count
    }

    fn count(&self) -> MutexGuard<'_, u64> {
        self.0.count.lock().unwrap_or_else(|p| p.into_inner())
    }
}
