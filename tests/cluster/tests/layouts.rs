//! Layouts and pools per service: defined before a service's first claim and fixed by it; every
//! holder (backends and service nodes) and every decoder cuts the service's IDs by it; claims hand
//! out its pool only; a node may claim the machine id it already uses; and a column of existing
//! keys can take the default once they sort below what the service mints.

use idgen_cluster_tests::*;
use idgen_core::layout::{IdParts, Layout, Preset};
use postgres::Client;
use std::collections::BTreeSet;

/// The row `idgen_layouts` shows for `service`: preset, pool, and whether a claim fixed it.
fn layout_row(client: &mut Client, service: &str) -> Option<(String, i32, i32, bool)> {
    client
        .query_opt(
            "SELECT preset, pool_first, pool_last, fixed_at IS NOT NULL FROM idgen_layouts WHERE service = $1",
            &[&service],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

#[test]
fn a_layout_is_defined_until_the_services_first_claim_fixes_it() {
    let db = TestDb::create("layouts_fixed");
    let mut admin = db.connect();
    // Defined, and defined again: nothing has been minted by it yet.
    admin.batch_execute("SELECT idgen_define_layout('orders', 'sonyflake')").unwrap();
    assert_eq!(layout_row(&mut admin, "orders"), Some(("sonyflake".to_owned(), 0, 65_535, false)));
    let row = admin
        .query_one(
            "SELECT preset, machine_ids, ids_per_second, (extract(epoch FROM ends_at) * 1000)::bigint, defined_by,
                    fixed_at IS NULL
               FROM idgen_define_layout('orders', 'js_safe', pool_first => 16, pool_last => 143)",
            &[],
        )
        .unwrap();
    let answer: (String, i32, i64, i64, String, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
    let js = Preset::JsSafe.layout();
    assert_eq!(answer, ("js_safe".to_owned(), 128, 25_600, js.last_unix_ms(), "postgres".to_owned(), true));
    // The view computes the same in SQL.
    let row = admin
        .query_one(
            "SELECT ids_per_second, (extract(epoch FROM ends_at) * 1000)::bigint FROM idgen_layouts WHERE service = 'orders'",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (25_600, js.last_unix_ms()));
    // The first claim fixes it, and the claim's IDs are cut by it: machine ids from the pool.
    let mut backend = db.connect();
    let id: i64 = backend.query_one("SELECT idgen_next_id('orders')", &[]).unwrap().get(0);
    assert_eq!(layout_row(&mut admin, "orders"), Some(("js_safe".to_owned(), 16, 143, true)));
    assert_eq!(js.decompose(id).unwrap().machine_id, 16, "the pool's first id");
    assert!(id <= js.max_id());
    let decoded: i32 = admin.query_one("SELECT machine_id FROM idgen_decode($1, 'orders')", &[&id]).unwrap().get(0);
    assert_eq!(decoded, 16);
    // A different layout now is refused, naming when it was fixed; the same one is answered as is.
    let err = admin.query_one("SELECT * FROM idgen_define_layout('orders', 'snowflake')", &[]).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55000");
    assert_eq!(e.message(), "idgen_define_layout: the layout of service \"orders\" is fixed");
    let detail = e.detail().unwrap();
    assert!(detail.starts_with("Its first claim fixed it at "), "{detail}");
    assert!(
        detail.contains("js_safe: 37 bits of 10 ms since 2025-01-01T00:00:00.000Z | 8-bit machine id | 8-bit sequence, machine ids 16-143"),
        "{detail}"
    );
    assert!(e.hint().unwrap().starts_with("A new layout needs a new service name"), "{e:?}");
    for narrower in ["pool_first => 16, pool_last => 100", "pool_first => 0, pool_last => 143"] {
        let sql = format!("SELECT * FROM idgen_define_layout('orders', 'js_safe', {narrower})");
        assert_eq!(sqlstate(&admin.query_one(&sql, &[]).unwrap_err()), "55000", "{narrower}");
    }
    admin.batch_execute("SELECT idgen_define_layout('orders', 'js_safe', pool_first => 16, pool_last => 143)").unwrap();
    // A service whose first claim came before any definition has the default, fixed (a node's claim:
    // a backend mints for no service that does not exist yet).
    claim(&mut admin, "plain", "10.0.0.9", 1).unwrap();
    assert_eq!(layout_row(&mut admin, "plain"), Some(("snowflake".to_owned(), 0, 1023, true)));
    let err = admin.query_one("SELECT * FROM idgen_define_layout('plain', 'sonyflake')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    // A refused definition leaves the table as it was.
    let all: i64 = admin.query_one("SELECT count(*) FROM idgen_layouts", &[]).unwrap().get(0);
    assert_eq!(all, 2);
}

#[test]
fn only_superusers_and_the_owner_define_layouts_and_bad_ones_are_refused_by_argument() {
    let db = TestDb::create("layouts_define");
    let mut admin = db.connect();
    let role = "idgen_t_layout_definer";
    ensure_login_role(&mut admin, role);
    admin.batch_execute(&format!("SELECT idgen_grant_service('svc', '{role}')")).unwrap();
    let mut granted = Client::connect(&format!("{} user={role}", db.dsn()), postgres::NoTls).unwrap();
    let err = granted.query_one("SELECT * FROM idgen_define_layout('svc', 'sonyflake')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "42501", "a role granted the service may claim it, not cut its IDs: {err:?}");
    // What a granted role reads: its service's layout, once there is one.
    admin
        .batch_execute("SELECT idgen_define_layout('svc', 'sonyflake'), idgen_define_layout('other', 'js_safe')")
        .unwrap();
    let seen: Vec<String> =
        granted.query("SELECT service FROM idgen_layouts", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(seen, ["svc"]);
    for (call, code, message) in [
        ("idgen_define_layout(NULL)", "22004", "argument \"service\" must not be NULL"),
        ("idgen_define_layout('x', 'twitter')", "22023", "argument \"preset\" is not a preset"),
        ("idgen_define_layout('x', 'snowflake', machine_bits => 17)", "22023", "do not make a layout"),
        ("idgen_define_layout('x', 'snowflake', sequence_bits => 13)", "22023", "do not make a layout"),
        (
            "idgen_define_layout('x', 'snowflake', time_unit_ms => 0)",
            "22023",
            "\"time_unit_ms\" does not make a layout",
        ),
        (
            "idgen_define_layout('x', 'snowflake', epoch => now() + interval '1 day')",
            "22023",
            "\"epoch\" is in the future",
        ),
        ("idgen_define_layout('x', 'snowflake', epoch => 'infinity')", "22023", "\"epoch\" must be a finite time"),
        ("idgen_define_layout('x', 'snowflake', epoch => '1971-01-01', time_bits => 20)", "22023", "has run out"),
        ("idgen_define_layout('x', 'sonyflake', pool_last => 65536)", "22023", "\"pool_last\" is out of range"),
        ("idgen_define_layout('x', 'js_safe', field_order => 'sequence_first')", "22023", "is not a field order"),
    ] {
        let err = admin.query_one(&format!("SELECT * FROM {call}"), &[]).unwrap_err();
        let e = db_error(&err);
        assert_eq!(e.code().code(), code, "{call}: {e:?}");
        assert!(e.message().starts_with("idgen_define_layout: ") && e.message().contains(message), "{call}: {e:?}");
    }
    let defined: i64 = admin.query_one("SELECT count(*) FROM idgen_layouts WHERE service = 'x'", &[]).unwrap().get(0);
    assert_eq!(defined, 0, "nothing written by a refused definition");
    // A custom layout: a preset changed by its parts.
    let row = admin
        .query_one(
            "SELECT preset, field_order FROM idgen_define_layout('x', 'snowflake', time_unit_ms => 100, \
             machine_bits => 12, sequence_bits => 10, field_order => 'time_sequence_machine')",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("custom".to_owned(), "time_sequence_machine".to_owned())
    );
}

/// Every ID `service`'s holders mint, with the machine id `idgen_decode(id, service)` finds in it.
fn decoded(client: &mut Client, service: &str, ids: &[i64]) -> Vec<i32> {
    client
        .query("SELECT (idgen_decode(id, $2)).machine_id FROM unnest($1::bigint[]) id", &[&ids, &service])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn backends_and_nodes_of_each_presets_service_mint_into_one_key_without_a_duplicate() {
    for preset in Preset::ALL {
        let name = preset.name();
        let db = TestDb::create(&format!("layouts_mix_{name}"));
        let mut admin = db.connect();
        admin.batch_execute(&format!("SELECT idgen_define_layout('mix', '{name}')")).unwrap();
        admin
            .batch_execute("CREATE TABLE keys (id bigint PRIMARY KEY DEFAULT idgen_next_id('mix'), who text)")
            .unwrap();
        // Two service nodes minting in-process with the core's generator for the layout they read.
        let mut nodes: Vec<TestNode> =
            (1..=2).map(|k| TestNode::claim(&mut admin, "mix", &format!("10.0.0.{k}"), 80).unwrap()).collect();
        assert!(nodes.iter().all(|n| *n.layout() == preset.layout()), "{name}: nodes read the service's layout");
        let mut written = 0;
        for round in 0..4 {
            // Backends with connection churn: a new connection each round, each in a slot of its own.
            let mut backends: Vec<Client> = (0..3).map(|_| db.connect()).collect();
            for (k, backend) in backends.iter_mut().enumerate() {
                let n = backend
                    .execute(
                        "INSERT INTO keys (who) SELECT 'backend ' || pg_backend_pid() FROM generate_series(1, 300)",
                        &[],
                    )
                    .unwrap_or_else(|e| panic!("{name} round {round} backend {k}: {e:?}"));
                written += n;
            }
            for node in nodes.iter_mut() {
                let ids = node.mint(300);
                assert_eq!(ids.len(), 300, "{name}: the node's lease runs on");
                let who = format!("node {}", node.machine_id);
                let n = admin
                    .execute("INSERT INTO keys (id, who) SELECT unnest($1::bigint[]), $2", &[&ids, &who])
                    .unwrap_or_else(|e| panic!("{name} round {round}, {who}: a duplicate key: {e:?}"));
                written += n;
            }
        }
        let rows: Vec<(i64, String)> =
            admin.query("SELECT id, who FROM keys", &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(rows.len() as u64, written);
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        // Every ID decodes, by the service's layout, to a machine id a holder of its kind held.
        let node_ids: BTreeSet<i32> = nodes.iter().map(|n| n.machine_id).collect();
        let backend_ids: BTreeSet<i32> = admin
            .query("SELECT machine_id FROM system_nodes WHERE service = 'mix' AND backend_slot IS NOT NULL", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for ((id, who), machine_id) in rows.iter().zip(decoded(&mut admin, "mix", &ids)) {
            let layout = preset.layout();
            assert_eq!(layout.decompose(*id).unwrap().machine_id as i32, machine_id, "{name}: {id}");
            if who.starts_with("node") {
                assert_eq!(who, &format!("node {machine_id}"), "{name}: {id}");
            } else {
                assert!(backend_ids.contains(&machine_id) && !node_ids.contains(&machine_id), "{name}: {id} {who}");
            }
            assert!(*id <= layout.max_id(), "{name}: {id}");
        }
        if preset == Preset::JsSafe {
            let max: i64 = admin.query_one("SELECT max(id) FROM keys", &[]).unwrap().get(0);
            assert!(max < 1 << 53, "a JavaScript Number holds {max} exactly");
        }
    }
}

#[test]
fn the_decoders_follow_the_services_layout_to_the_end_of_its_time() {
    let db = TestDb::create("layouts_decode");
    let mut admin = db.connect();
    admin
        .batch_execute("SELECT idgen_define_layout('js', 'js_safe'), idgen_define_layout('sony', 'sonyflake')")
        .unwrap();
    let js = Preset::JsSafe.layout();
    // The last tick of js_safe: its largest ID is 2^53 - 1; a millisecond later there is none.
    let last = idgen_core::format::iso_utc(js.last_unix_ms());
    let max: i64 = admin.query_one("SELECT idgen_max_id($1::text::timestamptz, 'js')", &[&last]).unwrap().get(0);
    assert_eq!(max, (1 << 53) - 1);
    let err = admin
        .query_one("SELECT idgen_max_id($1::text::timestamptz + interval '1 millisecond', 'js')", &[&last])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22008", "{err:?}");
    let err = admin.query_one("SELECT idgen_decode($1, 'js')", &[&(1i64 << 53)]).unwrap_err();
    assert_eq!(sqlstate(&err), "22003", "{err:?}");
    assert!(db_error(&err).message().contains("above the largest ID of the layout"), "{err:?}");
    // A 10 ms tick: min and max bracket every ID of the tick, and a time decodes to its tick's start.
    let sony = Preset::Sonyflake.layout();
    let at = "2026-05-04 03:02:01.017+00";
    let row = admin
        .query_one(
            "SELECT idgen_min_id($1::text::timestamptz, 'sony'), idgen_max_id($1::text::timestamptz, 'sony')",
            &[&at],
        )
        .unwrap();
    let (min, max): (i64, i64) = (row.get(0), row.get(1));
    let tick = sony.ticks_at(1_777_863_721_017).unwrap();
    assert_eq!(min, sony.compose(IdParts { ticks: tick, machine_id: 0, sequence: 0 }).unwrap());
    assert_eq!(max, sony.compose(IdParts { ticks: tick, machine_id: 65_535, sequence: 255 }).unwrap());
    let ts: i64 = admin
        .query_one("SELECT (extract(epoch FROM ts) * 1000)::bigint FROM idgen_decode($1, 'sony')", &[&max])
        .unwrap()
        .get(0);
    assert_eq!(ts, 1_777_863_721_010, "the start of the tick");
    // A service never claimed nor defined decodes by the default layout, as idgen_decode(id) does.
    let default_id = Layout::DEFAULT.compose(IdParts { ticks: 5, machine_id: 1023, sequence: 7 }).unwrap();
    let row = admin
        .query_one("SELECT (idgen_decode($1, 'nobody')).machine_id, (idgen_decode($1)).machine_id", &[&default_id])
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (1023, 1023));
}

#[test]
fn a_pool_of_256_runs_out_with_53000_and_its_tiers_take_back_within_it() {
    let db = TestDb::create("layouts_pool");
    let mut admin = db.connect();
    admin.batch_execute("SELECT idgen_define_layout('small', 'sonyflake', pool_first => 0, pool_last => 255)").unwrap();
    let first = claim(&mut admin, "small", "10.1.0.1", 1).unwrap();
    assert_eq!((first.machine_id, first.outcome.as_str()), (0, "new"));
    // The rest of the pool held by busy nodes; id 7's holder idle 8 days; an idle row outside the
    // pool (written by hand) is no candidate.
    admin
        .batch_execute(
            "INSERT INTO system_nodes (service, machine_id, host, port, version)
             SELECT 'small', m, ('192.0.2.' || (m % 250))::inet, 10000 + m, 1 FROM generate_series(1, 255) m;
             INSERT INTO system_nodes (service, machine_id, host, port, version, last_seen)
             VALUES ('small', 300, '192.0.2.251', 1, 1, now() - interval '9 days');",
        )
        .unwrap();
    set_idle(&mut admin, "8 days", "service = 'small' AND machine_id = 7");
    let taken = claim(&mut admin, "small", "10.1.0.2", 1).unwrap();
    assert_eq!((taken.machine_id, taken.outcome.as_str()), (7, "idle_7d"));
    let err = claim(&mut admin, "small", "10.1.0.3", 1).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "53000");
    assert!(e.detail().unwrap().starts_with("256 of 256 machine ids (0 to 255: the service's pool) are held"), "{e:?}");
    // A backend's claim meets the same pool.
    let err = admin.query_one("SELECT idgen_next_id('small')", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "53000");
    let capacity: (i32, i64) = {
        let r = admin.query_one("SELECT capacity, in_use FROM idgen_capacity WHERE service = 'small'", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(capacity, (256, 256), "the row outside the pool is not counted");
    let outside: i32 = admin
        .query_one("SELECT machine_id FROM idgen_nodes WHERE service = 'small' AND NOT in_range", &[])
        .unwrap()
        .get(0);
    assert_eq!(outside, 300);
}

#[test]
fn a_node_claims_the_machine_id_it_already_uses_only_when_nobody_else_may_hold_it() {
    let db = TestDb::create("layouts_adopt");
    let mut admin = db.connect();
    admin
        .batch_execute("SELECT idgen_define_layout('fleet', 'sonyflake', pool_first => 0, pool_last => 49999)")
        .unwrap();
    let by_id = |c: &mut Client, host: &str, id: i32| -> Result<Claimed, postgres::Error> {
        let row = c.query_one(
            "SELECT machine_id, version, outcome FROM idgen_claim('fleet', $1::text::inet, 8080, $2)",
            &[&host, &id],
        )?;
        Ok(Claimed { machine_id: row.get(0), version: row.get(1), outcome: row.get(2) })
    };
    // A 16-bit machine id, past smallint: the node's computed one (the low bits of its address).
    let node = by_id(&mut admin, "10.0.156.64", 40_000).unwrap();
    assert_eq!((node.machine_id, node.outcome.as_str()), (40_000, "new"));
    heartbeat(&mut admin, "fleet", 40_000, "10.0.156.64", 8080, node.version).unwrap();
    // Another node asking for it is refused, naming the holder; the holder heartbeats on.
    let err = by_id(&mut admin, "10.0.9.9", 40_000).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "55006", "{e:?}");
    assert_eq!(
        e.message(),
        "idgen_claim: machine id 40000 of service \"fleet\" is in use; 10.0.9.9:8080 cannot take it"
    );
    let held_by = format!("It is held by 10.0.156.64:8080 at version {}, last seen ", node.version);
    assert!(e.detail().unwrap().starts_with(&held_by), "{e:?}");
    heartbeat(&mut admin, "fleet", 40_000, "10.0.156.64", 8080, node.version).unwrap();
    // The holder itself gets it back (a restart after a release), after its watermark.
    release(&mut admin, "fleet", 40_000, "10.0.156.64", 8080, node.version).unwrap();
    let err = by_id(&mut admin, "10.0.9.9", 40_000).unwrap_err();
    assert_eq!(sqlstate(&err), "55006", "cooling down after the release: {err:?}");
    assert!(db_error(&err).detail().unwrap().starts_with("It was released at "), "{err:?}");
    let back = by_id(&mut admin, "10.0.156.64", 40_000).unwrap();
    assert_eq!((back.machine_id, back.outcome.as_str()), (40_000, "reused"));
    // Takeable under the same rules as any claim: an idle holder's, past the tiers, its last report
    // a week old.
    set_idle(&mut admin, "8 days", "service = 'fleet' AND machine_id = 40000");
    admin
        .batch_execute("UPDATE system_nodes SET issued_until = now() - interval '8 days' WHERE machine_id = 40000")
        .unwrap();
    let taken = by_id(&mut admin, "10.0.9.9", 40_000).unwrap();
    assert_eq!((taken.machine_id, taken.outcome.as_str()), (40_000, "idle_7d"));
    let row = admin
        .query_one(
            "SELECT not_before >= previous_bound, previous_holder FROM idgen_events
              WHERE service = 'fleet' AND outcome = 'idle_7d'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, bool>(0), row.get::<_, String>(1)),
        (true, "10.0.156.64:8080".to_owned()),
        "the taker stamps after what the idle holder may have stamped"
    );
    // Outside the pool: refused before anything is read.
    let err = by_id(&mut admin, "10.0.9.10", 50_000).unwrap_err();
    let e = db_error(&err);
    assert_eq!(e.code().code(), "22023");
    assert_eq!(e.message(), "idgen_claim: argument \"machine_id\" is outside the service's pool");
    assert_eq!(e.detail().unwrap(), "Got 50000; the pool of service \"fleet\" is 0-49999.");
    let err = admin.query_one("SELECT idgen_claim('fleet', '10.0.9.11', 1, 70000)", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    // A heartbeat still works with a smallint machine id, and one past the layout is no holder's.
    let small = by_id(&mut admin, "10.0.9.12", 12).unwrap();
    admin.query_one("SELECT idgen_heartbeat('fleet', 12::smallint, '10.0.9.12', 8080, $1)", &[&small.version]).unwrap();
    // A node that holds one id and asks for another leaves the one it holds, with a WARNING.
    let (mut moving, notices) = db.connect_recording();
    let moved = by_id(&mut moving, "10.0.9.12", 13).unwrap();
    assert_eq!((moved.machine_id, moved.outcome.as_str()), (13, "new"));
    let warned: Vec<String> = notices.take().iter().map(|n| n.message().to_owned()).collect();
    assert!(
        warned.contains(&"idgen_claim: 10.0.9.12:8080 of service \"fleet\" claimed machine id 13 by number and leaves machine id 12".to_owned()),
        "{warned:?}"
    );
    let left: bool = admin
        .query_one("SELECT released_at IS NOT NULL FROM system_nodes WHERE service = 'fleet' AND machine_id = 12", &[])
        .unwrap()
        .get(0);
    assert!(left);
    let err = admin.query_one("SELECT idgen_heartbeat('default', 1024, '10.0.9.12', 8080, 1)", &[]).unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    assert!(db_error(&err).detail().unwrap().contains("run from 0 to 1023 (its layout's 10-bit field)"), "{err:?}");
}

#[test]
fn rows_removed_by_hand_send_the_search_for_a_never_registered_id_back_to_them() {
    let db = TestDb::create("layouts_hint");
    let mut admin = db.connect();
    let ids: Vec<i32> =
        (1..=10).map(|k| claim(&mut admin, "svc", &format!("10.2.0.{k}"), 1).unwrap().machine_id).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    let hint = |c: &mut Client| -> i32 {
        c.query_one("SELECT unregistered_from FROM idgen_private.idgen_layouts WHERE service = 'svc'", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(hint(&mut admin), 10, "the next search starts past the ids handed out");
    // A row deleted by hand whose holder can no longer stamp (released, its watermark past):
    // its id is handed out again, though the search had moved past it.
    admin
        .batch_execute(
            "UPDATE system_nodes SET released_at = now() - interval '1 hour', issued_until = now() - interval '1 hour'
              WHERE machine_id = 3;
             DELETE FROM system_nodes WHERE machine_id = 3;",
        )
        .unwrap();
    assert_eq!(hint(&mut admin), 3);
    let again = claim(&mut admin, "svc", "10.2.0.11", 1).unwrap();
    assert_eq!((again.machine_id, again.outcome.as_str()), (3, "new"));
    assert_eq!(hint(&mut admin), 4, "past the id handed out (the search steps over the rows above it)");
    assert_eq!(claim(&mut admin, "svc", "10.2.0.14", 1).unwrap().machine_id, 10);
    // TRUNCATE: every id waits for its tombstone, then the search starts over from the pool's first.
    admin.batch_execute("TRUNCATE system_nodes").unwrap();
    assert_eq!(hint(&mut admin), 0);
    admin.batch_execute("UPDATE idgen_private.idgen_tombstones SET bound = now() - interval '1 second'").unwrap();
    assert_eq!(claim(&mut admin, "svc", "10.2.0.12", 1).unwrap().machine_id, 0);
    // A hint moves only over ids that have rows: an id taken by number far ahead leaves it.
    admin.batch_execute("SELECT idgen_claim('svc', '10.2.0.13', 1, 500)").unwrap();
    assert_eq!(hint(&mut admin), 1);
}

#[test]
fn a_bigserial_columns_keys_sort_below_what_any_layout_mints_from_now_on() {
    // The check docs/install.md gives before a column takes DEFAULT idgen_next_id(service): every key
    // below idgen_min_id(clock_timestamp(), service). (The recipes of docs/install.md, for serial columns and
    // for a Sonyflake fleet's, run as written in tests/cluster/tests/recipes.rs.)
    let db = TestDb::create("layouts_migrate");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "SELECT idgen_define_layout('js', 'js_safe'), idgen_define_layout('sony', 'sonyflake');
             CREATE TABLE invoices (id bigserial PRIMARY KEY, note text);
             INSERT INTO invoices (note) SELECT 'old ' || g FROM generate_series(1, 1000) g;",
        )
        .unwrap();
    for service in ["billing", "js", "sony"] {
        let below: bool = admin
            .query_one("SELECT max(id) < idgen_min_id(clock_timestamp(), $1) FROM invoices", &[&service])
            .unwrap()
            .get(0);
        assert!(below, "{service}");
    }
    admin.batch_execute("ALTER TABLE invoices ALTER COLUMN id SET DEFAULT idgen_next_id('js')").unwrap();
    db.connect().batch_execute("INSERT INTO invoices (note) SELECT 'new' FROM generate_series(1, 500)").unwrap();
    let ordered: bool = admin
        .query_one(
            "SELECT max(id) FILTER (WHERE note <> 'new') < min(id) FILTER (WHERE note = 'new') AND count(DISTINCT id) = 1500
               FROM invoices",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(ordered, "every new key sorts after every old one");
    // A key ahead of the service fails the check.
    admin
        .execute("INSERT INTO invoices (id, note) VALUES ($1, 'ahead')", &[&Preset::JsSafe.layout().max_id()])
        .unwrap();
    let below: bool =
        admin.query_one("SELECT max(id) < idgen_min_id(clock_timestamp(), 'js') FROM invoices", &[]).unwrap().get(0);
    assert!(!below);
}

/// CPU time (user and system) the server process `pid` has used, in clock ticks, from /proc.
fn cpu_ticks(pid: i32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server runs on this machine");
    // After the command's parenthesis: state is field 3; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<i64>().unwrap() + fields[12].parse::<i64>().unwrap()
}

#[test]
fn a_backend_whose_ticks_sequence_is_used_up_sleeps_until_the_next_tick() {
    // Two IDs per 2 ms tick: 2,002 IDs wait about 1,000 times for the next tick, two seconds at least.
    // Waits this short are where a generator that spins (as idgen's did, for the last 2 ms of a
    // wait) would burn the core the whole time.
    let db = TestDb::create("layouts_sleep");
    let mut admin = db.connect();
    admin
        .batch_execute("SELECT idgen_define_layout('short', 'snowflake', time_unit_ms => 2, sequence_bits => 1)")
        .unwrap();
    let mut backend = db.connect();
    backend.query_one("SELECT idgen_next_id('short')", &[]).unwrap();
    let pid: i32 = backend.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let hz = 100.0; // USER_HZ, the unit of /proc/<pid>/stat's times on Linux
    let (cpu_before, wall) = (cpu_ticks(pid), std::time::Instant::now());
    let distinct: i64 = backend
        .query_one("SELECT count(DISTINCT idgen_next_id('short')) FROM generate_series(1, 2002)", &[])
        .unwrap()
        .get(0);
    let (cpu, wall) = ((cpu_ticks(pid) - cpu_before) as f64 / hz, wall.elapsed().as_secs_f64());
    assert_eq!(distinct, 2002);
    assert!(wall >= 1.9, "1,000 waits of up to a 2 ms tick took {wall:.2} s");
    // Sleeping leaves the core to others: a wake-up per wait costs microseconds. (A busy machine
    // only lowers the share; a spinning generator's is the whole wait.)
    assert!(cpu < 0.25 * wall, "the backend used {cpu:.2} s of CPU in {wall:.2} s of waiting");
}

/// docs/concepts.md and docs/ha.md: disjoint pools keep two services' IDs apart when their
/// machine ids sit at the same bits. Two services of one database, one table: backends of each
/// mint into it from sessions that come and go, and no key repeats; nothing is reported.
#[test]
fn two_services_in_disjoint_pools_of_one_layout_mint_into_one_table_without_a_repeat() {
    let db = TestDb::create("layouts_apart");
    let mut admin = db.connect();
    let (_, notices) = {
        let (mut client, notices) = db.connect_recording();
        client
            .batch_execute(
                "SELECT idgen_define_layout('shard_a', 'snowflake', pool_first => 0, pool_last => 511);
                 SELECT idgen_define_layout('shard_b', 'snowflake', pool_first => 512, pool_last => 1023);",
            )
            .unwrap();
        (client, notices)
    };
    assert!(notices.take().is_empty(), "apart: nothing to warn of");
    admin.batch_execute("CREATE TABLE merged (id bigint PRIMARY KEY, side text)").unwrap();
    let dsn = db.dsn();
    let sides: Vec<_> = ["shard_a", "shard_b"]
        .into_iter()
        .map(|service| {
            let dsn = dsn.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let mut client = Client::connect(&dsn, postgres::NoTls).unwrap();
                    client
                        .execute(
                            "INSERT INTO merged SELECT idgen_next_id($1), $1 FROM generate_series(1, 2000)",
                            &[&service],
                        )
                        .unwrap();
                }
            })
        })
        .collect();
    for side in sides {
        join_within(side, WORK_PATIENCE, "a service's inserts");
    }
    let count: i64 = admin.query_one("SELECT count(*) FROM merged", &[]).unwrap().get(0);
    assert_eq!(count, 2 * 20 * 2000);
    let findings: i64 = admin
        .query_one("SELECT count(*) FROM idgen_health() WHERE finding = 'pools_apart_at_other_bits'", &[])
        .unwrap()
        .get(0);
    assert_eq!(findings, 0);
}

/// The outside review's configuration: pools that share no machine id, at other bits (snowflake's
/// machine ids 512-1023 against an 11-bit machine, 11-bit sequence layout's 1024-2047). Their IDs
/// can be equal: the definition warns, naming both, and idgen_health() reports the pair.
#[test]
fn disjoint_pools_at_other_bits_are_warned_of_and_reported() {
    let db = TestDb::create("layouts_other_bits");
    let (mut admin, notices) = db.connect_recording();
    admin
        .batch_execute("SELECT idgen_define_layout('shard_a', 'snowflake', pool_first => 512, pool_last => 1023)")
        .unwrap();
    assert!(notices.take().is_empty());
    admin
        .batch_execute(
            "SELECT idgen_define_layout('shard_b', 'snowflake', machine_bits => 11, sequence_bits => 11,
                                        pool_first => 1024, pool_last => 2047)",
        )
        .unwrap();
    let warned = notices.take();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].code().code(), "01000");
    assert!(warned[0].message().contains("share no machine id, yet their IDs can be equal"), "{}", warned[0].message());
    let detail = warned[0].detail().unwrap_or_default();
    assert!(
        detail.contains("pool 1024-2047 at bits 11-21") && detail.contains("pool 512-1023 at bits 12-21"),
        "{detail}"
    );
    // The same ID decodes as machine id 512 of one and 1024 of the other.
    let id = 254_336_768_514_457_600i64;
    let row = admin
        .query_one("SELECT (idgen_decode($1, 'shard_a')).machine_id, (idgen_decode($1, 'shard_b')).machine_id", &[&id])
        .unwrap();
    let machines: (i32, i32) = (row.get(0), row.get(1));
    assert_eq!(machines, (512, 1024));
    let finding: (String, String) = admin
        .query_one("SELECT severity, subject FROM idgen_health() WHERE finding = 'pools_apart_at_other_bits'", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(finding, ("warning".to_owned(), "shard_a, shard_b".to_owned()));
}
