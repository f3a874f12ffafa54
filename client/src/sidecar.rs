//! The sidecar: IDs over HTTP for the processes of a pod (or a host), minted by one [`IdgenNode`],
//! so they are the IDs the library gives in-process. `idgen-node --listen ADDRESS:PORT` runs it; the
//! API is in docs/kubernetes.md:
//!
//! | request | answer |
//! |---|---|
//! | `GET /id` | one ID |
//! | `GET /ids?count=N` | N IDs (1 to [`MAX_BATCH`]), in the order minted |
//! | `GET /livez` | 200 while the process serves and its node can still issue again; 503 once it cannot (the id was lost, the heartbeat died): restart it |
//! | `GET /readyz` | 200 while the node is live with at least [`READY_MARGIN`] of its lease left; 503 with the reason otherwise |
//! | `GET /status` | the node's metrics and its service's layout, as JSON |
//! | `GET /metrics` | the node's metrics in Prometheus' text format (lease left, IDs issued, heartbeats and their failures, clock events) |
//!
//! Answers are plain text (one ID per line, or one line of reason) unless JSON is asked for, by
//! `Accept: application/json` or `?format=json`. JSON gives every ID twice, as a number and as a
//! string (`{"id": 2527..., "id_str": "2527..."}`, `{"ids": [...], "ids_str": [...]}`): IDs of
//! every layout but `js_safe` go above 2^53, which JavaScript's numbers cannot hold exactly. Errors are 400 (a bad request), 404,
//! 405, and 503 when the node must not issue, with a reason code (`starting`, `shutting_down`,
//! `expired`, `lost`, `heartbeat_died`, `clock`) and the node's words:
//! `{"error": "expired", "reason": "..."}` in JSON, `expired: ...` in text.
//! `/id` and `/ids` take GET or POST; no answer may be cached (`Cache-Control: no-store`).
//!
//! Requests are read strictly: the path is one of the six above as sent (no dot segments, doubled
//! or trailing slashes, percent-encoding: 404), and the query holds only the parameters a path
//! takes, each once (`count` on `/ids`, in plain digits; `format` everywhere but `/metrics`; anything else: 400).
//!
//! ## Built for clients it cannot trust
//!
//! The listener may face a whole network (the manifest in docs/kubernetes.md listens on
//! `0.0.0.0`), so no client may hold what the others need. The server is hyper's HTTP/1.1 on a
//! tokio runtime of its own ([`IO_THREADS`] threads, started by [`Sidecar::bind`]): a connection
//! costs a task and its buffers, not a thread, so a client that stops reading stalls only its own
//! connection. What bounds each client:
//! - **one request at a time per connection**: hyper answers a connection's next request only
//!   once the answer to the last is written, and reads no further ahead than its buffer
//!   ([`MAX_REQUEST_HEAD`]); each connection's kernel send buffer is kept small, so a client that
//!   pipelines and reads nothing has one answer minted for it, and then nothing more;
//! - **timeouts** ([`WRITE_TIMEOUT`], [`ANSWER_TIMEOUT`], [`HEADER_TIMEOUT`], [`IDLE_TIMEOUT`]):
//!   an answer the client does not take (or takes too slowly), or a request begun and not
//!   finished, ends the connection with a reset, which frees what the kernel still held for it; a
//!   connection that sends nothing is closed. One task checks them all, four times a second;
//! - **bounded memory for answers** ([`ANSWER_MEMORY`]): an answer is held until its client has
//!   read it, so batches take room from a budget before they are minted, and give it back when
//!   hyper lets go of the body;
//! - **at most [`MAX_CONNECTIONS`] connections** (fewer if the process may not open that many
//!   files): a new client past the cap takes the place of the connection that has been quiet
//!   longest among those not being answered, so thousands of idle connections cost no more than
//!   the cap and cannot lock new clients out;
//! - **ID work apart from the rest**: `IdgenNode::next_id` is synchronous and fast (a few hundred
//!   nanoseconds), but it holds the generator's lock while it waits out a clock that stepped back
//!   (up to `Config::max_clock_backward`, 2 s) or the next millisecond of an exhausted sequence,
//!   so it may not run where it could stall the server. Batches are minted on blocking threads,
//!   at most `workers` requests at a time (the rest wait their turn). A small request (up to
//!   [`INLINE_MINT`] IDs) is minted on the runtime thread that read it, because handing it to a
//!   blocking thread and back costs more than the minting (single IDs came at half the rate) —
//!   but by all runtime threads except one at a time, so one always goes on accepting, reading
//!   and answering whatever `next_id` waits for. `/livez` reads the node's status alone (a lock
//!   no ID is minted under) and is answered at once; `/readyz` and `/status` read its metrics
//!   (the generator's lock too) on blocking threads of their own ([`PROBE_SLOTS`]). So the probes
//!   wait neither behind batches being minted nor behind connections that are stuck.

use crate::{Error, IdgenNode, Metrics, ServiceLayout, Status};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

/// The most IDs one request may ask for.
pub const MAX_BATCH: usize = 10_000;

/// How much of its lease a node must have left to be ready: a probe's answer should hold for a
/// moment, and `next_id` already refuses within the last millisecond before the deadline (it
/// stamps on a wall clock of whole milliseconds), so a readiness that looked at the deadline alone
/// could say ready just after an ID was refused.
pub const READY_MARGIN: Duration = Duration::from_secs(1);

/// The most connections open at once. A container's soft limit on open files is often 1,024:
/// [`Sidecar::bind`] raises it to what the cap needs when the hard limit allows, and otherwise
/// keeps the cap below it.
pub const MAX_CONNECTIONS: usize = 1024;

/// How long a write of an answer may make no progress (the client reads nothing) before the
/// connection is reset.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to read an answer whole, from the moment it is ready: one that
/// reads just enough to keep the write moving (see [`WRITE_TIMEOUT`]) is reset all the same, and
/// gives back its answer's room in [`ANSWER_MEMORY`]. The largest answer, 420 KB, takes a client
/// that reads it milliseconds.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request may take to arrive, from its first byte to the end of its head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may stay silent, neither sending nor taking anything, before it is
/// closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest request head (request line and headers) read: hyper answers 431 beyond it. The
/// sidecar's requests are a line and a few headers.
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// The runtime's threads: they accept, parse, route and write, and mint small requests
/// ([`INLINE_MINT`]), all of them but one at a time.
pub const IO_THREADS: usize = 4;

/// The most IDs a runtime thread mints itself rather than on a blocking thread (a few dozen
/// microseconds of minting, unless `next_id` waits): a handoff to a blocking thread and back
/// costs more than minting that many (single IDs over HTTP came at half the rate with each one
/// handed off, batches of 100 at two thirds). At most [`IO_THREADS`] - 1 runtime threads mint at
/// once, so that one serves on while `next_id` waits out a clock that stepped back.
pub const INLINE_MINT: usize = 256;

/// How many `/readyz` and `/status` requests read the node's metrics at once (each on a blocking
/// thread; more wait their turn, apart from the requests for IDs).
pub const PROBE_SLOTS: usize = 4;

