//! idgen-client: a service node that keeps idgen's client contract, and mints
//! IDs in-process with the generator the database's own backends run
//! (`idgen_core::generator`), cut by the service's layout as the registry recorded it,
//! so IDs of services and of `DEFAULT idgen_next_id()` never collide.
//!
//! ```no_run
//! use idgen_client::{Config, IdgenNode};
//! let config = Config::new(
//!     "host=db1,db2 port=5432,5432 user=orders_svc dbname=shop target_session_attrs=read-write",
//!     "orders", "10.0.0.5", 8080,
//! );
//! let mut node = IdgenNode::start(config)?;
//! let id = node.next_id()?;          // never waits on the network
//! node.shutdown()?;                  // stops issuing, then releases with the watermark
//! # Ok::<(), idgen_client::Error>(())
//! ```
//!
//! The contract, and where each part lives:
//! - **every registry call ends by a deadline** (`Config::call_timeout`, 5 s): past it the
//!   statement is cancelled and its connection dropped, so a primary waiting for a synchronous
//!   standby that is gone, or a peer that died without closing, cannot hang the node; TCP
//!   keepalives and a TCP user timeout are set unless the connection string sets its own;
//! - **claim** at start, retrying `55P03`, `40001`, lost connections and calls that timed out
//!   with backoff ([`IdgenNode::start`], within `start_timeout` plus one `call_timeout`); a claim
//!   that commits after the node gave up on it is released; then wait until the clock is past
//!   `not_before`. [`Config::machine_id`] claims one given id instead (a fleet adopting the ids it
//!   already uses); the server's refusal (`55006`: held, naming the holder; `22023`: outside the
//!   pool) is not retried; then **report before the first ID**: one heartbeat with the node's clock
//!   as its watermark, answered before `start` returns (the claim takes no report, and a clock far
//!   ahead of the server's would otherwise stamp past what the registry holds);
//! - **the layout comes from the registry**, never from the node's configuration: after the claim,
//!   in the same session, the node reads its service's row of `idgen_layouts` (fixed by the first
//!   claim, never changed after) and mints with it ([`IdgenNode::layout`]); a role that cannot see
//!   the row fails `start` (the claim released) rather than guess. Against idgen before 0.7.0:
//!   the one layout those servers have;
//! - **heartbeat** every interval (the server's `idgen.heartbeat_interval` unless set) on a
//!   thread of its own, with the node's watermark: the end of its last ID's tick (a tick of 10 ms
//!   is stamped until its last millisecond) or its clock, whichever is later; reconnect and retry when the connection
//!   fails (a multi-host connection string follows the primary);
//! - **one clock policy for every holder**: a step back of the wall clock is waited out up to
//!   `Config::max_clock_backward` (2 s, as `idgen.max_clock_backward` for backends) and refused
//!   beyond it ([`Error::Clock`]); both, and exhausted sequences, are counted
//!   ([`Metrics::clock`]) and reported with every heartbeat;
//! - **the lease is measured on a monotonic clock** from the moment the last successful
//!   heartbeat (or the claim) was *sent*, as each answer grants it (a reload that shortens
//!   leases reaches the node once the grant it holds has ended): `next_id` refuses once it has
//!   passed, and resumes if a later heartbeat succeeds (the node still owns the id);
//! - **a refused heartbeat** (`55000`: the id moved; `22023`: its watermark refused; `42501`: the
//!   grant revoked) stops the node for good, with the server's DETAIL;
//! - **the last word is true**: `shutdown` stops every minting thread before it reads the
//!   watermark it releases with, so that watermark bounds every ID the node issued;
//! - **no zombie generator**: if the heartbeat thread panics, the node stops issuing;
//! - **release on shutdown** ([`IdgenNode::shutdown`], and `Drop`), with the watermark, within
//!   two `call_timeout`s plus `max_clock_backward`, whatever the database and the clock do;
//! - **on SIGTERM as on SIGINT** (and SIGHUP): install [`ShutdownSignal`] before the claim, wait
//!   for it, then shut down. Kubernetes, systemd and `docker stop` send SIGTERM; a process that
//!   leaves it to the default action dies unreleased, and its id waits for the take-back tiers.
//!   A second signal while the release runs does not cut it short (see [`signals`]).
//!
//! ```no_run
//! use idgen_client::{Config, IdgenNode, ShutdownSignal};
//! let signal = ShutdownSignal::install()?;   // SIGINT, SIGTERM, SIGHUP
//! let node = IdgenNode::start(Config::new("host=db1 dbname=shop", "orders", "10.0.0.5", 8080))?;
//! signal.wait();                             // mint on other threads meanwhile
//! node.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`sidecar`] serves a node's IDs over HTTP (`idgen-node --listen`, docs/kubernetes.md).

mod call;
mod node;
pub mod sidecar;
pub mod signals;

pub use idgen_core::generator::{ClockEvents, Stop};
pub use idgen_core::layout::{FieldOrder, Layout, Pool, Preset, ServiceLayout};
pub use node::{Config, Error, IdgenNode, Metrics, Status, StatusHook, WallClockFn};
pub use signals::{ShutdownSignal, SignalError};
