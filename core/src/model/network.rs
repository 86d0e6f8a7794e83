//! How a box may use the network, as a request asks: beneath the request
//! rules and the allowlist rules that both read it.

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::NetworkPolicy;

/// How a box may use the network, as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkChoice {
    Deny,
    Egress,
    /// Only the hosts `allow_hosts` names, through an egress proxy (ADR 0020).
    Allowlist,
}

impl From<NetworkChoice> for NetworkPolicy {
    fn from(n: NetworkChoice) -> Self {
        match n {
            NetworkChoice::Deny => NetworkPolicy::Denied,
            NetworkChoice::Egress => NetworkPolicy::Egress,
            NetworkChoice::Allowlist => NetworkPolicy::Allowlist,
        }
    }
}
