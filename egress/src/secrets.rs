//! Secrets a box can use but never read (ADR 0032), the part core shares
//! with the proxy: what a request says (`--secret NAME=SOURCE`,
//! `--secret-host NAME=HOST`, `--secret-header HOST='Header: tmpl {NAME}'`),
//! the rules that request must keep, and what the proxy is told. A
//! request and the store keep a secret's *source*; the value is read on
//! the host side only, when a proxy starts, and handed to it on a pipe.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::policy::{Policy, normalize_name};

/// The most a secret's value may hold: a token, a key, never a file's worth.
pub const MAX_VALUE: usize = 64 * 1024;

/// Secrets as a request states them, kept in the box's spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretsSpec {
    /// Each secret's name (also the variable the box sees its placeholder
    /// in) and where its value comes from: `env:VAR`, `file:PATH` or
    /// `cmd:COMMAND`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, String>,
    /// The hosts each secret's placeholder is replaced for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, Vec<String>>,
    /// Whole headers set on requests to a host, `Header: text {NAME}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Vec<String>>,
}

/// Where a secret's value comes from, read on the host side only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A variable of the caller's (core's) environment.
    Env(String),
    /// A file on core's machine; one trailing newline is not part of the value.
    File(PathBuf),
    /// A command core runs with `/bin/sh -c` (`gh auth token`), as the
    /// caller, each time the value is needed; its standard output is the
    /// value, one trailing newline dropped.
    Command(String),
}

/// How long a `cmd:` source may take before it is killed and refused.
pub const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A secret asked for in a way that breaks a rule: one line naming the
/// value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("secret name {0:?} is not a variable name (letters, digits and '_', not starting with a digit)")]
    Name(String),
    #[error("secret {name} source {given:?} is none of env:VAR, file:PATH or cmd:COMMAND")]
    SourceKind { name: String, given: String },
    #[error("secret {name} source {given:?} gives no value: {why}")]
    SourceEmpty { name: String, given: String, why: String },
    #[error("secret binding {binding:?} names secret {name}, which no --secret defines")]
    UnknownName { binding: String, name: String },
    #[error(
        "secret binding {binding:?} names host {host:?}, which is not on the allowlist; add --allow-host {host} or bind a listed name"
    )]
    HostNotAllowed { binding: String, host: String },
    #[error("secret binding {binding:?} host {host:?}: {rule}")]
    HostName { binding: String, host: String, rule: String },
    #[error("secret header {header:?} for {host}: {rule}")]
    Header { host: String, header: String, rule: String },
    #[error(
        "secret {0} is bound to no host (--secret-host {0}=HOST or a --secret-header naming {{{0}}}), so it could never be used"
    )]
    Unbound(String),
    #[error("secrets need an allowlist network: the egress proxy is what puts them in; add --allow-host HOST")]
    NoAllowlist,
}

impl SecretSource {
    pub fn parse(name: &str, source: &str) -> Result<SecretSource, SecretError> {
        let kind = || SecretError::SourceKind { name: name.to_owned(), given: source.to_owned() };
        match source.split_once(':') {
            Some(("env", var)) if !var.is_empty() => Ok(SecretSource::Env(var.to_owned())),
            Some(("file", path)) if !path.is_empty() => Ok(SecretSource::File(PathBuf::from(path))),
            Some(("cmd", command)) if !command.trim().is_empty() => Ok(SecretSource::Command(command.to_owned())),
            _ => Err(kind()),
        }
    }

    /// The value, now, from the caller's side.
    pub fn read(&self, name: &str, source: &str) -> Result<String, SecretError> {
        let empty = |why: String| SecretError::SourceEmpty { name: name.to_owned(), given: source.to_owned(), why };
        let value = match self {
            SecretSource::Env(var) => std::env::var(var).map_err(|e| empty(format!("variable {var}: {e}")))?,
            SecretSource::File(path) => {
                chomp(std::fs::read_to_string(path).map_err(|e| empty(format!("{}: {e}", path.display())))?)
            }
            SecretSource::Command(command) => chomp(run_source(command, COMMAND_TIMEOUT).map_err(empty)?),
        };
        if value.is_empty() {
            return Err(empty("it is empty".into()));
        }
        if value.len() > MAX_VALUE {
            return Err(empty(format!("it is over {MAX_VALUE} bytes")));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(empty("it holds a line break or NUL, which no header value may".into()));
        }
        Ok(value)
    }
}

