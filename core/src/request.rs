//! The requests front ends make, and every rule that turns one into a box.
//!
//! A front end translates its own syntax into a request and prints what
//! comes back; it decides nothing. The CLI maps its flags onto a
//! [`CreateRequest`] field by field, the TinyBus module deserializes JSON
//! straight into one (the field names are the bus's), and
//! [`Tinybox::plan_create`] makes every decision: which source, how long
//! the box lives, which sandbox when none was named, which namespace,
//! which snapshot a template means, which hosts an `ssh:DEST` implies. So
//! the same request gives the same box through either front end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::{
    HostName, IsolationLevel, PortMapping, Resources, SandboxName, SnapshotId, TemplateName, WorkspaceSource,
};

use crate::Tinybox;
use crate::engine::PoolError;
use crate::error::{Error, Result};
use crate::hosts::HostRef;
use crate::model::{BoxInfo, BoxSpec, Lifecycle, Placement};
use crate::store::Settings;
use crate::store::settings::LEGACY_NAMESPACE;

mod error;
pub mod exec;
pub use crate::model::NetworkChoice;
pub use error::{MAX_CPUS, MAX_LIFETIME, MIN_CPUS, RequestError};
pub use exec::{ExecOptions, ExecPlan, StdinGiven};

/// A size in bytes, or text such as "512M".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    pub fn bytes(&self) -> Result<u64, RequestError> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(t) => crate::model::resources::parse_size(t).map_err(|_| RequestError::Size(t.clone())),
        }
    }
}

/// `"HOST:GUEST"`, `"PORT"` (both the same), or `{"host": H, "guest": G}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Port {
    Text(String),
    Pair { host: u32, guest: u32 },
}

impl Port {
    pub fn mapping(&self) -> Result<PortMapping, RequestError> {
        let port = |n: u32| u16::try_from(n).ok().filter(|p| *p > 0);
        match self {
            Port::Pair { host, guest } => match (port(*host), port(*guest)) {
                (Some(host), Some(guest)) => Ok(PortMapping { host, guest }),
                _ => Err(RequestError::Port(format!("{host}:{guest}"))),
            },
            Port::Text(s) => parse_port(s),
        }
    }
}

/// `HOST:GUEST`, or one port for both.
pub fn parse_port(s: &str) -> Result<PortMapping, RequestError> {
    let p = |v: &str| v.parse::<u16>().ok().filter(|n| *n > 0);
    let bad = || RequestError::Port(s.to_owned());
    match s.split_once(':') {
        Some((h, g)) => Ok(PortMapping { host: p(h).ok_or_else(bad)?, guest: p(g).ok_or_else(bad)? }),
        None => p(s).map(|n| PortMapping { host: n, guest: n }).ok_or_else(bad),
    }
}

/// Cores as a request may give them. Zero and below are left to the
/// spec's rule that every limit is positive, which says so in those words.
pub fn check_cpus(c: f64) -> Result<f64, RequestError> {
    if c <= 0.0 || (c.is_finite() && (MIN_CPUS..=MAX_CPUS).contains(&c)) { Ok(c) } else { Err(RequestError::Cpus(c)) }
}

/// A lifetime or a cadence: at least a second, at most [`MAX_LIFETIME`].
pub fn check_duration(what: &'static str, secs: u64) -> Result<Duration, RequestError> {
    if secs == 0 {
        return Err(RequestError::NotPositive { what, secs });
    }
    if secs > MAX_LIFETIME.as_secs() {
        return Err(RequestError::TooLong { what, secs });
    }
    Ok(Duration::from_secs(secs))
}

/// Merges `accel` into `options`; a key given two different values is
/// refused rather than one silently winning.
pub fn merge_options(
    pairs: impl IntoIterator<Item = (String, String)>,
    accel: Option<&str>,
) -> Result<BTreeMap<String, String>, RequestError> {
    let accel = accel.map(|a| ("accel".to_owned(), a.to_owned()));
    let mut options: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in pairs.into_iter().chain(accel) {
        match options.get(&key) {
            Some(first) if *first != value => {
                let hint = if key == "accel" { " (accel sets it too)" } else { "" };
                return Err(RequestError::OptionTwice { key, first: first.clone(), second: value, hint });
            }
            _ => {
                options.insert(key, value);
            }
        }
    }
    Ok(options)
}

