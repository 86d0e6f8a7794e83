//! A recording fake host for a driver's unit tests (cargo feature `testing`).
//!
//! A driver whose logic takes `&dyn` [`Host`] runs it here against
//! [`FakeHost`] instead of core and a host driver. Each `host.run` is
//! answered from a script, chosen by the command's argv (exit status,
//! stdout, stderr), and recorded whole (argv, env, cwd, and the input the
//! command was given), so a test asserts exactly which commands a driver
//! sent and what it made of their answers.
//!
//! The fake stands where a host driver stands. When a run's `StdioRef`
//! names a socket that serves descriptors, as every
//! [`capture`](crate::capture::capture) does, it takes them, reads stdin to
//! its end and writes the scripted output: a helper's output reaches the
//! driver by the same path as on a real host. A run whose socket serves
//! nothing (a made-up `StdioRef` for a box's command) is recorded with no
//! input, and its scripted output goes nowhere.
//!
//! Test code only: drivers enable it under `[dev-dependencies]`
//! (`tinybox-sdk = { ..., features = ["testing"] }`), so a released driver
//! does not carry it.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::collections::BTreeMap;
//! use tinybox_sdk::capture::capture;
//! use tinybox_sdk::testing::{FakeHost, Reply};
//!
//! let host = FakeHost::new().on_prefix(&["docker", "version"], Reply::ok("27.5\n"));
//! let out = capture(&host, vec!["docker".into(), "version".into()], BTreeMap::new(), b"").await.unwrap();
//! assert_eq!(out.stdout_text(), "27.5");
//! assert_eq!(host.argvs(), [["docker", "version"]]);
//! # });
//! ```

use std::io::{Read, Write};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::model::ExitStatus;
use crate::protocol::{DriverError, RunParams};
use crate::serve::Host;
use crate::stdio::{self, StdioFds};

/// How a scripted command ends and what it prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The run's answer: the command's status, or `host.run` failing outright.
    outcome: Result<ExitStatus, DriverError>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Reply {
    /// Exits 0 after printing `stdout`.
    pub fn ok(stdout: impl Into<Vec<u8>>) -> Reply {
        Reply { outcome: Ok(ExitStatus::code(0)), stdout: stdout.into(), stderr: Vec::new() }
    }

    /// Exits with `code` after printing `stderr`.
    pub fn fail(code: i32, stderr: impl Into<Vec<u8>>) -> Reply {
        Reply { outcome: Ok(ExitStatus::code(code)), stdout: Vec::new(), stderr: stderr.into() }
    }

    /// Ends with `status` (a signal, say) and prints nothing.
    pub fn exit(status: ExitStatus) -> Reply {
        Reply { outcome: Ok(status), stdout: Vec::new(), stderr: Vec::new() }
    }

    /// `host.run` itself fails with `error`: no command ran, as when core
    /// or the host driver has gone away.
    pub fn error(error: DriverError) -> Reply {
        Reply { outcome: Err(error), stdout: Vec::new(), stderr: Vec::new() }
    }

    /// The same reply, printing `stdout` too.
    pub fn with_stdout(mut self, stdout: impl Into<Vec<u8>>) -> Reply {
        self.stdout = stdout.into();
        self
    }

    /// The same reply, printing `stderr` too.
    pub fn with_stderr(mut self, stderr: impl Into<Vec<u8>>) -> Reply {
        self.stderr = stderr.into();
        self
    }
}

/// One `host.run` the fake received.
#[derive(Debug, Clone)]
pub struct Call {
    /// The call as the driver sent it: exec id, argv, env, `clear_env`, cwd, stdio.
    pub params: RunParams,
    /// What the command found on stdin; `None` when its socket served no
    /// descriptors or the reply was [`Reply::error`].
    pub stdin: Option<Vec<u8>>,
}

impl Call {
    pub fn argv(&self) -> &[String] {
        &self.params.argv
    }
}

type Rule = Box<dyn Fn(&[String]) -> Option<Reply> + Send + Sync>;
type Fallback = Box<dyn Fn(&[String]) -> Reply + Send + Sync>;

/// A host that answers from a script and records every call, in the order
/// they arrived. Rules are tried in the order they were added and the first
/// that matches answers; a command no rule matches gets the fallback, which
/// is [`Reply::ok`] with no output unless [`otherwise`](Self::otherwise) or
/// [`replying`](Self::replying) says else.
pub struct FakeHost {
    rules: Vec<Rule>,
    fallback: Fallback,
    calls: Mutex<Vec<Call>>,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl std::fmt::Debug for FakeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHost").field("rules", &self.rules.len()).field("calls", &self.calls()).finish()
    }
}

impl FakeHost {
    /// Every command exits 0 and prints nothing.
    pub fn new() -> FakeHost {
        FakeHost { rules: Vec::new(), fallback: Box::new(|_| Reply::ok("")), calls: Mutex::new(Vec::new()) }
    }

    /// Every command is answered by `reply`, given its argv.
    pub fn replying(reply: impl Fn(&[String]) -> Reply + Send + Sync + 'static) -> FakeHost {
        FakeHost { fallback: Box::new(reply), ..FakeHost::new() }
    }

    /// Commands for which `matches` holds get `reply`.
    pub fn on(mut self, matches: impl Fn(&[String]) -> bool + Send + Sync + 'static, reply: Reply) -> FakeHost {
        self.rules.push(Box::new(move |argv| matches(argv).then(|| reply.clone())));
        self
    }

    /// Commands whose argv starts with `prefix` get `reply`.
    pub fn on_prefix(self, prefix: &[&str], reply: Reply) -> FakeHost {
        let prefix: Vec<String> = prefix.iter().map(|w| (*w).to_owned()).collect();
        self.on(move |argv| argv.starts_with(&prefix), reply)
    }

