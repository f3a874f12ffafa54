"""idgen_client: a Python service's node of idgen, the Snowflake machine-id registry in PostgreSQL.

The client contract (claim, report before the first ID, the layout read from the registry,
heartbeats, the clock policy, the stop at the deadline or at once on a refused heartbeat, the release
with a watermark that bounds every ID) is kept by one implementation, the Rust crate idgen-client,
which this package binds. Python adds the context managers, the release on signals and asyncio.

    import idgen_client

    with idgen_client.Node(dsn, "orders", "10.0.0.5", 8080) as node:
        order_id = node.next_id()

See docs/services.md.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

# The errors first: the extension module takes their classes when it loads.
from .errors import (
    ClockAhead,
    ClockBehind,
    ClockOutsideLayout,
    HeartbeatDied,
    IdgenError,
    LayoutError,
    LeaseExpired,
    NoAnswer,
    NodeForked,
    NodeStopped,
    NotBeforeAhead,
    NotInstalled,
    OwnershipLost,
    ReleaseError,
    StartError,
)

from . import _native  # noqa: E402

__version__: str = _native.__version__

# The signals a service is stopped with: Kubernetes, systemd and `docker stop` send SIGTERM; a
# terminal SIGINT; a closed terminal SIGHUP.
STOP_SIGNALS: Tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class Layout:
    """The service's layout and pool, as the registry recorded them: what the node mints with."""

    epoch_unix_ms: int
    time_unit_ms: int
    time_bits: int
    machine_bits: int
    sequence_bits: int
    field_order: str
    pool_first: int
    pool_last: int


@dataclass(frozen=True)
class Metrics:
    """What a service exports about its node."""

    machine_id: int
    version: int
    status: str
    ids_issued: int
    heartbeats_ok: int
    heartbeats_failed: int
    heartbeats_timed_out: int
    clock_backward_waits: int
    clock_backward_refusals: int
    sequence_exhaustions: int
    # Seconds until the lease's deadline; None once passed.
    time_to_deadline: Optional[float]


_Handler = Union[Callable[[int, Optional[FrameType]], Any], int, None]


def _ends_the_process(handler: _Handler, signum: int) -> bool:
    """Whether `handler` of `signum` would end the process: the default action, or Python's own
    SIGINT handler (KeyboardInterrupt). An ignored signal, or one the application handles itself
    (a reload on SIGHUP, its own graceful stop), is left to the application."""
    if handler == signal.SIG_DFL or handler is None:
        return True
    return signum == signal.SIGINT and handler is signal.default_int_handler


