//! Observability with the ecosystem's own tools: the alert rules and the scrape configuration
//! shipped in monitoring/ pass `promtool check` and the rules their unit tests (`promtool test
//! rules`), and Debian's
//! postgres_exporter, run as a process with monitoring/postgres_exporter-queries.yaml and one target
//! per database, serves what idgen_metrics and idgen_health() say in each database, under the names
//! the rules use.

use idgen_cluster_tests::docs::repository_root;
use idgen_cluster_tests::*;
use postgres::Client;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

const EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";

fn monitoring_dir() -> std::path::PathBuf {
    repository_root().join("monitoring")
}

fn promtool(args: &[&str]) {
    let done = Command::new("promtool")
        .args(args)
        .current_dir(monitoring_dir())
        .output()
        .expect("promtool runs (Debian's prometheus package; scripts/test.sh installs it)");
    assert!(
        done.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
}

#[test]
fn the_alert_rules_and_the_scrape_configuration_pass_promtool_and_the_rules_unit_tests() {
    promtool(&["check", "rules", "prometheus-rules.yml"]);
    promtool(&["test", "rules", "prometheus-rules.test.yml"]);
    promtool(&["check", "config", "prometheus-scrape.yml"]);
}

/// A port nobody listens on now (the exporter takes no port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// postgres_exporter for one database, as the monitoring role, with idgen's queries alone.
fn exporter(dsn: &str) -> (GuardedChild, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let child = spawn_guarded(
        Command::new(EXPORTER)
            .env("DATA_SOURCE_NAME", format!("{dsn} sslmode=disable"))
            .arg(format!("--web.listen-address={address}"))
            .arg(format!("--extend.query-path={}", monitoring_dir().join("postgres_exporter-queries.yaml").display()))
            .args(["--disable-default-metrics", "--disable-settings-metrics"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "postgres_exporter (Debian's prometheus-postgres-exporter; scripts/test.sh installs it)",
    );
    wait_for("postgres_exporter to listen", PATIENCE, || {
        let up = std::net::TcpStream::connect(&address).is_ok();
        if !up {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        up
    });
    (child, address)
}

/// The samples of a scrape: `name{labels}` → value, with the exporter's `server` label left out.
fn scrape(address: &str) -> BTreeMap<String, f64> {
    let reply = http_get(address, "/metrics");
    assert_eq!(reply.status, 200, "{reply:?}");
    reply
        .body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let series = series
                .split_once('{')
                .map(|(name, labels)| {
                    let kept: Vec<&str> = labels
                        .trim_end_matches('}')
                        .split(',')
                        .filter(|l| !l.starts_with("server=") && !l.is_empty())
                        .collect();
                    if kept.is_empty() {
                        name.to_owned()
                    } else {
                        format!("{name}{{{}}}", kept.join(","))
                    }
                })
                .unwrap_or_else(|| series.to_owned());
            (series, value.parse().unwrap_or(f64::NAN))
        })
        .collect()
}

fn health_counts(client: &mut Client) -> BTreeMap<String, f64> {
    client
        .query("SELECT severity, count(*)::float8 FROM idgen_health() GROUP BY severity", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, f64>(1)))
        .collect()
}

#[test]
fn postgres_exporter_serves_each_databases_idgen_metrics_under_the_names_the_rules_use() {
    let shop = TestDb::create("monitoring_shop");
    let billing = TestDb::create("monitoring_billing");
    let mut admin = shop.connect();
    ensure_login_role(&mut admin, "idgen_t_monitor");
    admin.batch_execute("GRANT pg_monitor TO idgen_t_monitor").unwrap();
    // In shop, one node of "orders" holds a machine id; in billing, a backend of its own service.
    admin.batch_execute("SELECT * FROM idgen_claim('orders', '10.0.0.5', 8080)").unwrap();
    let mut billing_admin = billing.connect();
    billing_admin.batch_execute("SELECT idgen_next_id()").unwrap();

    let (_shop_exporter, shop_address) = exporter(&format!("{} user=idgen_t_monitor", shop.dsn()));
    let (_billing_exporter, billing_address) = exporter(&format!("{} user=idgen_t_monitor", billing.dsn()));
    for (address, client) in [(&shop_address, &mut admin), (&billing_address, &mut billing_admin)] {
        let m = scrape(address);
        assert_eq!(m.get("pg_up"), Some(&1.0), "{m:?}");
        assert_eq!(m.get("pg_exporter_last_scrape_error"), Some(&0.0), "{m:?}");
        let loaded = m.iter().find(|(k, _)| k.starts_with("pg_exporter_user_queries_load_error"));
        assert_eq!(loaded.map(|(_, v)| *v), Some(0.0), "the queries file did not load: {m:?}");
        // Every severity has its series, 0 when idgen_health() has none of it: what the rules compare.
        let counts = health_counts(client);
        for severity in ["critical", "warning", "notice"] {
            let series = format!("idgen_health_findings{{severity=\"{severity}\"}}");
            assert_eq!(m.get(&series), Some(counts.get(severity).unwrap_or(&0.0)), "{series}: {m:?}");
        }
        // One series per service of idgen_metrics, with the values it has.
        let rows =
            client.query("SELECT service::text, held::float8, capacity::float8 FROM idgen_metrics", &[]).unwrap();
        assert!(!rows.is_empty());
        for row in rows {
            let service: String = row.get(0);
            assert_eq!(m.get(&format!("idgen_held{{service=\"{service}\"}}")), Some(&row.get::<_, f64>(1)), "{m:?}");
            assert_eq!(
                m.get(&format!("idgen_capacity{{service=\"{service}\"}}")),
                Some(&row.get::<_, f64>(2)),
                "{m:?}"
            );
            assert!(m.contains_key(&format!("idgen_capacity_level{{service=\"{service}\"}}")), "{m:?}");
        }
    }
    // Each target is its own database: orders is held in shop's, not in billing's.
    assert_eq!(scrape(&shop_address).get("idgen_held{service=\"orders\"}"), Some(&1.0));
    assert_ne!(scrape(&billing_address).get("idgen_held{service=\"orders\"}"), Some(&1.0));
}
