//! Validation of the registry functions' arguments.
//!
//! Arguments are checked in the order the function declares them, before any
//! row is read or written, so a refused call leaves the registry untouched.

use crate::error::{IdgenError, SqlState};
use crate::layout::Layout;
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;

/// `system_nodes.service` is VARCHAR(64).
pub const SERVICE_MAX_CHARS: usize = 64;

/// Who a node is: its service name and the address it serves on; for a
/// database backend, also its slot on that server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    pub service: String,
    /// The host address in the text form of `inet`, without a mask.
    pub host: String,
    pub port: i32,
    /// The backend's slot number (MyBackendId / MyProcNumber); `None` for service nodes.
    pub backend_slot: Option<i32>,
}

impl NodeIdentity {
    /// How messages name the node: `10.0.0.5:8080`, or `backend slot 7 of 127.0.0.1:5432`.
    pub fn name(&self) -> String {
        node_name(&self.host, self.port, self.backend_slot)
    }
}

/// `10.0.0.5:8080` (`[2001:db8::5]:8080` for IPv6), prefixed with the backend slot if any.
pub fn node_name(host: &str, port: i32, backend_slot: Option<i32>) -> String {
    let endpoint = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    match backend_slot {
        Some(slot) => format!("backend slot {slot} of {endpoint}"),
        None => endpoint,
    }
}

/// What a node claims to hold: its identity, its machine id and the version of its claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    pub node: NodeIdentity,
    pub machine_id: i16,
    pub version: i64,
}

/// Checks `(service, host, port)`. `host` is the text form of an `inet` value.
pub fn node_identity(
    function: &str,
    service: Option<&str>,
    host: Option<&str>,
    port: Option<i32>,
) -> Result<NodeIdentity, IdgenError> {
    let service = service_name(function, service)?;
    let host = host_address(function, host)?;
    let port = port_number(function, port)?;
    Ok(NodeIdentity { service, host, port, backend_slot: None })
}

/// The identity of this database backend: `host` is the setting
/// `idgen.node_host` (checked when set, see [`node_host_setting`]).
pub fn backend_identity(service: String, host: &str, port: i32, backend_slot: i32) -> Result<NodeIdentity, IdgenError> {
    let host = node_host_setting(host)?;
    Ok(NodeIdentity { service, host, port, backend_slot: Some(backend_slot) })
}

/// Checks a value of the setting `idgen.node_host`: one address a node can be reached at.
/// Returns its canonical text form.
pub fn node_host_setting(host: &str) -> Result<String, IdgenError> {
    let refuse = |why: &str| {
        IdgenError::new(SqlState::InvalidParameterValue, format!("setting \"idgen.node_host\" {why}"))
            .detail(format!("It is {host:?}; a backend registers under this address and the server's port."))
            .hint("Set idgen.node_host to this server's own address, e.g. '10.0.0.5' or '2001:db8::5'.")
    };
    let address: std::net::IpAddr = host.trim().parse().map_err(|_| refuse("is not an IP address"))?;
    if let Some((kind, _)) = shared_address_kind(&address) {
        return Err(refuse(&format!("is {kind}, not one node's own address")));
    }
    Ok(address.to_string())
}

/// Checks `(service, machine_id, host, port, version)` as heartbeat and release take them.
pub fn holding(
    function: &str,
    layout: &Layout,
    service: Option<&str>,
    machine_id: Option<i16>,
    host: Option<&str>,
    port: Option<i32>,
    version: Option<i64>,
) -> Result<Holding, IdgenError> {
    let service = service_name(function, service)?;
    let machine_id = machine_id_in_layout(function, layout, machine_id)?;
    let host = host_address(function, host)?;
    let port = port_number(function, port)?;
    let version = positive_version(function, version)?;
    Ok(Holding { node: NodeIdentity { service, host, port, backend_slot: None }, machine_id, version })
}

pub fn service_name(function: &str, service: Option<&str>) -> Result<String, IdgenError> {
    let service = required(function, "service", service)?;
    check_service(&format!("{function}: argument \"service\""), service)
}