/// How many bytes of answers may be held at once, minted and not yet taken by their clients:
/// hyper keeps a connection's answer until the client has read it, so without a bound a thousand
/// clients that ask for the largest batch in JSON and read nothing would hold 400 MiB for
/// [`WRITE_TIMEOUT`]. A batch waits for room (as long as it takes the clients that do not read to
/// be dropped, at worst); answers under [`SMALL_ANSWER`] need none, so single IDs and the probes
/// are never held up.
pub const ANSWER_MEMORY: usize = 32 << 20;

/// The size of answer that needs no room in [`ANSWER_MEMORY`]: [`MAX_CONNECTIONS`] of them hold
/// 4 MiB at most.
pub const SMALL_ANSWER: usize = 4 << 10;

/// The send buffer asked of the kernel for each connection (Linux doubles it, and no longer grows
/// it). Left to autotuning it grows to megabytes, and the kernel would take a whole answer, or
/// several, off hyper's hands for a client that reads none of it: out of [`ANSWER_MEMORY`]'s
/// reach, and out of sight of [`WRITE_TIMEOUT`] and [`ANSWER_TIMEOUT`]. 64 KiB in flight keeps a
/// connection of a millisecond's round trip at 64 MB/s, three million IDs a second in text.
const SEND_BUFFER: usize = 32 << 10;

/// File descriptors left to the rest of the process (the listener, the registry's connections,
/// stdio, the runtime's own) when the cap on connections is taken from the limit on open files.
const FD_RESERVE: u64 = 64;

/// How often timeouts are checked: each is met within this much past its time.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// How long `accept` rests after a failure (no file descriptor left, say), rather than spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// An HTTP server that answers from an [`IdgenNode`]: bound first (answering 503 `starting`), then
/// given its node ([`Sidecar::serve`]); [`Sidecar::drain`] makes it answer 503 `shutting_down`
/// while the node releases; [`Sidecar::stop`] ends it (dropping it ends it too, without waiting).
pub struct Sidecar {
    runtime: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    address: SocketAddr,
}

/// What the sidecar's tasks share.
struct Shared {
    state: State,
    /// Permits to mint a batch on a blocking thread: `workers` of them.
    mint_slots: Arc<Semaphore>,
    /// How many runtime threads are minting a small request themselves.
    minting_inline: AtomicUsize,
    /// Permits to read the node's metrics for a probe or `/status`.
    probe_slots: Arc<Semaphore>,
    /// [`ANSWER_MEMORY`], in KiB.
    answer_room: Arc<Semaphore>,
    connections: Connections,
}

struct State {
    node: OnceLock<Arc<IdgenNode>>,
    draining: AtomicBool,
}

impl Sidecar {
    /// Listens on `address` (`127.0.0.1:0` picks a free port: see [`Sidecar::local_addr`]), with
    /// up to `workers` batches minted at once on blocking threads (see the module's
    /// documentation), on a runtime of its own.
    pub fn bind(address: &str, workers: usize) -> io::Result<Sidecar> {
        let workers = workers.max(1);
        let listener = listen(address).map_err(|e| io::Error::other(format!("listen on {address}: {e}")))?;
        let local = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            // Every blocking task holds a permit first, so none waits for a thread.
            .max_blocking_threads(workers + PROBE_SLOTS)
            .thread_name("idgen-sidecar")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| io::Error::other(format!("serve on {address}: {e}")))?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener).map_err(|e| io::Error::other(format!("serve on {address}: {e}")))?
        };
        let shared = Arc::new(Shared {
            state: State { node: OnceLock::new(), draining: AtomicBool::new(false) },
            mint_slots: Arc::new(Semaphore::new(workers)),
            minting_inline: AtomicUsize::new(0),
            probe_slots: Arc::new(Semaphore::new(PROBE_SLOTS)),
            answer_room: Arc::new(Semaphore::new(ANSWER_MEMORY >> 10)),
            connections: Connections::new(connection_cap()),
        });
        let (shutdown, stopping) = watch::channel(false);
        runtime.spawn(accept(listener, shared.clone(), stopping));
        runtime.spawn(reap(shared.clone()));
        Ok(Sidecar { runtime: Some(runtime), shared, shutdown, address: local })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serves IDs from `node` from now on (once: a later node is ignored).
    pub fn serve(&self, node: Arc<IdgenNode>) {
        let _ = self.shared.state.node.set(node);
    }

    /// Answers 503 `shutting_down` to every request for IDs, and to readiness, from now on. Call it
    /// before `IdgenNode::shutdown`, which stops the node and releases its id.
    pub fn drain(&self) {
        self.shared.state.draining.store(true, Ordering::Relaxed);
    }

    /// Stops listening, closes the idle connections, lets the answers under way be written for up
    /// to [`WRITE_TIMEOUT`], then closes what is left: returns within that and two seconds. Not
    /// from within an async runtime's task (it blocks); dropping the sidecar ends it at once.
    pub fn stop(mut self) {
        let _ = self.shutdown.send(true);
        let Some(runtime) = self.runtime.take() else { return };
        let shared = self.shared.clone();
        runtime.block_on(async move {
            let closed = async {
                while shared.connections.tasks.load(Ordering::SeqCst) > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            let _ = tokio::time::timeout(WRITE_TIMEOUT + 2 * REAP_EVERY, closed).await;
        });
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(runtime) = self.runtime.take() {
            // Without waiting: a mint under way finishes on its blocking thread.
            runtime.shutdown_background();
        }
    }
}

/// A listening socket on `address`, non-blocking for the runtime. A restarted sidecar binds its
/// port while the last one's connections linger in TIME_WAIT, hence SO_REUSEADDR.
fn listen(address: &str) -> io::Result<std::net::TcpListener> {
    let addr =
        address.to_socket_addrs()?.next().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// How many connections to keep open: [`MAX_CONNECTIONS`], or fewer when the process may not
/// open that many files. A soft limit below what the cap needs is raised (to that, no further)
/// when the hard limit allows: past the limit every `accept` fails, for the probes' connections
/// as for the others.
#[cfg(unix)]
fn connection_cap() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let wanted = MAX_CONNECTIONS as u64 + FD_RESERVE;
    let limit = getrlimit(Resource::Nofile);
    let soft = match limit.current {
        Some(soft) if soft < wanted => {
            let raised = limit.maximum.map_or(wanted, |hard| hard.min(wanted));
            match setrlimit(Resource::Nofile, Rlimit { current: Some(raised), maximum: limit.maximum }) {
                Ok(()) => raised,
                Err(_) => soft,
            }
        }
        Some(soft) => soft,
        None => return MAX_CONNECTIONS,
    };
    (soft.saturating_sub(FD_RESERVE) as usize).clamp(1, MAX_CONNECTIONS)
}

#[cfg(not(unix))]
fn connection_cap() -> usize {
    MAX_CONNECTIONS
}

