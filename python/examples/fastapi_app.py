"""A FastAPI service whose rows are keyed by IDs from its own idgen node, beside rows the database
keys itself (`DEFAULT idgen_next_id('orders')`): both kinds meet in one primary key, and never
collide. The node is started with the app and released when it stops (uvicorn's shutdown on SIGTERM
or Ctrl-C runs the lifespan's exit). One node per process: run it with one worker per address and
port (uvicorn's default), or give each worker its own IDGEN_NODE_PORT.

    IDGEN_DSN="host=db1,db2 dbname=shop user=orders_svc target_session_attrs=read-write" \\
    IDGEN_NODE_HOST=10.0.0.5 IDGEN_NODE_PORT=8000 \\
    uvicorn fastapi_app:app --host 0.0.0.0 --port 8000
"""

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator, Dict, Union

import psycopg
from fastapi import FastAPI, HTTPException

import idgen_client

DSN = os.environ["IDGEN_DSN"]
SERVICE = os.environ.get("IDGEN_SERVICE", "orders")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS orders (
    id bigint PRIMARY KEY DEFAULT idgen_next_id('{SERVICE}'),
    made_by text NOT NULL,
    item text NOT NULL
)"""


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(SCHEMA)
    # The node's identity is this instance's address and port. The claim waits on the network:
    # astart runs it off the event loop. uvicorn handles the signals; leaving the block releases.
    async with await idgen_client.Node.astart(
        DSN, SERVICE, os.environ.get("IDGEN_NODE_HOST", "127.0.0.1"), int(os.environ.get("IDGEN_NODE_PORT", "8000"))
    ) as node:
        app.state.node = node
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/orders")
async def create_order(item: str) -> Dict[str, int]:
    node: idgen_client.Node = app.state.node
    try:
        # Never waits on the network: safe to call on the event loop.
        ours = node.next_id()
    except idgen_client.IdgenError as e:
        # Not final (a late heartbeat, a clock step): retry later. Final: this instance must go.
        raise HTTPException(503, f"no ID ({e.sqlstate or type(e).__name__}): {e}") from e
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute("INSERT INTO orders (id, made_by, item) VALUES (%s, 'service', %s)", (ours, item))
        cur = await conn.execute("INSERT INTO orders (made_by, item) VALUES ('database', %s) RETURNING id", (item,))
        row = await cur.fetchone()
    assert row is not None
    return {"service_id": ours, "database_id": row[0]}


@app.get("/node")
async def node_status() -> Dict[str, Union[int, str, None]]:
    node: idgen_client.Node = app.state.node
    m = node.metrics_info()
    return {"machine_id": m.machine_id, "status": m.status, "ids_issued": m.ids_issued}
