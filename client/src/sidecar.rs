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
//!
//! Answers are plain text (one ID per line, or one line of reason) unless JSON is asked for, by
//! `Accept: application/json` or `?format=json`. JSON gives every ID twice, as a number and as a
//! string (`{"id": 2527..., "id_str": "2527..."}`, `{"ids": [...], "ids_str": [...]}`): IDs of
//! every layout but `js_safe` go above 2^53, which JavaScript's numbers cannot hold exactly. Errors are 400 (a bad request), 404,
//! 405, and 503 when the node must not issue, with a reason code (`starting`, `shutting_down`,
//! `expired`, `lost`, `heartbeat_died`, `clock`) and the node's words:
//! `{"error": "expired", "reason": "..."}` in JSON, `expired: ...` in text.
//! `/id` and `/ids` take GET or POST; no answer may be cached (`Cache-Control: no-store`).

use crate::{Error, IdgenNode, ServiceLayout, Status};
use serde_json::json;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response, Server};

/// The most IDs one request may ask for.
pub const MAX_BATCH: usize = 10_000;

/// How much of its lease a node must have left to be ready: a probe's answer should hold for a
/// moment, and `next_id` already refuses within the last millisecond before the deadline (it
/// stamps on a wall clock of whole milliseconds), so a readiness that looked at the deadline alone
/// could say ready just after an ID was refused.
pub const READY_MARGIN: Duration = Duration::from_secs(1);

/// An HTTP server that answers from an [`IdgenNode`]: bound first (answering 503 `starting`), then
/// given its node ([`Sidecar::serve`]); [`Sidecar::drain`] makes it answer 503 `shutting_down`
/// while the node releases; [`Sidecar::stop`] ends it.
pub struct Sidecar {
    server: Arc<Server>,
    state: Arc<State>,
    workers: Vec<JoinHandle<()>>,
    address: SocketAddr,
}

struct State {
    node: OnceLock<Arc<IdgenNode>>,
    draining: AtomicBool,
    stopping: AtomicBool,
}

