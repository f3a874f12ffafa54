//! `idgen_client._native`: the Python package's one implementation of idgen's client contract is
//! the Rust crate's (`idgen_client::IdgenNode`); this module only carries it across. Every call that
//! may wait (the claim, `next_id` waiting out a step back of the clock, the metrics behind it, the
//! release) lets go of the GIL, so other Python threads run meanwhile ([`without_gil`]). Errors are
//! raised as the classes of `idgen_client/errors.py`, with the SQLSTATE and the server's DETAIL
//! where there is one.

use idgen_client::{Config, Error, IdgenNode, Metrics, ServiceLayout, Status, Stop};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Threads of this process inside a call that let go of the GIL.
static WITHOUT_GIL: AtomicUsize = AtomicUsize::new(0);
/// Set by the package's atexit hook: from then on no call lets go of the GIL.
static EXITING: AtomicBool = AtomicBool::new(false);

/// `f` without the GIL, unless the interpreter is on its way out. CPython before 3.14 ends a
/// daemon thread that takes the GIL back during finalization with `pthread_exit`, which unwinds
/// through these Rust frames and aborts the process ("exception not rethrown"), releases undone.
/// So the package's atexit hook (idgen_client/__init__.py) sets [`EXITING`], closes every node, and
/// waits, the GIL let go, until [`WITHOUT_GIL`] is 0: by finalization no thread is out here. Both
/// the hook's flag and this count change under the GIL, so one of them sees the other.
fn without_gil<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    if EXITING.load(Ordering::SeqCst) {
        return f();
    }
    WITHOUT_GIL.fetch_add(1, Ordering::SeqCst);
    let out = py.detach(f);
    WITHOUT_GIL.fetch_sub(1, Ordering::SeqCst);
    out
}

/// The atexit hook's first step: no call lets go of the GIL from now on.
#[pyfunction]
fn _exiting() {
    EXITING.store(true, Ordering::SeqCst);
}

/// How many threads are inside a call without the GIL (the atexit hook waits for 0).
#[pyfunction]
fn _threads_without_gil() -> usize {
    WITHOUT_GIL.load(Ordering::SeqCst)
}

/// In a forked child (`os.register_at_fork`): only the forking thread lives on, and it is not out
/// without the GIL; the parent's count means nothing here.
#[pyfunction]
fn _after_fork_in_child() {
    WITHOUT_GIL.store(0, Ordering::SeqCst);
}

/// A started node. `frozen`: every method takes `&self`, so threads share one node without
/// Python-side borrow checks (`IdgenNode` is made to be shared).
///
/// A node belongs to the process that started it. `fork()` copies its generator into the child,
/// but not its heartbeat thread: a child that minted would repeat the parent's IDs, and one that
/// released (its `Drop`, a `with` block ending in both processes) would free the id the parent
/// still mints with, under a watermark short of the parent's IDs. In a child every call that
/// mints or releases is refused (`NodeForked`), and dropping the node there leaves it alone.
#[pyclass(module = "idgen_client._native", name = "Node", subclass, frozen, weakref)]
struct Node {
    /// Always `Some` until dropped; taken (and forgotten) by `Drop` in a forked child.
    inner: Option<IdgenNode>,
    service: String,
    /// The process that started the node.
    owner: u32,
}

impl Node {
    /// The node, in the process that started it.
    fn node(&self, py: Python<'_>) -> PyResult<&IdgenNode> {
        let here = std::process::id();
        if here != self.owner {
            return Err(error(
                py,
                "NodeForked",
                &format!(
                    "idgen: this node was started by process {} and this is process {here}, a fork of it: a node \
                     does not cross fork() (the child would repeat the parent's IDs); start a node in each process \
                     after the fork",
                    self.owner
                ),
                None,
                None,
            ));
        }
        Ok(self.inner.as_ref().expect("a node's IdgenNode is there until it is dropped"))
    }
}

