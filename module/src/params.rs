//! Method parameters. Each is a JSON object whose fields mirror the CLI's
//! flags; an unknown field is refused rather than ignored, because a
//! misspelt limit silently dropped is a limit the caller believes is in
//! force and is not.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tinybox_core::model::{
    BoxId, BoxSpec, ExecRequest, HostName, IsolationLevel, Lifecycle, NetworkPolicy, Placement, PortMapping, Resources,
    SandboxName, SnapshotId, TemplateName, WorkspaceSource,
};

use crate::errors::{CallError, CallResult, Code};

/// Fields every method accepts besides its own.
#[derive(Debug, Default)]
pub struct Common {
    /// The store directory; default as the CLI's (`TINYBOX_HOME`, ...).
    pub store: Option<PathBuf>,
}

/// Splits `params` (a JSON text) into the common fields and the method's own.
pub fn split(params: &str) -> CallResult<(Common, Value)> {
    let mut value: Value =
        serde_json::from_str(params).map_err(|e| CallError::invalid(format!("params are not valid JSON: {e}")))?;
    let Some(map) = value.as_object_mut() else {
        return Err(CallError::invalid("params must be a JSON object, such as {} for none"));
    };
    if let Some(abi) = map.remove("abi") {
        let speaks = abi.as_str() == Some(crate::ABI_VERSION) || abi.as_u64() == Some(1);
        if !speaks {
            return Err(CallError::new(
                Code::AbiMismatch,
                format!(
                    "the host asked for TinyBus ABI {abi}; this library speaks ABI \"{}\" only",
                    crate::ABI_VERSION
                ),
            ));
        }
    }
    let store = match map.remove("store") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(PathBuf::from(s)),
        Some(other) => return Err(CallError::invalid(format!("store must be a directory path, not {other}"))),
    };
    Ok((Common { store }, value))
}