/// Checks the setting `idgen.service`, which names the service of
/// `idgen_next_id()`. An empty setting means the database's name (not checked here).
pub fn service_setting(service: &str) -> Result<String, IdgenError> {
    check_service("setting \"idgen.service\"", service)
}

/// `subject` names what is checked in messages, e.g. `idgen_claim: argument "service"`.
fn check_service(subject: &str, service: &str) -> Result<String, IdgenError> {
    let invalid = |reason: &str| IdgenError::new(SqlState::InvalidParameterValue, format!("{subject} {reason}"));
    if service.is_empty() {
        return Err(invalid("must not be empty")
            .hint("Pass the name under which the service's nodes share machine ids, e.g. 'orders'."));
    }
    let chars = service.chars().count();
    if chars > SERVICE_MAX_CHARS {
        return Err(IdgenError::new(SqlState::StringDataRightTruncation, format!("{subject} is too long"))
            .detail(format!("It has {chars} characters; system_nodes.service holds at most {SERVICE_MAX_CHARS}.")));
    }
    if service.chars().any(char::is_control) {
        return Err(invalid("must not contain control characters").detail(format!("Got {service:?}.")));
    }
    if service.trim() != service {
        // "orders" and "orders " would silently be two services with separate id spaces.
        return Err(invalid("must not begin or end with white space").detail(format!("Got {service:?}.")));
    }
    Ok(service.to_owned())
}

/// `host` arrives as the text form of `inet`, which shows a mask only when it is not a single address.
pub fn host_address(function: &str, host: Option<&str>) -> Result<String, IdgenError> {
    let host = required(function, "host", host)?;
    if host.contains('/') {
        // 10.0.0.5/24 and 10.0.0.5 are different inet values: the same node would get two identities.
        return Err(bad_value(function, "host", "must be a single address without a netmask")
            .detail(format!("Got {host}."))
            .hint("Pass the node's own address, e.g. '10.0.0.5' or '2001:db8::5'."));
    }
    if let Some((kind, meaning)) = host.parse::<std::net::IpAddr>().ok().as_ref().and_then(shared_address_kind) {
        // A bind, broadcast or group address: every node of a fleet that passes it would share one identity.
        return Err(bad_value(function, "host", &format!("must be the node's own address, not {kind}"))
            .detail(format!("Got {host}, which means {meaning}: every node that passes it would share one identity."))
            .hint("Pass the address other hosts reach the node at, e.g. '10.0.0.5' or '2001:db8::5', not the address it binds to."));
    }
    Ok(host.to_owned())
}

/// What kind of shared address `address` is, and what it means, if it is not one host's own:
/// unspecified (`0.0.0.0`, `::`), the IPv4 broadcast address, or a multicast group (also as an
/// IPv4-mapped IPv6 address).
fn shared_address_kind(address: &std::net::IpAddr) -> Option<(&'static str, &'static str)> {
    let v4 = match address {
        std::net::IpAddr::V4(v4) => Some(*v4),
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    };
    const UNSPECIFIED: (&str, &str) = ("an unspecified address", "\"any address\"");
    const BROADCAST: (&str, &str) = ("the broadcast address", "\"every host of the network\"");
    const MULTICAST: (&str, &str) = ("a multicast address", "a group of hosts");
    match (address, v4) {
        (_, Some(v4)) if v4.is_unspecified() => Some(UNSPECIFIED),
        (_, Some(v4)) if v4.is_broadcast() => Some(BROADCAST),
        (_, Some(v4)) if v4.is_multicast() => Some(MULTICAST),
        (std::net::IpAddr::V6(v6), None) if v6.is_unspecified() => Some(UNSPECIFIED),
        (std::net::IpAddr::V6(v6), None) if v6.is_multicast() => Some(MULTICAST),
        _ => None,
    }
}