/// Whether `accept` failed for want of a file descriptor (the process's or the system's).
#[cfg(unix)]
fn out_of_files(e: &io::Error) -> bool {
    use rustix::io::Errno;
    Errno::from_io_error(e).is_some_and(|errno| errno == Errno::MFILE || errno == Errno::NFILE)
}

#[cfg(not(unix))]
fn out_of_files(_: &io::Error) -> bool {
    false
}

/// Milliseconds on the monotonic clock since the first reading (from 1: 0 stands for "never").
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Where a connection stands, as its timeouts and the choice of whom to close at the cap see it.
const WAITING: u8 = 0;
/// Part of a request head has come, not all of it.
const IN_HEAD: u8 = 1;
/// A request is being answered (read, routed, minted): never closed for being quiet.
const ANSWERING: u8 = 2;
/// A request for a batch waits for room in [`ANSWER_MEMORY`]: it holds nothing yet, so at the cap
/// it may be closed for a new connection like a quiet one (else a client with a thousand sockets
/// that read nothing, each asking for a batch, would leave the probes no place).
const AWAITING_ROOM: u8 = 3;

/// Why a connection was closed from outside.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Closing {
    /// An answer's write made no progress for [`WRITE_TIMEOUT`].
    WriteStalled = 1,
    /// A request head did not arrive within [`HEADER_TIMEOUT`] of its first byte.
    HeadTooSlow = 2,
    /// Nothing came or went for [`IDLE_TIMEOUT`].
    Idle = 3,
    /// At the cap, a new connection took its place.
    Evicted = 4,
    /// An answer was not taken whole within [`ANSWER_TIMEOUT`].
    AnswerNotTaken = 5,
}

/// One open connection, as its task, its socket wrapper, the reaper and `accept` see it.
struct Conn {
    phase: AtomicU8,
    /// When its current request head began (`now_ms`), while `IN_HEAD`.
    head_since: AtomicU64,
    /// When it last sent or took a byte, or an answer was ready.
    active: AtomicU64,
    /// Since when a write has been waiting for the client to read (0: none is).
    stalled_since: AtomicU64,
    /// Since when its answer has been ready, until hyper drops its body (written, or given up).
    unsent_since: AtomicU64,
    closing: AtomicU8,
    close: Notify,
}

impl Conn {
    fn new() -> Conn {
        let now = now_ms();
        Conn {
            phase: AtomicU8::new(WAITING),
            head_since: AtomicU64::new(now),
            active: AtomicU64::new(now),
            stalled_since: AtomicU64::new(0),
            unsent_since: AtomicU64::new(0),
            closing: AtomicU8::new(0),
            close: Notify::new(),
        }
    }

    /// Bytes came from the client: the first of a request starts the header timeout. Only the
    /// connection's own task moves `phase`.
    fn took_bytes(&self) {
        let now = now_ms();
        self.active.store(now, Ordering::SeqCst);
        if self.phase.load(Ordering::SeqCst) == WAITING {
            self.head_since.store(now, Ordering::SeqCst);
            self.phase.store(IN_HEAD, Ordering::SeqCst);
        }
    }

    fn wrote(&self, result: &Poll<io::Result<usize>>) {
        match result {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.stalled_since.store(0, Ordering::SeqCst);
                self.active.store(now_ms(), Ordering::SeqCst);
            }
            Poll::Pending => {
                let _ = self.stalled_since.compare_exchange(0, now_ms(), Ordering::SeqCst, Ordering::SeqCst);
            }
            _ => {}
        }
    }

    fn answering(&self) {
        self.phase.store(ANSWERING, Ordering::SeqCst);
    }

    fn awaiting_room(&self) {
        self.phase.store(AWAITING_ROOM, Ordering::SeqCst);
    }

    /// Its answer is ready, to be written (hyper writes a connection's next answer only once the
    /// last is written: one at a time).
    fn answered(&self) {
        let now = now_ms();
        self.active.store(now, Ordering::SeqCst);
        self.unsent_since.store(now, Ordering::SeqCst);
        self.phase.store(WAITING, Ordering::SeqCst);
    }

    /// Why it must close now, if it must.
    fn overdue(&self, now: u64) -> Option<Closing> {
        let past = |since: u64, limit: Duration| now.saturating_sub(since) >= limit.as_millis() as u64;
        let stalled = self.stalled_since.load(Ordering::SeqCst);
        if stalled != 0 && past(stalled, WRITE_TIMEOUT) {
            return Some(Closing::WriteStalled);
        }
        let unsent = self.unsent_since.load(Ordering::SeqCst);
        if unsent != 0 && past(unsent, ANSWER_TIMEOUT) {
            return Some(Closing::AnswerNotTaken);
        }
        match self.phase.load(Ordering::SeqCst) {
            IN_HEAD if past(self.head_since.load(Ordering::SeqCst), HEADER_TIMEOUT) => Some(Closing::HeadTooSlow),
            WAITING | IN_HEAD if past(self.active.load(Ordering::SeqCst), IDLE_TIMEOUT) => Some(Closing::Idle),
            _ => None,
        }
    }

    fn close_for(&self, why: Closing) {
        let _ = self.closing.compare_exchange(0, why as u8, Ordering::SeqCst, Ordering::SeqCst);
        self.close.notify_one();
    }

    /// Whether closing it should reset it rather than end it in order: a client that takes no
    /// answer, or sends half a request, gets no more of the kernel's memory than it has had.
    fn abortive(&self) -> bool {
        let why = self.closing.load(Ordering::SeqCst);
        why == Closing::WriteStalled as u8
            || why == Closing::AnswerNotTaken as u8
            || why == Closing::HeadTooSlow as u8
            || self.stalled_since.load(Ordering::SeqCst) != 0
            || self.unsent_since.load(Ordering::SeqCst) != 0
            || self.phase.load(Ordering::SeqCst) == IN_HEAD
    }
}

/// The open connections, at most `cap` of them.
struct Connections {
    cap: usize,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    /// Connection tasks still running, evicted ones included until they end.
    tasks: AtomicUsize,
}

