//! Validation of the registry functions' arguments.
//!
//! Arguments are checked in the order the function declares them, before any
//! row is read or written, so a refused call leaves the registry untouched.

use crate::error::{IdgenError, SqlState};
use crate::format::iso_utc;
use crate::layout::{FieldOrder, Layout, LayoutError, Pool, Preset, ServiceLayout, MAX_LAYOUT_BITS, MAX_MACHINE_BITS};
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
    pub machine_id: i32,
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

/// Checks `(service, machine_id, host, port, version)` as heartbeat and release take them. The
/// machine id is checked against the widest field (a heartbeat for an id its service's layout
/// cannot carry finds no row, and is told it holds nothing).
pub fn holding(
    function: &str,
    service: Option<&str>,
    machine_id: Option<i32>,
    host: Option<&str>,
    port: Option<i32>,
    version: Option<i64>,
) -> Result<Holding, IdgenError> {
    let service = service_name(function, service)?;
    let machine_id = i32::from(machine_id_argument(function, "machine_id", machine_id)?);
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

/// A machine id argument: required, and one that some layout can carry (0 to 65535).
pub fn machine_id_argument(function: &str, argument: &str, machine_id: Option<i32>) -> Result<u16, IdgenError> {
    let machine_id = required(function, argument, machine_id)?;
    let max = i32::from(u16::MAX);
    u16::try_from(machine_id).map_err(|_| {
        bad_value(function, argument, "is out of range")
            .detail(format!("Got {machine_id}; machine ids run from 0 to {max} (a 16-bit field), and each service's from 0 to its layout's largest."))
    })
}

/// A machine id its service's layout can carry (heartbeat and release check it once they have read
/// the layout): an id past the field is no holder's.
pub fn machine_id_in_layout(function: &str, service: &str, layout: &Layout, machine_id: i32) -> Result<(), IdgenError> {
    let max = layout.max_machine_id();
    if (0..=i32::from(max)).contains(&machine_id) {
        return Ok(());
    }
    Err(bad_value(function, "machine_id", "is out of range").detail(format!(
        "Got {machine_id}; machine ids of service \"{service}\" run from 0 to {max} (its layout's {}-bit field).",
        layout.machine_bits
    )))
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

/// `idgen.machine_id_range`: `first-last` (e.g. `0-255`), machine ids of the widest field;
/// empty means all. Each server sharing one ID space gets its own, disjoint, range; a claim hands
/// out the machine ids of its service's pool inside it.
pub fn machine_id_range(text: &str) -> Result<RangeInclusive<u16>, IdgenError> {
    let all = 0..=u16::MAX;
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
    let parse = |part: &str| {
        let part = part.trim();
        match part.parse::<u32>() {
            Ok(id) => {
                u16::try_from(id).map_err(|_| refuse(format!("{id} is above {}, the largest machine id", all.end())))
            }
            Err(_) => Err(refuse(format!("{part:?} is not a machine id"))),
        }
    };
    let (first, last) = (parse(first)?, parse(last)?);
    if first > last {
        return Err(refuse(format!("{first} is after {last}")));
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

/// The arguments of `idgen_define_layout` past the service: a preset, and the parts that change it
/// (`None`: the preset's). `epoch_unix_ms` is `Err` for an infinite timestamp.
#[derive(Clone, Debug, Default)]
pub struct LayoutArguments<'a> {
    pub preset: Option<&'a str>,
    pub pool_first: Option<i32>,
    pub pool_last: Option<i32>,
    pub epoch_unix_ms: Option<Result<i64, &'static str>>,
    pub time_unit_ms: Option<i32>,
    pub time_bits: Option<i32>,
    pub machine_bits: Option<i32>,
    pub sequence_bits: Option<i32>,
    pub field_order: Option<&'a str>,
}

/// A service's layout and pool from `idgen_define_layout`'s arguments, checked: a preset changed
/// by the parts given, whose time field has begun (`now_unix_ms`) and not run out, and a pool
/// inside its machine-id field (all of it by default).
pub fn layout_definition(
    function: &str,
    args: &LayoutArguments,
    now_unix_ms: i64,
) -> Result<ServiceLayout, IdgenError> {
    let name = required(function, "preset", args.preset)?;
    let preset = Preset::from_name(name).ok_or_else(|| {
        bad_value(function, "preset", "is not a preset")
            .detail(format!(
                "Got {name:?}; the presets are {}.",
                Preset::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
            ))
            .hint("Start from a preset and change the parts you need: epoch, time_unit_ms, time_bits, machine_bits, sequence_bits, field_order.")
    })?;
    let base = preset.layout();
    let order = match args.field_order {
        None => base.order,
        Some(label) => FieldOrder::from_label(label).ok_or_else(|| {
            bad_value(function, "field_order", "is not a field order").detail(format!(
                "Got {label:?}; the orders are {}.",
                FieldOrder::ALL.iter().map(|o| o.label()).collect::<Vec<_>>().join(" and ")
            ))
        })?,
    };
    let epoch_unix_ms = match args.epoch_unix_ms {
        None => base.epoch_unix_ms,
        Some(Ok(ms)) => ms,
        Some(Err(infinite)) => {
            return Err(bad_value(function, "epoch", "must be a finite time").detail(format!("Got {infinite}.")))
        }
    };
    let width = |argument: &str, value: Option<i32>, preset_value: u32| -> Result<u32, IdgenError> {
        match value {
            None => Ok(preset_value),
            Some(v) => u32::try_from(v)
                .map_err(|_| bad_value(function, argument, "must not be negative").detail(format!("Got {v}."))),
        }
    };
    let time_unit_ms = i64::from(args.time_unit_ms.unwrap_or(base.time_unit_ms as i32));
    let (time_bits, machine_bits, sequence_bits) = (
        width("time_bits", args.time_bits, base.time_bits)?,
        width("machine_bits", args.machine_bits, base.machine_bits)?,
        width("sequence_bits", args.sequence_bits, base.sequence_bits)?,
    );
    let layout = Layout::new(epoch_unix_ms, time_unit_ms, time_bits, machine_bits, sequence_bits, order).map_err(|e| {
        let argument = match e {
            LayoutError::BadTimeUnit(_) => "time_unit_ms",
            LayoutError::EpochBefore1970(_) => "epoch",
            LayoutError::EndsTooLate { .. } => "time_unit_ms and time_bits",
            _ => "time_bits, machine_bits and sequence_bits",
        };
        let (verb, argument) = if argument.contains(' ') { ("do", argument) } else { ("does", argument) };
        IdgenError::new(
            SqlState::InvalidParameterValue,
            format!("{function}: arguments \"{argument}\" {verb} not make a layout"),
        )
        .detail(format!("{}.", layout_error_text(&e)))
        .hint(format!(
            "A layout has at least 1 bit of time, 1 to {MAX_MACHINE_BITS} bits of machine id and at least 1 of sequence, {MAX_LAYOUT_BITS} bits at most in all (53 for IDs a JavaScript Number holds), a positive time unit in milliseconds, and its time field ends by 9999-12-31."
        ))
    })?;
    if layout.epoch_unix_ms > now_unix_ms {
        return Err(bad_value(function, "epoch", "is in the future").detail(format!(
            "Got {}; the server clock reads {}. No ID can be stamped before its layout's epoch.",
            iso_utc(layout.epoch_unix_ms),
            iso_utc(now_unix_ms)
        )));
    }
    if layout.last_unix_ms() <= now_unix_ms {
        return Err(IdgenError::new(
            SqlState::InvalidParameterValue,
            format!("{function}: the layout's time field has run out"),
        )
        .detail(format!(
            "{} bits of {} ms from {} end at {}; the server clock reads {}.",
            layout.time_bits,
            layout.time_unit_ms,
            iso_utc(layout.epoch_unix_ms),
            iso_utc(layout.last_unix_ms()),
            iso_utc(now_unix_ms)
        ))
        .hint("Give a later epoch, a longer time unit or more time bits."));
    }
    let all = Pool::all(&layout);
    let first = i64::from(args.pool_first.unwrap_or(i32::from(all.first)));
    let last = i64::from(args.pool_last.unwrap_or(i32::from(all.last)));
    let pool = Pool::new(&layout, first, last).map_err(|_| {
        let in_field = |id: i64| (0..=i64::from(all.last)).contains(&id);
        let argument = if in_field(first) && !in_field(last) { "pool_last" } else { "pool_first" };
        bad_value(function, argument, "is out of range").detail(format!(
            "Got pool {first} to {last}; the layout's machine ids run from 0 to {}, and the pool's first must not be after its last.",
            all.last
        ))
    })?;
    Ok(ServiceLayout { layout, pool })
}

/// What is wrong with a layout, in words.
fn layout_error_text(e: &LayoutError) -> String {
    match e {
        LayoutError::EndsTooLate { .. } => "its time field would end after 9999-12-31".to_owned(),
        other => {
            let text = other.to_string();
            let mut chars = text.chars();
            chars.next().map_or(text.clone(), |c| c.to_uppercase().collect::<String>() + chars.as_str())
        }
    }
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
    fn holdings_check_machine_id_and_version_sign() {
        let ok = holding("idgen_heartbeat", Some("o"), Some(65_535), Some("::1"), Some(1), Some(1)).unwrap();
        assert_eq!(ok.machine_id, 65_535);
        for (mid, ver, code, fragment) in [
            (Some(65_536), Some(1), "22023", "\"machine_id\" is out of range"),
            (Some(-1), Some(1), "22023", "\"machine_id\" is out of range"),
            (None, Some(1), "22004", "\"machine_id\" must not be NULL"),
            (Some(3), Some(0), "22023", "\"version\" must be positive"),
            (Some(3), Some(-7), "22023", "\"version\" must be positive"),
            (Some(3), None, "22004", "\"version\" must not be NULL"),
        ] {
            let err = holding("idgen_heartbeat", Some("o"), mid, Some("::1"), Some(1), ver).unwrap_err();
            assert_eq!(err.sqlstate.code(), code, "{err}");
            assert!(err.message.contains(fragment), "{err}");
        }
        let err = machine_id_argument("idgen_claim", "machine_id", Some(70_000)).unwrap_err();
        assert_eq!(err.detail.as_deref().unwrap(), "Got 70000; machine ids run from 0 to 65535 (a 16-bit field), and each service's from 0 to its layout's largest.");
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
    fn a_layout_is_a_preset_changed_by_the_parts_given() {
        const D: &str = "idgen_define_layout";
        let now = crate::layout::EPOCH_2025_UNIX_MS + 365 * 86_400_000;
        let args = |preset| LayoutArguments { preset: Some(preset), ..LayoutArguments::default() };
        let sony = layout_definition(D, &args("sonyflake"), now).unwrap();
        assert_eq!((sony.layout, sony.pool), (Preset::Sonyflake.layout(), Pool { first: 0, last: 65_535 }));
        let narrowed = layout_definition(
            D,
            &LayoutArguments { pool_first: Some(0), pool_last: Some(255), ..args("sonyflake") },
            now,
        )
        .unwrap();
        assert_eq!((narrowed.pool.size(), narrowed.preset_name()), (256, "sonyflake"));
        let custom = LayoutArguments {
            time_unit_ms: Some(100),
            time_bits: Some(36),
            machine_bits: Some(12),
            sequence_bits: Some(10),
            field_order: Some("time_sequence_machine"),
            ..args("snowflake")
        };
        let custom = layout_definition(D, &custom, now).unwrap();
        assert_eq!(custom.preset_name(), "custom");
        assert_eq!((custom.layout.total_bits(), custom.layout.order), (58, FieldOrder::TimeSequenceMachine));
        for (given, code, message, detail) in [
            (LayoutArguments { preset: None, ..args("x") }, "22004", "argument \"preset\" must not be NULL", ""),
            (
                args("twitter"),
                "22023",
                "argument \"preset\" is not a preset",
                "the presets are snowflake, sonyflake, js_safe",
            ),
            (
                LayoutArguments { field_order: Some("machine_first"), ..args("snowflake") },
                "22023",
                "\"field_order\" is not a field order",
                "time_machine_sequence and time_sequence_machine",
            ),
            (
                LayoutArguments { machine_bits: Some(17), ..args("snowflake") },
                "22023",
                "arguments \"time_bits, machine_bits and sequence_bits\" do not make a layout",
                "got time 41 + machine 17 + sequence 12",
            ),
            (
                LayoutArguments { sequence_bits: Some(-1), ..args("snowflake") },
                "22023",
                "\"sequence_bits\" must not be negative",
                "Got -1.",
            ),
            (
                LayoutArguments { time_unit_ms: Some(0), ..args("snowflake") },
                "22023",
                "\"time_unit_ms\" does not make a layout",
                "positive number of milliseconds",
            ),
            (
                LayoutArguments { time_unit_ms: Some(1000), ..args("snowflake") },
                "22023",
                "\"time_unit_ms and time_bits\" do not make a layout",
                "end after 9999-12-31",
            ),
            (
                LayoutArguments { epoch_unix_ms: Some(Err("infinity")), ..args("snowflake") },
                "22023",
                "\"epoch\" must be a finite time",
                "Got infinity.",
            ),
            (
                LayoutArguments { epoch_unix_ms: Some(Ok(now + 1)), ..args("snowflake") },
                "22023",
                "\"epoch\" is in the future",
                "No ID can be stamped before",
            ),
            (
                LayoutArguments { epoch_unix_ms: Some(Ok(0)), time_bits: Some(20), ..args("snowflake") },
                "22023",
                "the layout's time field has run out",
                "end at 1970-01-01T00:17:28.575Z",
            ),
            (
                LayoutArguments { pool_last: Some(1024), ..args("snowflake") },
                "22023",
                "\"pool_last\" is out of range",
                "run from 0 to 1023",
            ),
            (
                LayoutArguments { pool_first: Some(9), pool_last: Some(8), ..args("snowflake") },
                "22023",
                "\"pool_first\" is out of range",
                "Got pool 9 to 8",
            ),
            (
                LayoutArguments { pool_first: Some(-1), ..args("js_safe") },
                "22023",
                "\"pool_first\" is out of range",
                "run from 0 to 255",
            ),
        ] {
            let err = layout_definition(D, &given, now).unwrap_err();
            assert_eq!(err.sqlstate.code(), code, "{err}");
            assert!(err.message.starts_with(D) && err.message.contains(message), "{err}");
            assert!(err.detail.as_deref().unwrap_or("").contains(detail), "{err}");
        }
    }

    #[test]
    fn machine_id_ranges_are_first_last_of_sixteen_bits() {
        assert_eq!(machine_id_range(""), Ok(0..=65_535));
        assert_eq!(machine_id_range(" 0-255 "), Ok(0..=255));
        assert_eq!(machine_id_range("512 - 1023"), Ok(512..=1023));
        assert_eq!(machine_id_range("7-7"), Ok(7..=7));
        assert_eq!(machine_id_range("1024-65535"), Ok(1024..=65_535));
        for (bad, why) in [
            ("255", "expected first-last"),
            ("10-5", "10 is after 5"),
            ("0-65536", "65536 is above 65535, the largest machine id"),
            ("a-5", "\"a\" is not a machine id"),
            ("-1-5", "\"\" is not a machine id"),
        ] {
            let err = machine_id_range(bad).unwrap_err();
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