pub fn port_number(function: &str, port: Option<i32>) -> Result<i32, IdgenError> {
    let port = required(function, "port", port)?;
    if !(1..=65535).contains(&port) {
        return Err(bad_value(function, "port", "is out of range")
            .detail(format!("Got {port}; a port is between 1 and 65535.")));
    }
    Ok(port)
}

pub fn machine_id_in_layout(function: &str, layout: &Layout, machine_id: Option<i16>) -> Result<i16, IdgenError> {
    let machine_id = required(function, "machine_id", machine_id)?;
    let max = layout.max_machine_id();
    if machine_id < 0 || machine_id as u16 > max {
        return Err(bad_value(function, "machine_id", "is out of range")
            .detail(format!("Got {machine_id}; machine ids run from 0 to {max}.")));
    }
    Ok(machine_id)
}

/// A role name argument: required, non-empty.
pub fn role_name(function: &str, role: Option<&str>) -> Result<String, IdgenError> {
    let role = required(function, "role", role)?;
    if role.is_empty() {
        return Err(bad_value(function, "role", "must not be empty"));
    }
    Ok(role.to_owned())
}

pub fn positive_version(function: &str, version: Option<i64>) -> Result<i64, IdgenError> {
    let version = required(function, "version", version)?;
    if version <= 0 {
        return Err(bad_value(function, "version", "must be positive")
            .detail(format!("Got {version}; versions start at 1 and only grow."))
            .hint("Pass the version that idgen_claim returned."));
    }
    Ok(version)
}

/// The arguments of `idgen_heartbeat` a node's generator reports, in order.
pub const GENERATOR_COUNT_ARGUMENTS: [&str; 3] =
    ["clock_backward_waits", "clock_backward_refusals", "sequence_exhaustions"];

/// What a node's generator reports with a heartbeat, each counted since the node's claim: how
/// often its clock stepped back and was waited out, how often a step back was refused, and how
/// often it ran out of sequence in a millisecond and waited for the next. NULL: not reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GeneratorCounts {
    pub clock_backward_waits: Option<i64>,
    pub clock_backward_refusals: Option<i64>,
    pub sequence_exhaustions: Option<i64>,
}

/// Checks the counts a heartbeat reports: each is NULL or not negative (`22023` naming the
/// argument otherwise; the heartbeat then changes nothing).
pub fn generator_counts(
    function: &str,
    clock_backward_waits: Option<i64>,
    clock_backward_refusals: Option<i64>,
    sequence_exhaustions: Option<i64>,
) -> Result<GeneratorCounts, IdgenError> {
    let values = [clock_backward_waits, clock_backward_refusals, sequence_exhaustions];
    for (argument, value) in GENERATOR_COUNT_ARGUMENTS.iter().zip(values) {
        if let Some(n) = value.filter(|n| *n < 0) {
            return Err(bad_value(function, argument, "must not be negative")
                .detail(format!("Got {n}; it counts events of the node's generator since its claim."))
                .hint("Pass the generator's counts since the claim (0 or more), or NULL when the node does not count them."));
        }
    }
    Ok(GeneratorCounts { clock_backward_waits, clock_backward_refusals, sequence_exhaustions })
}

/// `idgen.machine_id_range`: `first-last` (e.g. `0-255`), inside the layout; empty means the
/// whole layout. Each server sharing one ID space gets its own, disjoint, range.
pub fn machine_id_range(text: &str, layout: &Layout) -> Result<RangeInclusive<u16>, IdgenError> {
    let all = layout.machine_id_range();
    let text = text.trim();
    if text.is_empty() {
        return Ok(all);
    }
    let refuse = |why: String| {
        IdgenError::new(SqlState::InvalidParameterValue, "setting \"idgen.machine_id_range\" is not a range of machine ids")
            .detail(format!("It is {text:?}: {why}."))
            .hint(format!(
                "Write first-last within {}-{}, e.g. '0-255'; give each server that mints into one ID space a disjoint range. Empty means all.",
                all.start(),
                all.end()
            ))
    };
    let (first, last) = text.split_once('-').ok_or_else(|| refuse("expected first-last".to_owned()))?;
    let parse =
        |part: &str| part.trim().parse::<u16>().map_err(|_| refuse(format!("{:?} is not a machine id", part.trim())));
    let (first, last) = (parse(first)?, parse(last)?);
    if first > last {
        return Err(refuse(format!("{first} is after {last}")));
    }
    if last > *all.end() {
        return Err(refuse(format!("{last} is outside the ID layout's machine ids ({}-{})", all.start(), all.end())));
    }
    Ok(first..=last)
}