impl Connections {
    fn new(cap: usize) -> Connections {
        Connections { cap, open: Mutex::new(HashMap::new()), next: AtomicU64::new(0), tasks: AtomicUsize::new(0) }
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A place for a new connection: at the cap, the one quiet longest among those not being
    /// answered is closed for it; `None` when every one is being answered (the new one is refused,
    /// at once).
    fn admit(&self) -> Option<(u64, Arc<Conn>)> {
        let mut open = self.open();
        if open.len() >= self.cap && !Connections::evict(&mut open) {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new());
        open.insert(id, conn.clone());
        self.tasks.fetch_add(1, Ordering::SeqCst);
        Some((id, conn))
    }

    /// Closes the connection quiet longest among those not being answered; whether there was one.
    fn evict(open: &mut HashMap<u64, Arc<Conn>>) -> bool {
        let quietest = open
            .iter()
            .filter(|(_, c)| c.phase.load(Ordering::SeqCst) != ANSWERING)
            .min_by_key(|(_, c)| c.active.load(Ordering::SeqCst))
            .map(|(id, _)| *id);
        let Some(conn) = quietest.and_then(|id| open.remove(&id)) else { return false };
        conn.close_for(Closing::Evicted);
        true
    }

    /// A connection's task ended.
    fn left(&self, id: u64) {
        self.open().remove(&id);
        self.tasks.fetch_sub(1, Ordering::SeqCst);
    }

    /// Closes every connection past one of its timeouts.
    fn reap(&self) {
        let now = now_ms();
        self.open().retain(|_, conn| match conn.overdue(now) {
            Some(why) => {
                conn.close_for(why);
                false
            }
            None => true,
        });
    }
}

async fn reap(shared: Arc<Shared>) {
    let mut every = tokio::time::interval(REAP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        shared.connections.reap();
    }
}

/// Accepts connections until the sidecar stops.
async fn accept(listener: TcpListener, shared: Arc<Shared>, mut stopping: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.changed() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                // Refused: every connection is being answered; this one is closed at once.
                let Some((id, conn)) = shared.connections.admit() else { continue };
                // Without it a long answer's last segment would wait for the client's delayed
                // ACK of the previous one (40 ms).
                let _ = stream.set_nodelay(true);
                let _ = SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER);
                tokio::spawn(serve(stream, id, conn, shared.clone(), stopping.clone()));
            }
            // A connection that ended before it was taken: the next one.
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset) => {}
            Err(e) => {
                // No file descriptor left (the connection waits in the backlog): free one. Rest
                // rather than spin on a listener that stays readable.
                if out_of_files(&e) {
                    Connections::evict(&mut shared.connections.open());
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// The client's socket, telling its connection's record of every byte that moves and of every
/// write that waits for the client to read.
struct Tracked {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.took_bytes();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.conn.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.conn.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Ends a connection's record when its task ends, however it ends.
struct Leaving(Arc<Shared>, u64);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.connections.left(self.1);
    }
}

/// Serves one connection until the client closes it, it is closed for a timeout or for a new
/// client, or the sidecar stops (the request being answered is answered first).
async fn serve(stream: TcpStream, id: u64, conn: Arc<Conn>, shared: Arc<Shared>, mut stopping: watch::Receiver<bool>) {
    let _leaving = Leaving(shared.clone(), id);
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let (shared, conn) = (shared.clone(), conn.clone());
            async move {
                conn.answering();
                let reply = shared.answer(&request, &conn).await;
                conn.answered();
                Ok::<_, Infallible>(reply.into_response(Some(conn)))
            }
        })
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    // The timeouts are the reaper's, measured by the socket's progress.
    http.max_buf_size(MAX_REQUEST_HEAD).header_read_timeout(None);
    // A client that shuts its side down after its request still gets its answer (the IDs are minted).
    http.half_close(true);
    let io = TokioIo::new(Tracked { stream, conn: conn.clone() });
    let mut connection = http.serve_connection(io, service);
    let mut graceful = false;
    loop {
        if !graceful && *stopping.borrow() {
            graceful = true;
            // hyper closes a connection between requests at once, and waits for the end of a
            // request head begun: that one has nothing to wait for.
            if conn.phase.load(Ordering::SeqCst) == IN_HEAD {
                break;
            }
            Pin::new(&mut connection).graceful_shutdown();
        }
        tokio::select! {
            // Done: the client closed, or an error (a bad request head hyper answered itself).
            _ = &mut connection => return,
            _ = conn.close.notified() => break,
            changed = stopping.changed(), if !graceful => {
                if changed.is_err() {
                    graceful = true;
                    Pin::new(&mut connection).graceful_shutdown();
                }
            }
        }
    }
    if conn.abortive() {
        let stream = connection.into_parts().io.into_inner().stream;
        let _ = SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    }
}

/// An answer, before it is written.
#[derive(Debug, PartialEq)]
struct Reply {
    status: u16,
    json: bool,
    body: String,
    /// Another content type than JSON's or plain text's (`/metrics`).
    content_type: Option<&'static str>,
    allow: Option<&'static str>,
    retry_after: bool,
    /// Its room in [`ANSWER_MEMORY`], given back once hyper drops the body: written, or its
    /// connection closed.
    room: Option<Room>,
}

/// Room for an answer in [`ANSWER_MEMORY`].
#[derive(Debug)]
struct Room {
    _permit: OwnedSemaphorePermit,
}

/// Replies compare by what they say.
impl PartialEq for Room {
    fn eq(&self, _: &Room) -> bool {
        true
    }
}

/// An answer's body, which holds its room as long as hyper holds any part of it, and tells its
/// connection when hyper has let go of it.
struct Body {
    bytes: Vec<u8>,
    _room: Option<Room>,
    conn: Option<Arc<Conn>>,
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(conn) = &self.conn {
            conn.unsent_since.store(0, Ordering::SeqCst);
        }
    }
}

impl Reply {
    fn ok(json: bool, body: String) -> Reply {
        Reply { status: 200, json, body, content_type: None, allow: None, retry_after: false, room: None }
    }

    /// An error: its status, a code a program can match, and a reason a person reads.
    fn error(status: u16, json: bool, code: &str, reason: &str) -> Reply {
        let body = if json {
            json!({ "error": code, "reason": reason }).to_string()
        } else {
            format!("{}: {reason}\n", code.replace('_', " "))
        };
        let retry_after = matches!(code, "starting" | "expired" | "clock");
        Reply { status, json, body, content_type: None, allow: None, retry_after, room: None }
    }

    fn bad_request(json: bool, reason: &str) -> Reply {
        Reply::error(400, json, "bad_request", reason)
    }

    /// The response to write on `conn`.
    fn into_response(self, conn: Option<Arc<Conn>>) -> Response<Full<Bytes>> {
        let content_type = match self.content_type {
            Some(content_type) => content_type,
            None if self.json => "application/json",
            None => "text/plain; charset=utf-8",
        };
        let body = Bytes::from_owner(Body { bytes: self.body.into_bytes(), _room: self.room, conn });
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = StatusCode::from_u16(self.status).expect("a status code of the sidecar");
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(allow) = self.allow {
            headers.insert(ALLOW, HeaderValue::from_static(allow));
        }
        if self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        // hyper sends the body's length as Content-Length, never chunks, however long the batch.
        response
    }
}

/// What a request asks for, read from its method, path, query and `Accept` header.
#[derive(Debug, PartialEq)]
struct Asked {
    route: Route,
    json: bool,
}

#[derive(Debug, PartialEq)]
enum Route {
    /// `/id`
    One,
    /// `/ids?count=N`
    Many(usize),
    Live,
    Ready,
    Status,
    Metrics,
}

const PATHS: &str = "/id, /ids?count=N, /livez, /readyz, /status, /metrics";

/// What of a client's text an answer repeats: enough to recognize it, never a whole long URL.
fn shown(text: &str) -> String {
    const SHOWN: usize = 64;
    if text.chars().count() <= SHOWN {
        return text.to_owned();
    }
    format!("{}...", text.chars().take(SHOWN).collect::<String>())
}

