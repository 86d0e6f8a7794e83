//! `tinybox-driver-ssh`: a host reached with the system `ssh`.
//!
//! It runs nothing itself. Every command becomes `ssh ... -- DEST 'STRING'`
//! run on this host's *inner* host through core's reverse `host.run` — the
//! local machine normally, another ssh host for a jump box — with the
//! caller's own descriptors, so a command's bytes never pass through here.
//! Using the system `ssh` inherits the user's configuration, keys, agent,
//! jump hosts and connection multiplexing.
//!
//! The command string is made by `quote.rs`, the one place a bug is an
//! injection. Before the first quoted command on a connection, the remote
//! login shell is probed; shells that do not parse POSIX quoting are refused.
//!
//! ssh exits 255 when it fails and otherwise with the remote status, so a
//! 255 is ambiguous: it is settled by a second, captured `ssh ... exec true`.
//! If that cannot connect either, the run is a connection error quoting
//! ssh's stderr; if it can, the remote command really ended with 255
//! (docs/adr/0011-ssh-host.md).

mod config;
mod quote;

use std::collections::BTreeMap;

use async_trait::async_trait;
use tinybox_sdk::capture::{Captured, capture};
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::{DriverError, Health, RunParams};
use tinybox_sdk::{DriverInfo, Host, HostDriver, HostHandle};

use config::SshConfig;
use quote::ShellVerdict;

struct SshHost {
    /// The remote login shell's verdict, once probed (one driver process serves one host).
    shell: tokio::sync::Mutex<Option<ShellVerdict>>,
    /// Runs core asked to cancel: ssh catches the SIGTERM core's inner host
    /// sends it and exits 255, which then means "cancelled", not "failed".
    cancelled: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Whether the shared-connection directory exists on the inner host.
    control_dir: tokio::sync::OnceCell<bool>,
}

/// The status a cancelled run reports: ended by the SIGTERM that cancelled it.
const CANCELLED: ExitStatus = ExitStatus { code: None, signal: Some(15) };

/// ssh's own failure status.
const SSH_FAILED: i32 = 255;

impl SshHost {
    fn new() -> SshHost {
        SshHost { shell: tokio::sync::Mutex::new(None), cancelled: Default::default(), control_dir: Default::default() }
    }

    /// Runs `remote` (a plain command line) over ssh with pipes, on the inner host.
    async fn capture(&self, inner: &dyn Host, cfg: &SshConfig, remote: &str) -> Result<Captured, DriverError> {
        let multiplex = self.multiplex(inner, cfg).await;
        capture(inner, cfg.argv_with(remote, multiplex, false), BTreeMap::new(), b"").await
    }

    /// Whether connections are shared: asked for, and the socket directory
    /// exists (made once per driver process, 0700, on the inner host). If it
    /// cannot be made, commands still run, each on its own connection.
    async fn multiplex(&self, inner: &dyn Host, cfg: &SshConfig) -> bool {
        if !cfg.multiplex {
            return false;
        }
        *self
            .control_dir
            .get_or_init(|| async {
                let mkdir = format!("umask 077 && mkdir -p \"$HOME/{}\"", config::CONTROL_DIR);
                let argv = vec!["sh".to_owned(), "-c".to_owned(), mkdir];
                capture(inner, argv, BTreeMap::new(), b"").await.is_ok_and(|c| c.success())
            })
            .await
    }

    fn unreachable(cfg: &SshConfig, out: &Captured) -> DriverError {
        let why = out.stderr_text();
        let why = if why.is_empty() { "ssh exited 255 and said nothing".to_owned() } else { why };
        DriverError::unavailable(format!("cannot reach ssh host {}: {why}", cfg.label()))
    }

    /// Makes sure the remote login shell parses POSIX quoting, probing it once.
    async fn ensure_posix(&self, inner: &dyn Host, cfg: &SshConfig) -> Result<(), DriverError> {
        let mut shell = self.shell.lock().await;
        if shell.is_none() {
            let out = self.capture(inner, cfg, quote::PROBE).await?;
            if out.status.code == Some(SSH_FAILED) {
                // Not cached: the next run tries again.
                return Err(Self::unreachable(cfg, &out));
            }
            if !out.success() {
                return Err(DriverError::unavailable(format!(
                    "ssh host {}: the login shell could not run tinybox's probe ({}): {}",
                    cfg.label(),
                    out.status,
                    out.stderr_text()
                )));
            }
            *shell = Some(quote::classify_probe(&out.stdout));
        }
        match shell.as_ref().expect("probed") {
            ShellVerdict::Posix(_) => Ok(()),
            ShellVerdict::Refused(why) => Err(DriverError::unsupported(format!("ssh host {}: {why}", cfg.label()))),
        }
    }