/// An age (`older_than` of `idgen_purge_history`) must be positive: zero or less would remove
/// every event, the newest included. Its parts (months, days, microseconds) are checked each:
/// subtracted from now() a month is a calendar month, so `-1000 years 360001 days` is far in
/// the future whatever a 30-day month says. `shown` is the value as the caller wrote it.
pub fn positive_age(
    function: &str,
    argument: &str,
    (months, days, micros): (i32, i32, i64),
    shown: &str,
) -> Result<(), IdgenError> {
    if months >= 0 && days >= 0 && micros >= 0 && (months, days, micros) != (0, 0, 0) {
        return Ok(());
    }
    Err(bad_value(function, argument, "must be positive")
        .detail(format!("Got {shown}. Events older than this are removed: an age of zero or less, or with a negative part, could remove every event, the newest included."))
        .hint("Pass how old the events to remove must be, e.g. interval '90 days', or nothing for idgen.history_retention."))
}

/// `value`, or 22004 naming the argument when it is NULL.
pub fn required<T>(function: &str, argument: &str, value: Option<T>) -> Result<T, IdgenError> {
    value.ok_or_else(|| {
        IdgenError::new(SqlState::NullValueNotAllowed, format!("{function}: argument \"{argument}\" must not be NULL"))
    })
}