impl Node {
    /// The node, for what reads plain fields only (its identity and layout): in a fork too. What
    /// takes the node's locks (status, metrics) goes through [`Node::node`]: a fork may have copied
    /// a lock another thread held, and would wait for ever.
    fn shared(&self) -> &IdgenNode {
        self.inner.as_ref().expect("a node's IdgenNode is there until it is dropped")
    }

    fn forked(&self) -> bool {
        std::process::id() != self.owner
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else { return };
        if self.forked() {
            // A fork's copy: releasing it would free the parent's id.
            std::mem::forget(inner);
        } else if EXITING.load(Ordering::SeqCst) {
            drop(inner);
        } else {
            // A node never closed is released here (IdgenNode's Drop): without the GIL, which a
            // release may hold up to two call timeouts.
            Python::attach(|py| without_gil(py, move || drop(inner)));
        }
    }
}

/// The most IDs one `next_ids` call mints: a batch is held in memory until it is returned.
const MAX_BATCH: usize = 1_000_000;

/// Seconds, as Python passes them, as a Duration from `min` to `max` seconds.
fn seconds_arg(name: &str, value: f64, min: f64, max: f64) -> PyResult<Duration> {
    if !(min..=max).contains(&value) {
        return Err(PyValueError::new_err(format!("{name} must be from {min} to {max} seconds, not {value}")));
    }
    Ok(Duration::from_secs_f64(value))
}

/// The ranges of the times a node takes, in seconds. A day bounds the waits; `call_timeout` is
/// also a TCP keepalive idle time, which Linux caps at 32767 s; `max_clock_backward` is the
/// backends' `idgen.max_clock_backward` range; heartbeats no closer than 50 ms.
const START_TIMEOUT_MAX: f64 = 86_400.0;
const CALL_TIMEOUT_RANGE: (f64, f64) = (0.001, 3_600.0);
const MAX_CLOCK_BACKWARD_MAX: f64 = 60.0;
const HEARTBEAT_INTERVAL_RANGE: (f64, f64) = (0.05, 86_400.0);

