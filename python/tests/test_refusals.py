"""What broke the docs' Python sketch (17,003 duplicates): minting must stop, in every thread and at
once, when a heartbeat is refused, and no ID may be stamped after that. Each case runs the package in
a service process (tests/node_program.py, two minting threads) and ends it from the registry."""

from __future__ import annotations

from typing import List

from conftest import Database, Program, ensure_login_role, node_program


def assert_stopped_for_good(p: Program, sqlstate: str) -> None:
    assert p.exit_code() == 3, p.messages()
    assert f"OwnershipLost sqlstate={sqlstate}" in p.messages(), p.messages()


def assert_minted_nothing_after_the_stop(db: Database, service: str, p: Program) -> None:
    line = next((l for l in p.messages().splitlines() if "stopped minting at" in l), None)
    assert line is not None, f"the program never said it stopped minting:\n{p.messages()}"
    stopped = int(line.split("stopped minting at ")[1].split()[0])
    late = [ms for ms in db.stamped_ms(service, p.ids()) if ms > stopped]
    assert not late, f"{len(late)} IDs stamped after the node stopped minting at {stopped}"
    assert len(set(p.ids())) == len(p.ids()), "an ID twice"


def test_a_hand_release_stops_every_thread_at_once_with_55000(db: Database, programs: List[Program]) -> None:
    p = node_program(programs, db, "orders", 8080, "--heartbeat", "0.2")
    p.wait_for_ids(20)
    row = db.node_row("orders", 8080)
    released = db.one(
        "SELECT idgen_release('orders', %s, '10.0.0.5', 8080, %s)", row["machine_id"], row["version"]
    )[0]
    assert released
    assert_stopped_for_good(p, "55000")
    assert_minted_nothing_after_the_stop(db, "orders", p)
    # The hand release kept the holder's bound: every ID the node stamped is below it.
    bound = db.one(
        "SELECT floor(extract(epoch FROM greatest(issued_until, lease_until)) * 1000)::bigint "
        "  FROM system_nodes WHERE service = 'orders' AND machine_id = %s",
        row["machine_id"],
    )[0]
    assert max(db.stamped_ms("orders", p.ids())) <= bound


def test_a_node_taken_over_stops_with_55000_naming_the_new_holder(db: Database, programs: List[Program]) -> None:
    p = node_program(programs, db, "orders", 8081, "--heartbeat", "0.2")
    p.wait_for_ids(20)
    row = db.node_row("orders", 8081)
    # Another node takes the id over, as the tiers would once it looked idle.
    db.execute(
        "UPDATE system_nodes SET host = '10.0.0.9', version = version + 1, last_seen = now() "
        " WHERE service = 'orders' AND machine_id = %s",
        row["machine_id"],
    )
    assert_stopped_for_good(p, "55000")
    assert "10.0.0.9" in p.messages(), p.messages()
    assert_minted_nothing_after_the_stop(db, "orders", p)


def test_a_revoked_grant_stops_the_node_with_42501(db: Database, programs: List[Program]) -> None:
    role = "idgen_t_py_revoked"
    ensure_login_role(db, role)
    db.execute(f"SELECT idgen_grant_service('payments', '{role}')")
    p = node_program(programs, db, "payments", 8082, "--heartbeat", "0.2")
    p.process.kill()
    p.process.wait()
    programs.remove(p)
    p = Program(
        [p.process.args[1], f"{db.dsn} user={role}", "payments", "10.0.0.5", "8082", "--heartbeat", "0.2"]
    )
    programs.append(p)
    p.wait_for_ids(20)
    db.execute(f"SELECT idgen_revoke_service('payments', '{role}')")
    assert_stopped_for_good(p, "42501")
    assert_minted_nothing_after_the_stop(db, "payments", p)


def test_a_watermark_refused_at_the_end_of_the_layout_stops_the_node_with_22023(
    db: Database, programs: List[Program]
) -> None:
    ends_ms = db.one(
        "SELECT floor(extract(epoch FROM ends_at) * 1000)::bigint FROM idgen_define_layout('ending', 'snowflake', "
        "  epoch => now() - interval '1 millisecond' * 2147483648 + interval '10 seconds', "
        "  time_bits => 31, machine_bits => 10, sequence_bits => 22)"
    )[0]
    p = node_program(programs, db, "ending", 8083, "--heartbeat", "0.2")
    p.wait_for_ids(20)
    assert p.exit_code() == 3, p.messages()
    assert "sqlstate=22023" in p.messages(), p.messages()
    assert all(ms <= ends_ms for ms in db.stamped_ms("ending", p.ids())), "an ID past the layout's last tick"
    assert_minted_nothing_after_the_stop(db, "ending", p)