fn bad_value(function: &str, argument: &str, reason: &str) -> IdgenError {
    IdgenError::new(SqlState::InvalidParameterValue, format!("{function}: argument \"{argument}\" {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = "idgen_claim";

    #[test]
    fn generator_counts_are_null_or_not_negative_and_a_refusal_names_the_argument() {
        assert_eq!(
            generator_counts("idgen_heartbeat", Some(0), None, Some(7)),
            Ok(GeneratorCounts {
                clock_backward_waits: Some(0),
                clock_backward_refusals: None,
                sequence_exhaustions: Some(7)
            })
        );
        for (i, argument) in GENERATOR_COUNT_ARGUMENTS.iter().enumerate() {
            let mut values = [Some(1), Some(1), Some(1)];
            values[i] = Some(-1);
            let err = generator_counts("idgen_heartbeat", values[0], values[1], values[2]).unwrap_err();
            assert_eq!(err.sqlstate, SqlState::InvalidParameterValue);
            assert_eq!(err.message, format!("idgen_heartbeat: argument \"{argument}\" must not be negative"));
        }
    }

    #[test]
    fn a_valid_identity_passes_unchanged() {
        let id = node_identity(F, Some("orders"), Some("10.0.0.5"), Some(8080)).unwrap();
        assert_eq!(
            id,
            NodeIdentity { service: "orders".into(), host: "10.0.0.5".into(), port: 8080, backend_slot: None }
        );
        assert!(node_identity(F, Some("x"), Some("2001:db8::5"), Some(1)).is_ok());
        assert!(node_identity(F, Some(&"é".repeat(64)), Some("::1"), Some(65535)).is_ok());
    }

    /// The table of refused inputs: (service, host, port, SQLSTATE, message fragment).
    #[test]
    fn bad_identities_are_refused_with_the_argument_named() {
        let long = "s".repeat(65);
        type Case<'a> = (Option<&'a str>, Option<&'a str>, Option<i32>, &'a str, &'a str);
        let cases: Vec<Case> = vec![
            (None, Some("10.0.0.5"), Some(1), "22004", "\"service\" must not be NULL"),
            (Some(""), Some("10.0.0.5"), Some(1), "22023", "\"service\" must not be empty"),
            (Some(&long), Some("10.0.0.5"), Some(1), "22001", "\"service\" is too long"),
            (Some(" orders"), Some("10.0.0.5"), Some(1), "22023", "white space"),
            (Some("orders\n"), Some("10.0.0.5"), Some(1), "22023", "control characters"),
            (Some("orders"), None, Some(1), "22004", "\"host\" must not be NULL"),
            (Some("orders"), Some("10.0.0.0/8"), Some(1), "22023", "\"host\" must be a single address"),
            (Some("orders"), Some("10.0.0.5"), None, "22004", "\"port\" must not be NULL"),
            (Some("orders"), Some("10.0.0.5"), Some(0), "22023", "\"port\" is out of range"),
            (Some("orders"), Some("10.0.0.5"), Some(65536), "22023", "\"port\" is out of range"),
            (Some("orders"), Some("10.0.0.5"), Some(-1), "22023", "\"port\" is out of range"),
            (Some("orders"), Some("0.0.0.0"), Some(1), "22023", "\"host\" must be the node's own address"),
            (Some("orders"), Some("::"), Some(1), "22023", "\"host\" must be the node's own address"),
            (Some("orders"), Some("::ffff:0.0.0.0"), Some(1), "22023", "\"host\" must be the node's own address"),
            (Some("orders"), Some("255.255.255.255"), Some(1), "22023", "not the broadcast address"),
            (Some("orders"), Some("224.0.0.1"), Some(1), "22023", "not a multicast address"),
            (Some("orders"), Some("239.255.255.250"), Some(1), "22023", "not a multicast address"),
            (Some("orders"), Some("ff02::1"), Some(1), "22023", "not a multicast address"),
            (Some("orders"), Some("::ffff:224.0.0.1"), Some(1), "22023", "not a multicast address"),
        ];
        for (service, host, port, code, fragment) in cases {
            let err = node_identity(F, service, host, port).unwrap_err();
            assert_eq!(err.sqlstate.code(), code, "{service:?} {host:?} {port:?}: {err}");
            assert!(err.message.contains(fragment), "{err}");
            assert!(err.message.starts_with("idgen_claim: "), "{err}");
        }
    }

    #[test]
    fn holdings_check_machine_id_against_the_layout_and_version_sign() {
        let l = Layout::DEFAULT;
        let ok = holding("idgen_heartbeat", &l, Some("o"), Some(1023), Some("::1"), Some(1), Some(1)).unwrap();
        assert_eq!(ok.machine_id, 1023);
        for (mid, ver, code, fragment) in [
            (Some(1024), Some(1), "22023", "\"machine_id\" is out of range"),
            (Some(-1), Some(1), "22023", "\"machine_id\" is out of range"),
            (None, Some(1), "22004", "\"machine_id\" must not be NULL"),
            (Some(3), Some(0), "22023", "\"version\" must be positive"),
            (Some(3), Some(-7), "22023", "\"version\" must be positive"),
            (Some(3), None, "22004", "\"version\" must not be NULL"),
        ] {
            let err = holding("idgen_heartbeat", &l, Some("o"), mid, Some("::1"), Some(1), ver).unwrap_err();
            assert_eq!(err.sqlstate.code(), code, "{err}");
            assert!(err.message.contains(fragment), "{err}");
        }
        let small = Layout::new(0, 1, 45, 8, 10).unwrap();
        assert!(holding("f", &small, Some("o"), Some(256), Some("::1"), Some(1), Some(1)).is_err());
    }

    #[test]
    fn backends_are_named_by_slot_and_need_an_ip_node_host() {
        let b = backend_identity("orders".into(), " 10.0.0.9 ", 5432, 7).unwrap();
        assert_eq!((b.host.as_str(), b.port, b.backend_slot), ("10.0.0.9", 5432, Some(7)));
        assert_eq!(b.name(), "backend slot 7 of 10.0.0.9:5432");
        assert_eq!(backend_identity("o".into(), "::1", 5432, 1).unwrap().name(), "backend slot 1 of [::1]:5432");
        for bad in ["", "db.example", "10.0.0.0/8", "300.1.1.1", "0.0.0.0", "::"] {
            let err = backend_identity("o".into(), bad, 5432, 1).unwrap_err();
            assert_eq!(err.sqlstate.code(), "22023", "{bad:?}");
            assert!(err.message.contains("idgen.node_host"), "{err}");
        }
    }

    #[test]
    fn the_service_setting_is_checked_like_the_argument() {
        assert_eq!(service_setting("orders").unwrap(), "orders");
        let err = service_setting(" orders").unwrap_err();
        assert_eq!(err.message, "setting \"idgen.service\" must not begin or end with white space");
        assert_eq!(service_setting(&"x".repeat(65)).unwrap_err().sqlstate.code(), "22001");
    }

    #[test]
    fn service_length_counts_characters_not_bytes() {
        assert!(service_name(F, Some(&"ü".repeat(64))).is_ok());
        let err = service_name(F, Some(&"ü".repeat(65))).unwrap_err();
        assert_eq!(err.detail.as_deref(), Some("It has 65 characters; system_nodes.service holds at most 64."));
    }

    #[test]
    fn machine_id_ranges_are_first_last_inside_the_layout() {
        let layout = Layout::DEFAULT;
        assert_eq!(machine_id_range("", &layout), Ok(0..=1023));
        assert_eq!(machine_id_range(" 0-255 ", &layout), Ok(0..=255));
        assert_eq!(machine_id_range("512 - 1023", &layout), Ok(512..=1023));
        assert_eq!(machine_id_range("7-7", &layout), Ok(7..=7));
        for (bad, why) in [
            ("255", "expected first-last"),
            ("10-5", "10 is after 5"),
            ("0-1024", "1024 is outside the ID layout's machine ids (0-1023)"),
            ("a-5", "\"a\" is not a machine id"),
            ("-1-5", "\"\" is not a machine id"),
        ] {
            let err = machine_id_range(bad, &layout).unwrap_err();
            assert_eq!(err.sqlstate, SqlState::InvalidParameterValue);
            assert!(err.detail.as_deref().unwrap().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn the_node_host_setting_is_one_hosts_address() {
        assert_eq!(node_host_setting(" 10.0.0.5 ").unwrap(), "10.0.0.5");
        assert_eq!(node_host_setting("2001:DB8::5").unwrap(), "2001:db8::5");
        for (value, reason) in [
            ("db1.internal", "is not an IP address"),
            ("10.0.0.5/24", "is not an IP address"),
            ("", "is not an IP address"),
            ("0.0.0.0", "is an unspecified address"),
            ("::", "is an unspecified address"),
            ("255.255.255.255", "is the broadcast address"),
            ("224.0.0.251", "is a multicast address"),
            ("ff05::2", "is a multicast address"),
        ] {
            let err = node_host_setting(value).expect_err(value);
            assert_eq!(err.sqlstate.code(), "22023", "{value}");
            assert!(err.message.contains(reason), "{value}: {}", err.message);
            assert!(err.hint.is_some(), "{value}");
        }
    }

    #[test]
    fn a_purge_age_must_be_positive() {
        assert!(positive_age("idgen_purge_history", "older_than", (0, 0, 1), "00:00:00.000001").is_ok());
        assert!(positive_age("idgen_purge_history", "older_than", (1, 2, 0), "1 mon 2 days").is_ok());
        for (parts, shown) in
            [((0, 0, 0), "00:00:00"), ((0, -1, 0), "-1 days"), ((-12_000, 360_001, 0), "-1000 years +360001 days")]
        {
            let err = positive_age("idgen_purge_history", "older_than", parts, shown).unwrap_err();
            assert_eq!(err.sqlstate.code(), "22023");
            assert_eq!(err.message, "idgen_purge_history: argument \"older_than\" must be positive");
            assert!(err.detail.unwrap().starts_with(&format!("Got {shown}. ")));
        }
    }
}
