"""A service process that uses idgen_client as a service would: a node started with the defaults
(its id released on SIGTERM, SIGINT and SIGHUP), minting on several threads, each ID printed on a
line of its own. When the node stops for good, it says when and why on stderr and exits 3.

    python node_program.py DSN SERVICE HOST PORT [--rate N] [--count N] [--threads N] [--heartbeat S]
"""

import argparse
import sys
import threading
import time

import idgen_client

parser = argparse.ArgumentParser()
parser.add_argument("dsn")
parser.add_argument("service")
parser.add_argument("host")
parser.add_argument("port", type=int)
parser.add_argument("--rate", type=float, default=200.0, help="IDs per second and thread")
parser.add_argument("--count", type=int, default=0, help="end after this many IDs per thread (0: never)")
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--heartbeat", type=float, default=None)
parser.add_argument("--max-clock-backward", type=float, default=2.0)
args = parser.parse_args()

node = idgen_client.Node(
    args.dsn,
    args.service,
    args.host,
    args.port,
    heartbeat_interval=args.heartbeat,
    max_clock_backward=args.max_clock_backward,
)
print(f"started: machine id {node.machine_id}", file=sys.stderr, flush=True)
out = threading.Lock()
# Waits through an Event, not time.sleep: under libfaketime 0.9.10 (the clock tests), Python's
# time.sleep fails with EINVAL (its clock_nanosleep on the monotonic clock is mishandled).
pause = threading.Event()
stopped = threading.Event()
final = []


def mint() -> None:
    n = 0
    while not stopped.is_set() and (args.count == 0 or n < args.count):
        try:
            i = node.next_id()
        except idgen_client.IdgenError as e:
            print(f"{type(e).__name__} sqlstate={e.sqlstate}: {e}", file=sys.stderr, flush=True)
            if e.final:
                final.append((int(time.time() * 1000), e))
                stopped.set()
                return
            pause.wait(0.05)
            continue
        with out:
            print(i, flush=True)
        n += 1
        pause.wait(1.0 / args.rate)


threads = [threading.Thread(target=mint) for _ in range(args.threads)]
for t in threads:
    t.start()
# The main thread waits, so that the signal handlers run in it.
while any(t.is_alive() for t in threads):
    pause.wait(0.05)
if final:
    at_ms, e = min(final, key=lambda f: f[0])
    print(f"stopped minting at {at_ms} with {e.sqlstate}", file=sys.stderr, flush=True)
    sys.exit(3)
node.close()
print("released", file=sys.stderr, flush=True)
