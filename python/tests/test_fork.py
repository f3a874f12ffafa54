"""A node does not cross fork(): a child (os.fork, gunicorn's --preload, multiprocessing's fork
start method) would repeat its parent's IDs, and a child that released on its way out would free the
id its parent still mints with. In the child every call that mints or releases is refused, and the
child's exit leaves the node alone; the parent goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import PATIENCE, Database

PROGRAM = textwrap.dedent(
    """
    import gc, os, sys, threading
    import idgen_client

    node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8130, heartbeat_interval=0.2)
    before = node.next_id()
    # Threads minting while the process forks: a fork copies the locks they hold.
    def mint():
        while node.status == "live":
            try:
                node.next_id()
            except idgen_client.IdgenError:
                pass
    for _ in range(2):
        threading.Thread(target=mint, daemon=True).start()
    for _ in range(20):
        child = os.fork()
        if child == 0:
            # Reads that take a lock refuse at once; the status says so.
            assert node.status == "forked", node.status
            try:
                node.metrics_info()
                os._exit(1)
            except idgen_client.NodeForked:
                os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    child = os.fork()
    if child == 0:
        try:
            node.next_id()
            print("child minted", flush=True)
        except idgen_client.NodeForked as e:
            assert e.final and isinstance(e, idgen_client.NodeStopped), e
            print("child refused:", e, flush=True)
        try:
            node.next_ids(10)
            print("child minted a batch", flush=True)
        except idgen_client.NodeForked:
            pass
        print("child close ->", node.close(), flush=True)
        del node
        gc.collect()
        sys.exit(0)  # finalizers run: the node's copy is dropped in the child
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    # The parent's node is untouched: heartbeats go on (the interval is 0.2 s), IDs come after its own.
    threading.Event().wait(1.0)
    assert node.status == "live", node.status
    after = node.next_id()
    assert after > before
    print("parent heartbeats:", node.metrics_info().heartbeats_ok, flush=True)
    print("parent close ->", node.close(), flush=True)
    """
)


def test_a_forked_child_neither_mints_nor_releases_and_the_parent_goes_on(db: Database, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "fork.py"
    script.write_text(PROGRAM)
    done = subprocess.run([sys.executable, str(script), db.dsn], capture_output=True, text=True, timeout=PATIENCE)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "child refused: idgen: this node was started by process" in out, out
    assert "child minted" not in out, out
    assert "child close -> False" in out, out
    assert "parent close -> True" in out, out
    heartbeats = int(out.split("parent heartbeats: ")[1].split()[0])
    assert heartbeats >= 2, out
