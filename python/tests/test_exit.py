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