/// `text` without one trailing newline (or CRLF).
fn chomp(text: String) -> String {
    let text = text.strip_suffix('\n').unwrap_or(&text);
    text.strip_suffix('\r').unwrap_or(text).to_owned()
}

/// The standard output of `/bin/sh -c command`, which must exit 0 within
/// `timeout` and print at most [`MAX_VALUE`] bytes (and a newline). Its
/// standard input is empty and its standard error is only for the refusal:
/// a token must never reach a log. It runs in a process group of its own,
/// killed whole when the time is up, so nothing it started holds the pipe.
pub fn run_source(command: &str, timeout: std::time::Duration) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run /bin/sh: {e}"))?;
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    // Standard error is read beside standard output, so neither pipe can
    // fill and hold the command up; only its start is kept.
    let errors = std::thread::spawn(move || {
        let mut why = Vec::new();
        let _ = (&mut err).take(4096).read_to_end(&mut why);
        let _ = std::io::copy(&mut err, &mut std::io::sink());
        why
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut value = Vec::new();
        // Past the most a value may hold the pipe is closed: a command
        // printing on gets SIGPIPE rather than waiting out its time.
        let read = (&mut out).take(MAX_VALUE as u64 + 3).read_to_end(&mut value);
        drop(out);
        let _ = tx.send(read.map(|_| value));
    });
    let Ok(value) = rx.recv_timeout(timeout) else {
        let group = rustix::process::Pid::from_child(&child);
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        let _ = child.wait();
        return Err(format!("the command did not finish within {timeout:?} and was killed"));
    };
    let status = child.wait().map_err(|e| format!("cannot wait for the command: {e}"))?;
    // Cut off past the most a value holds: its pipe was closed, so how it
    // ended (SIGPIPE, say) says nothing of its own.
    if value.as_ref().is_ok_and(|v| v.len() > MAX_VALUE + 2) {
        return Err(format!("it is over {MAX_VALUE} bytes"));
    }
    let why = errors.join().unwrap_or_default();
    if !status.success() {
        let why = String::from_utf8_lossy(&why);
        let why = why.trim().lines().last().unwrap_or("");
        return Err(format!(
            "the command failed ({status}){}",
            if why.is_empty() { String::new() } else { format!(": {why}") }
        ));
    }
    let value = value.map_err(|e| format!("cannot read the command's output: {e}"))?;
    String::from_utf8(value).map_err(|_| "the command's output is not UTF-8 text".to_owned())
}

fn check_name(name: &str) -> Result<(), SecretError> {
    let mut bytes = name.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(())
    } else {
        Err(SecretError::Name(name.to_owned()))
    }
}

/// Whether a name entry of `policy` lets `name` through on some port.
fn listed(policy: &Policy, name: &str) -> bool {
    policy.entries().iter().any(|e| match e.port {
        Some(p) => e.allows_name(name, p),
        None => crate::policy::DEFAULT_PORTS.iter().any(|p| e.allows_name(name, *p)),
    })
}

/// A header template split: its name and the text with `{NAME}` holes.
pub fn split_header(text: &str) -> Option<(&str, &str)> {
    let (name, value) = text.split_once(':')?;
    let token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    token.then(|| (name, value.trim_start()))
}

/// The secret names a template's `{NAME}` holes give, in order.
pub fn template_names(template: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                names.push(&after[..close]);
                rest = &after[close + 1..];
            }
            None => break,
        }
    }
    names
}