impl Sidecar {
    /// Listens on `address` (`127.0.0.1:0` picks a free port: see [`Sidecar::local_addr`]) with
    /// `workers` threads answering requests.
    pub fn bind(address: &str, workers: usize) -> io::Result<Sidecar> {
        let listener = listen(address).map_err(|e| io::Error::other(format!("listen on {address}: {e}")))?;
        let server =
            Server::from_listener(listener, None).map_err(|e| io::Error::other(format!("serve on {address}: {e}")))?;
        let server = Arc::new(server);
        let local = server.server_addr().to_ip().ok_or_else(|| io::Error::other("not an IP address"))?;
        let state = Arc::new(State {
            node: OnceLock::new(),
            draining: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        });
        let workers = (0..workers.max(1))
            .map(|n| {
                let (server, state) = (server.clone(), state.clone());
                std::thread::Builder::new().name(format!("idgen-sidecar-{n}")).spawn(move || {
                    while !state.stopping.load(Ordering::Relaxed) {
                        if let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(200)) {
                            let reply = state.answer(&request);
                            // The client may have gone: nothing to do about it.
                            let _ = request.respond(reply.into_response());
                        }
                    }
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Sidecar { server, state, workers, address: local })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serves IDs from `node` from now on (once: a later node is ignored).
    pub fn serve(&self, node: Arc<IdgenNode>) {
        let _ = self.state.node.set(node);
    }

    /// Answers 503 `shutting_down` to every request for IDs, and to readiness, from now on. Call it
    /// before `IdgenNode::shutdown`, which stops the node and releases its id.
    pub fn drain(&self) {
        self.state.draining.store(true, Ordering::Relaxed);
    }

    /// Stops answering, and waits for the answers being written (tiny_http sets no write timeout:
    /// a client that stops reading holds its worker, so a process about to exit need not call it).
    pub fn stop(self) {
        self.state.stopping.store(true, Ordering::Relaxed);
        for _ in &self.workers {
            self.server.unblock();
        }
        for worker in self.workers {
            let _ = worker.join();
        }
    }
}

/// A listening socket on `address` whose connections send at once: tiny_http writes a long body
/// apart from its head, and with Nagle's algorithm the body would wait for the client's delayed
/// ACK of the head (40 ms a request: a batch of 100 IDs came 25 times slower than single IDs).
/// Accepted connections inherit TCP_NODELAY from the listening socket (Linux).
fn listen(address: &str) -> io::Result<TcpListener> {
    let addr =
        address.to_socket_addrs()?.next().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // A restarted sidecar binds its port while the last one's connections linger in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// An answer, before it is written.
#[derive(Debug, PartialEq)]
struct Reply {
    status: u16,
    json: bool,
    body: String,
    allow: Option<&'static str>,
    retry_after: bool,
}

impl Reply {
    fn ok(json: bool, body: String) -> Reply {
        Reply { status: 200, json, body, allow: None, retry_after: false }
    }

    /// An error: its status, a code a program can match, and a reason a person reads.
    fn error(status: u16, json: bool, code: &str, reason: &str) -> Reply {
        let body = if json {
            json!({ "error": code, "reason": reason }).to_string()
        } else {
            format!("{}: {reason}\n", code.replace('_', " "))
        };
        let retry_after = matches!(code, "starting" | "expired" | "clock");
        Reply { status, json, body, allow: None, retry_after }
    }

    fn into_response(self) -> Response<io::Cursor<Vec<u8>>> {
        let content_type = if self.json { "application/json" } else { "text/plain; charset=utf-8" };
        let mut response = Response::from_string(self.body)
            .with_status_code(self.status)
            .with_header(header("Content-Type", content_type))
            .with_header(header("Cache-Control", "no-store"))
            // A Content-Length, never chunks, however long the batch.
            .with_chunked_threshold(usize::MAX);
        if let Some(allow) = self.allow {
            response = response.with_header(header("Allow", allow));
        }
        if self.retry_after {
            response = response.with_header(header("Retry-After", "1"));
        }
        response
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("an ASCII header")
}

/// What a request asks for, read from its method, URL and `Accept` header.
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
}

/// Reads a request; `Err` is the answer to a bad one.
fn parse(method: &Method, url: &str, accept: Option<&str>) -> Result<Asked, Reply> {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut json = accept.is_some_and(|a| a.split(',').any(|t| t.trim().starts_with("application/json")));
    let (mut count, mut format) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "count" if path == "/ids" => count = Some(value),
            "format" => format = Some(value),
            _ => {
                let reason = format!("unknown parameter \"{name}\" for {path}");
                return Err(Reply::error(400, json, "bad_request", &reason));
            }
        }
    }
    match format {
        Some("json") => json = true,
        Some("text") => json = false,
        Some(other) => {
            let reason = format!("format is json or text, not \"{other}\"");
            return Err(Reply::error(400, json, "bad_request", &reason));
        }
        None => {}
    }
    let route = match path {
        "/id" => Route::One,
        "/ids" => {
            let Some(count) = count else {
                return Err(Reply::error(400, json, "bad_request", &format!("/ids needs count=N (1 to {MAX_BATCH})")));
            };
            match count.parse::<usize>() {
                Ok(n) if (1..=MAX_BATCH).contains(&n) => Route::Many(n),
                _ => {
                    let reason = format!("count is a whole number from 1 to {MAX_BATCH}, not \"{count}\"");
                    return Err(Reply::error(400, json, "bad_request", &reason));
                }
            }
        }
        "/livez" => Route::Live,
        "/readyz" => Route::Ready,
        "/status" => Route::Status,
        _ => {
            let reason = format!("no such path: {path} (/id, /ids?count=N, /livez, /readyz, /status)");
            return Err(Reply::error(404, json, "not_found", &reason));
        }
    };
    let allowed: &[Method] = match route {
        Route::One | Route::Many(_) => &[Method::Get, Method::Post],
        _ => &[Method::Get, Method::Head],
    };
    if !allowed.contains(method) {
        let allow = if matches!(route, Route::One | Route::Many(_)) { "GET, POST" } else { "GET, HEAD" };
        let mut reply = Reply::error(405, json, "method_not_allowed", &format!("{path} takes {allow}, not {method}"));
        reply.allow = Some(allow);
        return Err(reply);
    }
    Ok(Asked { route, json })
}

/// Why the node must not issue now, as (code, reason): from a refused `next_id`.
fn refusal(error: &Error) -> (&'static str, String) {
    let code = match error {
        Error::LeaseExpired => "expired",
        Error::OwnershipLost(_) => "lost",
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
        | Error::NotInstalled => "unavailable",
    };
    (code, error.to_string())
}

const STARTING: &str = "the node is claiming its machine id";
const SHUTTING_DOWN: &str = "the node is stopping, and releases its machine id";

impl State {
    fn answer(&self, request: &Request) -> Reply {
        let accept = request.headers().iter().find(|h| h.field.equiv("Accept")).map(|h| h.value.as_str());
        match parse(request.method(), request.url(), accept) {
            Ok(asked) => self.route(&asked),
            Err(reply) => reply,
        }
    }

    fn route(&self, asked: &Asked) -> Reply {
        let json = asked.json;
        let node = self.node.get();
        let draining = self.draining.load(Ordering::Relaxed);
        match asked.route {
            Route::Live => match node.map(|n| n.status()) {
                Some(Status::Lost { detail }) => {
                    Reply::error(503, json, "lost", &Error::OwnershipLost(detail).to_string())
                }
                Some(Status::HeartbeatDied) => {
                    Reply::error(503, json, "heartbeat_died", &Error::HeartbeatDied.to_string())
                }
                _ => Reply::ok(json, if json { json!({ "live": true }).to_string() } else { "live\n".to_owned() }),
            },
            Route::Status => {
                let body = match node {
                    None => json!({ "status": "starting", "draining": draining }),
                    Some(node) => {
                        let m = node.metrics();
                        json!({
                            "machine_id": m.machine_id,
                            "version": m.version,
                            "status": status_word(&m.status),
                            "ids_issued": m.ids_issued,
                            "heartbeats_ok": m.heartbeats_ok,
                            "heartbeats_failed": m.heartbeats_failed,
                            "time_to_deadline_ms": m.time_to_deadline.map(|d| d.as_millis() as u64),
                            "draining": draining,
                            "layout": layout_json(&m.layout),
                        })
                    }
                };
                Reply::ok(true, body.to_string())
            }
            _ if draining => Reply::error(503, json, "shutting_down", SHUTTING_DOWN),
            _ if node.is_none() => Reply::error(503, json, "starting", STARTING),
            Route::Ready => {
                let node = node.expect("checked above");
                let metrics = node.metrics();
                match metrics.status {
                    Status::Live if metrics.time_to_deadline.is_some_and(|left| left >= READY_MARGIN) => {
                        let body = if json {
                            json!({ "ready": true, "machine_id": metrics.machine_id }).to_string()
                        } else {
                            format!("ready: machine id {}\n", metrics.machine_id)
                        };
                        Reply::ok(json, body)
                    }
                    Status::Live if metrics.time_to_deadline.is_some() => {
                        let reason = format!(
                            "idgen: the lease ends in under {READY_MARGIN:?} and no heartbeat has renewed it yet"
                        );
                        Reply::error(503, json, "expired", &reason)
                    }
                    Status::Live | Status::Expired => {
                        Reply::error(503, json, "expired", &Error::LeaseExpired.to_string())
                    }
                    Status::Lost { detail } => {
                        Reply::error(503, json, "lost", &Error::OwnershipLost(detail).to_string())
                    }
                    Status::Stopped => Reply::error(503, json, "shutting_down", SHUTTING_DOWN),
                    Status::HeartbeatDied => {
                        Reply::error(503, json, "heartbeat_died", &Error::HeartbeatDied.to_string())
                    }
                }
            }
            Route::One | Route::Many(_) => {
                let count = if let Route::Many(n) = asked.route { n } else { 1 };
                let node = node.expect("checked above");
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
                Reply::ok(json, ids_body(&ids, json, asked.route == Route::One))
            }
        }
    }
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

fn status_word(status: &Status) -> &'static str {
    match status {
        Status::Live => "live",
        Status::Expired => "expired",
        Status::Lost { .. } => "lost",
        Status::Stopped => "stopped",
        Status::HeartbeatDied => "heartbeat_died",
    }
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

    fn asked(url: &str, accept: Option<&str>) -> Result<Asked, Reply> {
        parse(&Method::Get, url, accept)
    }

    #[test]
    fn requests_are_read_with_their_format() {
        assert_eq!(asked("/id", None), Ok(Asked { route: Route::One, json: false }));
        assert_eq!(asked("/ids?count=100", None), Ok(Asked { route: Route::Many(100), json: false }));
        assert_eq!(asked("/ids?count=10000&format=json", None), Ok(Asked { route: Route::Many(10_000), json: true }));
        assert_eq!(asked("/id", Some("text/html, application/json;q=0.9")).map(|a| a.json), Ok(true));
        assert_eq!(asked("/id?format=text", Some("application/json")).map(|a| a.json), Ok(false));
        assert_eq!(asked("/readyz", None).map(|a| a.route), Ok(Route::Ready));
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
        let reply = parse(&Method::Delete, "/id", None).unwrap_err();
        assert_eq!((reply.status, reply.allow), (405, Some("GET, POST")));
        let reply = asked("/ids?count=x&format=json", None).unwrap_err();
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"], "bad_request");
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