    /// Writes a command's environment file on the remote side (its bytes on
    /// ssh's stdin, [`quote::UPLOAD_ENV`]) and returns the file's path.
    async fn upload_env(
        &self,
        inner: &dyn Host,
        cfg: &SshConfig,
        multiplex: bool,
        script: &[u8],
    ) -> Result<String, DriverError> {
        let out = capture(inner, cfg.argv_with(quote::UPLOAD_ENV, multiplex, false), BTreeMap::new(), script).await?;
        if out.status.code == Some(SSH_FAILED) {
            return Err(Self::unreachable(cfg, &out));
        }
        let path = out.stdout_text().trim_end_matches('\n').to_owned();
        if !out.success() || path.is_empty() || path.contains('\n') {
            return Err(DriverError::failed(format!(
                "ssh host {}: cannot write the command's environment to a file of the remote user's ({}): {}; the remote side needs mktemp and a writable $TMPDIR or /tmp",
                cfg.label(),
                out.status,
                out.stderr_text().trim()
            )));
        }
        Ok(path)
    }

    fn was_cancelled(&self, exec_id: &str) -> bool {
        self.cancelled.lock().expect("cancelled runs").contains(exec_id)
    }

    /// A 255 from ssh: a connection failure, or the remote command's own status?
    async fn settle_255(&self, inner: &dyn Host, cfg: &SshConfig) -> Result<ExitStatus, DriverError> {
        let out = self.capture(inner, cfg, "exec true").await?;
        if out.status.code == Some(SSH_FAILED) {
            return Err(Self::unreachable(cfg, &out));
        }
        Ok(ExitStatus::code(SSH_FAILED))
    }

    /// `run`, with the handshake's configuration given apart from the inner
    /// host, so the logic runs against any `Host` (the sdk's fake in tests).
    async fn run_configured(
        &self,
        inner: &dyn Host,
        config: &serde_json::Value,
        p: RunParams,
    ) -> Result<ExitStatus, DriverError> {
        let cfg = SshConfig::from_json(config)?;
        if p.tty.is_some() && p.tty_session_inside {
            return Err(DriverError::unsupported(format!(
                "ssh host {}: sshd makes the remote terminal's session, so a command cannot take that terminal in a session of its own; run it without a terminal",
                cfg.label()
            )));
        }
        let invalid = |e: quote::QuoteError| DriverError::invalid(e.to_string());
        let multiplex = self.multiplex(inner, &cfg).await;
        let remote = if p.env.is_empty() {
            let (remote, plain) = quote::command_line_str(&p.argv, p.cwd.as_deref(), p.clear_env).map_err(invalid)?;
            if !plain {
                self.ensure_posix(inner, &cfg).await?;
            }
            remote
        } else {
            // The values never go in a command line (this machine's `ssh`
            // and the remote shell show theirs to every user): first into a
            // file of the remote user's own, on ssh's stdin over the shared
            // connection; the command names only the file (ADR 0027).
            let script = quote::env_script_str(&p.env).map_err(invalid)?;
            // Checked before anything is sent.
            quote::sourced_command_line_str(&p.argv, p.cwd.as_deref(), "/checked", p.clear_env).map_err(invalid)?;
            self.ensure_posix(inner, &cfg).await?;
            let file = self.upload_env(inner, &cfg, multiplex, &script).await?;
            quote::sourced_command_line_str(&p.argv, p.cwd.as_deref(), &file, p.clear_env).map_err(invalid)?
        };
        // ssh itself runs with the inner host's own environment.
        let p_exec_id = p.exec_id.clone();
        let status = inner
            .run(RunParams {
                exec_id: p.exec_id,
                argv: cfg.argv_with(&remote, multiplex, p.tty.is_some()),
                env: BTreeMap::new(),
                clear_env: false,
                cwd: None,
                stdio: p.stdio,
                // The terminal ssh mirrors is made by the inner host.
                tty: p.tty,
                tty_session_inside: false,
            })
            .await?;
        let status = if status.code == Some(SSH_FAILED) && !self.was_cancelled(&p_exec_id) {
            // Core cancels the inner run before telling this driver, so a
            // cancellation may still arrive while the 255 is settled.
            let settled = self.settle_255(inner, &cfg).await;
            if self.was_cancelled(&p_exec_id) { Ok(CANCELLED) } else { settled }
        } else if status.code == Some(SSH_FAILED) {
            Ok(CANCELLED)
        } else {
            Ok(status)
        };
        self.cancelled.lock().expect("cancelled runs").remove(&p_exec_id);
        status
    }
}

#[async_trait]
impl HostDriver for SshHost {
    fn info(&self) -> DriverInfo {
        // The inner host (where ssh runs) cannot be reached during the
        // handshake, so health says only what this driver is.
        DriverInfo {
            name: "ssh".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            health: Health::ok_with("runs the system ssh on its inner host; POSIX login shells only"),
        }
    }

    async fn run(&self, inner: &HostHandle, p: RunParams) -> Result<ExitStatus, DriverError> {
        self.run_configured(inner, inner.config(), p).await
    }

    async fn cancel(&self, exec_id: &str) -> Result<(), DriverError> {
        // Core has already cancelled the `ssh` it forwarded to the inner host;
        // remember it, so the 255 ssh exits with reads as the cancellation.
        self.cancelled.lock().expect("cancelled runs").insert(exec_id.to_owned());
        Ok(())
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("tinybox-driver-ssh {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    tinybox_sdk::run_host_main(SshHost::new())
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
