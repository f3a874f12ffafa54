//! Keeps the simulator's model honest (issue 23): the same short scripted steps run against the
//! model (`idgen_sim::protocol::Mirror`, the registry model with the claim the simulator runs) and
//! against the scratch cluster (SQL: `idgen_claim`, `idgen_heartbeat`, `idgen_release`,
//! `idgen_next_id` and a backend's exit, a hand `DELETE` and `UPDATE`), and every step's answer
//! and the registry's rows after it are compared. The model runs at the cluster's clock, read just
//! before each step; times are compared only where they are the protocol's (a `not_before`), within
//! a second beyond the time the step took (a busy machine answers late, not wrong).

use idgen_cluster_tests::*;
use idgen_sim::protocol::{Mirror, RowState};
use idgen_sim::registry::{Holding, Ms, Node, Row, NEG_INF};
use postgres::Client;

const SERVICE: &str = "sim";
const PORT: i32 = 8080;
/// Machine ids left free by the fill; every other id of the layout is held by a filler row.
const FREE: [i32; 5] = [0, 1, 2, 3, 4];

/// What a step answered, as both sides can say it.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Claimed { machine_id: i32, version: i64, outcome: String },
    Refused(String),
    Renewed,
    Released(bool),
    Done,
}

/// A report sent with a heartbeat or a release.
#[derive(Clone, Copy)]
enum Report {
    /// The server's clock plus this many ms.
    Ahead(Ms),
    Infinite,
}

enum Step {
    Claim {
        host: &'static str,
    },
    Heartbeat {
        host: &'static str,
        machine_id: i32,
        version: i64,
        report: Report,
    },
    Release {
        host: &'static str,
        machine_id: i32,
        version: i64,
        report: Report,
    },
    /// A backend mints once on a new connection, then disconnects (its exit record).
    Backend,
    /// `set_idle(..., '2 hours', machine_id = m)`.
    Idle {
        machine_id: i32,
    },
    Delete {
        machine_id: i32,
    },
}

fn clock_ms(c: &mut Client) -> Ms {
    c.query_one("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8", &[]).unwrap().get(0)
}

fn node(host: &str) -> Node {
    Node { service: SERVICE.into(), host: host.into(), port: PORT, backend_slot: None }
}

fn code(e: &postgres::Error) -> Answer {
    Answer::Refused(db_error(e).code().code().to_owned())
}

/// The rows of the service as the cluster has them, times as Unix ms.
fn cluster_rows(c: &mut Client) -> Vec<Row> {
    let ms = |column: &str| {
        format!(
            "CASE WHEN {column} IS NULL THEN NULL WHEN NOT isfinite({column}) THEN '{NEG_INF}'::int8 \
             ELSE floor(extract(epoch FROM {column}) * 1000)::int8 END"
        )
    };
    let sql = format!(
        "SELECT machine_id, host(host), port, backend_slot, version, {}, {}, {}, {}, {} \
           FROM system_nodes WHERE service = $1 ORDER BY machine_id",
        ms("last_seen"),
        ms("released_at"),
        ms("issued_until"),
        ms("lease_until"),
        ms("takeover_at")
    );
    c.query(&sql, &[&SERVICE])
        .unwrap()
        .iter()
        .map(|r| Row {
            service: SERVICE.into(),
            machine_id: r.get(0),
            host: r.get(1),
            port: r.get(2),
            backend_slot: r.get(3),
            version: r.get(4),
            last_seen: r.get(5),
            released_at: r.get(6),
            issued_until: r.get(7),
            lease_until: r.get(8),
            takeover_at: r.get(9),
        })
        .collect()
}

fn states(rows: &[Row]) -> Vec<RowState> {
    rows.iter()
        .map(|r| RowState {
            machine_id: r.machine_id,
            host: r.host.clone(),
            port: r.port,
            backend_slot: r.backend_slot,
            version: r.version,
            released: r.released_at.is_some(),
        })
        .collect()
}

fn reported(report: Report, now: Ms) -> Option<Ms> {
    match report {
        Report::Ahead(ms) => Some(now + ms),
        Report::Infinite => Some(i64::MAX),
    }
}

/// `to_timestamp` of a report in SQL: `'infinity'` for the infinite one.
fn report_sql(report: Report, now: Ms) -> String {
    match report {
        Report::Infinite => "'infinity'::timestamptz".into(),
        Report::Ahead(ms) => format!("to_timestamp({}::float8 / 1000)", now + ms),
    }
}

