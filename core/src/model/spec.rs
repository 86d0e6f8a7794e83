//! What a caller asks for: where a box runs, what it starts from, how long
//! it lives and what it may use.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::{
    HostName, IsolationLevel, NetworkPolicy, PortMapping, Resources, SandboxName, WorkspaceSource,
};

use super::SpecError;

/// One point on each axis: which host reaches the machine, which sandbox confines the code.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Placement {
    pub host: HostName,
    pub sandbox: SandboxName,
}

impl Placement {
    pub fn new(host: HostName, sandbox: SandboxName) -> Self {
        Placement { host, sandbox }
    }

    /// `local` host, `passthrough` sandbox.
    pub fn local_passthrough() -> Self {
        Placement::new(HostName::local(), SandboxName::passthrough())
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.host, self.sandbox)
    }
}

/// The name of the sandbox that lives in core and confines nothing.
pub const PASSTHROUGH: &str = "passthrough";

/// How a box ends. Only the reaper and the autosnapshot timer read this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Lifecycle {
    /// Destroyed when `ttl_secs` have passed since creation.
    Ephemeral { ttl_secs: u64 },
    /// Kept until removed; snapshotted every `autosnapshot_secs`.
    Persistent { autosnapshot_secs: u64 },
}

impl Lifecycle {
    pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);
    pub const DEFAULT_AUTOSNAPSHOT: Duration = Duration::from_secs(60);

    pub fn ephemeral(ttl: Duration) -> Self {
        Lifecycle::Ephemeral { ttl_secs: ttl.as_secs() }
    }

    pub fn persistent(autosnapshot: Duration) -> Self {
        Lifecycle::Persistent { autosnapshot_secs: autosnapshot.as_secs() }
    }

    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Lifecycle::Ephemeral { ttl_secs: 0 } => {
                Err("ttl 0s is not positive; a box must live at least one second".into())
            }
            Lifecycle::Persistent { autosnapshot_secs: 0 } => {
                Err("autosnapshot interval 0s is not positive; use at least one second".into())
            }
            _ => Ok(()),
        }
    }
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::ephemeral(Self::DEFAULT_TTL)
    }
}

/// Everything a caller states about a box. Fields a caller did not set are
/// `None`/empty: what is actually in force is decided by the capability gate
/// and recorded on the box's [`Instance`](super::Instance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxSpec {
    /// Where the code being run sits.
    pub workspace: Placement,
    /// Where the agent driving the work sits.
    pub runner: Placement,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<WorkspaceSource>,
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// The network policy asked for explicitly (`None`: the default, where enforced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
    /// With network `allowlist`: what the box may reach, as canonical
    /// `tinybox_egress::Policy` entries (crate::egress).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// With network `allowlist`: secrets the box uses but never reads,
    /// each by its source (never its value) and the hosts it is for (ADR 0032).
    #[serde(default, skip_serializing_if = "tinybox_egress::SecretsSpec::is_empty")]
    pub secrets: tinybox_egress::SecretsSpec,
    /// Limits asked for explicitly.
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub ports: Vec<PortMapping>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The least isolation the caller accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_isolation: Option<IsolationLevel>,
    /// Separates this store's boxes from another's on a shared daemon.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Driver-specific create options for the workspace's sandbox (microvm's
    /// `accel`, say). The gate refuses a name the sandbox did not declare;
    /// the values are the driver's to check. A separate runner gets none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

pub fn default_namespace() -> String {
    "default".to_owned()
}

impl BoxSpec {
    /// A box whose runner and workspace are colocated.
    pub fn new(placement: Placement) -> Self {
        BoxSpec {
            workspace: placement.clone(),
            runner: placement,
            source: None,
            lifecycle: Lifecycle::default(),
            network: None,
            allow_hosts: Vec::new(),
            secrets: Default::default(),
            resources: Resources::default(),
            ports: Vec::new(),
            env: BTreeMap::new(),
            min_isolation: None,
            namespace: default_namespace(),
            options: BTreeMap::new(),
        }
    }

    /// Splits the runner from the workspace.
    pub fn with_runner(mut self, runner: Placement) -> Self {
        self.runner = runner;
        self
    }

    /// Whether the runner is a place of its own.
    pub fn has_separate_runner(&self) -> bool {
        self.runner != self.workspace
    }

    /// Rules that need no driver: positive limits, positive lifetimes, a valid namespace.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.resources.validate()?;
        self.lifecycle.validate().map_err(SpecError::Lifecycle)?;
        crate::egress::check_spec(self.network, &self.allow_hosts)?;
        tinybox_sdk::model::names::validate_name("namespace", &self.namespace)
            .map_err(|e| SpecError::Namespace(e.to_string()))?;
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
                return Err(SpecError::Env(name.clone()));
            }
        }
        Ok(())
    }
}
