"""IDs per second a Python service gets from idgen, in one run: the package's next_id() and
next_ids(1000), the Rust crate on the same node without Python in the loop (its yardstick), and the
HTTP sidecar (idgen-node --listen) from Python with httpx, one ID a request and batches of 1,000 on a
keep-alive connection. Each measured for SECONDS, in ROUNDS interleaved rounds; the medians and their
ratio to the Rust crate's, as a markdown table. scripts/bench_python.sh runs it.

    python bench_python.py DSN IDGEN_NODE [SECONDS] [ROUNDS]
"""

import re
import statistics
import subprocess
import sys
import time

import httpx

import idgen_client

dsn, node_bin = sys.argv[1], sys.argv[2]
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5


def rate(mint) -> float:
    started = time.perf_counter()
    until = started + seconds
    minted = 0
    while time.perf_counter() < until:
        minted += mint()
    return minted / (time.perf_counter() - started)


node = idgen_client.Node(dsn, "bench", "10.0.0.1", 1)
sidecar = subprocess.Popen(
    [node_bin, "--dsn", dsn, "--service", "bench", "--host", "10.0.0.2", "--port", "1", "--listen", "127.0.0.1:0"],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
)
try:
    address = ""
    for line in sidecar.stderr:  # type: ignore[union-attr]
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            address = found.group(1)
            break
    http = httpx.Client(base_url=address, timeout=30)
    deadline = time.monotonic() + 60
    while http.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the sidecar was not ready within 60 s"
        time.sleep(0.05)

    def one_by_one() -> int:
        for _ in range(1000):
            node.next_id()
        return 1000

    def sidecar_one() -> int:
        http.get("/id").raise_for_status()
        return 1

    def sidecar_batch() -> int:
        answer = http.get("/ids", params={"count": 1000})
        answer.raise_for_status()
        return answer.text.count("\n")

    measurements = {
        "the Rust crate, in-process (IdgenNode::next_id, no Python in the loop)": lambda: node._mint_for(0.1),
        "the package, `node.next_id()`": one_by_one,
        "the package, `node.next_ids(1000)`": lambda: len(node.next_ids(1000)),
        "the sidecar from Python (httpx), `GET /id` on one keep-alive connection": sidecar_one,
        "the sidecar from Python (httpx), `GET /ids?count=1000`": sidecar_batch,
    }
    results = {name: [] for name in measurements}
    for _ in range(rounds):
        for name, mint in measurements.items():
            results[name].append(rate(mint))
    medians = {name: statistics.median(r) for name, r in results.items()}
    base = next(iter(medians.values()))
    print(f"| what (Python {sys.version.split()[0]}, {rounds} rounds of {seconds:g} s) | IDs per second (median) | ratio to the Rust crate |")
    print("|---|---:|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value:,.0f} | {value / base:.3f} |")
finally:
    node.close()
    sidecar.terminate()
    sidecar.wait(30)