/// Everything a caller may say about a new box. Unset fields mean "the
/// default": what that is, core decides (see [`Tinybox::plan_create`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// Where the workspace runs: a configured host, or `ssh:DEST`; default `local`.
    #[serde(default)]
    pub host: Option<HostRef>,
    /// What confines it; default the strongest healthy sandbox installed.
    #[serde(default)]
    pub sandbox: Option<SandboxName>,
    /// A separate runner's host; default `local` when a runner is asked for.
    #[serde(default)]
    pub runner_host: Option<HostRef>,
    /// A separate runner's sandbox; default passthrough when a runner is asked for.
    #[serde(default)]
    pub runner_sandbox: Option<SandboxName>,
    /// Refuse anything below the isolation floor for untrusted code.
    #[serde(default)]
    pub untrusted: bool,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub from_snapshot: Option<SnapshotId>,
    #[serde(default)]
    pub from_template: Option<TemplateName>,
    #[serde(default)]
    pub git: Option<String>,
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    #[serde(default)]
    pub persistent: Option<bool>,
    #[serde(default)]
    pub autosnapshot_secs: Option<u64>,
    #[serde(default)]
    pub network: Option<NetworkChoice>,
    /// The hosts an allowlist box may reach (`--allow-host`): `NAME`,
    /// `*.NAME`, an address or a CIDR, each with an optional `:PORT`.
    /// Given alone, they make the network `allowlist` (crate::egress).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Secrets the box uses but never reads (`--secret NAME=SOURCE`, ADR
    /// 0032): the name is the variable holding the box's placeholder, the
    /// source `env:VAR`, `file:PATH` or `cmd:COMMAND`, read on this side only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// The hosts each secret is put in for (`--secret-host NAME=HOST`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_hosts: BTreeMap<String, Vec<String>>,
    /// Whole headers set on requests to a host (`--secret-header
    /// HOST='Header: text {NAME}'`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub memory: Option<Size>,
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default)]
    pub disk: Option<Size>,
    #[serde(default)]
    pub ports: Vec<Port>,
    /// Environment every command in the box starts with.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// microvm: `kvm` or `tcg`; the create option `accel`.
    #[serde(default)]
    pub accel: Option<String>,
    /// Sandbox-specific create options; the gate refuses a name the sandbox did not declare.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// Take a ready box from this warm pool when the request matches the
    /// pool's (ttl and env are the taker's); otherwise create cold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// With `pool`: refuse rather than create cold.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pool_only: bool,
}

/// Which sandbox core picked for a request that named none, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxChoice {
    pub sandbox: SandboxName,
    pub isolation: IsolationLevel,
    pub reason: String,
}

/// A request with every decision made, ready to create.
#[derive(Debug, Clone)]
pub struct CreatePlan {
    pub spec: BoxSpec,
    /// Set when the request named no sandbox.
    pub choice: Option<SandboxChoice>,
}

/// A box made from a request, what was chosen for it, and what its
/// caller should be told about it.
#[derive(Debug, Clone)]
pub struct Created {
    pub info: BoxInfo,
    pub choice: Option<SandboxChoice>,
    pub warnings: Vec<String>,
    /// Set when the request asked for a pool: what it got from it.
    pub pool: Option<crate::engine::PoolHandOut>,
}

/// What `create` answers on either front end (`tinybox create --json` and
/// the bus's `create`): the box, and what its caller must hear about it,
/// omitted when there is nothing.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedDocument<'a> {
    #[serde(flatten)]
    pub info: &'a BoxInfo,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub warnings: &'a [String],
    /// Set when the request named a pool (`BoxInfo::pool` is the pool a
    /// box still waits in, so this has a name of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_pool: Option<&'a crate::engine::PoolHandOut>,
}

