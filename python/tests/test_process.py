"""A service process's end, as Kubernetes, systemd and a terminal end it: SIGTERM, SIGHUP and SIGINT
stop every minting thread and release the id with a watermark that bounds every ID the process
printed. And a process paused (SIGSTOP) past its lease, whose id another node took meanwhile,
prints nothing after it resumes."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import List

import pytest

from conftest import PATIENCE, Database, Program, SystemSettings, node_program, wait_for


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_releases_with_a_watermark_covering_every_printed_id(
    db: Database, programs: List[Program], signum: signal.Signals
) -> None:
    port = 8100 + int(signum)
    p = node_program(programs, db, "orders", port, "--threads", "4", "--rate", "500")
    p.wait_for_ids(200)
    p.signal(signum)
    code = p.exit_code()
    if signum == signal.SIGINT:
        # The earlier handler ran after the release: Python's, which raised KeyboardInterrupt.
        assert "KeyboardInterrupt" in p.messages(), p.messages()
    else:
        # The default action ran after the release: the process ended by the signal.
        assert code == -int(signum), (code, p.messages())
    row = db.node_row("orders", port)
    assert row["released"], f"{signum.name} left the id held:\n{p.messages()}"
    ids = p.ids()
    assert len(ids) == len(set(ids))
    last = max(db.stamped_ms("orders", ids))
    assert row["issued_until_ms"] >= last, f"released at {row['issued_until_ms']}, an ID stamped at {last}"


def test_a_process_paused_past_its_lease_prints_nothing_after_another_node_took_its_id(
    db: Database, programs: List[Program], short_leases: SystemSettings
) -> None:
    # One machine id in the pool: the second node can only get the paused one's.
    db.execute("SELECT idgen_define_layout('solo', 'snowflake', pool_first => 5, pool_last => 5)")
    paused = node_program(programs, db, "solo", 8110, "--threads", "2", "--rate", "200")
    paused.wait_for_ids(50)
    paused.signal(signal.SIGSTOP)
    # The id is taken once it is idle past the last tier (6 s).
    wait_for(
        "the paused node's id to be idle past the last tier",
        lambda: db.one("SELECT now() - last_seen > interval '6.5 s' FROM system_nodes WHERE port = 8110")[0],
    )
    taker = node_program(programs, db, "solo", 8111, "--threads", "1", "--rate", "200")
    taker.wait_for_ids(50)
    assert db.node_row("solo", 8111)["machine_id"] == 5
    before = len(paused.ids())
    paused.signal(signal.SIGCONT)
    assert paused.exit_code() == 3, paused.messages()
    assert "OwnershipLost sqlstate=55000" in paused.messages(), paused.messages()
    # At most what was on its way to stdout when it stopped.
    assert len(paused.ids()) - before <= 2, f"printed {len(paused.ids()) - before} IDs after it resumed"
    assert not set(paused.ids()) & set(taker.ids()), "an ID of the paused node printed by the taker"
    assert max(db.stamped_ms("solo", paused.ids())) < min(db.stamped_ms("solo", taker.ids()))
    taker.signal(signal.SIGTERM)
    taker.exit_code()
    wait_for("the taker's release", lambda: bool(db.node_row("solo", 8111)["released"]))


def test_a_sigterm_while_the_node_claims_is_kept_and_releases_once_the_claim_is_answered(
    db: Database, programs: List[Program]
) -> None:
    # Another session claims the same identity and keeps its transaction open: the node's claim
    # waits (55P03, retried) until it ends.
    with db.connect() as blocker:
        blocker.autocommit = False
        blocker.execute("SELECT * FROM idgen_claim('orders', '10.0.0.5', 8150)")
        p = node_program(programs, db, "orders", 8150)
        wait_for(
            "the node's connection while its claim waits",
            lambda: db.one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )[0]
            >= 2,
        )
        p.signal(signal.SIGTERM)
        blocker.rollback()
    # Kept, not the default action at once: the claim was answered, then released, then the process
    # ended by the signal.
    assert p.exit_code() == -int(signal.SIGTERM), p.messages()
    assert "started: machine id" not in p.messages(), "the program went on after the signal"
    assert db.node_row("orders", 8150)["released"], p.messages()


def test_a_node_closed_in_another_thread_leaves_the_earlier_handler_to_a_later_signal(
    db: Database, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "handlers.py"
    script.write_text(
        "import signal, sys, threading\n"
        "import idgen_client\n"
        "seen = []\n"
        "signal.signal(signal.SIGHUP, lambda s, f: seen.append(s))\n"
        "node = idgen_client.Node(sys.argv[1], 'orders', '10.0.0.5', 8151)\n"
        "closer = threading.Thread(target=node.close)\n"
        "closer.start(); closer.join()\n"
        "signal.raise_signal(signal.SIGHUP)\n"
        "assert seen == [signal.SIGHUP], seen\n"
        "# Closed in the main thread, a node puts the earlier handler back.\n"
        "other = idgen_client.Node(sys.argv[1], 'orders', '10.0.0.5', 8152)\n"
        "other.close()\n"
        "assert signal.getsignal(signal.SIGHUP) is not None and signal.getsignal(signal.SIGHUP).__name__ == '<lambda>'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, str(script), db.dsn], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout + done.stderr
    assert db.node_row("orders", 8151)["released"] and db.node_row("orders", 8152)["released"]
