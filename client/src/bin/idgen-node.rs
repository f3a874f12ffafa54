//! `idgen-node`: a service node from the command line. Claims a machine id, prints IDs at a
//! given rate (one per line on stdout), survives database restarts and failovers (its heartbeat
//! reconnects), and releases its id on SIGINT (Ctrl-C), SIGTERM or SIGHUP. With `--listen` it is a
//! sidecar instead: it serves IDs over HTTP (docs/kubernetes.md) and prints none.
//!
//! ```text
//! idgen-node --dsn "host=127.0.0.1 port=28815 user=postgres dbname=idgen_demo" \
//!            --service orders --host 10.0.0.5 --port 8080 [--machine-id N] [--rate 10] [--count N]
//! idgen-node --dsn ... --service orders --host 10.0.0.5 --port 8080 --listen 127.0.0.1:7070 [--threads 4]
//! ```
//! `--machine-id N` claims that machine id (a fleet adopting the ids it already uses), and fails
//! with the server's refusal when someone else holds it. The startup line on stderr names the
//! machine id and the service's layout, as the registry recorded it.
//! With `--listen`, the bound address is printed on stderr (`idgen-node: listening on
//! http://127.0.0.1:7070`), which tells the port when it was 0. `--threads N` (default 4): how many
//! batches of more than 256 IDs are minted at once, each on a thread of its own (the sidecar's
//! limits on connections and timeouts are in its module, `idgen_client::sidecar`).
//!
//! A second signal while the release runs does not cut it short: the release finishes, and the
//! process exits as after the first.
//!
//! Exit status: 0 after a release (or when the id had already moved by then), 3 when the id moved
//! to another node while printing IDs, 2 on bad arguments, 1 when the claim (or binding the
//! listener) failed or the release failed.

use idgen_client::sidecar::Sidecar;
use idgen_client::{Config, Error, IdgenNode, ShutdownSignal, Status};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

fn usage(why: &str) -> ! {
    eprintln!("idgen-node: {why}");
    eprintln!("usage: idgen-node --dsn CONNINFO --service NAME --host ADDRESS --port PORT [--machine-id N] [--rate IDS_PER_SECOND] [--count N] [--call-timeout SECONDS]");
    eprintln!("       idgen-node --dsn CONNINFO --service NAME --host ADDRESS --port PORT [--machine-id N] --listen ADDRESS:PORT [--threads N] [--call-timeout SECONDS]");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut dsn, mut service, mut host, mut port, mut rate, mut count) = (None, None, None, None, 10.0_f64, None);
    let (mut listen, mut threads, mut call_timeout, mut machine_id) = (None, 4usize, None, None);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--dsn" => dsn = Some(value()),
            "--service" => service = Some(value()),
            "--host" => host = Some(value()),
            "--port" => port = Some(value().parse::<i32>().unwrap_or_else(|_| usage("--port takes a number"))),
            "--machine-id" => {
                machine_id = Some(value().parse::<i32>().unwrap_or_else(|_| usage("--machine-id takes a number")))
            }
            "--rate" => {
                rate = value()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| *r > 0.0)
                    .unwrap_or_else(|| usage("--rate takes a positive number"))
            }
            "--count" => count = Some(value().parse::<u64>().unwrap_or_else(|_| usage("--count takes a number"))),
            "--listen" => listen = Some(value()),
            "--threads" => {
                threads = value()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=256).contains(n))
                    .unwrap_or_else(|| usage("--threads takes a number from 1 to 256"))
            }
            "--call-timeout" => {
                call_timeout = Some(
                    value()
                        .parse::<f64>()
                        .ok()
                        .and_then(|s| Duration::try_from_secs_f64(s).ok())
                        .filter(|d| !d.is_zero())
                        .unwrap_or_else(|| usage("--call-timeout takes a positive number of seconds")),
                )
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let (Some(dsn), Some(service), Some(host), Some(port)) = (dsn, service, host, port) else {
        usage("--dsn, --service, --host and --port are required")
    };
    // Before the claim: a signal that comes meanwhile is kept, not left to the default action.
    let signal = ShutdownSignal::install().unwrap_or_else(|e| {
        eprintln!("idgen-node: {e}");
        std::process::exit(1)
    });
    // Listening before the claim: probes see the process live (and not ready) while it claims.
    let sidecar = listen.map(|address| {
        let sidecar = Sidecar::bind(&address, threads).unwrap_or_else(|e| {
            eprintln!("idgen-node: {e}");
            std::process::exit(1)
        });
        eprintln!("idgen-node: listening on http://{}", sidecar.local_addr());
        sidecar
    });

    let mut config = Config::new(&dsn, &service, &host, port);
    config.machine_id = machine_id;
    config.on_status_change = Some(Arc::new(|status: &Status| eprintln!("idgen-node: lease {status:?}")));
    if let Some(timeout) = call_timeout {
        config.call_timeout = timeout;
    }
    let node = match IdgenNode::start(config) {
        Ok(node) => Arc::new(node),
        Err(e) => {
            eprintln!("idgen-node: {e}");
            std::process::exit(1)
        }
    };
    let layout = node.layout();
    eprintln!(
        "idgen-node: machine id {} of service \"{service}\" at version {}; layout {}, pool {}-{}",
        node.machine_id(),
        node.version(),
        idgen_core::messages::layout_summary(&layout.layout),
        layout.pool.first,
        layout.pool.last
    );
    match sidecar {
        Some(sidecar) => {
            sidecar.serve(node.clone());
            signal.wait();
            // New requests get 503 shutting_down from here on; the node stops, then releases.
            sidecar.drain();
            let status = release(&node, &signal);
            // Exiting closes the listener and every connection at once; Sidecar::stop would let
            // the answers being written finish, for up to its write timeout.
            std::process::exit(status)
        }
        None => print_ids(&node, &signal, rate, count),
    }
}

