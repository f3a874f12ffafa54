//! Guards that keep "a claim never waits for another session" without the
//! global advisory-lock space, which any role can take keys in (a denial of
//! service) and applications collide with by accident.
//!
//! A claim locks a row of the private table `idgen_claim_guards`, which only
//! the extension owner can lock, with `FOR UPDATE SKIP LOCKED`: a row someone
//! else holds is skipped at once, never waited for. Keys hash onto a fixed set
//! of rows. A claim that finds its own row (a reconnect, a restart) needs no
//! guard: the row's lock serialises it exactly. Guards are for identities that
//! get a new row, and for never-registered ids: two such keys sharing a row at
//! the same moment make one claim retry (`55P03`) or try its next candidate id.

use crate::input::NodeIdentity;

/// Rows in `idgen_claim_guards` (0 to `GUARD_BUCKETS - 1`); `sql/registry.sql` creates them.
pub const GUARD_BUCKETS: u32 = 65_536;

/// The guard of a node identity: claims of one identity take turns.
pub fn identity_guard(node: &NodeIdentity) -> i32 {
    let slot = node.backend_slot.map_or_else(String::new, |s| s.to_string());
    bucket(&["node", &node.service, &node.host, &node.port.to_string(), &slot])
}

/// The guard of a never-registered machine id: one claimant inserts its row at a time.
pub fn new_id_guard(service: &str, machine_id: i16) -> i32 {
    bucket(&["machine_id", service, &machine_id.to_string()])
}

/// FNV-1a over the parts, each followed by a NUL (which no part contains: text cannot hold it).
fn bucket(parts: &[&str]) -> i32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0u8]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    // A finalizer (MurmurHash3's): FNV alone leaves the low bits, which the modulo keeps, poorly mixed.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash % u64::from(GUARD_BUCKETS)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(service: &str, host: &str, port: i32, slot: Option<i32>) -> NodeIdentity {
        NodeIdentity { service: service.into(), host: host.into(), port, backend_slot: slot }
    }

    #[test]
    fn guards_are_stable_and_in_range() {
        let a = identity_guard(&node("orders", "10.0.0.5", 8080, None));
        assert_eq!(a, identity_guard(&node("orders", "10.0.0.5", 8080, None)));
        for k in 0..2_000 {
            let g = new_id_guard("orders", k as i16);
            assert!((0..GUARD_BUCKETS as i32).contains(&g));
        }
    }

    #[test]
    fn identities_and_ids_spread_over_the_guards() {
        // Parts are separated: ("ab", "c") and ("a", "bc") are different keys.
        assert_ne!(bucket(&["ab", "c"]), bucket(&["a", "bc"]));
        assert_ne!(identity_guard(&node("s", "10.0.0.1", 1, None)), identity_guard(&node("s", "10.0.0.1", 1, Some(1))));
        let distinct: std::collections::HashSet<i32> = (0..1024).map(|m| new_id_guard("orders", m)).collect();
        assert!(distinct.len() > 1_010, "1,024 ids of a service share only a few guards: {}", distinct.len());
    }
}
