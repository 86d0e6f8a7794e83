//! What an agent may ask for when an operator hands it box creation (the
//! MCP server): the operator's ceiling, and the rule that turns an agent's
//! request into a [`CreateRequest`] at or under it. The agent can lower
//! every limit and its box's lifetime; it can raise none of them, never
//! lift the isolation floor, and gets the network only if the operator
//! allowed it. A request over the ceiling is refused, not silently cut, so
//! the agent learns what it has.

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::SandboxName;

use crate::request::{CreateRequest, NetworkChoice, Size};

mod error;
pub use error::CeilingError;

/// The most a box made for an agent may have, and what it gets by default.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceiling {
    /// `None`: core picks the strongest healthy sandbox.
    pub sandbox: Option<SandboxName>,
    /// Boxes need the isolation floor for untrusted code.
    pub untrusted: bool,
    /// The most network a box may have.
    pub network: NetworkChoice,
    pub ttl_secs: u64,
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpus: f64,
}

impl Default for Ceiling {
    /// Fit for untrusted agent code: the floor, no network, an hour, 1 GiB,
    /// 256 processes, one core.
    fn default() -> Self {
        Ceiling {
            sandbox: None,
            untrusted: true,
            network: NetworkChoice::Deny,
            ttl_secs: 3600,
            memory_bytes: 1 << 30,
            pids: 256,
            cpus: 1.0,
        }
    }
}

/// What an agent may say about a new box; every field unset is the ceiling's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCreate {
    /// Seconds the box lives before it is removed.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// Bytes, or text such as "512M".
    #[serde(default)]
    pub memory: Option<Size>,
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub network: Option<NetworkChoice>,
    /// An image, for a sandbox that takes one (docker).
    #[serde(default)]
    pub image: Option<String>,
}

impl Ceiling {
    /// The request `ask` makes under this ceiling, or the first thing it
    /// asks for over it. Sizes and durations keep core's own checks.
    pub fn request(&self, ask: &AgentCreate) -> crate::Result<CreateRequest> {
        let over = |what, asked: String, ceiling: String| CeilingError::Over { what, asked, ceiling };
        let ttl = ask.ttl_secs.unwrap_or(self.ttl_secs);
        if ttl > self.ttl_secs {
            return Err(over("ttl_secs", ttl.to_string(), self.ttl_secs.to_string()).into());
        }
        let memory = match &ask.memory {
            Some(m) => m.bytes()?,
            None => self.memory_bytes,
        };
        if memory > self.memory_bytes {
            return Err(over("memory", memory.to_string(), self.memory_bytes.to_string()).into());
        }
        let pids = ask.pids.unwrap_or(self.pids);
        if pids > self.pids {
            return Err(over("pids", pids.to_string(), self.pids.to_string()).into());
        }
        let cpus = ask.cpus.unwrap_or(self.cpus);
        if cpus.is_nan() || cpus > self.cpus {
            return Err(over("cpus", cpus.to_string(), self.cpus.to_string()).into());
        }
        let network = ask.network.unwrap_or(NetworkChoice::Deny);
        if network == NetworkChoice::Egress && self.network == NetworkChoice::Deny {
            return Err(CeilingError::Network.into());
        }
        Ok(CreateRequest {
            sandbox: self.sandbox.clone(),
            untrusted: self.untrusted,
            image: ask.image.clone(),
            ttl_secs: Some(ttl),
            network: Some(network),
            memory: Some(Size::Bytes(memory)),
            pids: Some(pids),
            cpus: Some(cpus),
            ..CreateRequest::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_gets_the_ceiling_and_can_ask_for_less() {
        let c = Ceiling::default();
        let r = c.request(&AgentCreate::default()).unwrap();
        assert_eq!(
            (r.untrusted, r.ttl_secs, r.pids, r.network),
            (true, Some(3600), Some(256), Some(NetworkChoice::Deny))
        );
        let less = AgentCreate { ttl_secs: Some(60), memory: Some(Size::Text("64M".into())), ..Default::default() };
        let r = c.request(&less).unwrap();
        assert_eq!((r.ttl_secs, r.memory), (Some(60), Some(Size::Bytes(64 << 20))));
    }

    #[test]
    fn an_agent_cannot_raise_anything() {
        let c = Ceiling::default();
        let asks = [
            AgentCreate { ttl_secs: Some(3601), ..Default::default() },
            AgentCreate { memory: Some(Size::Text("2G".into())), ..Default::default() },
            AgentCreate { pids: Some(257), ..Default::default() },
            AgentCreate { cpus: Some(1.5), ..Default::default() },
            AgentCreate { cpus: Some(f64::NAN), ..Default::default() },
            AgentCreate { network: Some(NetworkChoice::Egress), ..Default::default() },
        ];
        for ask in asks {
            let e = c.request(&ask).unwrap_err();
            assert!(e.to_string().contains("ceiling") || e.to_string().contains("not allowed"), "{ask:?}: {e}");
        }
    }
}
