"""The clock policy under real clock steps: the service process runs under libfaketime (its wall
clock re-read from a file on every reading; monotonic time stays real), as the backends' clock-step
tests run the server. A step back within max_clock_backward is waited out, one beyond it refused
(and both reported to the registry); a jump past what the layout can stamp ends the lease with the
server's 22023. No ID ever reuses time."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import Database, Program, node_program, wait_for


def libfaketime() -> str:
    path = os.environ.get("IDGEN_LIBFAKETIME")
    if not path:
        listed = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True).stdout
        path = next((l for l in listed.splitlines() if l.endswith("/libfaketime.so.1")), "")
    if not path:
        pytest.fail("libfaketime.so.1 not found (Debian package libfaketime; scripts/test.sh installs it)")
    return path


class Clock:
    """The wall clock of a process started with `environment`: `set("-1.5")` steps it."""

    def __init__(self, directory: Path) -> None:
        self.file = directory / "faketime.rc"
        self.set("+0")
        self.environment: Dict[str, str] = {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "TZ": "UTC",
        }

    def set(self, offset: str) -> None:
        self.file.write_text(offset + "\n")


def registry_counts(db: Database, port: int) -> Dict[str, int]:
    with db.connect() as c:
        cur = c.execute(
            "SELECT coalesce(clock_backward_waits, 0), coalesce(clock_backward_refusals, 0) "
            "  FROM system_nodes WHERE port = %s",
            (port,),
        )
        waits, refusals = cur.fetchone()  # type: ignore[misc]
        return {"waits": waits, "refusals": refusals}


def assert_increasing(ids: List[int]) -> None:
    assert all(a < b for a, b in zip(ids, ids[1:])), "an ID not after the one before it: time was reused"


def test_a_step_back_within_the_bound_is_waited_out_and_reported(
    db: Database, programs: List[Program], tmp_path: Path
) -> None:
    clock = Clock(tmp_path)
    p = node_program(programs, db, "orders", 8090, "--threads", "1", "--heartbeat", "0.2", env=clock.environment)
    p.wait_for_ids(20)
    clock.set("-1")
    n = len(p.ids())
    p.wait_for_ids(n + 50)
    wait_for("the wait reported with a heartbeat", lambda: registry_counts(db, 8090)["waits"] >= 1)
    assert "ClockBehind" not in p.messages(), p.messages()
    assert_increasing(p.ids())


def test_a_step_back_beyond_the_bound_is_refused_reported_and_ids_resume_after_it(
    db: Database, programs: List[Program], tmp_path: Path
) -> None:
    clock = Clock(tmp_path)
    p = node_program(
        programs, db, "orders", 8091, "--threads", "1", "--heartbeat", "0.2", "--max-clock-backward", "0.5",
        env=clock.environment,
    )
    p.wait_for_ids(20)
    clock.set("-30")
    wait_for("a ClockBehind refusal", lambda: "ClockBehind" in p.messages())
    wait_for("the refusal reported with a heartbeat", lambda: registry_counts(db, 8091)["refusals"] >= 1)
    clock.set("+0")
    n = len(p.ids())
    p.wait_for_ids(n + 20)
    assert_increasing(p.ids())
    assert p.process.poll() is None, "a refused step back ended the node"


def test_a_jump_past_the_layout_ends_the_lease_with_22023_and_nothing_is_stamped_past_it(
    db: Database, programs: List[Program], tmp_path: Path
) -> None:
    clock = Clock(tmp_path)
    p = node_program(programs, db, "orders", 8092, "--threads", "1", "--heartbeat", "0.2", env=clock.environment)
    p.wait_for_ids(20)
    clock.set("+100y")
    assert p.exit_code() == 3, p.messages()
    assert "OwnershipLost sqlstate=22023" in p.messages(), p.messages()
    ends_ms = db.one("SELECT floor(extract(epoch FROM ends_at) * 1000)::bigint FROM idgen_layouts WHERE service = 'orders'")[0]
    assert all(ms <= ends_ms for ms in db.stamped_ms("orders", p.ids()))
    assert_increasing(p.ids())
    # The refused report wrote nothing: the registry's watermark stayed near the real time.
    assert db.one("SELECT issued_until < now() + interval '1 day' FROM system_nodes WHERE port = 8092")[0]