#[pymethods]
impl Node {
    /// Claims a machine id of `service`, reports the node's clock, and returns once it may mint
    /// (`IdgenNode::start`). Raises a `StartError` (or a subclass) when it cannot.
    #[new]
    #[pyo3(signature = (dsn, service, host, port, *, machine_id=None, heartbeat_interval=None,
                        start_timeout=60.0, call_timeout=5.0, max_clock_backward=2.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dsn: &str,
        service: &str,
        host: &str,
        port: i32,
        machine_id: Option<i32>,
        heartbeat_interval: Option<f64>,
        start_timeout: f64,
        call_timeout: f64,
        max_clock_backward: f64,
    ) -> PyResult<Node> {
        let mut config = Config::new(dsn, service, host, port);
        config.machine_id = machine_id;
        let (beat_min, beat_max) = HEARTBEAT_INTERVAL_RANGE;
        config.heartbeat_interval =
            heartbeat_interval.map(|s| seconds_arg("heartbeat_interval", s, beat_min, beat_max)).transpose()?;
        config.start_timeout = seconds_arg("start_timeout", start_timeout, 0.0, START_TIMEOUT_MAX)?;
        let (call_min, call_max) = CALL_TIMEOUT_RANGE;
        config.call_timeout = seconds_arg("call_timeout", call_timeout, call_min, call_max)?;
        config.max_clock_backward = seconds_arg("max_clock_backward", max_clock_backward, 0.0, MAX_CLOCK_BACKWARD_MAX)?;
        let started = without_gil(py, || IdgenNode::start(config));
        match started {
            Ok(inner) => Ok(Node { inner: Some(inner), service: service.to_owned(), owner: std::process::id() }),
            Err(e) => Err(raise(py, e, None)),
        }
    }

    /// The next ID. Never waits on the network; waits out a step back of the clock up to
    /// `max_clock_backward`.
    fn next_id(&self, py: Python<'_>) -> PyResult<i64> {
        let inner = self.node(py)?;
        without_gil(py, || inner.next_id()).map_err(|e| raise(py, e, Some(inner)))
    }

    /// `n` IDs (0 to [`MAX_BATCH`]), in increasing order; all or none (on a refusal, the IDs minted
    /// before it are not handed out, and none of them is used elsewhere).
    fn next_ids(&self, py: Python<'_>, n: usize) -> PyResult<Vec<i64>> {
        if n > MAX_BATCH {
            return Err(PyValueError::new_err(format!(
                "next_ids takes at most {MAX_BATCH} IDs at a time, not {n} (a batch is held in memory until returned)"
            )));
        }
        let inner = self.node(py)?;
        let minted = without_gil(py, || (0..n).map(|_| inner.next_id()).collect::<Result<Vec<i64>, Error>>());
        minted.map_err(|e| raise(py, e, Some(inner)))
    }

    /// Stops issuing (other threads' `next_id` raise `NodeStopped`), then releases the machine id
    /// with a watermark that bounds every ID issued. True when released, False when the id had
    /// already moved. A second call raises `NodeStopped`.
    fn shutdown(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.node(py)?;
        without_gil(py, || inner.shutdown()).map_err(|e| raise(py, e, None))
    }

    #[getter]
    fn service(&self) -> &str {
        &self.service
    }

    #[getter]
    fn machine_id(&self) -> i32 {
        self.shared().machine_id()
    }

    #[getter]
    fn version(&self) -> i64 {
        self.shared().version()
    }

    /// "live", "expired", "lost", "stopped" or "heartbeat_died"; "forked" in a forked child.
    #[getter]
    fn status(&self) -> &'static str {
        if self.forked() {
            return "forked";
        }
        self.shared().status().word()
    }

    /// The service's layout and pool, as the registry recorded them.
    #[getter]
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        layout_dict(py, &self.shared().layout())
    }

    /// The node's counters and lease, as a dict (`idgen_client.Metrics` reads it).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.node(py)?;
        // It takes the generator's lock, which a thread waiting out a step back of the clock holds.
        let metrics = without_gil(py, || inner.metrics());
        metrics_dict(py, &metrics)
    }

    /// How many IDs the Rust crate mints in `seconds` on this node, in one Rust loop without the
    /// GIL: the benchmark's yardstick for what the Python calls cost (scripts/bench_python.sh).
    fn _mint_for(&self, py: Python<'_>, seconds: f64) -> PyResult<u64> {
        let inner = self.node(py)?;
        let until = std::time::Instant::now() + seconds_arg("seconds", seconds, 0.0, 60.0)?;
        without_gil(py, || {
            let mut minted = 0u64;
            while std::time::Instant::now() < until {
                for _ in 0..1000 {
                    inner.next_id()?;
                }
                minted += 1000;
            }
            Ok(minted)
        })
        .map_err(|e| raise(py, e, Some(inner)))
    }

    /// The parts of an ID of this node's layout: (unix_ms, machine_id, sequence).
    fn parts(&self, id: i64) -> PyResult<(i64, i64, i64)> {
        let layout = self.shared().layout().layout;
        let parts = layout.decompose(id).map_err(|e| PyValueError::new_err(format!("id {id}: {e}")))?;
        Ok((layout.unix_ms_of(parts.ticks), i64::from(parts.machine_id), i64::from(parts.sequence)))
    }
}

fn layout_dict<'py>(py: Python<'py>, service: &ServiceLayout) -> PyResult<Bound<'py, PyDict>> {
    let l = &service.layout;
    let d = PyDict::new(py);
    d.set_item("epoch_unix_ms", l.epoch_unix_ms)?;
    d.set_item("time_unit_ms", l.time_unit_ms)?;
    d.set_item("time_bits", l.time_bits)?;
    d.set_item("machine_bits", l.machine_bits)?;
    d.set_item("sequence_bits", l.sequence_bits)?;
    d.set_item("field_order", l.order.label())?;
    d.set_item("pool_first", service.pool.first)?;
    d.set_item("pool_last", service.pool.last)?;
    Ok(d)
}

