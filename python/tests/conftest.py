"""Fixtures of the package's tests: a database of its own per test, with idgen installed, in the
cluster IDGEN_TEST_DSN names (scripts/test.sh python starts the scratch cluster and sets it), and
short leases set with ALTER SYSTEM for the tests that need them (the stage runs alone: nothing else
uses the cluster meanwhile)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import psycopg
import pytest

# Every wait of a test ends by this, with a message (a slow machine gets there; a hang does not).
PATIENCE = 60.0

# The services these tests start get the stop signals as a service manager gives them, at their
# defaults, whatever this run inherited: nohup ignores SIGHUP, and a shell's background job SIGINT,
# and an ignored signal is inherited across exec (a handler is not, so these reach the children as
# SIG_DFL; Python then installs its KeyboardInterrupt handler).
for _stop in (signal.SIGHUP, signal.SIGTERM):
    signal.signal(_stop, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)
HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent


def cluster_dsn() -> str:
    dsn = os.environ.get("IDGEN_TEST_DSN")
    if not dsn:
        pytest.fail("IDGEN_TEST_DSN is not set: run these tests with `bash scripts/test.sh python`")
    return dsn


def wait_for(what: str, condition: Callable[[], bool], patience: float = PATIENCE) -> None:
    deadline = time.monotonic() + patience
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {patience} s")
        time.sleep(0.05)


class Database:
    """A database of one test, dropped after it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dsn = f"{cluster_dsn()} dbname={name}"

    def connect(self, **options: object) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, **options)

    def one(self, sql: str, *params: object) -> tuple:
        with self.connect() as c:
            row = c.execute(sql, params).fetchone()
            assert row is not None, sql
            return row

    def execute(self, sql: str, *params: object) -> None:
        with self.connect() as c:
            c.execute(sql, params)

    def node_row(self, service: str, port: int) -> Dict[str, object]:
        with self.connect() as c:
            cur = c.execute(
                "SELECT machine_id::int, version, released_at IS NOT NULL AS released, "
                "       floor(extract(epoch FROM issued_until) * 1000)::bigint AS issued_until_ms "
                "  FROM system_nodes WHERE service = %s AND port = %s",
                (service, port),
            )
            row = cur.fetchone()
            assert row is not None, f"no row of {service} port {port} in system_nodes"
            return dict(zip([d.name for d in cur.description], row))

    def stamped_ms(self, service: str, ids: List[int]) -> List[int]:
        """The times the registry decodes from IDs of `service`, in Unix ms."""
        with self.connect() as c:
            return [
                r[0]
                for r in c.execute(
                    "SELECT floor(extract(epoch FROM (idgen_decode(x, %s)).ts) * 1000)::bigint "
                    "  FROM unnest(%s::bigint[]) x",
                    (service, ids),
                )
            ]


def _admin() -> psycopg.Connection:
    return psycopg.connect(f"{cluster_dsn()} dbname=postgres", autocommit=True)


def _drop(admin: psycopg.Connection, name: str) -> None:
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    name = "py_" + re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:55]
    with _admin() as admin:
        _drop(admin, name)
        admin.execute(f'CREATE DATABASE "{name}"')
    database = Database(name)
    database.execute("CREATE EXTENSION idgen")
    yield database
    with _admin() as admin:
        _drop(admin, name)


def ensure_login_role(db: Database, role: str) -> None:
    db.execute(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') "
        f"THEN CREATE ROLE {role} LOGIN; END IF; END $$"
    )


class SystemSettings:
    """ALTER SYSTEM settings, reset (and reloaded) when the test ends, however it ends."""

    def __init__(self) -> None:
        self.names: List[str] = []

    def set(self, **settings: str) -> None:
        with _admin() as admin:
            admin.execute("LOAD 'idgen'")
            for name, value in settings.items():
                admin.execute(f"ALTER SYSTEM SET idgen.{name} = '{value}'")
                self.names.append(name)
            admin.execute("SELECT pg_reload_conf()")
        # A new session sees the reloaded values.
        wait_for(
            "the reloaded settings",
            lambda: all(self._shown(n) == v or self._shown(n) == _normal(v) for n, v in settings.items()),
        )

    @staticmethod
    def _shown(name: str) -> str:
        with _admin() as admin:
            admin.execute("LOAD 'idgen'")
            row = admin.execute(f"SHOW idgen.{name}").fetchone()
            return str(row[0]) if row else ""

    def reset(self) -> None:
        with _admin() as admin:
            admin.execute("LOAD 'idgen'")
            for name in self.names:
                admin.execute(f"ALTER SYSTEM RESET idgen.{name}")
            admin.execute("SELECT pg_reload_conf()")
        self.names = []


def _normal(value: str) -> str:
    return {"1": "1s"}.get(value, value)


@pytest.fixture
def system_settings() -> Iterator[SystemSettings]:
    settings = SystemSettings()
    yield settings
    settings.reset()


@pytest.fixture
def short_leases(system_settings: SystemSettings) -> SystemSettings:
    """Leases of 4 s, heartbeats every second (the client tests' short_leases)."""
    system_settings.set(
        takeover_idle_7d="40s",
        takeover_idle_1d="20s",
        takeover_idle_1h="6s",
        lease_safety_margin="2s",
        heartbeat_interval="1s",
        release_cooldown="1s",
    )
    return system_settings


class Program:
    """A Python program run with the package (tests/node_program.py and the like): what it prints on
    stdout (one ID per line) and stderr, read as it comes."""

    def __init__(self, args: List[str], env: Optional[Dict[str, str]] = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._ids: List[int] = []
        self._messages: List[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, args=(self.process.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, False), daemon=True).start()

    def _read(self, stream, ids: bool) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            with self._lock:
                if ids:
                    self._ids.append(int(line))
                else:
                    self._messages.append(line.rstrip("\n"))

    def ids(self) -> List[int]:
        with self._lock:
            return list(self._ids)

    def messages(self) -> str:
        with self._lock:
            return "\n".join(self._messages)

    def wait_for_ids(self, n: int) -> None:
        def enough() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"the program exited ({self.process.returncode}) before {n} IDs:\n{self.messages()}")
            return len(self.ids()) >= n

        wait_for(f"{n} IDs", enough)

    def exit_code(self) -> int:
        try:
            code = self.process.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"the program still runs {PATIENCE} s after it should have ended:\n{self.messages()}")
        # Let the readers take the last lines.
        time.sleep(0.2)
        return code

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=PATIENCE)


@pytest.fixture
def programs() -> Iterator[List[Program]]:
    started: List[Program] = []
    yield started
    for p in started:
        p.kill()


def node_program(programs: List[Program], db: Database, service: str, port: int, *extra: str, env=None) -> Program:  # type: ignore[no-untyped-def]
    p = Program([str(HERE / "node_program.py"), db.dsn, service, "10.0.0.5", str(port), *extra], env=env)
    programs.append(p)
    return p