    /// Commands no rule matches get `reply`.
    pub fn otherwise(mut self, reply: Reply) -> FakeHost {
        self.fallback = Box::new(move |_| reply.clone());
        self
    }

    /// Every call received so far, in the order they arrived.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("recorded calls").clone()
    }

    /// The argv of every call received so far, in order.
    pub fn argvs(&self) -> Vec<Vec<String>> {
        self.calls.lock().expect("recorded calls").iter().map(|c| c.params.argv.clone()).collect()
    }

    fn reply_to(&self, argv: &[String]) -> Reply {
        self.rules.iter().find_map(|rule| rule(argv)).unwrap_or_else(|| (self.fallback)(argv))
    }
}

#[async_trait]
impl Host for FakeHost {
    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError> {
        let reply = self.reply_to(&params.argv);
        let stdio = params.stdio.clone();
        let index = {
            let mut calls = self.calls.lock().expect("recorded calls");
            calls.push(Call { params, stdin: None });
            calls.len() - 1
        };
        let status = reply.outcome?;
        // No descriptors served (a made-up socket): nothing to read or write.
        let Ok(fds) = stdio::receive(&stdio).await else {
            return Ok(status);
        };
        let (stdout, stderr) = (reply.stdout, reply.stderr);
        let stdin = tokio::task::spawn_blocking(move || play(fds, &stdout, &stderr))
            .await
            .map_err(|e| DriverError::failed(format!("the fake host's command failed: {e}")))?;
        self.calls.lock().expect("recorded calls")[index].stdin = Some(stdin);
        Ok(status)
    }
}

/// What a command would do with its streams: read its input to the end,
/// print its output, and close all three (dropping them) as it exits.
fn play(fds: StdioFds, stdout: &[u8], stderr: &[u8]) -> Vec<u8> {
    let mut input = Vec::new();
    // A closed or broken stream is the driver's side's business, as on a real host.
    let _ = std::fs::File::from(fds.stdin).read_to_end(&mut input);
    let _ = std::fs::File::from(fds.stdout).write_all(stdout);
    let _ = std::fs::File::from(fds.stderr).write_all(stderr);
    input
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::capture::capture;
    use crate::protocol::{ErrorCode, StdioRef};

    fn words(argv: &[&str]) -> Vec<String> {
        argv.iter().map(|w| (*w).to_owned()).collect()
    }

    #[tokio::test]
    async fn a_capture_gets_the_scripted_output_and_its_call_is_recorded_whole() {
        let host = FakeHost::new().on_prefix(&["cat"], Reply::fail(3, "oops\n").with_stdout("out"));
        let env: BTreeMap<String, String> = [("K".to_owned(), "v".to_owned())].into();
        let got = capture(&host, words(&["cat", "-"]), env.clone(), b"input bytes").await.unwrap();
        assert_eq!(got.status, ExitStatus::code(3));
        assert_eq!(got.stdout, b"out");
        assert_eq!(got.stderr, b"oops\n");
        let calls = host.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].argv(), ["cat", "-"]);
        assert_eq!(calls[0].params.env, env);
        assert_eq!(calls[0].params.cwd, None);
        assert_eq!(calls[0].stdin.as_deref(), Some(&b"input bytes"[..]), "the command read what the driver sent");
    }

    #[tokio::test]
    async fn the_first_matching_rule_answers_and_the_fallback_takes_the_rest() {
        let host = FakeHost::new()
            .on(|argv| argv.last().is_some_and(|w| w == "x"), Reply::ok("last is x"))
            .on_prefix(&["a"], Reply::ok("starts with a"))
            .otherwise(Reply::fail(127, "not found"));
        let run = |argv: &[&str]| capture(&host, words(argv), BTreeMap::new(), b"");
        assert_eq!(run(&["a", "x"]).await.unwrap().stdout_text(), "last is x");
        assert_eq!(run(&["a", "y"]).await.unwrap().stdout_text(), "starts with a");
        let other = run(&["b"]).await.unwrap();
        assert_eq!((other.status.code, other.stderr_text()), (Some(127), "not found".to_owned()));
        assert_eq!(host.argvs(), [words(&["a", "x"]), words(&["a", "y"]), words(&["b"])]);
    }

    #[tokio::test]
    async fn a_run_whose_socket_serves_nothing_is_recorded_without_input() {
        let host = FakeHost::replying(|argv| Reply::exit(ExitStatus { code: None, signal: Some(argv.len() as i32) }));
        let params = RunParams {
            exec_id: "x1-0".into(),
            argv: words(&["sleep", "9"]),
            env: BTreeMap::new(),
            clear_env: true,
            cwd: Some("/w".into()),
            stdio: StdioRef { socket: PathBuf::from("/nonexistent/tinybox-fake.sock") },
            tty: None,
            tty_session_inside: false,
        };
        let status = host.run(params).await.unwrap();
        assert_eq!(status.signal, Some(2), "the reply was chosen from the argv");
        let call = &host.calls()[0];
        assert_eq!(call.stdin, None);
        assert_eq!(call.params.exec_id, "x1-0");
        assert!(call.params.clear_env);
        assert_eq!(call.params.cwd.as_deref(), Some("/w"));
    }

    #[tokio::test]
    async fn a_failing_host_run_is_the_driver_s_error_and_still_recorded() {
        let host = FakeHost::new().otherwise(Reply::error(DriverError::unavailable("host.run: connection closed")));
        let err = capture(&host, words(&["true"]), BTreeMap::new(), b"").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert_eq!(err.message, "host.run: connection closed");
        assert_eq!(host.calls().len(), 1);
        assert_eq!(host.calls()[0].stdin, None);
    }
}
