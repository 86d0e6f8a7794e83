//! A request that breaks a rule no driver needs to be asked about, and the
//! bounds its messages quote: a leaf beneath the request rules, gathered by
//! `crate::Error`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest a box may be asked to live, or to wait between
/// autosnapshots: a year. Past it a duration is a typo, not a plan.
pub const MAX_LIFETIME: Duration = Duration::from_secs(366 * 24 * 60 * 60);
/// The fewest cores a box may be given; below it no sandbox schedules anything.
pub const MIN_CPUS: f64 = 0.01;
/// The most cores a box may be asked for.
pub const MAX_CPUS: f64 = 1024.0;

/// A request that breaks a rule no driver needs to be asked about.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("image, workspace, from_snapshot, from_template and git are alternatives; give at most one")]
    SourcesConflict,
    #[error("ttl and persistent conflict; a persistent box lives until removed")]
    TtlAndPersistent,
    #[error("autosnapshot applies to a persistent box only")]
    AutosnapshotNotPersistent,
    #[error("{what} {secs}s is not positive; use at least 1s")]
    NotPositive { what: &'static str, secs: u64 },
    #[error("{what} {secs}s is longer than a year ({max}s); ask for less", max = MAX_LIFETIME.as_secs())]
    TooLong { what: &'static str, secs: u64 },
    #[error("cpus {0} is not a number of cores from {MIN_CPUS} to {MAX_CPUS}, like 1 or 0.5")]
    Cpus(f64),
    #[error("{0:?} is not a size like 512M or 2G")]
    Size(String),
    #[error("{0:?} is not a port mapping HOST:GUEST with ports 1-65535")]
    Port(String),
    #[error("option {key} is given twice, as {first:?} and {second:?}; give it once{hint}")]
    OptionTwice { key: String, first: String, second: String, hint: &'static str },
    #[error("workspace {path} cannot be used: {detail}")]
    Workspace { path: PathBuf, detail: String },
    #[error(
        "workspace {path}{} would hand the box {what}; a workspace is a project directory (a box writes to it), never {rule}",
        leads_to(.path, .resolved)
    )]
    SystemWorkspace { path: PathBuf, resolved: PathBuf, what: &'static str, rule: &'static str },
    #[error("timeout {secs}s is not positive; use at least 0.001s (a millisecond)")]
    TimeoutTooShort { secs: f64 },
    #[error("timeout {secs}s is longer than a clock can count; ask for less")]
    TimeoutTooLong { secs: f64 },
    #[error("stdin and stdin_base64 are alternatives; give at most one")]
    StdinTwice,
    /// Bytes a front end takes spelt base64 that are not (decoding is the
    /// front end's; the words are core's, so every front end says them alike).
    #[error("{field} is not base64 ({detail}): send standard base64 (RFC 4648, padded)")]
    NotBase64 { field: &'static str, detail: String },
    #[error("a tty of {rows} rows by {cols} columns is no terminal; give both at least 1")]
    NoTerminal { rows: u16, cols: u16 },
    /// A `--secret`, `--secret-host` or `--secret-header` that breaks a rule (ADR 0032).
    #[error(transparent)]
    Secret(#[from] tinybox_egress::SecretError),
    #[error("env {0} is also a secret's name: the box's {0} holds the secret's placeholder; rename one")]
    EnvIsSecret(String),
}

/// Where a workspace path given as `path` leads, when that is not itself
/// (a symlink, `..`): the refusal is about the place, so it names it.
fn leads_to(path: &Path, resolved: &Path) -> String {
    if path == resolved { String::new() } else { format!(" (which leads to {})", resolved.display()) }
}
