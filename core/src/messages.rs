//! What idgen tells people: errors, warnings and alerts built from facts read
//! out of the registry. The edge reads the facts; the words live here.

use crate::error::{IdgenError, SqlState};
use crate::input::{Holding, NodeIdentity};
use crate::policy::{human_duration, Outcome};
use serde_json::json;

/// Channel of the `NOTIFY` alerts.
pub const ALERT_CHANNEL: &str = "idgen_alert";

/// One registry row as it stands, with times rendered as UTC ISO-8601 text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFacts {
    pub machine_id: i16,
    pub host: String,
    pub port: i32,
    pub version: i32,
    pub last_seen: String,
    /// Seconds since `last_seen`, at the time of reading.
    pub idle_secs: i64,
    pub released_at: Option<String>,
}

/// An event a person should hear about: a WARNING to the client, a LOG line
/// and a `NOTIFY idgen_alert` with `payload` as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub message: String,
    pub payload: serde_json::Value,
}

/// The registry has no row for this identity at this version: ownership moved.
pub fn ownership_lost(function: &str, held: &Holding, now: Option<&RowFacts>) -> IdgenError {
    let n = &held.node;
    let message = format!(
        "{function}: machine id {} of service \"{}\" is no longer held by {} at version {}",
        held.machine_id,
        n.service,
        endpoint(&n.host, n.port),
        held.version
    );
    let detail = match now {
        None => format!("The registry has no row for machine id {} of service \"{}\".", held.machine_id, n.service),
        Some(row) => match &row.released_at {
            Some(at) if row.host == n.host && row.port == n.port => {
                format!("It was released at {at} and is at version {} now.", row.version)
            }
            _ => format!(
                "It is now held by {} at version {}, last seen {}.",
                endpoint(&row.host, row.port),
                row.version,
                row.last_seen
            ),
        },
    };
    IdgenError::new(SqlState::ObjectNotInPrerequisiteState, message)
        .detail(detail)
        .hint("Stop issuing IDs with this machine id at once and exit; on restart, claim again with idgen_claim.")
}

/// Release of something the caller does not hold: a WARNING, not an error.
pub fn release_not_held(held: &Holding, now: Option<&RowFacts>) -> IdgenError {
    let lost = ownership_lost("idgen_release", held, now);
    IdgenError { sqlstate: SqlState::Warning, hint: None, ..lost }
        .hint("Nothing was changed. The caller must not issue IDs with this machine id.")
}

/// Another transaction holds the caller's own row, or is claiming the same identity.
pub fn identity_busy(function: &str, node: &NodeIdentity, machine_id: Option<i16>) -> IdgenError {
    let what = match machine_id {
        Some(id) => format!(
            "Machine id {id} of this node is being claimed, heartbeated, released or taken over by a transaction that has not finished."
        ),
        None => "Another transaction is claiming a machine id for the same service, host and port and has not finished.".to_owned(),
    };
    IdgenError::new(
        SqlState::LockNotAvailable,
        format!(
            "{function}: the registry entry of {} in service \"{}\" is busy",
            endpoint(&node.host, node.port), node.service
        ),
    )
    .detail(format!("{what} A claim never waits for another session."))
    .hint("Retry in a moment. If it keeps failing, look for an old transaction in pg_stat_activity, or for two processes started with the same host and port.")
}

/// The registry cannot be written: a read-only transaction, or a standby.
pub fn read_only(function: &str, on_standby: bool) -> IdgenError {
    let (where_, hint) = if on_standby {
        ("on a standby server", "Call it on the primary.")
    } else {
        ("in a read-only transaction", "Call it outside the read-only transaction (SET TRANSACTION READ WRITE, or default_transaction_read_only = off).")
    };
    IdgenError::new(SqlState::ReadOnlySqlTransaction, format!("{function}: cannot write the registry {where_}"))
        .detail("Claims, heartbeats and releases update system_nodes.")
        .hint(hint)
}

