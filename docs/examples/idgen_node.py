#!/usr/bin/env python3
"""A node of an idgen service in Python (psycopg 3): the client contract of docs/services.md.

    python3 idgen_node.py DSN SERVICE HOST PORT [--count N] [--rate PER_SECOND]

Claims a machine id, mints IDs with the layout the registry fixed for the service (one per line on
stdout), heartbeats at the server's idgen.heartbeat_interval from a thread of its own, and releases
the id with its watermark when done (after --count IDs, on SIGTERM, SIGHUP or Ctrl-C, or when
nobody reads its output any more). A heartbeat the registry refuses (55000: the id moved; 22023:
the watermark was refused; 42501: the role may no longer act for the service) stops the minting at
once, from any thread, and the program exits 3 without releasing. Exit status 1 when the claim
fails or the lease runs out.
"""
import argparse, os, signal, sys, threading, time
import psycopg

REFUSALS = {"55000", "22023", "42501"}         # the registry said no: stop minting, never retry
MAX_BACKWARD_MS = 2000                         # the clock policy of every holder (idgen.max_clock_backward)


class Stopped(Exception):
    """Minting has stopped for good: the registry refused a report, or the lease ran out."""


class NoId(Exception):
    """No ID this time: the clock is far behind the last ID (idgen.max_clock_backward)."""