impl Created {
    pub fn document(&self) -> CreatedDocument<'_> {
        CreatedDocument { info: &self.info, warnings: &self.warnings, from_pool: self.pool.as_ref() }
    }
}

/// What a caller must hear about a new box: a box for untrusted code
/// (made with an isolation floor) without a pids or a memory limit in
/// force can exhaust this machine, and says so loudly rather than being
/// refused — a sandbox that enforces no limits (namespace without a
/// writable cgroup) is still the right place for code that must not see
/// the host.
pub fn warnings(info: &BoxInfo) -> Vec<String> {
    let Some(ws) = &info.workspace else { return Vec::new() };
    if info.spec.min_isolation.is_none() {
        return Vec::new();
    }
    let missing: Vec<&str> = [("pids", ws.limits.pids.is_none()), ("memory", ws.limits.memory_bytes.is_none())]
        .into_iter()
        .filter_map(|(name, missing)| missing.then_some(name))
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "box {} is for untrusted code but has no {} limit in force (sandbox {} enforces none here): code in it can exhaust this machine; a sandbox that enforces limits (docker) avoids that",
        info.id,
        missing.join(" or "),
        ws.placement.sandbox
    )]
}

impl CreateRequest {
    /// The isolation floor the request asks for.
    pub fn floor(&self) -> Option<IsolationLevel> {
        self.untrusted.then_some(IsolationLevel::UNTRUSTED_FLOOR)
    }

    pub(crate) fn lifecycle(&self) -> Result<Lifecycle, RequestError> {
        let persistent = match (self.persistent, self.autosnapshot_secs) {
            (Some(false), Some(_)) => return Err(RequestError::AutosnapshotNotPersistent),
            (Some(true), _) | (None, Some(_)) => true,
            _ => false,
        };
        Ok(match (self.ttl_secs, persistent) {
            (Some(_), true) => return Err(RequestError::TtlAndPersistent),
            (None, true) => Lifecycle::persistent(match self.autosnapshot_secs {
                Some(secs) => check_duration("autosnapshot interval", secs)?,
                None => Lifecycle::DEFAULT_AUTOSNAPSHOT,
            }),
            (Some(ttl), false) => Lifecycle::ephemeral(check_duration("ttl", ttl)?),
            (None, false) => Lifecycle::default(),
        })
    }

    /// The source, before templates are resolved (that needs the store).
    fn source(&self, store_dir: Option<&Path>) -> Result<Option<WorkspaceSource>, RequestError> {
        let given = [
            self.image.is_some(),
            self.workspace.is_some(),
            self.from_snapshot.is_some(),
            self.from_template.is_some(),
            self.git.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(RequestError::SourcesConflict);
        }
        Ok(if let Some(reference) = &self.image {
            Some(WorkspaceSource::OciImage { reference: reference.clone() })
        } else if let Some(dir) = &self.workspace {
            Some(WorkspaceSource::LocalDir { path: workspace_dir(dir, store_dir)? })
        } else if let Some(id) = &self.from_snapshot {
            Some(WorkspaceSource::Snapshot { id: id.clone() })
        } else {
            self.git.as_ref().map(|url| WorkspaceSource::GitRepo { url: url.clone(), rev: None })
        })
    }