/// Prints IDs until a signal, `count` IDs, or a closed stdout; then releases and exits.
fn print_ids(node: &IdgenNode, signal: &ShutdownSignal, rate: f64, count: Option<u64>) -> ! {
    let pause = Duration::from_secs_f64(1.0 / rate);
    let mut printed = 0u64;
    while !signal.requested() && count.is_none_or(|n| printed < n) {
        match node.next_id() {
            Ok(id) => {
                // Whoever reads our output went away: stop as on Ctrl-C, releasing the id.
                if writeln!(std::io::stdout(), "{id}").is_err() {
                    break;
                }
                printed += 1;
            }
            Err(Error::LeaseExpired) => eprintln!("idgen-node: lease expired, waiting for a heartbeat"),
            Err(e @ Error::ClockAhead { .. }) => eprintln!("idgen-node: {e}"),
            Err(e @ Error::OwnershipLost { .. }) => {
                eprintln!("idgen-node: {e}; exiting");
                std::process::exit(3)
            }
            Err(e) => {
                eprintln!("idgen-node: {e}");
                break;
            }
        }
        std::thread::sleep(pause);
    }
    std::process::exit(release(node, signal))
}

/// Stops the node and releases its id, saying so (and saying that a later signal waits for the
/// release); the exit status.
fn release(node: &IdgenNode, signal: &ShutdownSignal) -> i32 {
    let seen = signal.received();
    std::thread::Builder::new()
        .name("idgen-node-signals".into())
        .spawn({
            let signal = signal.clone();
            move || {
                let mut seen = seen;
                loop {
                    let now = signal.wait_beyond(seen, Duration::from_secs(3600));
                    if now > seen {
                        eprintln!("idgen-node: signal {now} received: the release is under way and finishes first");
                        seen = now;
                    }
                }
            }
        })
        .expect("spawn the signal reporter");
    eprintln!("idgen-node: stopping; releasing machine id {}", node.machine_id());
    match node.shutdown() {
        Ok(true) => {
            eprintln!("idgen-node: released machine id {}", node.machine_id());
            0
        }
        Ok(false) => {
            eprintln!("idgen-node: machine id {} had already moved", node.machine_id());
            0
        }
        Err(e) => {
            eprintln!("idgen-node: {e}");
            1
        }
    }
}
