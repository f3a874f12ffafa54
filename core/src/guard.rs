//! Guards that keep "a claim never waits for another session" without the
//! global advisory-lock space, which any role can take keys in (a denial of
//! service) and applications collide with by accident.
//!
//! A claim locks a row of the private table `idgen_private.idgen_claim_guards`,
//! which only the extension owner can lock, with `FOR UPDATE SKIP LOCKED`: a
//! row someone else holds is skipped at once, never waited for. A guard is
//! `(service, bucket)`: claims of different services never share one, so a
//! role granted one service can hold no guard of another, however it picks its
//! identities. A service's guard rows are created once, in a transaction of
//! their own, the first time it needs them ([`buckets`]).
//!
//! - A never-registered machine id has a bucket (ids share one modulo
//!   [`MACHINE_ID_BUCKETS`]): one claimant inserts its row at a time; the others
//!   try the next id.
//! - A service node's identity hashes onto one of [`IDENTITY_BUCKETS`]: claims
//!   of one identity take turns (two brand-new identities of the service may
//!   share a bucket; one then gets `55P03`, which the client contract retries).
//! - A database backend needs no identity guard: one process at a time holds a
//!   backend slot, and each waits for its own registry write before the next.
//! - A node whose own row exists needs no guard: the row's lock serialises it.
//! - A change of a service's capacity level is announced by the claim that holds its
//!   [`CAPACITY_TURN`]; a claim that finds it taken leaves the announcement to a later one.

use crate::input::NodeIdentity;

/// Buckets of never-registered machine ids: one per machine id of the default layout; the machine
/// ids of a wider field share them (ids 5 and 1,029 one bucket: a claimant that finds it taken
/// tries the next id, as it does for a taken id).
pub const MACHINE_ID_BUCKETS: i32 = 1_024;
/// Buckets of service node identities, after the machine-id ones.
pub const IDENTITY_BUCKETS: i32 = 1_024;

/// The guard of a service's capacity announcements, after the identity buckets: one claim at a
/// time announces a change of the service's level (`crate::fleet::level_change`), so that
/// claims that cross a threshold together announce it once.
pub const CAPACITY_TURN: i32 = MACHINE_ID_BUCKETS + IDENTITY_BUCKETS;

/// Every bucket of a service, as its guard rows are created: `0..MACHINE_ID_BUCKETS` for
/// machine ids, then the identity buckets, then the capacity turn.
pub fn buckets() -> std::ops::Range<i32> {
    0..CAPACITY_TURN + 1
}

/// The buckets of the SQL objects before 0.10.0, which have no capacity turn.
pub fn buckets_without_capacity_turn() -> std::ops::Range<i32> {
    0..CAPACITY_TURN
}

/// The guard of a service node's identity: claims of one identity take turns.
pub fn identity_guard(node: &NodeIdentity) -> i32 {
    let slot = node.backend_slot.map_or_else(String::new, |s| s.to_string());
    let hash = fnv_murmur(&[&node.host, &node.port.to_string(), &slot]);
    MACHINE_ID_BUCKETS + (hash % IDENTITY_BUCKETS as u64) as i32
}

/// The guard of a never-registered machine id: one claimant inserts its row at a time.
pub fn new_id_guard(machine_id: i32) -> i32 {
    machine_id.rem_euclid(MACHINE_ID_BUCKETS)
}

/// FNV-1a over the parts, each followed by a NUL (which no part contains: text cannot hold
/// it), then MurmurHash3's finalizer: FNV alone leaves the low bits, which the modulo keeps,
/// poorly mixed.
fn fnv_murmur(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0u8]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i32) -> NodeIdentity {
        NodeIdentity { service: "orders".into(), host: host.into(), port, backend_slot: None }
    }

    #[test]
    fn guards_are_stable_and_in_their_ranges() {
        let a = identity_guard(&node("10.0.0.5", 8080));
        assert_eq!(a, identity_guard(&node("10.0.0.5", 8080)));
        assert!((MACHINE_ID_BUCKETS..MACHINE_ID_BUCKETS + IDENTITY_BUCKETS).contains(&a));
        for m in 0..1_024 {
            assert_eq!(new_id_guard(m), m, "one bucket per machine id of the default layout");
        }
        assert_eq!(new_id_guard(65_535), 1_023, "a 16-bit field's ids share them");
        assert_eq!(buckets().len(), 2_049);
        assert_eq!(buckets().last(), Some(CAPACITY_TURN), "the capacity turn is a bucket of its own, after them");
        assert_eq!(buckets_without_capacity_turn().len(), 2_048);
    }

    #[test]
    fn identities_spread_over_their_buckets() {
        // Parts are separated: ("ab", "c") and ("a", "bc") are different keys.
        assert_ne!(fnv_murmur(&["ab", "c"]), fnv_murmur(&["a", "bc"]));
        let distinct: std::collections::HashSet<i32> =
            (0..1024).map(|k| identity_guard(&node(&format!("10.0.{}.{}", k / 256, k % 256), 8080))).collect();
        assert!(distinct.len() > 600, "1,024 identities share only a few guards: {}", distinct.len());
    }

    #[test]
    fn the_service_is_no_part_of_the_bucket_but_of_the_guard() {
        // A guard row is (service, bucket): the same identity of two services has the same bucket,
        // in two different rows, so no claim of one service can hold a guard of another.
        let mut billing = node("10.0.0.5", 8080);
        billing.service = "billing".into();
        assert_eq!(identity_guard(&billing), identity_guard(&node("10.0.0.5", 8080)));
    }
}