/// Fills a template's holes from `value`.
pub fn fill_template(template: &str, value: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        out.push_str(&rest[..open]);
        match value(&after[..close]) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

impl SecretsSpec {
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.hosts.is_empty() && self.headers.is_empty()
    }

    /// Every rule a request's secrets keep, against the box's allowlist
    /// (`None`: the box has none). Each source is read once to see it
    /// gives a value; the value is dropped. Returns the spec with every
    /// host in its canonical spelling.
    pub fn checked(&self, policy: Option<&Policy>) -> Result<SecretsSpec, SecretError> {
        if self.is_empty() {
            return Ok(SecretsSpec::default());
        }
        let policy = policy.ok_or(SecretError::NoAllowlist)?;
        for (name, source) in &self.sources {
            check_name(name)?;
            SecretSource::parse(name, source)?.read(name, source)?;
        }
        let host_rule = |binding: &str, host: &str| -> Result<String, SecretError> {
            if host.parse::<std::net::IpAddr>().is_ok() || host.contains(['[', ']', '/', ':', '*']) {
                return Err(SecretError::HostName {
                    binding: binding.to_owned(),
                    host: host.to_owned(),
                    rule: "a secret is bound to one name, no address, port or wildcard (its TLS certificate is made for that name)".into(),
                });
            }
            let canonical = normalize_name(host).map_err(|rule| SecretError::HostName {
                binding: binding.to_owned(),
                host: host.to_owned(),
                rule,
            })?;
            if !listed(policy, &canonical) {
                return Err(SecretError::HostNotAllowed { binding: binding.to_owned(), host: host.to_owned() });
            }
            Ok(canonical)
        };
        let mut used: std::collections::BTreeSet<&str> = Default::default();
        let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, bound) in &self.hosts {
            for host in bound {
                let binding = format!("{name}={host}");
                if !self.sources.contains_key(name) {
                    return Err(SecretError::UnknownName { binding, name: name.clone() });
                }
                let canonical = host_rule(&binding, host)?;
                let list = hosts.entry(name.clone()).or_default();
                if !list.contains(&canonical) {
                    list.push(canonical);
                }
                used.insert(name);
            }
        }
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (host, templates) in &self.headers {
            for header in templates {
                let fail = |rule: String| SecretError::Header { host: host.clone(), header: header.clone(), rule };
                let canonical = host_rule(&format!("{host}={header}"), host)?;
                let Some((field, template)) = split_header(header) else {
                    return Err(fail("write it as 'Header-Name: text {NAME}'".into()));
                };
                let names = template_names(template);
                if names.is_empty() {
                    return Err(fail("it names no secret; put {NAME} where a secret's value goes".into()));
                }
                for n in names {
                    if !self.sources.contains_key(n) {
                        return Err(fail(format!("{{{n}}} names no secret a --secret defines")));
                    }
                    used.insert(self.sources.get_key_value(n).map(|(k, _)| k.as_str()).unwrap_or(n));
                }
                headers.entry(canonical).or_default().push(format!("{field}: {template}"));
            }
        }
        if let Some(name) = self.sources.keys().find(|n| !used.contains(n.as_str())) {
            return Err(SecretError::Unbound(name.clone()));
        }
        Ok(SecretsSpec { sources: self.sources.clone(), hosts, headers })
    }

    /// Every value, read now from its source (the host side only).
    pub fn values(&self) -> Result<BTreeMap<String, String>, SecretError> {
        self.sources
            .iter()
            .map(|(name, source)| Ok((name.clone(), SecretSource::parse(name, source)?.read(name, source)?)))
            .collect()
    }
}

/// What a box's proxy is told in its directory (no value ever: those come
/// on its standard input, see [`Values`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectRules {
    /// The box, for the audit lines.
    pub box_id: String,
    /// Each secret's placeholder and the hosts it is replaced for.
    pub secrets: Vec<SecretRule>,
    /// Whole headers, by host: `Header: text {NAME}`.
    #[serde(default)]
    pub headers: BTreeMap<String, Vec<String>>,
}

/// One secret, as its proxy knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretRule {
    pub name: String,
    /// What the box holds instead of the value.
    pub placeholder: String,
    pub hosts: Vec<String>,
}

/// The values, by secret name: written by core on the proxy's standard
/// input, one JSON object, and kept in the proxy's memory only.
pub type Values = BTreeMap<String, String>;

impl InjectRules {
    /// The rules for `spec`, each secret given a placeholder from `random`
    /// (hex digits, at least 32).
    pub fn new(box_id: &str, spec: &SecretsSpec, mut random: impl FnMut() -> String) -> InjectRules {
        let secrets = spec
            .sources
            .keys()
            .map(|name| SecretRule {
                name: name.clone(),
                placeholder: format!("tinybox-placeholder-{}", random()),
                hosts: spec.hosts.get(name).cloned().unwrap_or_default(),
            })
            .collect();
        InjectRules { box_id: box_id.to_owned(), secrets, headers: spec.headers.clone() }
    }

    /// Whether connections to `host` (canonical) are intercepted.
    pub fn intercepts(&self, host: &str) -> bool {
        self.headers.contains_key(host) || self.secrets.iter().any(|s| s.hosts.iter().any(|h| h == host))
    }

    /// The box's environment: each secret's name holding its placeholder.
    pub fn env(&self) -> Vec<(String, String)> {
        self.secrets.iter().map(|s| (s.name.clone(), s.placeholder.clone())).collect()
    }
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
