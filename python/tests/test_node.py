"""The package's API against a real registry: a node claims, mints by the service's layout as the
registry recorded it, is shared between threads and asyncio, refuses with the server's SQLSTATE,
and releases with a watermark that bounds every ID it issued."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest

import idgen_client
from conftest import Database, ensure_login_role


def test_a_node_claims_mints_increasing_ids_and_releases_with_a_covering_watermark(db: Database) -> None:
    with idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8080) as node:
        assert node.status == "live"
        row = db.node_row("orders", 8080)
        assert (node.machine_id, node.version) == (row["machine_id"], row["version"])
        assert not row["released"]
        ids = [node.next_id() for _ in range(1000)] + node.next_ids(1000)
        assert ids == sorted(ids) and len(set(ids)) == 2000
        # The registry reads the node's machine id in every ID.
        decoded = db.one(
            "SELECT array_agg(DISTINCT (idgen_decode(x, 'orders')).machine_id) FROM unnest(%s::bigint[]) x", ids
        )[0]
        assert decoded == [node.machine_id]
        assert node.metrics_info().ids_issued == 2000
    row = db.node_row("orders", 8080)
    assert row["released"], "the with block ended without releasing"
    last = max(db.stamped_ms("orders", ids))
    assert row["issued_until_ms"] >= last, "released with a watermark before the node's last ID"
    with pytest.raises(idgen_client.NodeStopped) as stopped:
        node.next_id()
    assert stopped.value.final


def test_the_layout_comes_from_the_registry(db: Database) -> None:
    db.execute(
        "SELECT idgen_define_layout('flakes', 'sonyflake', pool_first => 100, pool_last => 199)"
    )
    with idgen_client.Node(db.dsn, "flakes", "10.0.0.5", 8081) as node:
        layout = node.layout_info()
        expected = db.one(
            "SELECT (extract(epoch FROM epoch) * 1000)::bigint, time_bits, machine_bits, sequence_bits, "
            "       field_order, pool_first, pool_last FROM idgen_layouts WHERE service = 'flakes'"
        )
        assert (
            layout.epoch_unix_ms,
            layout.time_bits,
            layout.machine_bits,
            layout.sequence_bits,
            layout.field_order,
            layout.pool_first,
            layout.pool_last,
        ) == tuple(expected)
        assert 100 <= node.machine_id <= 199
        i = node.next_id()
        # Sonyflake's order: the machine id in the lowest bits, and the registry agrees.
        assert node.parts(i)[1] == node.machine_id == i % (1 << layout.machine_bits)
        assert db.one("SELECT (idgen_decode(%s, 'flakes')).machine_id", i)[0] == node.machine_id


def test_threads_share_one_node_and_never_see_an_id_twice(db: Database) -> None:
    with idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8082) as node:
        seen: list = []
        lock = threading.Lock()

        def mint() -> None:
            mine = [node.next_id() for _ in range(5000)]
            with lock:
                seen.extend(mine)

        threads = [threading.Thread(target=mint) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "a minting thread did not end within 60 s"
    assert len(seen) == 40000 and len(set(seen)) == 40000


def test_asyncio_starts_and_releases_off_the_event_loop(db: Database) -> None:
    async def main() -> list:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.get_running_loop().create_task(ticker())
        node = await idgen_client.Node.astart(db.dsn, "orders", "10.0.0.5", 8083)
        # The ticker's first turn comes at the first await that yields: the claim's.
        assert ticks > 0, "the event loop did not run while the node started"
        async with node:
            ids = [node.next_id() for _ in range(10)]
        task.cancel()
        return ids

    ids = asyncio.run(main())
    assert len(set(ids)) == 10
    assert db.node_row("orders", 8083)["released"]


def test_a_role_without_the_service_is_refused_with_42501(db: Database) -> None:
    ensure_login_role(db, "idgen_t_py_stranger")
    with pytest.raises(idgen_client.StartError) as refused:
        idgen_client.Node(f"{db.dsn} user=idgen_t_py_stranger", "orders", "10.0.0.5", 8084, start_timeout=5)
    assert refused.value.sqlstate == "42501", refused.value
    assert refused.value.final
    assert "orders" in str(refused.value)


def test_a_pinned_machine_id_held_by_another_node_is_refused_with_55006(db: Database) -> None:
    with idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8085, machine_id=7):
        with pytest.raises(idgen_client.StartError) as refused:
            idgen_client.Node(db.dsn, "orders", "10.0.0.6", 8085, machine_id=7, start_timeout=5)
        assert refused.value.sqlstate == "55006"
        assert "10.0.0.5" in str(refused.value), "the refusal names the holder"


def test_a_database_without_idgen_is_refused_as_not_installed(db: Database) -> None:
    db.execute("DROP EXTENSION idgen")
    with pytest.raises(idgen_client.NotInstalled):
        idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8086, start_timeout=5)


def test_a_batch_is_bounded(db: Database) -> None:
    with idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8090) as node:
        assert node.next_ids(0) == []
        with pytest.raises(ValueError, match="at most 1000000"):
            node.next_ids(1_000_001)
        with pytest.raises(OverflowError):
            node.next_ids(-1)
        assert len(node.next_ids(1_000_000)) == 1_000_000


def test_arguments_are_checked_before_anything_is_claimed(db: Database) -> None:
    for bad in (
        {"call_timeout": 0},
        {"call_timeout": 32768},
        {"start_timeout": -1},
        {"start_timeout": 1e19},
        {"max_clock_backward": 61},
        {"heartbeat_interval": float("nan")},
        {"heartbeat_interval": 1e-9},
        {"heartbeat_interval": 1e19},
    ):
        with pytest.raises(ValueError):
            idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8087, **bad)
    assert db.one("SELECT count(*) FROM system_nodes WHERE port = 8087")[0] == 0


def test_the_dsn_forms_psycopg_takes_work(db: Database) -> None:
    info = psycopg.conninfo.conninfo_to_dict(db.dsn)
    # A URI, and a multi-host string whose first host does not answer, with read-write.
    uri = f"postgresql://{info['user']}@{info['host']}:{info['port']}/{info['dbname']}"
    multi = (
        f"host=127.0.0.1,{info['host']} port=1,{info['port']} user={info['user']} dbname={info['dbname']} "
        "target_session_attrs=read-write connect_timeout=5"
    )
    for port, dsn in ((8088, uri), (8089, multi)):
        with idgen_client.Node(dsn, "orders", "10.0.0.5", port) as node:
            assert node.next_id() > 0
