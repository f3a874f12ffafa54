//! Alerts: what a person on call should hear about, and what of it any listener may hear.

use serde::{Deserialize, Serialize};

/// Channel of the `NOTIFY` alerts.
pub const ALERT_CHANNEL: &str = "idgen_alert";

/// An event a person should hear about: a WARNING to the client, a LOG line
/// and a `NOTIFY idgen_alert` with `payload` as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub message: String,
    pub payload: serde_json::Value,
}

impl Alert {
    /// What listeners of `idgen_alert` get: any role can LISTEN, so the holders' addresses,
    /// ports, slots and versions stay in the server log and the claimant's WARNING.
    pub fn for_listeners(&self) -> serde_json::Value {
        let mut payload = self.payload.clone();
        if let Some(fields) = payload.as_object_mut() {
            fields.remove("holder");
            fields.remove("previous_holder");
        }
        payload
    }
}