/// Whether an `Accept` header names `application/json` exactly, with a weight above 0
/// (`application/json;q=0` refuses it; `application/jsonx` is another type).
fn accepts_json(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let weight = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        media.eq_ignore_ascii_case("application/json") && weight > 0.0
    })
}

/// Reads a request; `Err` is the answer to a bad one. `path` and `query` are as sent (hyper does
/// not decode them), and must be exactly what the API names.
fn parse(method: &Method, path: &str, query: Option<&str>, accept: Option<&str>) -> Result<Asked, Reply> {
    let pairs: Vec<&str> = match query {
        None | Some("") => vec![],
        Some(query) => query.split('&').collect(),
    };
    // The format first, so that a bad request hears why in the format it asked for.
    let mut json = accept.is_some_and(accepts_json);
    match pairs.iter().find_map(|p| p.strip_prefix("format=")) {
        Some("json") => json = true,
        Some("text") => json = false,
        _ => {}
    }
    let mut route = match path {
        "/id" => Route::One,
        "/ids" => Route::Many(0),
        "/livez" => Route::Live,
        "/readyz" => Route::Ready,
        "/status" => Route::Status,
        "/metrics" => Route::Metrics,
        _ => {
            let reason = format!("no such path: {} ({PATHS})", shown(path));
            return Err(Reply::error(404, json, "not_found", &reason));
        }
    };
    let (allowed, allow): (&[Method], _) = match route {
        Route::One | Route::Many(_) => (&[Method::GET, Method::POST], "GET, POST"),
        _ => (&[Method::GET, Method::HEAD], "GET, HEAD"),
    };
    if !allowed.contains(method) {
        let reason = format!("{path} takes {allow}, not {}", shown(method.as_str()));
        let mut reply = Reply::error(405, json, "method_not_allowed", &reason);
        reply.allow = Some(allow);
        return Err(reply);
    }
    let (mut count, mut format) = (None, None);
    for pair in pairs {
        if pair.is_empty() {
            return Err(Reply::bad_request(json, "an empty parameter in the query (\"&&\", or a trailing \"&\")"));
        }
        // A parameter without "=" has an empty value, which no parameter takes.
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "count" if matches!(route, Route::Many(_)) => &mut count,
            "format" if route != Route::Metrics => &mut format,
            _ => {
                return Err(Reply::bad_request(json, &format!("unknown parameter \"{}\" for {path}", shown(name))));
            }
        };
        if slot.replace(value).is_some() {
            return Err(Reply::bad_request(json, &format!("parameter \"{name}\" given more than once")));
        }
    }
    if let Some(format) = format.filter(|f| !matches!(*f, "json" | "text")) {
        return Err(Reply::bad_request(json, &format!("format is json or text, not \"{}\"", shown(format))));
    }
    if let Route::Many(n) = &mut route {
        let Some(count) = count else {
            return Err(Reply::bad_request(json, &format!("/ids needs count=N (1 to {MAX_BATCH})")));
        };
        *n = batch_size(count).ok_or_else(|| {
            let reason = format!("count is a whole number from 1 to {MAX_BATCH}, not \"{}\"", shown(count));
            Reply::bad_request(json, &reason)
        })?;
    }
    Ok(Asked { route, json })
}

/// A count as the API writes it: decimal digits alone, no sign, no leading zero, 1 to
/// [`MAX_BATCH`]. (Rust's parser takes "+5" and "007".)
fn batch_size(count: &str) -> Option<usize> {
    if count.is_empty() || count.starts_with('0') || !count.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    count.parse().ok().filter(|n| (1..=MAX_BATCH).contains(n))
}

/// Why the node must not issue now, as (code, reason): from a refused `next_id`.
fn refusal(error: &Error) -> (&'static str, String) {
    let code = match error {
        Error::LeaseExpired => "expired",
        Error::OwnershipLost { .. } => "lost",
        Error::Stopped => return ("shutting_down", SHUTTING_DOWN.to_owned()),
        Error::HeartbeatDied => "heartbeat_died",
        Error::Clock { .. } | Error::ClockAhead { .. } => "clock",
        // Not answers of next_id.
        Error::Start(_)
        | Error::Release(_)
        | Error::NoAnswer { .. }
        | Error::NotBeforeAhead { .. }
        | Error::Layout { .. }
        | Error::MachineIdNotSupported { .. }
        | Error::NotInstalled
        | Error::Thread(_) => "unavailable",
    };
    (code, error.to_string())
}

const STARTING: &str = "the node is claiming its machine id";
const SHUTTING_DOWN: &str = "the node is stopping, and releases its machine id";

/// The node's status as `next_id` would act on it at this moment. The heartbeat thread marks a
/// lease `Expired` only when a heartbeat has failed past the deadline, so a status read alone
/// still says `Live` past it while a heartbeat hangs, or right after the process resumes from a
/// pause (SIGSTOP, a frozen VM); and says `Expired` for the moment between a heartbeat's answer
/// and its status. `next_id` goes by the deadline: so does this.
fn as_of_now(status: Status, time_to_deadline: Option<Duration>) -> Status {
    match status {
        Status::Live | Status::Expired if time_to_deadline.is_some() => Status::Live,
        Status::Live | Status::Expired => Status::Expired,
        other => other,
    }
}

/// Runs `work` on a blocking thread once `slots` has a permit for it; the permit is held until
/// the work is done, even if the client goes away meanwhile (it cannot be cut short).
async fn blocking<T: Send + 'static>(
    slots: &Arc<Semaphore>,
    json: bool,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Reply> {
    let permit = slots.clone().acquire_owned().await.expect("the sidecar's semaphores are never closed");
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
    .map_err(|e| Reply::error(500, json, "internal_error", &format!("the sidecar failed answering: {e}")))
}

/// A runtime thread minting a small request itself, counted until dropped.
struct MintingInline<'a>(&'a AtomicUsize);

