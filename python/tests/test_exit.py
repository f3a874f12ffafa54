"""How a service process ends when it does not end cleanly: daemon threads still minting when the
interpreter exits (CPython before 3.14 unwinds them through the extension's frames, which aborted
the process with every such node left held), a node never closed, a second stop signal while the
release waits, signals the application ignores or handles itself, and a close racing another."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import List

import psycopg

from conftest import PATIENCE, Database, Program, wait_for

DAEMONS = textwrap.dedent(
    """
    import sys, threading
    import idgen_client

    node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", int(sys.argv[2]))

    def mint(batch):
        while True:
            try:
                node.next_ids(batch) if batch else node.next_id()
            except idgen_client.IdgenError:
                pass

    for batch in (0, 0, 1000, 1000):
        threading.Thread(target=mint, args=(batch,), daemon=True).start()
    threading.Event().wait(0.3)
    print("leaving", flush=True)
    """
)


def test_daemon_threads_minting_at_exit_neither_abort_the_process_nor_leave_the_id_held(
    db: Database, tmp_path: Path
) -> None:
    script = tmp_path / "daemons.py"
    script.write_text(DAEMONS)
    for round in range(5):
        port = 8200 + round
        done = subprocess.run(
            [sys.executable, str(script), db.dsn, str(port)], capture_output=True, text=True, timeout=PATIENCE
        )
        assert done.returncode == 0, f"round {round}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        assert db.node_row("orders", port)["released"], f"round {round}: the id was left held"


def blocked_release(db: Database, port: int) -> psycopg.Connection:
    """A transaction holding the node's row, so that its release waits; committed by the caller."""
    conn = db.connect()
    conn.autocommit = False
    conn.execute("SELECT 1 FROM system_nodes WHERE service = 'orders' AND port = %s FOR UPDATE", (port,))
    return conn


def wait_for_release_waiting(db: Database) -> None:
    wait_for(
        "the release to wait for the row",
        lambda: db.one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )[0]
        >= 1,
    )


def test_a_second_sigterm_while_the_release_waits_does_not_cut_it_short(
    db: Database, programs: List[Program]
) -> None:
    from conftest import node_program

    p = node_program(programs, db, "orders", 8210)
    p.wait_for_ids(20)
    holder = blocked_release(db, 8210)
    p.signal(signal.SIGTERM)
    wait_for_release_waiting(db)
    p.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert p.process.poll() is None, "the second SIGTERM ended the process while its release waited"
    holder.commit()
    holder.close()
    assert p.exit_code() == -int(signal.SIGTERM), p.messages()
    assert db.node_row("orders", 8210)["released"]


def run(tmp_path: Path, name: str, program: str, *args: str) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    script = tmp_path / name
    script.write_text(textwrap.dedent(program))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=PATIENCE)


def test_signals_the_application_ignores_or_handles_itself_are_left_to_it(db: Database, tmp_path: Path) -> None:
    done = run(
        tmp_path,
        "own_handlers.py",
        """
        import os, signal, sys
        import idgen_client

        stopping = []
        signal.signal(signal.SIGHUP, signal.SIG_IGN)              # nohup
        signal.signal(signal.SIGTERM, lambda s, f: stopping.append(s))   # the app's graceful stop
        node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8220)
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)
        assert node.status == "live" and node.next_id() > 0, node.status
        assert stopping == [signal.SIGTERM], stopping
        print("closed:", node.close())
        """,
        db.dsn,
    )
    assert done.returncode == 0 and done.stdout == "closed: True\n", done.stdout + done.stderr


