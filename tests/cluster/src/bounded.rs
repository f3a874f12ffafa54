//! Waits that end: every wait of a test (a barrier, a join, a channel, a child process) gives up
//! after a generous deadline with a message that names what it waited for, and a party that died
//! releases the others at once with its own message. A hang becomes a failure that says why.

use std::any::Any;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a test waits for something that takes a moment on any machine (a reload, a process
/// exit, the server clock passing a time, the parties of a barrier) before it fails.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How long a test waits for the whole work of its threads or of a child process (thousands of
/// statements, a dump, a failover) before it fails: minutes, for the busiest machine.
pub const WORK_PATIENCE: Duration = Duration::from_secs(15 * 60);

/// Polls `done` every few milliseconds until it holds; fails, naming `what`, after `patience`.
pub fn wait_for(what: &str, patience: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !done() {
        assert!(Instant::now() < deadline, "gave up after {patience:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a panic said: the message of `panic!`, of a failed `assert!` or of an `unwrap`.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}

/// A thread named `name` (its panic message says which one failed).
pub fn spawn_named<T: Send + 'static>(
    name: impl Into<String>,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let name = name.into();
    std::thread::Builder::new().name(name.clone()).spawn(f).unwrap_or_else(|e| panic!("could not start {name}: {e}"))
}

/// A thread named `name` that is a party of `barrier`: if it panics, it breaks the barrier with
/// its message first, so that the other parties fail at once instead of waiting for it.
pub fn spawn_party<T: Send + 'static>(
    name: impl Into<String>,
    barrier: &Arc<Barrier>,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let name = name.into();
    let barrier = barrier.clone();
    let party = name.clone();
    spawn_named(name, move || match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(payload) => {
            barrier.break_with(format!("{party} failed: {}", panic_message(payload.as_ref())));
            std::panic::resume_unwind(payload)
        }
    })
}

/// Joins `workers` (`what` names them, for the message) within `patience`, returning their
/// results in order. Fails if any panicked or is still running at the deadline, listing every
/// one of them by name with its panic message: no worker's failure goes unreported.
pub fn join_all<T>(workers: Vec<JoinHandle<T>>, patience: Duration, what: &str) -> Vec<T> {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline && !workers.iter().all(|w| w.is_finished()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let count = workers.len();
    let mut results = Vec::with_capacity(count);
    let mut failures = Vec::new();
    for (k, worker) in workers.into_iter().enumerate() {
        let name = worker.thread().name().map_or_else(|| format!("thread {k}"), str::to_owned);
        if !worker.is_finished() {
            // Left running (detached): the test fails now, naming it.
            failures.push(format!("{name}: still running after {patience:?}"));
            continue;
        }
        match worker.join() {
            Ok(value) => results.push(value),
            Err(payload) => failures.push(format!("{name}: {}", panic_message(payload.as_ref()))),
        }
    }
    assert!(failures.is_empty(), "{what}: {} of {count} failed:\n{}", failures.len(), failures.join("\n"));
    results
}

/// Joins one thread within `patience`: its result, or a failure naming `what` with its panic
/// message, or saying it is still running.
pub fn join_within<T>(worker: JoinHandle<T>, patience: Duration, what: &str) -> T {
    join_all(vec![worker], patience, what).pop().expect("one result for one thread")
}

/// The next message on `receiver` within `patience`. Fails naming `what` if none comes, or at once
/// if every sender is gone (the thread that was to send it died: its panic is reported too).
pub fn recv_within<T>(receiver: &mpsc::Receiver<T>, patience: Duration, what: &str) -> T {
    match receiver.recv_timeout(patience) {
        Ok(message) => message,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("gave up after {patience:?} waiting for {what}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{what}: never sent, its sender is gone (did its thread fail?)")
        }
    }
}

/// A barrier whose parties fail instead of waiting forever: a wait gives up after a deadline
/// (and breaks the barrier for the others), and a barrier broken by a party that died (see
/// [`spawn_party`], [`Barrier::break_with`]) releases every party, now or later, with that
/// party's message.
pub struct Barrier {
    parties: usize,
    state: Mutex<BarrierState>,
    turned: Condvar,
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    broken: Option<String>,
}

impl Barrier {
    pub fn new(parties: usize) -> Barrier {
        Barrier {
            parties,
            state: Mutex::new(BarrierState { arrived: 0, generation: 0, broken: None }),
            turned: Condvar::new(),
        }
    }

    /// Waits until every party has arrived, within [`PATIENCE`].
    pub fn wait(&self) {
        self.wait_within(PATIENCE);
    }

    /// Waits until every party has arrived; fails after `patience`, or as soon as the barrier is broken.
    pub fn wait_within(&self, patience: Duration) {
        let mut state = self.lock();
        if let Some(why) = &state.broken {
            panic!("a barrier of {} parties was broken: {why}", self.parties);
        }
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.turned.notify_all();
            return;
        }
        let (mut state, _) = self
            .turned
            .wait_timeout_while(state, patience, |s| s.generation == generation && s.broken.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.generation != generation {
            return;
        }
        if let Some(why) = &state.broken {
            panic!("a barrier of {} parties was broken: {why}", self.parties);
        }
        let why =
            format!("gave up after {patience:?} at a barrier: {} of {} parties arrived", state.arrived, self.parties);
        state.broken = Some(why.clone());
        self.turned.notify_all();
        panic!("{why}");
    }

    /// Breaks the barrier: every party waiting, and every one that comes, fails with `why`. The
    /// first reason stays (the others are its consequences).
    pub fn break_with(&self, why: impl Into<String>) {
        let mut state = self.lock();
        if state.broken.is_none() {
            state.broken = Some(why.into());
        }
        self.turned.notify_all();
    }

    /// (A party that panicked while holding the lock cannot have left the state half-changed.)
    fn lock(&self) -> MutexGuard<'_, BarrierState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A child process that is killed, with its process group, when dropped: a test that fails
/// while its child runs leaves no process behind. Start it with [`spawn_guarded`].
pub struct GuardedChild {
    child: Child,
    what: String,
}

/// Starts `command` (`what` names it in failures) in a process group of its own, so that a
/// deadline can end it together with anything it started.
pub fn spawn_guarded(command: &mut Command, what: &str) -> GuardedChild {
    use std::os::unix::process::CommandExt;
    let child = command.process_group(0).spawn().unwrap_or_else(|e| panic!("could not start {what}: {e}"));
    GuardedChild { child, what: what.to_owned() }
}

impl GuardedChild {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's pipes and handle, for what the guard does not do itself.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its exit status, within `patience`; past it, the child and its process group are killed
    /// and the test fails.
    pub fn wait_within(&mut self, patience: Duration) -> ExitStatus {
        let deadline = Instant::now() + patience;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    self.kill();
                    panic!("gave up after {patience:?} waiting for {} to exit: killed it", self.what);
                }
                Err(e) => panic!("waiting for {}: {e}", self.what),
            }
        }
    }

    /// Kills the child and its process group (SIGKILL), and reaps it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // The group's id is the child's (process_group(0)); `kill` is procps', as elsewhere in the tests.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for GuardedChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `command` to its end with its output captured, within `patience`: past it, the child and