impl Drop for MintingInline<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    /// Leave to mint on this runtime thread, unless every runtime thread but one is minting.
    fn mint_inline(&self) -> Option<MintingInline<'_>> {
        let counted = self
            .minting_inline
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n + 1 < IO_THREADS).then_some(n + 1));
        counted.is_ok().then(|| MintingInline(&self.minting_inline))
    }

    async fn answer(&self, request: &Request<Incoming>, conn: &Conn) -> Reply {
        let accept = request.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
        // A request target in absolute form (`GET http://host/id`) names no path of ours "as sent".
        let path = if request.uri().authority().is_some() { "" } else { request.uri().path() };
        match parse(request.method(), path, request.uri().query(), accept) {
            Ok(asked) => self.route(&asked, conn).await,
            Err(reply) => reply,
        }
    }

    async fn route(&self, asked: &Asked, conn: &Conn) -> Reply {
        let json = asked.json;
        let node = self.state.node.get().cloned();
        let draining = self.state.draining.load(Ordering::Relaxed);
        match (&asked.route, node) {
            // The node's status alone (a lock held only for moments): answered here, at once.
            (Route::Live, node) => match node.map(|n| n.status()) {
                Some(Status::Lost { sqlstate, detail }) => {
                    Reply::error(503, json, "lost", &Error::OwnershipLost { sqlstate, detail }.to_string())
                }
                Some(Status::HeartbeatDied) => {
                    Reply::error(503, json, "heartbeat_died", &Error::HeartbeatDied.to_string())
                }
                _ => Reply::ok(json, if json { json!({ "live": true }).to_string() } else { "live\n".to_owned() }),
            },
            (Route::Metrics, node) => {
                let metrics = match node {
                    None => None,
                    Some(node) => match blocking(&self.probe_slots, false, move || node.metrics()).await {
                        Ok(m) => Some(m),
                        Err(reply) => return reply,
                    },
                };
                let mut reply = Reply::ok(false, prometheus_text(metrics.as_ref(), draining));
                reply.content_type = Some(PROMETHEUS_TEXT);
                reply
            }
            (Route::Status, None) => Reply::ok(true, json!({ "status": "starting", "draining": draining }).to_string()),
            (Route::Status, Some(node)) => {
                let layout = node.layout();
                match blocking(&self.probe_slots, true, move || node.metrics()).await {
                    Ok(m) => {
                        let status = as_of_now(m.status, m.time_to_deadline);
                        // A node stopped for good has no deadline left to count down.
                        let time_to_deadline = if matches!(status, Status::Live) { m.time_to_deadline } else { None };
                        let body = json!({
                            "machine_id": m.machine_id,
                            "version": m.version,
                            "status": status.word(),
                            "ids_issued": m.ids_issued,
                            "heartbeats_ok": m.heartbeats_ok,
                            "heartbeats_failed": m.heartbeats_failed,
                            "time_to_deadline_ms": time_to_deadline.map(|d| d.as_millis() as u64),
                            "draining": draining,
                            "layout": layout_json(&layout),
                        });
                        Reply::ok(true, body.to_string())
                    }
                    Err(reply) => reply,
                }
            }
            _ if draining => Reply::error(503, json, "shutting_down", SHUTTING_DOWN),
            (_, None) => Reply::error(503, json, "starting", STARTING),
            (Route::Ready, Some(node)) => match blocking(&self.probe_slots, json, move || node.metrics()).await {
                Ok(metrics) => readiness(metrics, json),
                Err(reply) => reply,
            },
            (Route::One | Route::Many(_), Some(node)) => {
                let (count, single) = match asked.route {
                    Route::Many(n) => (n, false),
                    _ => (1, true),
                };
                // Room first, then a thread: a batch waiting for room holds no minting slot.
                let size = answer_size(count, json);
                let room = if size < SMALL_ANSWER {
                    None
                } else {
                    let kib = size.div_ceil(1024).min(ANSWER_MEMORY >> 10) as u32;
                    conn.awaiting_room();
                    let permit = self.answer_room.clone().acquire_many_owned(kib).await;
                    conn.answering();
                    Some(Room { _permit: permit.expect("the sidecar's semaphores are never closed") })
                };
                let inline = if count <= INLINE_MINT { self.mint_inline() } else { None };
                let mut reply = match inline {
                    Some(_minting) => mint(&node, count, json, single),
                    None => blocking(&self.mint_slots, json, move || mint(&node, count, json, single))
                        .await
                        .unwrap_or_else(|reply| reply),
                };
                if reply.status == 200 {
                    reply.room = room;
                }
                reply
            }
        }
    }
}

fn readiness(metrics: Metrics, json: bool) -> Reply {
    match as_of_now(metrics.status, metrics.time_to_deadline) {
        Status::Live if metrics.time_to_deadline.is_some_and(|left| left >= READY_MARGIN) => {
            let body = if json {
                json!({ "ready": true, "machine_id": metrics.machine_id }).to_string()
            } else {
                format!("ready: machine id {}\n", metrics.machine_id)
            };
            Reply::ok(json, body)
        }
        Status::Live => {
            let reason = format!("idgen: the lease ends in under {READY_MARGIN:?} and no heartbeat has renewed it yet");
            Reply::error(503, json, "expired", &reason)
        }
        Status::Expired => Reply::error(503, json, "expired", &Error::LeaseExpired.to_string()),
        Status::Lost { sqlstate, detail } => {
            Reply::error(503, json, "lost", &Error::OwnershipLost { sqlstate, detail }.to_string())
        }
        Status::Stopped => Reply::error(503, json, "shutting_down", SHUTTING_DOWN),
        Status::HeartbeatDied => Reply::error(503, json, "heartbeat_died", &Error::HeartbeatDied.to_string()),
    }
}

/// The most an answer of `count` IDs takes: an ID has 19 digits at most, written once in text
/// (with its newline), twice in JSON (a number and a quoted string, each with its comma).
fn answer_size(count: usize, json: bool) -> usize {
    if json {
        count * 42 + 32
    } else {
        count * 20
    }
}

/// `count` IDs from `node`, or the refusal that stopped them.
fn mint(node: &IdgenNode, count: usize, json: bool, single: bool) -> Reply {
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        match node.next_id() {
            Ok(id) => ids.push(id),
            // The IDs minted before the refusal are never handed out: a gap, no harm.
            Err(e) => {
                let (code, reason) = refusal(&e);
                return Reply::error(503, json, code, &reason);
            }
        }
    }
    Reply::ok(json, ids_body(&ids, json, single))
}

/// A service's layout and pool in `/status`, named as `idgen_layouts` and docs/test_vectors.json
/// name them.
fn layout_json(service: &ServiceLayout) -> serde_json::Value {
    let layout = &service.layout;
    json!({
        "preset": service.preset_name(),
        "epoch": idgen_core::format::iso_utc(layout.epoch_unix_ms),
        "epoch_unix_ms": layout.epoch_unix_ms,
        "time_unit_ms": layout.time_unit_ms,
        "time_bits": layout.time_bits,
        "machine_bits": layout.machine_bits,
        "sequence_bits": layout.sequence_bits,
        "field_order": layout.order.label(),
        "pool_first": service.pool.first,
        "pool_last": service.pool.last,
    })
}

/// The content type of Prometheus' text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every status `/metrics` has a series of (`idgen_node_status{status="..."}`), so that an alert
/// rule finds 0 where it looks, not nothing.
const STATUS_WORDS: [&str; 7] = ["starting", "live", "expired", "lost", "stopped", "heartbeat_died", "shutting_down"];