def _warn(text: str) -> None:
    """A line on stderr, for what a signal handler or the exit hook cannot raise."""
    try:
        sys.stderr.write(f"idgen_client: {text}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr gone: nothing else to tell
        pass


class _Signals:
    """The process's handlers of STOP_SIGNALS for its nodes made with release_on_signals (in the
    main thread): one handler per signal, whatever the number of nodes, taken over only where the
    handler in place would end the process (see _ends_the_process). It goes in before a claim, so
    that a signal while a node claims (a pod stopped as it starts) is kept, and acted on once no
    claim is under way: it is not the default action, which would end the process with the claim
    held. On a signal every such node stops minting and is released, then the handler that was
    there before runs: a failed release does not swallow the signal, and a second signal during
    the release finds this handler still in place. Handlers are put back, in the main thread,
    once no node needs them; from another thread they stay, and a later signal finds no node and
    goes on to the earlier handler."""

    def __init__(self) -> None:
        self.previous: Dict[int, _Handler] = {}
        self.nodes: List["Node"] = []
        self.claiming = 0
        self.pending: List[int] = []

    def before_claim(self) -> None:
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            if current != self.handle and _ends_the_process(current, sig):
                self.previous[sig] = signal.signal(sig, self.handle)
        self.claiming += 1

    def after_claim(self, node: Optional["Node"]) -> None:
        self.claiming -= 1
        if node is not None:
            self.nodes.append(node)
        if self.claiming == 0:
            if self.pending:
                self.handle(self.pending[0], None)
            elif not self.nodes:
                self.restore()

    def closed(self, node: "Node") -> None:
        if node in self.nodes:
            self.nodes.remove(node)
        if not self.nodes and self.claiming == 0:
            self.restore()

    def handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.claiming:
            # A claim is under way: kept until it is answered.
            self.pending.append(signum)
            return
        self.pending = []
        # Taken now: the last close puts the earlier handlers back and forgets them.
        previous = self.previous.get(signum, signal.SIG_DFL)
        try:
            # First stop issuing everywhere and release: whatever the earlier handler does next
            # (raise in the main thread only, or end the process), no thread mints after it.
            for node in list(self.nodes):
                try:
                    node.close()
                except IdgenError as e:
                    _warn(f"releasing machine id {node.machine_id} of {node.service!r} on signal {signum} failed: {e}")
        finally:
            self.chain(signum, frame, previous)

    def chain(self, signum: int, frame: Optional[FrameType], previous: _Handler) -> None:
        self.restore()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL or previous is None:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def restore(self) -> None:
        """Puts back the earlier handlers where this one is still installed (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) == self.handle:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}

    def after_fork_in_child(self) -> None:
        # The child's copies of the parent's nodes are inert; no claim of the parent's runs here.
        self.nodes = []
        self.claiming = 0
        self.pending = []


_signals = _Signals()


# Every node of this process not yet collected, for the atexit hook.
_live_nodes: "weakref.WeakSet[Node]" = weakref.WeakSet()


_exiting = False


def _close_quietly(node: "Node") -> None:
    try:
        node.close()
    except IdgenError as e:
        _warn(f"releasing machine id {node.machine_id} of {node.service!r} at exit failed: {e}")


def _at_exit() -> None:
    """At interpreter exit: no call lets go of the GIL any more, every node still open is released
    (one that a claim still under way brings is released as it comes: Node.__new__), and the hook
    waits, the GIL let go, until no thread is inside a call without it. CPython before 3.14 ends
    daemon threads that take the GIL back during finalization by unwinding them, which through the
    extension's frames aborts the process; and a node a daemon thread still uses would never be
    collected, its id held until the take-back tiers."""
    global _exiting
    _exiting = True
    _native._exiting()
    # Calls that were out without the GIL end by their own bounds (a mint waits out a clock step at
    # most max_clock_backward; a claim, start_timeout); past this, finalization goes on regardless.
    deadline = time.monotonic() + 15.0
    pause = threading.Event()
    while True:
        for node in list(_live_nodes):
            _close_quietly(node)
        if not _native._threads_without_gil() or time.monotonic() >= deadline:
            break
        pause.wait(0.001)


def _release_at_multiprocessing_exit(node: "Node") -> None:
    """In a worker of multiprocessing (its fork start method above all), which ends with os._exit
    and runs no atexit hook: the node is released by multiprocessing's own exit step."""
    mp = sys.modules.get("multiprocessing")
    if mp is None or mp.parent_process() is None:
        return
    from multiprocessing import util

    util.Finalize(None, _close_ref, args=(weakref.ref(node),), exitpriority=100)


def _close_ref(ref: "weakref.ref[Node]") -> None:
    node = ref()
    if node is not None:
        _close_quietly(node)


def _after_fork_in_child() -> None:
    _native._after_fork_in_child()
    _signals.after_fork_in_child()
    # A lock a thread of the parent held (inside close) would never be freed here.
    for node in list(_live_nodes):
        node._closing = threading.RLock()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


class Node(_native.Node):
    """A node holding one machine id of its service. Creating it claims (blocking until it may
    mint, at most ``start_timeout`` plus ``call_timeout`` seconds); share it between threads.

    ``dsn`` is a libpq connection string or URI; give every server of the cluster and
    ``target_session_attrs=read-write`` so that a reconnect finds the primary. ``host`` and
    ``port`` are the node's identity in the registry. ``machine_id`` claims that id (a fleet that
    pins its ids) instead of any free one. Times are in seconds.

    ``release_on_signals`` (default True, in the main thread only): on SIGTERM, SIGINT or SIGHUP,
    when that signal would end the process (its default action, or Python's KeyboardInterrupt),
    the node stops issuing in every thread and releases its id, then the signal's earlier handler
    runs. A signal the application ignores or handles itself is left to it. Give False when the
    application shuts down on signals itself (uvicorn, gunicorn) and calls ``close`` (or leaves the
    ``with`` block) then. At interpreter exit every node still open is released.
    """

    _on_signals: bool
    _closing: Any  # a threading.RLock

    def __new__(
        cls,
        dsn: str,
        service: str,
        host: str,
        port: int,
        *,
        machine_id: Optional[int] = None,
        heartbeat_interval: Optional[float] = None,
        start_timeout: float = 60.0,
        call_timeout: float = 5.0,
        max_clock_backward: float = 2.0,
        release_on_signals: bool = True,
    ) -> "Node":
        on_signals = release_on_signals and threading.current_thread() is threading.main_thread()
        if on_signals:
            _signals.before_claim()
        try:
            node = super().__new__(
                cls,
                dsn,
                service,
                host,
                port,
                machine_id=machine_id,
                heartbeat_interval=heartbeat_interval,
                start_timeout=start_timeout,
                call_timeout=call_timeout,
                max_clock_backward=max_clock_backward,
            )
        except BaseException:
            if on_signals:
                _signals.after_claim(None)
            raise
        node._on_signals = on_signals
        node._closing = threading.RLock()
        _live_nodes.add(node)
        if _exiting:
            # A claim that was under way when the interpreter began to exit: released at once.
            _close_quietly(node)
            stopped = NodeStopped("idgen: the interpreter is exiting; the node was released at once")
            stopped.message = str(stopped)
            raise stopped
        if on_signals:
            _signals.after_claim(node)
        _release_at_multiprocessing_exit(node)
        return node

    def __init__(self, dsn: str, service: str, host: str, port: int, **options: Any) -> None:
        # The claim ran in __new__ (the native constructor, behind the signal handlers).
        pass

    # ---- identity and state

    def layout_info(self) -> Layout:
        """The service's layout and pool as a dataclass."""
        return Layout(**self.layout)

    def metrics_info(self) -> Metrics:
        """The node's counters and lease as a dataclass."""
        return Metrics(**self.metrics())

    # ---- shutdown, with and without signals

    def close(self) -> bool:
        """Shuts the node down unless it already is: stops issuing, releases with the watermark.
        True when released; False when already shut down or the id had moved (or in a forked child).
        A close while another thread's runs waits for that one's release to end."""
        with self._closing:
            try:
                return self.shutdown()
            except NodeStopped:
                return False
            finally:
                # After the release: a signal meanwhile still found the handler.
                if self._on_signals:
                    _signals.closed(self)

    def __enter__(self) -> "Node":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # ---- asyncio: the claim and the release wait on the network, off the event loop

    @classmethod
    async def astart(cls, dsn: str, service: str, host: str, port: int, **options: Any) -> "Node":
        """Starts a node on a worker thread, so the event loop runs meanwhile. Signals are left to
        the application (``release_on_signals`` is False): shut down with ``aclose``."""
        options.setdefault("release_on_signals", False)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: cls(dsn, service, host, port, **options)
        )

    async def aclose(self) -> bool:
        """``close`` on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, self.close)

    async def __aenter__(self) -> "Node":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()


def start(dsn: str, service: str, host: str, port: int, **options: Any) -> Node:
    """``Node(dsn, service, host, port, **options)``: claims and returns a started node."""
    return Node(dsn, service, host, port, **options)


# Listed in full (not from errors.__all__): type checkers read only a literal list.
__all__ = [
    "Node",
    "Layout",
    "Metrics",
    "start",
    "STOP_SIGNALS",
    "IdgenError",
    "StartError",
    "NotInstalled",
    "LayoutError",
    "NotBeforeAhead",
    "NoAnswer",
    "LeaseExpired",
    "ClockAhead",
    "ClockBehind",
    "ClockOutsideLayout",
    "OwnershipLost",
    "NodeStopped",
    "NodeForked",
    "HeartbeatDied",
    "ReleaseError",
]