fn metrics_dict<'py>(py: Python<'py>, m: &Metrics) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("machine_id", m.machine_id)?;
    d.set_item("version", m.version)?;
    d.set_item("status", m.status.word())?;
    d.set_item("ids_issued", m.ids_issued)?;
    d.set_item("heartbeats_ok", m.heartbeats_ok)?;
    d.set_item("heartbeats_failed", m.heartbeats_failed)?;
    d.set_item("heartbeats_timed_out", m.heartbeats_timed_out)?;
    d.set_item("clock_backward_waits", m.clock.backward_waits)?;
    d.set_item("clock_backward_refusals", m.clock.backward_refusals)?;
    d.set_item("sequence_exhaustions", m.clock.sequence_exhaustions)?;
    d.set_item("time_to_deadline", m.time_to_deadline.map(|t| t.as_secs_f64()))?;
    Ok(d)
}

/// The class of `idgen_client.errors` an error is raised as, and its SQLSTATE and DETAIL.
fn classify(e: &Error, node: Option<&IdgenNode>) -> (&'static str, Option<String>, Option<String>) {
    let db = |e: &postgres::Error| {
        (e.code().map(|c| c.code().to_owned()), e.as_db_error().and_then(|d| d.detail().map(str::to_owned)))
    };
    match e {
        Error::LeaseExpired => ("LeaseExpired", None, None),
        Error::ClockAhead { .. } => ("ClockAhead", None, None),
        Error::OwnershipLost { sqlstate, detail } => ("OwnershipLost", Some(sqlstate.clone()), Some(detail.clone())),
        Error::Stopped => match node.map(IdgenNode::status) {
            // A node stopped because its heartbeat was refused says so, whoever asks.
            Some(Status::Lost { sqlstate, detail }) => ("OwnershipLost", Some(sqlstate), Some(detail)),
            _ => ("NodeStopped", None, None),
        },
        Error::HeartbeatDied => ("HeartbeatDied", None, None),
        Error::Clock { stop: Stop::ClockBehind { .. }, .. } => ("ClockBehind", None, None),
        Error::Clock { .. } => ("ClockOutsideLayout", None, None),
        Error::Start(pg) => {
            let (sqlstate, detail) = db(pg);
            ("StartError", sqlstate, detail)
        }
        Error::Layout { .. } => ("LayoutError", None, None),
        Error::MachineIdNotSupported { .. } => ("StartError", None, None),
        Error::Release(pg) => {
            let (sqlstate, detail) = db(pg);
            ("ReleaseError", sqlstate, detail)
        }
        Error::NoAnswer { .. } => ("NoAnswer", None, None),
        Error::NotBeforeAhead { .. } => ("NotBeforeAhead", None, None),
        Error::NotInstalled => ("NotInstalled", None, None),
        Error::Thread(_) => ("StartError", None, None),
    }
}

/// The error as an instance of its `idgen_client.errors` class.
fn raise(py: Python<'_>, e: Error, node: Option<&IdgenNode>) -> PyErr {
    let (class, sqlstate, detail) = classify(&e, node);
    error(py, class, &e.to_string(), sqlstate, detail)
}

/// `idgen_client.errors`, taken when this module loads (the package imports it first).
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An instance of `idgen_client.errors.<class>`. Made without running Python code (the classes
/// have no `__init__` of their own; the attributes are set on the instance), so that no thread
/// can be ended inside these frames at interpreter exit (see [`without_gil`]).
fn error(py: Python<'_>, class: &str, message: &str, sqlstate: Option<String>, detail: Option<String>) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let errors = ERRORS.get(py).expect("idgen_client._native loads after idgen_client.errors").bind(py);
        let value = errors.getattr(class)?.call1((PyString::new(py, message),))?;
        value.setattr("message", message)?;
        value.setattr("sqlstate", sqlstate)?;
        value.setattr("detail", detail)?;
        Ok(PyErr::from_value(value))
    })();
    made.unwrap_or_else(|failed| failed)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let errors = m.py().import("idgen_client.errors")?;
    let _ = ERRORS.set(m.py(), errors.unbind());
    m.add_class::<Node>()?;
    m.add_function(wrap_pyfunction!(_exiting, m)?)?;
    m.add_function(wrap_pyfunction!(_threads_without_gil, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