/// The node's metrics in Prometheus' text format; `None` while it claims.
fn prometheus_text(metrics: Option<&Metrics>, draining: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, String)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let status = match metrics {
        None => "starting",
        Some(_) if draining => "shutting_down",
        Some(m) => as_of_now(m.status.clone(), m.time_to_deadline).word(),
    };
    let statuses: Vec<(String, String)> = STATUS_WORDS
        .iter()
        .map(|word| (format!("{{status=\"{word}\"}}"), u8::from(*word == status).to_string()))
        .collect();
    family("idgen_node_status", "gauge", "1 for the node's status, 0 for the others (live: it issues).", &statuses);
    let Some(m) = metrics else { return out };
    let one = |value: String| [(String::new(), value)];
    let lease_left = match status {
        "live" => m.time_to_deadline.map_or(0.0, |d| d.as_secs_f64()),
        _ => 0.0,
    };
    family(
        "idgen_node_lease_remaining_seconds",
        "gauge",
        "Seconds until the lease's deadline unless a heartbeat renews it; 0 when not live.",
        &one(format!("{lease_left:.3}")),
    );
    family("idgen_node_machine_id", "gauge", "The machine id the node holds.", &one(m.machine_id.to_string()));
    family("idgen_node_ids_issued_total", "counter", "IDs the node issued.", &one(m.ids_issued.to_string()));
    family(
        "idgen_node_heartbeats_total",
        "counter",
        "Heartbeats the registry answered.",
        &one(m.heartbeats_ok.to_string()),
    );
    family(
        "idgen_node_heartbeat_failures_total",
        "counter",
        "Heartbeats that failed (no connection, an error, no answer in time) and were retried.",
        &one(m.heartbeats_failed.to_string()),
    );
    family(
        "idgen_node_heartbeat_timeouts_total",
        "counter",
        "Of the failed heartbeats, those that got no answer within the call timeout.",
        &one(m.heartbeats_timed_out.to_string()),
    );
    family(
        "idgen_node_clock_backward_waits_total",
        "counter",
        "Steps back of the clock the node waited out.",
        &one(m.clock.backward_waits.to_string()),
    );
    family(
        "idgen_node_clock_backward_refusals_total",
        "counter",
        "IDs refused because the clock was further behind the last ID than allowed.",
        &one(m.clock.backward_refusals.to_string()),
    );
    family(
        "idgen_node_sequence_exhaustions_total",
        "counter",
        "Ticks whose sequence the node used up (it waited for the next tick).",
        &one(m.clock.sequence_exhaustions.to_string()),
    );
    out
}

