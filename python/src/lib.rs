//! `idgen_client._native`: the Python package's one implementation of idgen's client contract is
//! the Rust crate's (`idgen_client::IdgenNode`); this module only carries it across. Every call that
//! may wait (the claim, `next_id` waiting out a step back of the clock, the release) lets go of the
//! GIL, so other Python threads run meanwhile. Errors are raised as the classes of
//! `idgen_client/errors.py`, with the SQLSTATE and the server's DETAIL where there is one.

use idgen_client::{Config, Error, IdgenNode, Metrics, ServiceLayout, Status, Stop};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::time::Duration;

/// A started node. `frozen`: every method takes `&self`, so threads share one node without
/// Python-side borrow checks (`IdgenNode` is made to be shared).
///
/// A node belongs to the process that started it. `fork()` copies its generator into the child,
/// but not its heartbeat thread: a child that minted would repeat the parent's IDs, and one that
/// released (its `Drop`, a `with` block ending in both processes) would free the id the parent
/// still mints with, under a watermark short of the parent's IDs. In a child every call that
/// mints or releases is refused (`NodeForked`), and dropping the node there leaves it alone.
#[pyclass(module = "idgen_client._native", name = "Node", subclass, frozen)]
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
    /// The node, for what reads it only (its identity, status, metrics): in a fork too.
    fn shared(&self) -> &IdgenNode {
        self.inner.as_ref().expect("a node's IdgenNode is there until it is dropped")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::process::id() != self.owner {
            // A fork's copy: releasing it would free the parent's id.
            std::mem::forget(self.inner.take());
        }
    }
}

/// The most IDs one `next_ids` call mints: a batch is held in memory until it is returned.
const MAX_BATCH: usize = 1_000_000;

/// Seconds, as Python passes them, as a Duration: finite and not negative.
fn seconds_arg(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!("{name} must be a finite number of seconds, at least 0, not {value}"))
    })
}

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
        config.heartbeat_interval = heartbeat_interval.map(|s| seconds_arg("heartbeat_interval", s)).transpose()?;
        if config.heartbeat_interval.is_some_and(|d| d.is_zero()) {
            return Err(PyValueError::new_err("heartbeat_interval must be more than 0 seconds"));
        }
        config.start_timeout = seconds_arg("start_timeout", start_timeout)?;
        config.call_timeout = seconds_arg("call_timeout", call_timeout)?;
        if config.call_timeout.is_zero() {
            return Err(PyValueError::new_err("call_timeout must be more than 0 seconds"));
        }
        config.max_clock_backward = seconds_arg("max_clock_backward", max_clock_backward)?;
        let started = py.detach(|| IdgenNode::start(config));
        match started {
            Ok(inner) => Ok(Node { inner: Some(inner), service: service.to_owned(), owner: std::process::id() }),
            Err(e) => Err(raise(py, e, None)),
        }
    }

    /// The next ID. Never waits on the network; waits out a step back of the clock up to
    /// `max_clock_backward`.
    fn next_id(&self, py: Python<'_>) -> PyResult<i64> {
        let inner = self.node(py)?;
        py.detach(|| inner.next_id()).map_err(|e| raise(py, e, Some(inner)))
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
        let minted = py.detach(|| (0..n).map(|_| inner.next_id()).collect::<Result<Vec<i64>, Error>>());
        minted.map_err(|e| raise(py, e, Some(inner)))
    }

    /// Stops issuing (other threads' `next_id` raise `NodeStopped`), then releases the machine id
    /// with a watermark that bounds every ID issued. True when released, False when the id had
    /// already moved. A second call raises `NodeStopped`.
    fn shutdown(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.node(py)?;
        py.detach(|| inner.shutdown()).map_err(|e| raise(py, e, None))
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

    /// "live", "expired", "lost", "stopped" or "heartbeat_died".
    #[getter]
    fn status(&self) -> &'static str {
        status_name(&self.shared().status())
    }

    /// The service's layout and pool, as the registry recorded them.
    #[getter]
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        layout_dict(py, &self.shared().layout())
    }

    /// The node's counters and lease, as a dict (`idgen_client.Metrics` reads it).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        metrics_dict(py, &self.shared().metrics())
    }

    /// How many IDs the Rust crate mints in `seconds` on this node, in one Rust loop without the
    /// GIL: the benchmark's yardstick for what the Python calls cost (scripts/bench_python.sh).
    fn _mint_for(&self, py: Python<'_>, seconds: f64) -> PyResult<u64> {
        let inner = self.node(py)?;
        let until = std::time::Instant::now() + seconds_arg("seconds", seconds)?;
        py.detach(|| {
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

fn status_name(status: &Status) -> &'static str {
    match status {
        Status::Live => "live",
        Status::Expired => "expired",
        Status::Lost { .. } => "lost",
        Status::Stopped => "stopped",
        Status::HeartbeatDied => "heartbeat_died",
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
    d.set_item("status", status_name(&m.status))?;
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
    }
}

/// The error as an instance of its `idgen_client.errors` class.
fn raise(py: Python<'_>, e: Error, node: Option<&IdgenNode>) -> PyErr {
    let (class, sqlstate, detail) = classify(&e, node);
    error(py, class, &e.to_string(), sqlstate, detail)
}

/// An instance of `idgen_client.errors.<class>`.
fn error(py: Python<'_>, class: &str, message: &str, sqlstate: Option<String>, detail: Option<String>) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let errors = py.import("idgen_client.errors")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("sqlstate", sqlstate)?;
        kwargs.set_item("detail", detail)?;
        let value = errors.getattr(class)?.call((PyString::new(py, message),), Some(&kwargs))?;
        Ok(PyErr::from_value(value))
    })();
    made.unwrap_or_else(|import_failed| import_failed)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Node>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
