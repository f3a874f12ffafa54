//! What the edge reads out of the registry for the messages people read: a row as it stands,
//! a watermark too far ahead, a holder that may still be stamping.

use crate::input::{node_name, NodeIdentity};

/// One registry row as it stands, with times rendered as UTC ISO-8601 text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFacts {
    pub machine_id: i32,
    pub host: String,
    pub port: i32,
    pub version: i64,
    pub last_seen: String,
    /// Seconds since `last_seen`, at the time of reading.
    pub idle_secs: i64,
    pub released_at: Option<String>,
    /// Set when the holder is a database backend.
    pub backend_slot: Option<i32>,
}

impl RowFacts {
    /// How messages name the row's holder.
    pub fn holder(&self) -> String {
        node_name(&self.host, self.port, self.backend_slot)
    }

    /// Whether `node` is the row's holder.
    pub fn is_held_by(&self, node: &NodeIdentity) -> bool {
        self.host == node.host && self.port == node.port && self.backend_slot == node.backend_slot
    }
}

/// A machine id the caller would keep cannot be used yet: an earlier holder
/// may have stamped up to `bound`, further ahead than the caller may wait.
pub struct WatermarkAhead {
    pub machine_id: i32,
    pub bound_unix_ms: i64,
    pub now_unix_ms: i64,
    pub tolerance_ms: i64,
    /// When the bound is a live holder's lease rather than a watermark: the service node that holds
    /// the row, last seen then, may still be issuing (an earlier process of the claimant's identity,
    /// or a second one). `None`: the bound is what was stamped.
    pub held_since_unix_ms: Option<i64>,
}

/// Something the registry still guards when someone tries to drop it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StillStamping {
    pub service: String,
    pub machine_id: i32,
    /// Who may be stamping: `10.0.0.5:8080`, `backend slot 3 of 127.0.0.1:5432 (pid 4242)`, or
    /// `a row deleted by hand`.
    pub holder: String,
    pub until_unix_ms: i64,
}
