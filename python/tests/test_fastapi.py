"""The FastAPI example (examples/fastapi_app.py) run as it would be deployed, under uvicorn, and
driven over HTTP with httpx: its IDs and the database's meet in one primary key, and SIGTERM
releases its id with a watermark that bounds every ID it handed out."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List

import httpx

from conftest import PACKAGE_ROOT, PATIENCE, Database, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_fastapi_example_serves_rows_keyed_by_both_and_releases_on_sigterm(db: Database, tmp_path: Path) -> None:
    port = free_port()
    env = {"IDGEN_DSN": db.dsn, "IDGEN_NODE_HOST": "10.0.0.8", "IDGEN_NODE_PORT": str(port)}
    app = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(PACKAGE_ROOT / "examples"),
         "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, **env},
        # Not the source tree: the app imports the installed package.
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert app.poll() is None, app.stdout.read() if app.stdout else ""
            try:
                return httpx.get(f"{base}/node", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for("the app to serve", up)
        with httpx.Client(base_url=base, timeout=PATIENCE) as http:

            def order(i: int) -> List[int]:
                answer = http.post("/orders", params={"item": f"item {i}"})
                assert answer.status_code == 200, answer.text
                body = answer.json()
                return [body["service_id"], body["database_id"]]

            with ThreadPoolExecutor(8) as pool:
                ids = [i for pair in pool.map(order, range(200)) for i in pair]
            status = http.get("/node").json()
        assert status["status"] == "live" and status["ids_issued"] == 200, status
        assert len(set(ids)) == 400
        assert db.one("SELECT count(*), count(DISTINCT id) FROM orders") == (400, 400)
        app.send_signal(signal.SIGTERM)
        out, _ = app.communicate(timeout=PATIENCE)
        # uvicorn shuts down gracefully, then (since 0.29) ends by the signal it caught.
        assert app.returncode in (0, -signal.SIGTERM), out
        assert "Application shutdown complete" in out, out
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(PATIENCE)
    row = db.node_row("orders", port)
    assert row["released"], "uvicorn's shutdown left the id held"
    service_ids = [r[0] for r in db.connect().execute("SELECT id FROM orders WHERE made_by = 'service'")]
    assert row["issued_until_ms"] >= max(db.stamped_ms("orders", service_ids))