/// its process group are killed and the test fails naming `what`, with what it printed so far.
pub fn output_within(command: &mut Command, patience: Duration, what: &str) -> Output {
    let deadline = Instant::now() + patience;
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = spawn_guarded(command, what);
    let stdout = Collected::start(child.child().stdout.take().expect("piped stdout"));
    let stderr = Collected::start(child.child().stderr.take().expect("piped stderr"));
    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child.wait_within(patience))).unwrap_or_else(
        |payload| {
            panic!(
                "{}\n{what} printed on stdout: {}\nand on stderr: {}",
                panic_message(payload.as_ref()),
                stdout.so_far(),
                stderr.so_far()
            )
        },
    );
    let left = deadline.saturating_duration_since(Instant::now()).max(PATIENCE);
    Output {
        status,
        stdout: stdout.finish(left, &format!("{what} to close its stdout")),
        stderr: stderr.finish(left, &format!("{what} to close its stderr")),
    }
}

/// Runs `command` to its end, its output going where the test's goes, within `patience`: past
/// it, the child and its process group are killed and the test fails naming `what`.
pub fn status_within(command: &mut Command, patience: Duration, what: &str) -> ExitStatus {
    spawn_guarded(command.stdin(Stdio::null()), what).wait_within(patience)
}

/// A pipe read to its end on a thread of its own, so that no read can hang the test.
struct Collected {
    bytes: Arc<Mutex<Vec<u8>>>,
    ended: mpsc::Receiver<()>,
}

impl Collected {
    fn start(mut pipe: impl Read + Send + 'static) -> Collected {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let (done, ended) = mpsc::channel();
        let sink = bytes.clone();
        spawn_named("pipe reader", move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(&chunk[..n]);
            }
            let _ = done.send(());
        });
        Collected { bytes, ended }
    }

    fn so_far(&self) -> String {
        String::from_utf8_lossy(&self.bytes.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Everything, once the pipe has closed (something the child started may hold it open).
    fn finish(self, patience: Duration, what: &str) -> Vec<u8> {
        recv_within(&self.ended, patience, what);
        std::mem::take(&mut *self.bytes.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