/// IDs as text (one a line) or JSON (numbers and strings): `{"id", "id_str"}` for one, `{"ids", "ids_str"}`
/// for a batch.
fn ids_body(ids: &[i64], json: bool, single: bool) -> String {
    if !json {
        let mut text = String::with_capacity(ids.len() * 20);
        for id in ids {
            text.push_str(&id.to_string());
            text.push('\n');
        }
        return text;
    }
    if single {
        return json!({ "id": ids[0], "id_str": ids[0].to_string() }).to_string();
    }
    let strings: Vec<String> = ids.iter().map(i64::to_string).collect();
    json!({ "ids": ids, "ids_str": strings }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked_by(method: &Method, url: &str, accept: Option<&str>) -> Result<Asked, Reply> {
        let (path, query) = match url.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (url, None),
        };
        parse(method, path, query, accept)
    }

    fn asked(url: &str, accept: Option<&str>) -> Result<Asked, Reply> {
        asked_by(&Method::GET, url, accept)
    }

    #[test]
    fn requests_are_read_with_their_format() {
        assert_eq!(asked("/id", None), Ok(Asked { route: Route::One, json: false }));
        assert_eq!(asked("/id?", None), Ok(Asked { route: Route::One, json: false }));
        assert_eq!(asked("/ids?count=100", None), Ok(Asked { route: Route::Many(100), json: false }));
        assert_eq!(asked("/ids?count=10000&format=json", None), Ok(Asked { route: Route::Many(10_000), json: true }));
        assert_eq!(asked("/ids?format=json&count=1", None), Ok(Asked { route: Route::Many(1), json: true }));
        assert_eq!(asked("/id", Some("text/html, application/json;q=0.9")).map(|a| a.json), Ok(true));
        assert_eq!(asked("/id", Some("application/json; q=0")).map(|a| a.json), Ok(false));
        assert_eq!(asked("/id", Some("application/jsonx")).map(|a| a.json), Ok(false));
        assert_eq!(asked("/id", Some("Application/JSON")).map(|a| a.json), Ok(true));
        assert_eq!(asked("/id?format=text", Some("application/json")).map(|a| a.json), Ok(false));
        assert_eq!(asked("/readyz", None).map(|a| a.route), Ok(Route::Ready));
        assert_eq!(asked("/status?format=json", None).map(|a| a.route), Ok(Route::Status));
        assert_eq!(asked("/metrics", None).map(|a| a.route), Ok(Route::Metrics));
        assert!(asked("/metrics?format=json", None).is_err(), "a scrape takes no parameter");
        assert_eq!(asked_by(&Method::POST, "/ids?count=3", None).map(|a| a.route), Ok(Route::Many(3)));
        assert_eq!(asked_by(&Method::HEAD, "/livez", None).map(|a| a.route), Ok(Route::Live));
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        for (url, status, words) in [
            ("/ids", 400, "needs count=N"),
            ("/ids?count=0", 400, "from 1 to 10000, not \"0\""),
            ("/ids?count=10001", 400, "not \"10001\""),
            ("/ids?count=-1", 400, "not \"-1\""),
            ("/ids?count=ten", 400, "not \"ten\""),
            ("/id?count=2", 400, "unknown parameter \"count\" for /id"),
            ("/id?format=xml", 400, "json or text, not \"xml\""),
            ("/nope", 404, "no such path: /nope"),
        ] {
            let reply = asked(url, None).unwrap_err();
            assert_eq!(reply.status, status, "{url}");
            assert!(reply.body.contains(words), "{url}: {}", reply.body);
        }
        let reply = asked_by(&Method::DELETE, "/id", None).unwrap_err();
        assert_eq!((reply.status, reply.allow), (405, Some("GET, POST")));
        let reply = asked_by(&Method::POST, "/readyz", None).unwrap_err();
        assert_eq!((reply.status, reply.allow), (405, Some("GET, HEAD")));
        let reply = asked("/ids?count=x&format=json", None).unwrap_err();
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"], "bad_request");
    }

    #[test]
    fn counts_are_plain_digits_and_parameters_come_once() {
        for (url, words) in [
            ("/ids?count=+5", "not \"+5\""),
            ("/ids?count=05", "not \"05\""),
            ("/ids?count=00", "not \"00\""),
            ("/ids?count=5.0", "not \"5.0\""),
            ("/ids?count=%35", "not \"%35\""),
            ("/ids?count=", "not \"\""),
            ("/ids?count", "not \"\""),
            ("/ids?count=99999999999999999999999", "not \"99999999999999999999999\""),
            ("/ids?count=2&count=3", "parameter \"count\" given more than once"),
            ("/ids?count=2&format=text&format=text", "parameter \"format\" given more than once"),
            ("/ids?count=2&limit=3", "unknown parameter \"limit\" for /ids"),
            ("/ids?count=2&", "an empty parameter"),
            ("/ids?&count=2", "an empty parameter"),
            ("/id?Format=json", "unknown parameter \"Format\""),
            ("/id?format=JSON", "not \"JSON\""),
            ("/id?format", "not \"\""),
            ("/livez?verbose=1", "unknown parameter \"verbose\" for /livez"),
        ] {
            let reply = asked(url, None).unwrap_err();
            assert_eq!(reply.status, 400, "{url}: {}", reply.body);
            assert!(reply.body.starts_with("bad request: ") && reply.body.contains(words), "{url}: {}", reply.body);
        }
        let long = format!("/ids?count={}", "9".repeat(500));
        let reply = asked(&long, None).unwrap_err();
        assert!(reply.body.len() < 200, "a long value is not echoed whole: {}", reply.body);
    }

    #[test]
    fn only_the_documented_paths_exist_as_written() {
        for path in [
            "/../id",
            "/./id",
            "//id",
            "/id/",
            "/id/.",
            "/ids/",
            "/%69d",
            "/id%2F",
            "/ID",
            "/id;x",
            "*",
            "",
            "/livez/",
            "/status/..",
        ] {
            let reply = asked(path, None).unwrap_err();
            assert_eq!(reply.status, 404, "{path:?}: {}", reply.body);
            assert!(reply.body.starts_with("not found: no such path"), "{path:?}: {}", reply.body);
        }
        // Before the method and the query: there is nothing there to ask for.
        assert_eq!(asked_by(&Method::DELETE, "/nope?count=x", None).unwrap_err().status, 404);
        let reply = asked("/nope", Some("application/json")).unwrap_err();
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"], "not_found");
    }

    #[test]
    fn a_lease_past_its_deadline_is_expired_whatever_the_heartbeat_thread_has_said() {
        let left = Some(Duration::from_secs(3));
        assert_eq!(as_of_now(Status::Live, None), Status::Expired);
        assert_eq!(as_of_now(Status::Live, left), Status::Live);
        assert_eq!(as_of_now(Status::Expired, None), Status::Expired);
        assert_eq!(as_of_now(Status::Expired, left), Status::Live);
        assert_eq!(as_of_now(Status::Stopped, left), Status::Stopped);
        assert_eq!(as_of_now(Status::HeartbeatDied, None), Status::HeartbeatDied);
    }

    #[test]
    fn a_quiet_connection_is_overdue_by_its_phase() {
        let conn = Conn::new();
        let now = now_ms();
        let later = |d: Duration| now + d.as_millis() as u64;
        assert_eq!(conn.overdue(now), None);
        assert_eq!(conn.overdue(later(IDLE_TIMEOUT)), Some(Closing::Idle));
        conn.took_bytes();
        assert_eq!(conn.phase.load(Ordering::SeqCst), IN_HEAD);
        assert_eq!(conn.overdue(later(HEADER_TIMEOUT + Duration::from_secs(1))), Some(Closing::HeadTooSlow));
        conn.answering();
        assert_eq!(conn.overdue(later(IDLE_TIMEOUT * 2)), None, "never while being answered");
        conn.answered();
        conn.wrote(&Poll::Pending);
        assert_eq!(conn.overdue(later(WRITE_TIMEOUT + Duration::from_secs(1))), Some(Closing::WriteStalled));
        conn.wrote(&Poll::Ready(Ok(10)));
        assert_eq!(conn.overdue(now_ms()), None);
        // Writes that keep moving, too slowly to take the answer in time.
        conn.wrote(&Poll::Ready(Ok(10)));
        assert_eq!(conn.overdue(later(ANSWER_TIMEOUT + Duration::from_secs(1))), Some(Closing::AnswerNotTaken));
        conn.unsent_since.store(0, Ordering::SeqCst);
        assert_eq!(conn.overdue(now_ms()), None);
    }

    #[test]
    fn at_the_cap_the_quietest_connection_not_being_answered_makes_room() {
        let connections = Connections::new(2);
        let (_, busy) = connections.admit().unwrap();
        busy.answering();
        let (_, quiet) = connections.admit().unwrap();
        let (_, new) = connections.admit().expect("room made");
        assert_eq!(quiet.closing.load(Ordering::SeqCst), Closing::Evicted as u8);
        assert_eq!(busy.closing.load(Ordering::SeqCst), 0);
        new.answering();
        assert!(connections.admit().is_none(), "every connection is being answered: refused");
    }

    #[test]
    fn at_the_cap_a_batch_still_waiting_for_room_makes_room_for_a_new_connection() {
        let connections = Connections::new(2);
        let (_, busy) = connections.admit().unwrap();
        busy.answering();
        let (_, waiting) = connections.admit().unwrap();
        waiting.answering();
        waiting.awaiting_room();
        let (_, new) = connections.admit().expect("room made by the batch that holds nothing yet");
        assert_eq!(waiting.closing.load(Ordering::SeqCst), Closing::Evicted as u8);
        assert_eq!(busy.closing.load(Ordering::SeqCst), 0);
        new.answering();
    }

    #[test]
    fn one_runtime_thread_is_always_left_to_serve_while_the_others_mint() {
        let shared = Shared {
            state: State { node: OnceLock::new(), draining: AtomicBool::new(false) },
            mint_slots: Arc::new(Semaphore::new(1)),
            minting_inline: AtomicUsize::new(0),
            probe_slots: Arc::new(Semaphore::new(PROBE_SLOTS)),
            answer_room: Arc::new(Semaphore::new(ANSWER_MEMORY >> 10)),
            connections: Connections::new(1),
        };
        let mut minting: Vec<_> = (1..IO_THREADS).map(|_| shared.mint_inline().expect("room to mint inline")).collect();
        assert!(shared.mint_inline().is_none(), "the last runtime thread minted too");
        minting.pop();
        assert!(shared.mint_inline().is_some());
    }

    #[test]
    fn an_answer_holds_its_room_until_its_body_is_dropped() {
        let room = Arc::new(Semaphore::new(10));
        let mut reply = Reply::ok(false, "1\n".repeat(100));
        reply.room = Some(Room { _permit: room.clone().try_acquire_many_owned(4).unwrap() });
        let conn = Arc::new(Conn::new());
        conn.answered();
        let response = reply.into_response(Some(conn.clone()));
        assert_eq!(room.available_permits(), 6);
        let body = response.into_body();
        assert_eq!(room.available_permits(), 6, "the body holds it");
        assert_ne!(conn.unsent_since.load(Ordering::SeqCst), 0);
        drop(body);
        assert_eq!(room.available_permits(), 10);
        assert_eq!(conn.unsent_since.load(Ordering::SeqCst), 0, "taken");
        assert!(answer_size(MAX_BATCH, true) < ANSWER_MEMORY / 8, "room for several of the largest answers");
        assert!(answer_size(1, true) < SMALL_ANSWER && answer_size(100, false) < SMALL_ANSWER);
    }

    #[test]
    fn ids_are_numbers_and_strings_in_json() {
        let id = 252_721_505_048_199_168_i64;
        let one: serde_json::Value = serde_json::from_str(&ids_body(&[id], true, true)).unwrap();
        assert_eq!((one["id"].as_i64(), one["id_str"].as_str()), (Some(id), Some("252721505048199168")));
        let many: serde_json::Value = serde_json::from_str(&ids_body(&[id, id + 1], true, false)).unwrap();
        assert_eq!(many["ids_str"][1], "252721505048199169");
        assert_eq!(ids_body(&[id, id + 1], false, false), "252721505048199168\n252721505048199169\n");
    }
}