    /// The spec this request describes once the sandbox is known, with
    /// everything that needs no driver and no store checked (a workspace
    /// is checked against the store in `store_dir`, when given).
    pub fn spec(&self, sandbox: SandboxName, store_dir: Option<&Path>) -> Result<BoxSpec, Error> {
        let host = self.host.as_ref().map(HostRef::name).unwrap_or_else(HostName::local);
        let mut spec = BoxSpec::new(Placement::new(host, sandbox));
        if self.runner_host.is_some() || self.runner_sandbox.is_some() {
            let runner = Placement::new(
                self.runner_host.as_ref().map(HostRef::name).unwrap_or_else(HostName::local),
                self.runner_sandbox.clone().unwrap_or_else(SandboxName::passthrough),
            );
            spec = spec.with_runner(runner);
        }
        spec.source = self.source(store_dir)?;
        spec.lifecycle = self.lifecycle()?;
        (spec.network, spec.allow_hosts) = crate::egress::requested(self.network, &self.allow_hosts)?;
        spec.resources = Resources {
            cpus: self.cpus.map(check_cpus).transpose()?,
            memory_bytes: self.memory.as_ref().map(Size::bytes).transpose()?,
            pids: self.pids,
            disk_bytes: self.disk.as_ref().map(Size::bytes).transpose()?,
        };
        spec.ports = self.ports.iter().map(Port::mapping).collect::<Result<_, _>>()?;
        spec.env = self.env.clone();
        spec.secrets = self.secrets_spec(&spec)?;
        spec.min_isolation = self.floor();
        if let Some(ns) = &self.namespace {
            spec.namespace = ns.clone();
        }
        spec.options = merge_options(self.options.clone(), self.accel.as_deref())?;
        spec.validate()?;
        Ok(spec)
    }

    /// The request's secrets, checked against the allowlist in `spec`.
    fn secrets_spec(&self, spec: &BoxSpec) -> Result<tinybox_egress::SecretsSpec, RequestError> {
        let given = tinybox_egress::SecretsSpec {
            sources: self.secrets.clone(),
            hosts: self.secret_hosts.clone(),
            headers: self.secret_headers.clone(),
        };
        if let Some(name) = self.secrets.keys().find(|n| self.env.contains_key(*n)) {
            return Err(RequestError::EnvIsSecret(name.clone()));
        }
        let policy = match spec.network {
            Some(tinybox_sdk::model::NetworkPolicy::Allowlist) => {
                // Already checked by crate::egress::requested.
                tinybox_egress::Policy::parse(&spec.allow_hosts).ok()
            }
            _ => None,
        };
        Ok(given.checked(policy.as_ref())?)
    }

    fn ad_hoc_hosts(&self) -> Vec<&str> {
        [&self.host, &self.runner_host].into_iter().flatten().filter_map(HostRef::ad_hoc).collect()
    }
}

/// The directory a `workspace` request names, resolved (symlinks too) and
/// checked: it must be a directory, and never the whole machine, a system
/// directory, or anywhere tinybox keeps its own records.
pub fn workspace_dir(dir: &Path, store_dir: Option<&Path>) -> Result<PathBuf, RequestError> {
    let abs = std::fs::canonicalize(dir)
        .map_err(|e| RequestError::Workspace { path: dir.to_owned(), detail: e.to_string() })?;
    if !abs.is_dir() {
        return Err(RequestError::Workspace { path: dir.to_owned(), detail: "it is not a directory".into() });
    }
    if abs == Path::new("/") {
        return Err(RequestError::SystemWorkspace {
            path: dir.to_owned(),
            resolved: abs,
            what: "the whole machine",
            rule: "/ or a system directory",
        });
    }
    if let Some((_, what)) = crate::paths::SYSTEM_DIRS.iter().find(|(sys, _)| abs.starts_with(sys)) {
        return Err(RequestError::SystemWorkspace {
            path: dir.to_owned(),
            resolved: abs,
            what,
            rule: "/ or a system directory",
        });
    }
    if let Some(store) = store_dir.and_then(|s| std::fs::canonicalize(s).ok())
        && (abs.starts_with(&store) || store.starts_with(&abs))
    {
        return Err(RequestError::SystemWorkspace {
            path: dir.to_owned(),
            resolved: abs,
            what: "tinybox's own records (the store)",
            rule: "the store, inside it, or a directory holding it",
        });
    }
    Ok(abs)
}

