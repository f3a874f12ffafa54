//! IDs per second from the sidecar (`idgen-node --listen`) over HTTP, against the library in-process
//! (`IdgenNode::next_id`), in one run: one ID a request on one keep-alive connection and on four,
//! and batches of 100 and 1,000 on one; each measured for SECONDS, in ROUNDS interleaved rounds,
//! the median reported with its ratio to the library's. scripts/bench_sidecar.sh runs it.
//!
//! ```text
//! bench_sidecar --dsn CONNINFO --node PATH_TO_IDGEN_NODE [--seconds 2] [--rounds 3]
//! ```

use idgen_client::{Config, IdgenNode};
use idgen_cluster_tests::{recv_within, spawn_guarded, spawn_named, Http, PATIENCE};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn usage(why: &str) -> ! {
    eprintln!("bench_sidecar: {why}");
    eprintln!("usage: bench_sidecar --dsn CONNINFO --node PATH_TO_IDGEN_NODE [--seconds 2] [--rounds 3]");
    std::process::exit(2)
}

/// IDs per second that `mint` gives for `seconds` (it returns how many it minted in one go).
fn rate(seconds: f64, mut mint: impl FnMut() -> usize) -> f64 {
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut minted = 0;
    while Instant::now() < until {
        minted += mint();
    }
    minted as f64 / started.elapsed().as_secs_f64()
}

/// `/ids?count=n` (or `/id` for 0) on `http`: how many IDs came back.
fn fetch(http: &mut Http, n: usize) -> usize {
    let path = if n == 0 { "/id".to_owned() } else { format!("/ids?count={n}") };
    let reply = http.get(&path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(reply.status, 200, "GET {path}: {reply:?}");
    reply.body.lines().count()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut dsn, mut node_bin, mut seconds, mut rounds) = (None, None, 2.0_f64, 3usize);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--dsn" => dsn = Some(value()),
            "--node" => node_bin = Some(value()),
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage("--seconds takes a number")),
            "--rounds" => rounds = value().parse().unwrap_or_else(|_| usage("--rounds takes a number")),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let (Some(dsn), Some(node_bin)) = (dsn, node_bin) else { usage("--dsn and --node are required") };

    let library = IdgenNode::start(Config::new(&dsn, "bench", "10.0.0.1", 1)).expect("claim for the library");
    let mut sidecar = spawn_guarded(
        Command::new(&node_bin)
            .args(["--dsn", &dsn, "--service", "bench", "--host", "10.0.0.2", "--port", "1"])
            .args(["--listen", "127.0.0.1:0", "--threads", "4"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
        "the sidecar",
    );
    let stderr = sidecar.child().stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    spawn_named("the sidecar's stderr", move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = line.strip_prefix("idgen-node: listening on http://") {
                let _ = tx.send(address.to_owned());
            }
        }
    });
    let address = recv_within(&rx, PATIENCE, "the sidecar's address");
    let give_up = Instant::now() + PATIENCE;
    while Http::connect(&address).and_then(|mut h| h.get("/readyz")).map(|r| r.status).ok() != Some(200) {
        assert!(Instant::now() < give_up, "the sidecar was not ready within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let names = [
        "library: IdgenNode::next_id",
        "HTTP GET /id, 1 connection",
        "HTTP GET /id, 4 connections",
        "HTTP GET /ids?count=100, 1 connection",
        "HTTP GET /ids?count=1000, 1 connection",
    ];
    let mut samples: Vec<Vec<f64>> = vec![vec![]; names.len()];
    for round in 0..rounds {
        eprintln!("bench_sidecar: round {} of {rounds}", round + 1);
        samples[0].push(rate(seconds, || {
            for _ in 0..1000 {
                library.next_id().expect("an ID from the library");
            }
            1000
        }));
        let mut http = Http::connect(&address).unwrap();
        samples[1].push(rate(seconds, || fetch(&mut http, 0)));
        let parallel: Vec<_> = (0..4)
            .map(|c| {
                let address = address.clone();
                spawn_named(format!("client {c}"), move || {
                    let mut http = Http::connect(&address).unwrap();
                    rate(seconds, || fetch(&mut http, 0))
                })
            })
            .collect();
        samples[2].push(parallel.into_iter().map(|t| t.join().expect("a client")).sum());
        samples[3].push(rate(seconds, || fetch(&mut http, 100)));
        samples[4].push(rate(seconds, || fetch(&mut http, 1000)));
    }
    let library_rate = median(samples[0].clone());
    println!("| {rounds} rounds of {seconds} s each, median | IDs/s | / library |");
    println!("|---|---:|---:|");
    for (name, values) in names.iter().zip(samples) {
        let value = median(values);
        println!("| {name} | {value:.0} | {:.4} |", value / library_rate);
    }

    let stopped = Command::new("kill").args(["-TERM", &sidecar.id().to_string()]).status().expect("kill");
    assert!(stopped.success());
    assert!(sidecar.wait_within(PATIENCE).success(), "the sidecar did not release and exit 0");
    assert!(library.shutdown().expect("the library's release"));
}