struct Both {
    db: TestDb,
    admin: Client,
    client: Client,
    mirror: Mirror,
    log: Vec<String>,
}

impl Both {
    fn step(&mut self, step: &Step) {
        let now = clock_ms(&mut self.admin);
        self.mirror.set_clock(now);
        let (told, cluster, model, not_before) = match *step {
            Step::Claim { host } => {
                let row = self.client.query_one(
                    "SELECT machine_id, version, outcome, floor(extract(epoch FROM not_before) * 1000)::int8 \
                       FROM idgen_claim($1, $2::text::inet, $3)",
                    &[&SERVICE, &host, &PORT],
                );
                let (cluster, cluster_nb) = match row {
                    Ok(r) => (
                        Answer::Claimed { machine_id: r.get(0), version: r.get(1), outcome: r.get(2) },
                        Some(r.get::<_, i64>(3)),
                    ),
                    Err(e) => (code(&e), None),
                };
                let (model, model_nb) = match self.mirror.claim(&node(host)) {
                    Ok(g) => (
                        Answer::Claimed {
                            machine_id: g.row.machine_id,
                            version: g.row.version,
                            outcome: g.outcome.to_owned(),
                        },
                        Some(g.not_before),
                    ),
                    Err(r) => (Answer::Refused(r.code.to_owned()), None),
                };
                (format!("{host} claims"), cluster, model, cluster_nb.zip(model_nb))
            }
            Step::Heartbeat { host, machine_id, version, report } => {
                let sql =
                    format!("SELECT idgen_heartbeat($1, $2, $3::text::inet, $4, $5, {})", report_sql(report, now));
                let cluster = match self.client.query_one(&sql, &[&SERVICE, &machine_id, &host, &PORT, &version]) {
                    Ok(_) => Answer::Renewed,
                    Err(e) => code(&e),
                };
                let held = Holding { node: node(host), machine_id, version };
                let model = match self.mirror.heartbeat(&held, reported(report, now)) {
                    Ok(_) => Answer::Renewed,
                    Err(r) => Answer::Refused(r.code.to_owned()),
                };
                (format!("{host} heartbeats machine id {machine_id} v{version}"), cluster, model, None)
            }
            Step::Release { host, machine_id, version, report } => {
                let sql = format!("SELECT idgen_release($1, $2, $3::text::inet, $4, $5, {})", report_sql(report, now));
                let cluster = match self.client.query_one(&sql, &[&SERVICE, &machine_id, &host, &PORT, &version]) {
                    Ok(r) => Answer::Released(r.get(0)),
                    Err(e) => code(&e),
                };
                let held = Holding { node: node(host), machine_id, version };
                let model = match self.mirror.release(&held, reported(report, now)) {
                    Ok(done) => Answer::Released(done),
                    Err(r) => Answer::Refused(r.code.to_owned()),
                };
                (format!("{host} releases machine id {machine_id} v{version}"), cluster, model, None)
            }
            Step::Backend => {
                let mut backend = self.db.connect();
                let pid: i32 = backend.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
                let minted = backend.query_one("SELECT idgen_next_id($1)", &[&SERVICE]);
                let (cluster, model) = match minted {
                    Ok(r) => {
                        let id: i64 = r.get(0);
                        let lease = backend
                            .query_one(
                                "SELECT machine_id, version, backend_slot FROM idgen_backend_leases() WHERE service = $1",
                                &[&SERVICE],
                            )
                            .unwrap();
                        let (machine_id, version, slot): (i32, i64, Option<i32>) =
                            (lease.get(0), lease.get(1), lease.get(2));
                        let host: String = backend.query_one("SHOW idgen.node_host", &[]).unwrap().get(0);
                        let port: i32 = backend.query_one("SELECT current_setting('port')::int4", &[]).unwrap().get(0);
                        let me = Node { service: SERVICE.into(), host, port, backend_slot: slot };
                        let model = match self.mirror.claim(&me) {
                            Ok(g) => {
                                let parts = idgen_core::Layout::DEFAULT.decompose(id).unwrap();
                                let stamp = idgen_core::Layout::DEFAULT.unix_ms_of(parts.ticks);
                                let held = Holding { node: me, machine_id: g.row.machine_id, version: g.row.version };
                                // Ended by a termination, its exit records its last stamp (a client's
                                // disconnect leaves its lease in the slot for the next one, unwritten).
                                self.admin.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
                                drop(backend);
                                wait_for_exit(&mut self.admin, pid);
                                self.mirror.close_backend(&held, stamp);
                                Answer::Claimed {
                                    machine_id: g.row.machine_id,
                                    version: g.row.version,
                                    outcome: String::new(),
                                }
                            }
                            Err(r) => Answer::Refused(r.code.to_owned()),
                        };
                        (Answer::Claimed { machine_id, version, outcome: String::new() }, model)
                    }
                    Err(e) => (code(&e), Answer::Done),
                };
                ("a backend mints once and disconnects".into(), cluster, model, None)
            }
            Step::Idle { machine_id } => {
                set_idle(&mut self.admin, "2 hours", &format!("service = 'sim' AND machine_id = {machine_id}"));
                self.mirror.set_idle(SERVICE, machine_id, now, 2 * 3_600_000);
                (format!("machine id {machine_id}'s holder looks silent for 2 hours"), Answer::Done, Answer::Done, None)
            }
            Step::Delete { machine_id } => {
                self.admin
                    .execute(
                        "DELETE FROM system_nodes WHERE service = $1 AND machine_id = $2",
                        &[&SERVICE, &machine_id],
                    )
                    .unwrap();
                self.mirror.delete(SERVICE, machine_id);
                (format!("DELETE machine id {machine_id}"), Answer::Done, Answer::Done, None)
            }
        };
        // The cluster answered between `now` and this: its times may be later by that much.
        let took = clock_ms(&mut self.admin) - now;
        self.log.push(format!("{told}: cluster {cluster:?}, model {model:?}"));
        assert_eq!(cluster, model, "step {}: {told}\n{}", self.log.len(), self.log.join("\n"));
        if let Some((c, m)) = not_before {
            assert!(
                c >= m - 1_000 && c <= m + took + 1_000,
                "step {}: not_before {c} on the cluster, {m} in the model (the step took {took} ms)",
                self.log.len()
            );
        }
        let (rows, modelled) = (states(&cluster_rows(&mut self.admin)), self.mirror.rows(SERVICE));
        assert_eq!(rows, modelled, "step {}: the rows differ after {told}\n{}", self.log.len(), self.log.join("\n"));
    }
}