impl Tinybox {
    /// Makes every decision a create needs: checks the request, picks the
    /// sandbox when none was named (saying which and why), resolves a
    /// template, applies the store's namespace (recording one for a store
    /// that has none yet), and saves the hosts an
    /// `ssh:DEST` implies — the last, so a request refused for anything
    /// else leaves the store as it was.
    pub async fn plan_create(&self, request: &CreateRequest) -> Result<CreatePlan> {
        let store_dir = self.store_dir.as_deref();
        // Everything that needs no driver first: a bad request starts none.
        request.spec(SandboxName::passthrough(), store_dir)?;
        let (sandbox, choice) = match &request.sandbox {
            Some(s) => (s.clone(), None),
            None => {
                let options = merge_options(request.options.clone(), request.accel.as_deref())?;
                let choice = self.choose_sandbox(request.floor(), &options).await?;
                (choice.sandbox.clone(), Some(choice))
            }
        };
        let mut spec = request.spec(sandbox, store_dir)?;
        let settings = store_dir.map(Settings::load).transpose()?.unwrap_or_default();
        if let Some(t) = &request.from_template {
            spec.source = Some(self.template_source(t, &spec.workspace)?);
        }
        // A request's own namespace is deliberate sharing and leaves the
        // store's alone; otherwise the store's, recorded by its first create.
        if request.namespace.is_none()
            && let Some(dir) = store_dir
        {
            spec.namespace = match settings.namespace {
                Some(ns) => ns,
                None => Settings::settle_namespace(dir, || {
                    Ok(self.store().list()?.iter().any(|b| b.spec.namespace == LEGACY_NAMESPACE))
                })?,
            };
        }
        let dests = request.ad_hoc_hosts();
        if !dests.is_empty() {
            let saved = match store_dir {
                Some(dir) => crate::store::HostStore::open(dir)?.save_ad_hoc(&dests)?,
                None => dests.iter().map(|d| (crate::hosts::ad_hoc_name(d), crate::hosts::ssh_entry(d))).collect(),
            };
            self.drivers.add_hosts(saved);
        }
        Ok(CreatePlan { spec, choice })
    }

    /// Creates the box a request describes: [`Tinybox::plan_create`], then
    /// [`Tinybox::create`].
    ///
    /// A request naming a pool takes a ready box from it when it matches
    /// the pool's, at the cost of one record change; otherwise (unless
    /// `pool_only`) it creates cold from the pool's request with the
    /// caller's fields laid over it, and says why.
    pub async fn create_requested(&self, request: &CreateRequest) -> Result<Created> {
        let Some(name) = &request.pool else {
            return self.create_planned(self.plan_create(request).await?).await;
        };
        let refilled = self.store_dir.as_deref().is_some_and(crate::supervisor::supervised);
        let outcome = match self.pool_take(name, request)? {
            Ok((info, left)) => {
                let warnings = warnings(&info);
                let taken = crate::engine::PoolOutcome::Taken { pool: name.clone(), left };
                return Ok(Created {
                    info,
                    choice: None,
                    warnings,
                    pool: Some(crate::engine::PoolHandOut::new(taken, refilled)),
                });
            }
            Err(outcome) => outcome,
        };
        if request.pool_only {
            return Err(match outcome {
                crate::engine::PoolOutcome::Differs { pool, fields } => PoolError::Differs { pool, fields },
                _ => PoolError::Empty { pool: name.clone(), filling: refilled.then(|| self.pool_filling(name)) },
            }
            .into());
        }
        let plan = self.plan_create(&self.pool_request(name, request)?).await?;
        let created = self.create_planned(plan).await?;
        Ok(Created { pool: Some(crate::engine::PoolHandOut::new(outcome, refilled)), ..created })
    }

    /// Creates the box `plan` describes ([`Tinybox::create`]) and says what
    /// its caller must hear about it ([`warnings`]).
    pub async fn create_planned(&self, plan: CreatePlan) -> Result<Created> {
        let info = self.create(plan.spec).await?;
        let warnings = warnings(&info);
        Ok(Created { info, choice: plan.choice, warnings, pool: None })
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