/// Every machine id of the service is held and none may be taken back.
pub fn exhausted(
    function: &str,
    claimant: &NodeIdentity,
    held: i64,
    max_machine_id: u16,
    shortest_idle_secs: i64,
    oldest: Option<&RowFacts>,
) -> (IdgenError, Alert) {
    let service = &claimant.service;
    let oldest_text = match oldest {
        Some(row) => format!(
            " The least recently seen holder is machine id {} at {}, idle {} (last seen {}).",
            row.machine_id,
            endpoint(&row.host, row.port),
            human_duration(row.idle_secs),
            row.last_seen
        ),
        None => String::new(),
    };
    let error = IdgenError::new(
        SqlState::InsufficientResources,
        format!("{function}: no machine id is free for service \"{service}\""),
    )
    .detail(format!(
        "{held} of {} machine ids (0 to {max_machine_id}) are held; none was released past its cooldown or idle for more than {}.{oldest_text}",
        u32::from(max_machine_id) + 1,
        human_duration(shortest_idle_secs)
    ))
    .hint(format!(
        "Someone must look: SELECT * FROM system_nodes WHERE service = '{}' ORDER BY last_seen; find why so many nodes registered, and release the ids of nodes that are stopped for good.",
        service.replace('\'', "''")
    ));
    let alert = Alert {
        message: format!(
            "{function}: machine ids of service \"{service}\" are exhausted; {} could not start",
            endpoint(&claimant.host, claimant.port)
        ),
        payload: json!({
            "event": "exhausted",
            "service": service,
            "machine_id": null,
            "held": held,
            "holder": { "host": claimant.host, "port": claimant.port },
            "previous_holder": oldest.map(row_json),
            "idle_seconds": oldest.map(|r| r.idle_secs),
        }),
    };
    (error, alert)
}

/// A take-back that a person should hear about (the policy alerts on the 1-hour tier):
/// event `<outcome>_takeover`, e.g. `idle_1h_takeover`.
pub fn takeover_alert(
    function: &str,
    outcome: Outcome,
    claimant: &NodeIdentity,
    machine_id: i16,
    new_version: i32,
    previous: &RowFacts,
) -> Alert {
    Alert {
        message: format!(
            "{function}: took back machine id {machine_id} of service \"{}\" from {}, idle only {}",
            claimant.service,
            endpoint(&previous.host, previous.port),
            human_duration(previous.idle_secs)
        ),
        payload: json!({
            "event": format!("{}_takeover", outcome.label()),
            "service": claimant.service,
            "machine_id": machine_id,
            "holder": { "host": claimant.host, "port": claimant.port, "version": new_version },
            "previous_holder": row_json(previous),
            "idle_seconds": previous.idle_secs,
        }),
    }
}

fn row_json(row: &RowFacts) -> serde_json::Value {
    json!({
        "machine_id": row.machine_id,
        "host": row.host,
        "port": row.port,
        "version": row.version,
        "last_seen": row.last_seen,
    })
}

