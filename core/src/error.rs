//! core's error type. Every message names the bad value and the rule, and
//! where there is something to do next, says it.

use std::path::PathBuf;
use std::time::Duration;

use tinybox_sdk::model::{BoxId, ExecRequestError, NameError, SandboxName};
use tinybox_sdk::protocol::ErrorCode;

use crate::model::SpecError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sandbox did not declare what the operation needs. Raised by core
    /// before any driver is called.
    #[error("sandbox {sandbox} does not support {capability}")]
    Unsupported { sandbox: SandboxName, capability: String },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Exec(#[from] ExecRequestError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no driver named {name} (looked for tinybox-driver-{name} in {}); `tinybox drivers` lists what is installed", display_paths(.searched))]
    DriverNotFound { name: String, searched: Vec<PathBuf> },
    #[error("driver {driver} is installed but cannot work here: {detail}")]
    DriverUnavailable { driver: String, detail: String },
    #[error("driver {driver}: {message}")]
    Driver { driver: String, code: ErrorCode, message: String },
    #[error("driver {driver} broke the protocol: {detail}")]
    Protocol { driver: String, detail: String },
    #[error("driver {driver} died ({status}){}", tail_suffix(.stderr_tail))]
    DriverDied { driver: String, status: String, stderr_tail: String },
    #[error("driver {driver} did not answer {what} within {}s{}", .after.as_secs_f64(), tail_suffix(.stderr_tail))]
    DriverTimeout { driver: String, what: String, after: Duration, stderr_tail: String },
    #[error("no host named {name}; the hosts known here are: {}", .known.join(", "))]
    UnknownHost { name: String, known: Vec<String> },
    #[error("box {id} is {state}; {hint}")]
    BoxNotReady { id: BoxId, state: String, hint: String },
    #[error("{0}")]
    NoSandbox(String),
    /// A request that breaks a rule not covered above; the text names the value and the rule.
    #[error("{0}")]
    Refused(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    pub fn unsupported(sandbox: &SandboxName, capability: impl Into<String>) -> Self {
        Error::Unsupported { sandbox: sandbox.clone(), capability: capability.into() }
    }
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "no directory".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn tail_suffix(tail: &str) -> String {
    let t = tail.trim();
    if t.is_empty() { String::new() } else { format!("; its last words: {}", t.replace('\n', " | ")) }
}