class Node:
    def __init__(self, dsn, service, host, port):
        self.dsn, self.service, self.host, self.port = dsn, service, host, port
        self.lock = threading.Lock()           # guards the generator's state and `stopped`
        self.stopped = None                    # why minting stopped, once it has
        self.refused = False                   # whether the registry refused a report
        self.done = threading.Event()          # set when the node ends
        self.wake = threading.Event()          # wakes the heartbeat thread: to end, or to report now
        self.conn = psycopg.connect(dsn, autocommit=True)
        sent = time.monotonic()
        self.machine_id, self.version, lease, self.not_before = self.conn.execute(
            "SELECT machine_id, version, extract(epoch FROM lease_until - now())::float8,"
            " floor(extract(epoch FROM not_before) * 1000)::bigint FROM idgen_claim(%s, %s, %s)",
            (service, host, port)).fetchone()
        self.deadline = sent + lease           # monotonic: from the moment the claim was sent
        layout = self.conn.execute(            # fixed by the claim; never from the node's configuration
            "SELECT round(extract(epoch FROM epoch) * 1000)::bigint, time_unit_ms, time_bits, machine_bits,"
            " sequence_bits, field_order FROM idgen_layouts WHERE service = %s", (service,)).fetchone()
        if layout is None:                     # this role does not see it: give the id back, guess nothing
            self.release(self.not_before)
            raise SystemExit(f"idgen_node: no row of idgen_layouts for {service}")
        self.epoch_ms, self.unit_ms, self.time_bits, self.machine_bits, self.sequence_bits, order = layout
        self.max_seq = (1 << self.sequence_bits) - 1
        self.machine_shift, self.seq_shift = (
            (self.sequence_bits, 0) if order == "time_machine_sequence" else (0, self.machine_bits))
        self.last_tick = (self.not_before - self.epoch_ms) // self.unit_ms  # not_before's tick counts as used
        self.seq, self.issued = self.max_seq, False
        self.wall_bound = self.not_before      # set by each report: its watermark plus the lease it granted
        self.counts = [0, 0, 0]                # backward waits, backward refusals, sequence exhaustions
        interval = self.conn.execute(          # the server's, read after the claim loaded idgen
            "SELECT extract(epoch FROM current_setting('idgen.heartbeat_interval')::interval)::float8"
        ).fetchone()[0]
        self.interval = min(interval, lease / 3)

    def stop(self, why, refused=False):
        with self.lock:                        # next_id checks under the same lock: no ID after this
            if self.stopped is None:
                self.stopped, self.refused = why, refused
                print(f"idgen_node: stopped minting at {int(time.time() * 1000)} ms: {why}",
                      file=sys.stderr, flush=True)
        self.done.set()
        self.wake.set()

    def next_id(self):
        while True:
            with self.lock:
                if self.stopped is not None:
                    raise Stopped(self.stopped)
                if time.monotonic() >= self.deadline:
                    self.stopped = "lease expired: no heartbeat succeeded in time"
                    raise Stopped(self.stopped)
                now = int(time.time() * 1000)
                tick = (now - self.epoch_ms) // self.unit_ms
                if now >= self.wall_bound or tick >= 1 << self.time_bits:
                    # Past what the registry holds for us, or past the layout's last tick: no ID;
                    # report now, and the answer decides (22023 past the layout: the node stops).
                    self.wake.set()
                    wait_ms = 10
                else:
                    if tick > self.last_tick or (tick == self.last_tick and self.seq < self.max_seq):
                        self.seq = 0 if tick > self.last_tick else self.seq + 1
                        self.last_tick, self.issued = tick, True
                        return (self.last_tick << (self.machine_bits + self.sequence_bits)
                                | self.machine_id << self.machine_shift | self.seq << self.seq_shift)
                    behind_ms = self.epoch_ms + self.last_tick * self.unit_ms - now
                    if behind_ms > MAX_BACKWARD_MS:  # a large step back: refuse this ID, issue nothing
                        self.counts[1] += 1
                        raise NoId(f"clock {behind_ms} ms behind the last ID: no ID issued")
                    if self.issued:
                        self.counts[0 if tick < self.last_tick else 2] += 1
                    resume = self.last_tick + 1 if self.seq == self.max_seq else self.last_tick
                    wait_ms = max(self.epoch_ms + resume * self.unit_ms - now, 1)
            time.sleep(wait_ms / 1000)

    def watermark_ms(self):
        """The latest time this node may have stamped, or its clock: a tick is stamped until its end."""
        with self.lock:
            stamped = self.epoch_ms + (self.last_tick + 1) * self.unit_ms - 1 if self.issued else self.not_before
        return max(stamped, int(time.time() * 1000))

    def report(self):
        """One heartbeat with the watermark; the deadline and the wall bound move on its answer only."""
        sent, reported = time.monotonic(), self.watermark_ms()
        with self.lock:
            counts = list(self.counts)
        lease = self.conn.execute(             # the lease this heartbeat granted: a reload may shorten it
            "SELECT extract(epoch FROM idgen_heartbeat(%s, %s, %s, %s, %s, to_timestamp(%s), %s, %s, %s)"
            " - clock_timestamp())::float8",
            (self.service, self.machine_id, self.host, self.port, self.version, reported / 1000, *counts)
        ).fetchone()[0]
        with self.lock:
            self.deadline, self.wall_bound = sent + lease, reported + int(lease * 1000)

    def heartbeat(self):
        """Reports every interval until done; a refusal stops the node, a lost connection is retried."""
        wait = self.interval
        while True:
            self.wake.wait(wait)
            self.wake.clear()
            if self.done.is_set():
                return
            try:
                self.report()
                wait = self.interval
            except psycopg.Error as e:
                if e.sqlstate in REFUSALS:
                    self.stop(f"heartbeat refused with {e.sqlstate}: {e.diag.message_primary}", refused=True)
                    return
                print(f"idgen_node: heartbeat failed, retrying: {e}", file=sys.stderr, flush=True)
                wait = 1.0
                try:                           # the DSN may name several hosts: this finds the primary
                    self.conn = psycopg.connect(self.dsn, autocommit=True)
                except psycopg.Error:
                    pass

    def release(self, watermark_ms):
        self.conn.execute("SELECT idgen_release(%s, %s, %s, %s, %s, to_timestamp(%s))",
                          (self.service, self.machine_id, self.host, self.port, self.version,
                           watermark_ms / 1000))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("service")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=None, help="stop after N IDs (default: until SIGTERM)")
    parser.add_argument("--rate", type=float, default=100.0, help="IDs per second")
    args = parser.parse_args()
    try:
        node = Node(args.dsn, args.service, args.host, args.port)
    except psycopg.Error as e:
        print(f"idgen_node: the claim failed with {e.sqlstate}: {e}", file=sys.stderr)
        return 1
    print(f"idgen_node: machine id {node.machine_id} of service {args.service!r} at version {node.version}",
          file=sys.stderr, flush=True)
    shutdown = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: shutdown.set())
    while int(time.time() * 1000) <= node.not_before:  # no ID at or before not_before
        time.sleep(0.01)
    node.report()                              # before the first ID: the registry holds this node's clock
    beat = threading.Thread(target=node.heartbeat, daemon=True)
    beat.start()
    minted = 0
    try:
        while (args.count is None or minted < args.count) and not shutdown.is_set():
            try:
                print(node.next_id(), flush=True)
                minted += 1
            except NoId as e:
                print(f"idgen_node: {e}", file=sys.stderr, flush=True)
            time.sleep(1 / args.rate)
    except Stopped as e:
        print(f"idgen_node: {e}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:                    # the reader went away: end as on SIGTERM
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    node.stop("shutting down")                 # no ID after this; then the watermark covers them all
    beat.join()
    if node.refused:                           # the id is no longer ours to release
        return 3
    if node.stopped != "shutting down":        # the lease ran out: the registry may take the id back
        return 1
    node.release(node.watermark_ms())
    print(f"idgen_node: released machine id {node.machine_id}", file=sys.stderr, flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