/// `10.0.0.5:8080`, or `[2001:db8::5]:8080` for IPv6.
pub fn endpoint(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i32) -> NodeIdentity {
        NodeIdentity { service: "orders".into(), host: host.into(), port }
    }

    fn row(host: &str, port: i32, version: i32, released_at: Option<&str>) -> RowFacts {
        RowFacts {
            machine_id: 5,
            host: host.into(),
            port,
            version,
            last_seen: "2026-11-29T08:00:00.000000Z".into(),
            idle_secs: 3_780,
            released_at: released_at.map(Into::into),
        }
    }

    fn holding() -> Holding {
        Holding { node: node("10.0.0.5", 8080), machine_id: 5, version: 3 }
    }

    #[test]
    fn ownership_lost_names_the_new_holder() {
        let err = ownership_lost("idgen_heartbeat", &holding(), Some(&row("10.0.0.9", 9090, 4, None)));
        assert_eq!(err.sqlstate.code(), "55000");
        assert_eq!(
            err.message,
            "idgen_heartbeat: machine id 5 of service \"orders\" is no longer held by 10.0.0.5:8080 at version 3"
        );
        assert_eq!(
            err.detail.as_deref(),
            Some("It is now held by 10.0.0.9:9090 at version 4, last seen 2026-11-29T08:00:00.000000Z.")
        );
        assert!(err.hint.unwrap().contains("exit"));
    }

    #[test]
    fn ownership_lost_says_when_the_row_is_gone_or_released() {
        let gone = ownership_lost("idgen_heartbeat", &holding(), None);
        assert_eq!(gone.detail.as_deref(), Some("The registry has no row for machine id 5 of service \"orders\"."));
        let released = ownership_lost(
            "idgen_heartbeat",
            &holding(),
            Some(&row("10.0.0.5", 8080, 4, Some("2026-11-29T08:01:00Z"))),
        );
        assert_eq!(
            released.detail.as_deref(),
            Some("It was released at 2026-11-29T08:01:00Z and is at version 4 now.")
        );
        // Same identity, a newer version and not released: a newer claim by the same host and port.
        let reclaimed = ownership_lost("idgen_heartbeat", &holding(), Some(&row("10.0.0.5", 8080, 4, None)));
        assert!(reclaimed.detail.unwrap().starts_with("It is now held by 10.0.0.5:8080 at version 4"));
    }

    #[test]
    fn release_of_what_is_not_held_is_a_warning() {
        let w = release_not_held(&holding(), None);
        assert_eq!(w.sqlstate, SqlState::Warning);
        assert!(w.message.starts_with("idgen_release: machine id 5"));
        assert!(w.hint.unwrap().starts_with("Nothing was changed"));
    }

    #[test]
    fn exhaustion_names_service_count_and_least_recently_seen_holder() {
        let (err, alert) =
            exhausted("idgen_claim", &node("10.0.0.1", 1), 1024, 1023, 3600, Some(&row("10.0.0.7", 8080, 2, None)));
        assert_eq!(err.sqlstate.code(), "53000");
        assert_eq!(err.message, "idgen_claim: no machine id is free for service \"orders\"");
        let detail = err.detail.unwrap();
        assert!(detail.starts_with("1024 of 1024 machine ids (0 to 1023) are held"), "{detail}");
        assert!(detail.contains("machine id 5 at 10.0.0.7:8080, idle 1h 3m"), "{detail}");
        assert!(err.hint.unwrap().starts_with("Someone must look"));
        assert_eq!(alert.payload["event"], "exhausted");
        assert_eq!(alert.payload["held"], 1024);
        assert_eq!(alert.payload["previous_holder"]["host"], "10.0.0.7");
        assert_eq!(alert.payload["idle_seconds"], 3780);
    }

    #[test]
    fn exhaustion_hint_quotes_the_service_literal_safely() {
        let claimant = NodeIdentity { service: "o'brien".into(), host: "::1".into(), port: 1 };
        let (err, _) = exhausted("idgen_claim", &claimant, 1, 0, 60, None);
        assert!(err.hint.unwrap().contains("service = 'o''brien'"));
    }

    #[test]
    fn idle_1h_alert_carries_new_and_previous_holder() {
        let alert = takeover_alert(
            "idgen_claim",
            Outcome::Idle1h,
            &node("2001:db8::9", 9090),
            5,
            8,
            &row("10.0.0.7", 8080, 7, None),
        );
        assert_eq!(alert.payload["event"], "idle_1h_takeover");
        assert_eq!(
            alert.message,
            "idgen_claim: took back machine id 5 of service \"orders\" from 10.0.0.7:8080, idle only 1h 3m"
        );
        let p = &alert.payload;
        assert_eq!((p["service"].as_str(), p["machine_id"].as_i64()), (Some("orders"), Some(5)));
        assert_eq!(p["holder"], json!({"host": "2001:db8::9", "port": 9090, "version": 8}));
        assert_eq!(p["previous_holder"]["version"], 7);
        assert_eq!(p["idle_seconds"], 3780);
    }

    #[test]
    fn read_only_errors_say_where_and_what_to_do() {
        let standby = read_only("idgen_heartbeat", true);
        assert_eq!(
            (standby.sqlstate.code(), standby.message.as_str()),
            ("25006", "idgen_heartbeat: cannot write the registry on a standby server")
        );
        assert_eq!(standby.hint.as_deref(), Some("Call it on the primary."));
        assert!(read_only("idgen_claim", false).message.ends_with("in a read-only transaction"));
    }

    #[test]
    fn ipv6_endpoints_are_bracketed() {
        assert_eq!(endpoint("::1", 80), "[::1]:80");
        assert_eq!(endpoint("10.0.0.1", 80), "10.0.0.1:80");
    }
}
