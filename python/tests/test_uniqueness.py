"""One primary key, three kinds of writers of one service: backends (`DEFAULT idgen_next_id`, new
connections among them), nodes of this package (in-process, several threads each) and idgen-node's
HTTP sidecar. Every row goes in: not one duplicate."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path
from typing import List

import httpx
import psycopg
import pytest

import idgen_client
from conftest import PATIENCE, Database, wait_for

ROUNDS = 30
BATCH = 200


def idgen_node_binary() -> str:
    path = os.environ.get("IDGEN_NODE_BIN") or str(Path(__file__).resolve().parents[2] / "target/debug/idgen-node")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no idgen-node at {path}: build it with `cargo build -p idgen-client --bin idgen-node`")
    return path


def test_backends_package_nodes_and_the_sidecar_never_mint_one_id_twice(db: Database) -> None:
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT idgen_next_id('orders'), made_by text NOT NULL)")
    sidecar = subprocess.Popen(
        [idgen_node_binary(), "--dsn", db.dsn, "--service", "orders", "--host", "10.0.0.7", "--port", "9000",
         "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: List[BaseException] = []
    try:
        address = ""
        assert sidecar.stderr is not None
        for line in sidecar.stderr:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                address = found.group(1)
                break
        assert address, "idgen-node never said where it listens"

        def run(work) -> threading.Thread:  # type: ignore[no-untyped-def]
            def guarded() -> None:
                try:
                    work()
                except BaseException as e:  # noqa: BLE001 - reported by the test below
                    errors.append(e)

            t = threading.Thread(target=guarded)
            t.start()
            return t

        def backend(new_connections: bool) -> None:
            conn = db.connect()
            for _ in range(ROUNDS):
                if new_connections:
                    conn.close()
                    conn = db.connect()
                conn.execute("INSERT INTO orders (made_by) SELECT 'backend' FROM generate_series(1, %s)", (BATCH,))
            conn.close()

        def package(node: idgen_client.Node) -> None:
            with db.connect() as conn:
                for _ in range(ROUNDS):
                    with conn.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO orders (id, made_by) VALUES (%s, 'package')",
                            [(i,) for i in node.next_ids(BATCH)],
                        )

        def from_sidecar() -> None:
            with db.connect() as conn, httpx.Client(base_url=address, timeout=PATIENCE) as http:
                for _ in range(ROUNDS):
                    answer = http.get("/ids", params={"count": BATCH})
                    answer.raise_for_status()
                    ids = [int(x) for x in answer.text.split()]
                    with conn.cursor() as cur:
                        cur.executemany("INSERT INTO orders (id, made_by) VALUES (%s, 'sidecar')", [(i,) for i in ids])

        with idgen_client.Node(db.dsn, "orders", "10.0.0.5", 8120) as one, idgen_client.Node(
            db.dsn, "orders", "10.0.0.6", 8120
        ) as two:
            threads = [run(lambda: backend(False)), run(lambda: backend(True))]
            threads += [run(lambda n=n: package(n)) for n in (one, two, one, two)]
            threads += [run(from_sidecar)]
            for t in threads:
                t.join(PATIENCE * 5)
                assert not t.is_alive(), "a writer did not end in time"
    finally:
        sidecar.terminate()
        sidecar.wait(PATIENCE)
    assert not errors, errors[0]
    counts = dict(db.connect().execute("SELECT made_by, count(*) FROM orders GROUP BY made_by").fetchall())
    assert counts == {"backend": 2 * ROUNDS * BATCH, "package": 4 * ROUNDS * BATCH, "sidecar": ROUNDS * BATCH}
    # The machine ids the registry reads in the rows: the package's nodes' among them, and none shared.
    per_writer = db.connect().execute(
        "SELECT made_by, array_agg(DISTINCT (idgen_decode(id, 'orders')).machine_id) FROM orders GROUP BY made_by"
    ).fetchall()
    seen = [m for _, ids in per_writer for m in ids]
    assert len(seen) == len(set(seen)), f"a machine id used by two kinds of writers: {per_writer}"