#[test]
fn the_model_answers_each_step_as_the_cluster_does() {
    let db = TestDb::create("model_vs_cluster");
    let mut admin = db.connect();
    fill_registry_except(&mut admin, SERVICE, &FREE.map(i32::from));
    // Rows never registered start after the registry's version base (drawn at CREATE EXTENSION,
    // finding F3's fix): the model takes the cluster's.
    let base = first_version(&mut admin) - 1;
    let mut mirror = Mirror::new(clock_ms(&mut admin), base);
    mirror.load(cluster_rows(&mut admin));
    let client = db.connect();
    let mut both = Both { db, admin, client, mirror, log: Vec::new() };
    let (a, b, c, d) = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4");
    // The n-th version of a machine id never registered before.
    let v = |n: i64| base + n;
    let steps = [
        Step::Claim { host: a },
        Step::Claim { host: b },
        Step::Heartbeat { host: a, machine_id: 0, version: v(1), report: Report::Ahead(0) },
        // A wrong version and an infinite report: refused, nothing written.
        Step::Heartbeat { host: a, machine_id: 0, version: v(7), report: Report::Ahead(0) },
        Step::Heartbeat { host: a, machine_id: 0, version: v(1), report: Report::Infinite },
        // A report a day and a half ahead is kept (with a WARNING).
        Step::Heartbeat { host: b, machine_id: 1, version: v(1), report: Report::Ahead(36 * 3_600_000) },
        // A second live process of a's identity: its row is set aside, it gets another id.
        Step::Claim { host: a },
        Step::Heartbeat { host: a, machine_id: 0, version: v(1), report: Report::Ahead(0) },
        Step::Release { host: a, machine_id: 2, version: v(1), report: Report::Ahead(2_000) },
        // A graceful restart gets its released id back.
        Step::Claim { host: a },
        Step::Release { host: c, machine_id: 2, version: v(1), report: Report::Ahead(0) },
        Step::Backend,
        Step::Delete { machine_id: 1 },
        Step::Heartbeat { host: b, machine_id: 1, version: v(1), report: Report::Ahead(0) },
        Step::Claim { host: c },
        // Nothing free: the tombstone of 1 is a day and a half ahead; 0 is set aside with a's lease.
        Step::Claim { host: d },
        Step::Idle { machine_id: 500 },
        Step::Claim { host: d },
        Step::Heartbeat { host: d, machine_id: 500, version: 2, report: Report::Ahead(0) },
    ];
    for step in &steps {
        both.step(step);
    }
}