/// The method's own parameters, with a message that names the bad field.
pub fn parse<T: DeserializeOwned>(method: &str, value: Value) -> CallResult<T> {
    serde_json::from_value(value).map_err(|e| CallError::invalid(format!("{method}: {e}")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxParams {
    pub id: BoxId,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmParams {
    #[serde(default)]
    pub id: Option<BoxId>,
    #[serde(default)]
    pub ids: Vec<BoxId>,
}

impl RmParams {
    pub fn all(self) -> CallResult<Vec<BoxId>> {
        let mut ids = self.ids;
        ids.extend(self.id);
        if ids.is_empty() {
            return Err(CallError::invalid("rm: name the boxes to remove with \"id\" or \"ids\""));
        }
        Ok(ids)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSaveParams {
    pub name: TemplateName,
    pub id: BoxId,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateNameParams {
    pub name: TemplateName,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkArg {
    Deny,
    Egress,
}

/// A size in bytes, or text such as "512M" as the CLI reads it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn bytes(&self) -> CallResult<u64> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(t) => tinybox_core::model::resources::parse_size(t).map_err(CallError::invalid),
        }
    }
}

/// `"HOST:GUEST"`, `"PORT"`, or `{"host": H, "guest": G}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Port {
    Text(String),
    Pair { host: u32, guest: u32 },
}

impl Port {
    fn mapping(&self) -> CallResult<PortMapping> {
        let bad = || CallError::invalid(format!("{self:?} is not a port mapping HOST:GUEST with ports 1-65535"));
        let port = |n: u32| u16::try_from(n).ok().filter(|p| *p > 0);
        let text = |s: &str| s.parse::<u32>().ok().and_then(port);
        match self {
            Port::Pair { host, guest } => {
                Ok(PortMapping { host: port(*host).ok_or_else(bad)?, guest: port(*guest).ok_or_else(bad)? })
            }
            Port::Text(s) => match s.split_once(':') {
                Some((h, g)) => Ok(PortMapping { host: text(h).ok_or_else(bad)?, guest: text(g).ok_or_else(bad)? }),
                None => text(s).map(|n| PortMapping { host: n, guest: n }).ok_or_else(bad),
            },
        }
    }
}

/// `create`: the CLI's `tinybox create` flags, as fields.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    #[serde(default)]
    pub host: Option<HostName>,
    #[serde(default)]
    pub sandbox: Option<SandboxName>,
    #[serde(default)]
    pub runner_host: Option<HostName>,
    #[serde(default)]
    pub runner_sandbox: Option<SandboxName>,
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
    pub network: Option<NetworkArg>,
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
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl CreateParams {
    /// The isolation floor `untrusted` asks for.
    pub fn floor(&self) -> Option<IsolationLevel> {
        self.untrusted.then_some(IsolationLevel::UNTRUSTED_FLOOR)
    }

    /// The spec these fields describe once the sandbox is known, as the
    /// CLI's `BoxArgs::spec` builds it. Core validates the rest (positive
    /// limits and lifetimes, the namespace, the environment).
    pub fn spec(&self, sandbox: SandboxName, default_namespace: Option<String>) -> CallResult<BoxSpec> {
        let local = || HostName::new("local").expect("valid");
        let mut spec = BoxSpec::new(Placement::new(self.host.clone().unwrap_or_else(local), sandbox));
        if self.runner_host.is_some() || self.runner_sandbox.is_some() {
            let runner = Placement::new(
                self.runner_host.clone().unwrap_or_else(local),
                self.runner_sandbox.clone().unwrap_or_else(|| SandboxName::new("passthrough").expect("valid")),
            );
            spec = spec.with_runner(runner);
        }
        let sources = [
            self.image.is_some(),
            self.workspace.is_some(),
            self.from_snapshot.is_some(),
            self.from_template.is_some(),
            self.git.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(CallError::invalid(
                "create: image, workspace, from_snapshot, from_template and git are alternatives; give at most one",
            ));
        }
        spec.source = if let Some(r) = &self.image {
            Some(WorkspaceSource::OciImage { reference: r.clone() })
        } else if let Some(dir) = &self.workspace {
            let abs = std::fs::canonicalize(dir)
                .map_err(|e| CallError::invalid(format!("workspace {} cannot be used: {e}", dir.display())))?;
            if !abs.is_dir() {
                return Err(CallError::invalid(format!("workspace {} is not a directory", dir.display())));
            }
            Some(WorkspaceSource::LocalDir { path: abs })
        } else if let Some(id) = &self.from_snapshot {
            Some(WorkspaceSource::Snapshot { id: id.clone() })
        } else {
            self.git.as_ref().map(|url| WorkspaceSource::GitRepo { url: url.clone(), rev: None })
        };
        let persistent = match (self.persistent, self.autosnapshot_secs) {
            (Some(false), Some(_)) => {
                return Err(CallError::invalid("create: autosnapshot_secs applies to a persistent box only"));
            }
            (Some(true), _) | (None, Some(_)) => true,
            _ => false,
        };
        spec.lifecycle = match (self.ttl_secs, persistent) {
            (Some(_), true) => {
                return Err(CallError::invalid(
                    "create: ttl_secs and persistent conflict; a persistent box lives until removed",
                ));
            }
            (None, true) => Lifecycle::persistent(
                self.autosnapshot_secs.map(Duration::from_secs).unwrap_or(Lifecycle::DEFAULT_AUTOSNAPSHOT),
            ),
            (Some(ttl), false) => Lifecycle::ephemeral(Duration::from_secs(ttl)),
            (None, false) => Lifecycle::default(),
        };
        spec.network = self.network.map(|n| match n {
            NetworkArg::Deny => NetworkPolicy::Denied,
            NetworkArg::Egress => NetworkPolicy::Egress,
        });
        if let Some(c) = self.cpus
            && !c.is_finite()
        {
            return Err(CallError::invalid(format!("cpus {c} is not a number of cores like 1 or 0.5")));
        }
        spec.resources = Resources {
            cpus: self.cpus,
            memory_bytes: self.memory.as_ref().map(Size::bytes).transpose()?,
            pids: self.pids,
            disk_bytes: self.disk.as_ref().map(Size::bytes).transpose()?,
        };
        spec.ports = self.ports.iter().map(Port::mapping).collect::<CallResult<_>>()?;
        spec.env = self.env.clone();
        spec.min_isolation = self.floor();
        if let Some(ns) = self.namespace.clone().or(default_namespace) {
            spec.namespace = ns;
        }
        Ok(spec)
    }
}

/// `exec` and `exec.start`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    pub id: BoxId,
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Input as text.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Input as bytes, base64.
    #[serde(default)]
    pub stdin_base64: Option<String>,
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// Run on the box's runner placement instead of its workspace.
    #[serde(default)]
    pub runner: bool,
    /// How much of each stream `exec` keeps (default 16 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// `exec.start` only: unread bytes buffered per stream before the command waits (default 1 MiB).
    #[serde(default)]
    pub buffer_bytes: Option<u64>,
}

impl ExecParams {
    pub fn request(&self) -> ExecRequest {
        let mut r = ExecRequest::new(self.argv.clone());
        r.env = self.env.clone();
        r.cwd = self.cwd.clone();
        r
    }

    pub fn stdin_bytes(&self) -> CallResult<Option<Vec<u8>>> {
        match (&self.stdin, &self.stdin_base64) {
            (Some(_), Some(_)) => Err(CallError::invalid("exec: give stdin or stdin_base64, not both")),
            (Some(text), None) => Ok(Some(text.clone().into_bytes())),
            (None, Some(b64)) => {
                crate::base64::decode(b64).map(Some).map_err(|e| CallError::invalid(format!("stdin_base64 is {e}")))
            }
            (None, None) => Ok(None),
        }
    }

    pub fn timeout(&self) -> CallResult<Option<Duration>> {
        match self.timeout_secs {
            None => Ok(None),
            Some(t) if t.is_finite() && t > 0.0 => Duration::try_from_secs_f64(t)
                .map(Some)
                .map_err(|e| CallError::invalid(format!("timeout_secs {t} cannot be used: {e}"))),
            Some(t) => Err(CallError::invalid(format!("timeout_secs {t} is not positive; use at least 0.001"))),
        }
    }

    pub fn max_output(&self) -> CallResult<usize> {
        positive("max_output_bytes", self.max_output_bytes, crate::exec::DEFAULT_MAX_OUTPUT)
    }

    pub fn buffer(&self) -> CallResult<usize> {
        positive("buffer_bytes", self.buffer_bytes, crate::exec::DEFAULT_STREAM_BUFFER)
    }
}

/// A positive byte count, or `default`; zero is refused, as every limit is.
fn positive(name: &str, value: Option<u64>, default: usize) -> CallResult<usize> {
    match value {
        None => Ok(default),
        Some(0) => Err(CallError::invalid(format!("{name} 0 is not positive"))),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

/// `exec.read`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    pub exec: String,
    /// How long to wait for output; absent: until some arrives or the streams end.
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// At most this much of each stream (default 1 MiB).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

impl ReadParams {
    pub fn max(&self) -> CallResult<usize> {
        positive("max_bytes", self.max_bytes, crate::exec::DEFAULT_STREAM_BUFFER)
    }
}

/// `exec.wait` and `exec.cancel`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleParams {
    pub exec: String,
    /// `exec.wait` only: how much of each stream's unread output to return (default 16 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
}

impl HandleParams {
    pub fn max_output(&self) -> CallResult<usize> {
        positive("max_output_bytes", self.max_output_bytes, crate::exec::DEFAULT_MAX_OUTPUT)
    }
}

/// The namespace in the store's `config.json`, read as the CLI reads it
/// (cli/src/config.rs): a missing file is no setting.
pub fn configured_namespace(store_dir: &std::path::Path) -> CallResult<Option<String>> {
    let path = store_dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CallError::new(Code::Io, format!("cannot read {}: {e}", path.display()))),
    };
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[serde(default)]
        namespace: Option<String>,
    }
    let config: Config = serde_json::from_str(&text).map_err(|e| {
        CallError::invalid(format!(
            "{} is not a valid configuration ({e}); it holds one JSON object such as {{\"namespace\": \"alice\"}}",
            path.display()
        ))
    })?;
    if let Some(ns) = &config.namespace {
        tinybox_core::model::names::validate_name("namespace", ns)
            .map_err(|e| CallError::invalid(format!("{}: {e}", path.display())))?;
    }
    Ok(config.namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(json: &str) -> CallResult<BoxSpec> {
        let p: CreateParams = parse("create", serde_json::from_str(json).unwrap())?;
        p.spec(SandboxName::new("passthrough").unwrap(), None)
    }

    #[test]
    fn create_fields_become_the_spec_the_cli_flags_would() {
        let spec = create(
            r#"{"memory": "512M", "disk": 1024, "pids": 7, "cpus": 0.5, "ports": ["8080:80", {"host": 1, "guest": 2}, "9"],
                "env": {"A": "b"}, "network": "egress", "ttl_secs": 90, "namespace": "alice", "untrusted": true}"#,
        )
        .unwrap();
        assert_eq!(spec.resources.memory_bytes, Some(512 << 20));
        assert_eq!(spec.resources.disk_bytes, Some(1024));
        assert_eq!(spec.resources.pids, Some(7));
        assert_eq!(spec.ports.len(), 3);
        assert_eq!(spec.ports[2], PortMapping { host: 9, guest: 9 });
        assert_eq!(spec.network, Some(NetworkPolicy::Egress));
        assert_eq!(spec.lifecycle, Lifecycle::Ephemeral { ttl_secs: 90 });
        assert_eq!(spec.namespace, "alice");
        assert_eq!(spec.min_isolation, Some(IsolationLevel::Kernel));
        assert!(!spec.has_separate_runner());
        let spec = create(r#"{"persistent": true, "runner_sandbox": "passthrough", "runner_host": "local"}"#).unwrap();
        assert_eq!(spec.lifecycle, Lifecycle::Persistent { autosnapshot_secs: 60 });
        let spec = create(r#"{"autosnapshot_secs": 5}"#).unwrap();
        assert_eq!(spec.lifecycle, Lifecycle::Persistent { autosnapshot_secs: 5 });
    }

    #[test]
    fn bad_create_fields_are_refused_naming_the_field() {
        for (json, needle) in [
            (r#"{"memroy": "1G"}"#, "unknown field `memroy`"),
            (r#"{"sandbox": "bad/name"}"#, "contains '/'"),
            (r#"{"memory": "lots"}"#, "is not a number"),
            (r#"{"ports": ["0:80"]}"#, "not a port mapping"),
            (r#"{"ports": [{"host": 70000, "guest": 1}]}"#, "not a port mapping"),
            (r#"{"ttl_secs": 5, "persistent": true}"#, "conflict"),
            (r#"{"image": "x", "git": "y"}"#, "alternatives"),
            (r#"{"workspace": "/nonexistent/dir"}"#, "cannot be used"),
            (r#"{"pids": -1}"#, "invalid value"),
        ] {
            let err = create(json).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument, "{json}");
            assert!(err.message.contains(needle), "{json}: {}", err.message);
        }
    }

    #[test]
    fn common_fields_are_split_off_and_the_abi_is_checked() {
        let (common, rest) = split(r#"{"store": "/tmp/x", "abi": "1", "id": "box-0"}"#).unwrap();
        assert_eq!(common.store, Some(PathBuf::from("/tmp/x")));
        assert_eq!(rest, serde_json::json!({"id": "box-0"}));
        assert_eq!(split(r#"{"abi": "2"}"#).unwrap_err().code, Code::AbiMismatch);
        assert_eq!(split("[]").unwrap_err().code, Code::InvalidArgument);
        assert_eq!(split("{").unwrap_err().code, Code::InvalidArgument);
        assert_eq!(split(r#"{"store": 3}"#).unwrap_err().code, Code::InvalidArgument);
    }

    #[test]
    fn exec_fields_are_checked() {
        let p: ExecParams =
            parse("exec", serde_json::json!({"id": "box-0", "argv": ["a"], "timeout_secs": 0})).unwrap();
        assert!(p.timeout().is_err());
        let p: ExecParams =
            parse("exec", serde_json::json!({"id": "box-0", "argv": ["a"], "stdin_base64": "AP8="})).unwrap();
        assert_eq!(p.stdin_bytes().unwrap(), Some(vec![0, 255]));
        let p: ExecParams =
            parse("exec", serde_json::json!({"id": "box-0", "argv": ["a"], "max_output_bytes": 0})).unwrap();
        assert!(p.max_output().is_err());
    }
}
