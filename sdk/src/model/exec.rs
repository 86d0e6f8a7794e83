//! What to run in a box, and how it ended.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A command to run: an argument vector, never a command line, so no backend
/// has to quote and no caller can inject through a filename.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Run the command on a pseudo-terminal of this size, made for it where
    /// it runs: its stdin, stdout and stderr are that terminal, and it leads
    /// a new session whose controlling terminal it is. Absent: plain streams.
    /// Only a sandbox declaring `Feature::Terminal` is sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
}

/// A terminal's window size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

/// A request that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecRequestError {
    #[error("the argument vector is empty; name a program to run")]
    EmptyArgv,
    #[error("argument {index} contains a NUL byte, which no process argument can carry")]
    NulInArg { index: usize },
    #[error("environment variable name {name:?} is invalid; names are non-empty and contain neither '=' nor NUL")]
    BadEnvName { name: String },
    #[error("environment variable {name} contains a NUL byte")]
    NulInEnvValue { name: String },
    #[error("working directory {cwd:?} contains a NUL byte")]
    NulInCwd { cwd: String },
}

impl ExecRequest {
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest { argv: argv.into_iter().map(Into::into).collect(), env: BTreeMap::new(), cwd: None, tty: None }
    }

    pub fn validate(&self) -> Result<(), ExecRequestError> {
        if self.argv.is_empty() {
            return Err(ExecRequestError::EmptyArgv);
        }
        if let Some(index) = self.argv.iter().position(|a| a.contains('\0')) {
            return Err(ExecRequestError::NulInArg { index });
        }
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(ExecRequestError::BadEnvName { name: name.clone() });
            }
            if value.contains('\0') {
                return Err(ExecRequestError::NulInEnvValue { name: name.clone() });
            }
        }
        if let Some(cwd) = &self.cwd
            && cwd.contains('\0')
        {
            return Err(ExecRequestError::NulInCwd { cwd: cwd.clone() });
        }
        Ok(())
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    /// The exit code, when the command exited.
    #[serde(default)]
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(default)]
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn code(code: i32) -> Self {
        ExitStatus { code: Some(code), signal: None }
    }

    /// The conventional shell exit code: the code, or 128 + signal.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 255,
        }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(s: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus { code: s.code(), signal: s.signal() }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => f.write_str("unknown exit"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_problem() {
        assert_eq!(ExecRequest::new(Vec::<String>::new()).validate(), Err(ExecRequestError::EmptyArgv));
        assert_eq!(ExecRequest::new(["a", "b\0"]).validate(), Err(ExecRequestError::NulInArg { index: 1 }));
        let mut r = ExecRequest::new(["true"]);
        r.env.insert("A=B".into(), "x".into());
        assert!(matches!(r.validate(), Err(ExecRequestError::BadEnvName { .. })));
        assert!(ExecRequest::new(["echo", "a b", ";", "$(x)", "\n"]).validate().is_ok());
    }

    #[test]
    fn a_terminal_is_asked_for_only_when_wanted() {
        let plain = ExecRequest::new(["sh"]);
        assert!(serde_json::to_value(&plain).unwrap().get("tty").is_none());
        let old: ExecRequest = serde_json::from_str(r#"{"argv":["sh"]}"#).unwrap();
        assert_eq!(old.tty, None, "an older core asks for none");
        let mut r = plain;
        r.tty = Some(TtySize { rows: 40, cols: 120 });
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["tty"], serde_json::json!({"rows": 40, "cols": 120}));
        assert_eq!(serde_json::from_value::<ExecRequest>(json).unwrap(), r);
    }

    #[test]
    fn shell_code_follows_convention() {
        assert_eq!(ExitStatus::code(3).shell_code(), 3);
        assert_eq!(ExitStatus { code: None, signal: Some(9) }.shell_code(), 137);
    }
}