def test_a_close_while_another_threads_release_waits_waits_for_it(db: Database, tmp_path: Path) -> None:
    script = tmp_path / "two_closes.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, threading, time
            import idgen_client

            node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8230, release_on_signals=False)
            print("started", flush=True)
            sys.stdin.readline()          # the test now holds the node's row
            ended = []   # in the order the closes returned
            first = threading.Thread(target=lambda: ended.append(f"first: {node.close()}"))
            first.start()
            time.sleep(0.3)
            ended.append(f"second: {node.close()}")
            first.join()
            print("\\n".join(ended), flush=True)
            """
        )
    )
    child = subprocess.Popen(
        [sys.executable, str(script), db.dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "started\n"
        holder = blocked_release(db, 8230)
        child.stdin.write("go\n")
        child.stdin.flush()
        wait_for_release_waiting(db)
        time.sleep(0.6)
        assert not db.node_row("orders", 8230)["released"]
        holder.commit()
        holder.close()
        out, _ = child.communicate(timeout=PATIENCE)
    finally:
        if child.poll() is None:
            child.kill()
    # The second close returned only after the first one's release: released, and it says False.
    assert out.splitlines() == ["first: True", "second: False"], out
    assert db.node_row("orders", 8230)["released"]


def test_every_node_of_the_process_is_released_on_a_signal(db: Database, tmp_path: Path) -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        base = 8240 + 10 * (signum == signal.SIGHUP)
        done = run(
            tmp_path,
            "three_nodes.py",
            f"""
            import os, signal, sys
            import idgen_client

            with idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", {base}) as first:
                pass                      # closed before the signal, in the main thread
            a = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", {base + 1})
            b = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", {base + 2})
            os.kill(os.getpid(), {int(signum)})
            threading_never_reached = True
            """,
            db.dsn,
        )
        assert done.returncode == -int(signum), done.stdout + done.stderr
        for port in (base, base + 1, base + 2):
            assert db.node_row("orders", port)["released"], f"{signum.name}: port {port} left held"


def test_a_release_that_fails_on_sigterm_does_not_swallow_the_signal(db: Database, tmp_path: Path) -> None:
    script = tmp_path / "failing_release.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import idgen_client

            node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8260, call_timeout=1)
            print("started", flush=True)
            while True:           # a service loop that goes on after any error
                try:
                    sys.stdin.readline()
                except Exception:
                    pass
            """
        )
    )
    child = subprocess.Popen(
        [sys.executable, str(script), db.dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "started\n"
        holder = blocked_release(db, 8260)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=PATIENCE)
        holder.rollback()
        holder.close()
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -int(signal.SIGTERM), err
    assert "releasing machine id" in err and "failed" in err, err


def test_a_fork_while_another_thread_closes_the_node_does_not_hang_the_child(db: Database, tmp_path: Path) -> None:
    script = tmp_path / "fork_closing.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys, threading, time
            import idgen_client

            node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8270, release_on_signals=False)
            print("started", flush=True)
            sys.stdin.readline()                     # the test now holds the node's row
            closing = threading.Thread(target=node.close)
            closing.start()
            time.sleep(0.5)                          # inside close, its release waiting
            child = os.fork()
            if child == 0:
                print("child closes:", node.close(), node.status, flush=True)
                sys.exit(0)                          # and the exit hook runs
            _, status = os.waitpid(child, 0)
            print("child exit:", os.waitstatus_to_exitcode(status), flush=True)
            """
        )
    )
    child = subprocess.Popen(
        [sys.executable, str(script), db.dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "started\n"
        holder = blocked_release(db, 8270)
        child.stdin.write("go\n")
        child.stdin.flush()
        first = child.stdout.readline()
        second = child.stdout.readline()
        holder.commit()
        holder.close()
        child.communicate(timeout=PATIENCE)
    finally:
        if child.poll() is None:
            child.kill()
    assert (first, second) == ("child closes: False forked\n", "child exit: 0\n"), (first, second)
    assert db.node_row("orders", 8270)["released"]


def test_at_exit_a_release_that_fails_leaves_the_others_released(db: Database, tmp_path: Path) -> None:
    script = tmp_path / "exit_failing.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, threading
            import idgen_client

            nodes = [idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8280 + i, call_timeout=1) for i in range(3)]
            # Held by a daemon thread only: never collected before finalization.
            threading.Thread(target=lambda held: threading.Event().wait(), args=(nodes,), daemon=True).start()
            del nodes
            print("started", flush=True)
            sys.stdin.readline()
            """
        )
    )
    child = subprocess.Popen(
        [sys.executable, str(script), db.dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "started\n"
        holder = blocked_release(db, 8281)
        child.stdin.write("go\n")
        child.stdin.flush()
        _, err = child.communicate(timeout=PATIENCE)
        holder.rollback()
        holder.close()
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert db.node_row("orders", 8280)["released"] and db.node_row("orders", 8282)["released"], err
    assert "at exit failed" in err, err


def test_a_claim_still_under_way_at_exit_is_released_as_it_comes(db: Database, tmp_path: Path) -> None:
    done_event = "started"
    script = tmp_path / "exit_claiming.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, threading
            import idgen_client

            def claim():
                try:
                    node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", 8290, release_on_signals=False)
                    while True:
                        node.next_id()
                except idgen_client.IdgenError:
                    pass

            threading.Thread(target=claim, daemon=True).start()
            print("started", flush=True)
            sys.stdin.readline()
            """
        )
    )
    with db.connect() as blocker:
        # Another session claims the same identity and keeps its transaction open: the claim waits.
        blocker.autocommit = False
        blocker.execute("SELECT * FROM idgen_claim('orders', '10.0.0.5', 8290)")
        child = subprocess.Popen(
            [sys.executable, str(script), db.dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline() == done_event + "\n"
            wait_for(
                "the daemon's claim to wait",
                lambda: db.one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )[0]
                >= 2,
            )
            child.stdin.write("go\n")
            child.stdin.flush()
            time.sleep(0.5)               # the exit hook waits for the claim
            blocker.rollback()
            _, err = child.communicate(timeout=PATIENCE)
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == 0, err
    assert db.node_row("orders", 8290)["released"], err


def test_multiprocessing_fork_workers_release_their_nodes(db: Database, tmp_path: Path) -> None:
    done = run(
        tmp_path,
        "pool.py",
        """
        import multiprocessing, os, sys
        import idgen_client

        def work(port):
            node = idgen_client.Node(sys.argv[1], "orders", "10.0.0.5", port)
            return node.next_id()                    # the node stays open: the worker's exit releases it

        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2) as pool:
                ids = pool.map(work, [8300, 8301])
            pool.join()
            print(len(set(ids)))
        """,
        db.dsn,
    )
    assert done.returncode == 0 and done.stdout == "2\n", done.stdout + done.stderr
    for port in (8300, 8301):
        assert db.node_row("orders", port)["released"], f"the pool worker left port {port} held"


def test_no_thread_to_start_is_an_idgen_error_not_a_panic(db: Database, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys, idgen_client\n"
         "try:\n"
         "    idgen_client.Node(sys.argv[1], 'orders', '10.0.0.5', 8310, start_timeout=1, call_timeout=1)\n"
         "except idgen_client.IdgenError as e:\n"
         "    print(type(e).__name__, e.final)\n",
         db.dsn],
        capture_output=True, text=True, timeout=PATIENCE, cwd=tmp_path,
        # Every thread the crate starts asks for more stack than any machine gives.
        env={**__import__("os").environ, "RUST_MIN_STACK": str(1 << 60)},
    )
    assert done.returncode == 0 and done.stdout in ("NoAnswer True\n", "StartError True\n"), done.stdout + done.stderr
    assert "panicked" not in done.stderr, done.stderr
    assert db.one("SELECT count(*) FROM system_nodes WHERE port = 8310")[0] == 0
