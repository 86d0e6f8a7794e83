//! The CLI as a front end: each verb is one `tinybox` process over the
//! store; a command is cancelled as a user does, with Ctrl-C (SIGINT) to
//! the `tinybox exec` process.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use super::{Answer, Ask, Entry, FrontEnd, Ran, Refused};
use crate::{Cli, KillOnDrop};

/// `tinybox exec` exits with this when tinybox itself refused or failed,
/// not the command.
const TINYBOX_FAILED: i32 = 125;

pub struct CliFront {
    pub cli: Cli,
    sandbox: String,
}

impl CliFront {
    pub fn start(sandbox: &str) -> CliFront {
        CliFront { cli: Cli::new(), sandbox: sandbox.to_owned() }
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self
            .cli
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tinybox");
        let mut input = child.stdin.take().expect("stdin");
        let bytes = stdin.to_vec();
        // Written beside the reads, so a command that answers before it
        // has read everything cannot stall the pipe.
        let writer = std::thread::spawn(move || {
            let _ = input.write_all(&bytes);
        });
        let out = child.wait_with_output().expect("wait for tinybox");
        let _ = writer.join();
        out
    }

    /// The verb's stdout, or its stderr as the refusal.
    fn verb(&self, args: &[&str]) -> Answer<String> {
        let out = self.run(args, b"");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(Refused::Line(String::from_utf8_lossy(&out.stderr).into_owned()))
        }
    }

    fn scratch(&self, name: &str) -> std::path::PathBuf {
        let dir = self.cli.home.path().join("front-scratch");
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir.join(name)
    }
}

/// A `tinybox exec` still running.
pub struct CliRunning(KillOnDrop);

impl FrontEnd for CliFront {
    type Running = CliRunning;

    fn name(&self) -> &'static str {
        "cli"
    }

    fn store(&self) -> &Path {
        self.cli.home.path()
    }

    fn create(&mut self, ask: &Ask) -> Answer<String> {
        let pids = ask.pids.map(|p| p.to_string());
        let mut args = vec!["create", "--sandbox", &self.sandbox, "--ttl", "10m"];
        if let Some(image) = &ask.image {
            args.extend(["--image", image]);
        }
        if let Some(pids) = &pids {
            args.extend(["--pids", pids]);
        }
        if ask.untrusted {
            args.push("--untrusted");
        }
        self.verb(&args)
    }

    fn exec(&mut self, id: &str, argv: &[&str], stdin: &[u8]) -> Answer<Ran> {
        let mut args = vec!["exec", id, "--"];
        args.extend_from_slice(argv);
        let out = self.run(&args, stdin);
        let exit_code = out.status.code().unwrap_or(-1);
        if exit_code == TINYBOX_FAILED {
            return Err(Refused::Line(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        Ok(Ran { stdout: out.stdout, stderr: out.stderr, exit_code })
    }

    fn start(&mut self, id: &str, argv: &[&str]) -> Answer<CliRunning> {
        let mut args = vec!["exec", id, "--"];
        args.extend_from_slice(argv);
        let child = self.cli.cmd(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        Ok(CliRunning(KillOnDrop(child.expect("start tinybox exec"))))
    }

    fn cancel(&mut self, mut running: CliRunning) -> Answer<()> {
        let pid = rustix::process::Pid::from_raw(running.0.0.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT tinybox exec");
        let status = running.0.0.wait().expect("wait for tinybox exec");
        match status.code() {
            Some(130) => Ok(()),
            other => Err(Refused::Line(format!("tinybox exec ended with {other:?} on Ctrl-C, not 130"))),
        }
    }

    fn write_file(&mut self, id: &str, path: &str, bytes: &[u8]) -> Answer<()> {
        let local = self.scratch("to-box");
        std::fs::write(&local, bytes).expect("write the file to copy");
        self.verb(&["cp", local.to_str().expect("UTF-8 path"), &format!("{id}:{path}")]).map(drop)
    }

    fn read_file(&mut self, id: &str, path: &str) -> Answer<Vec<u8>> {
        let local = self.scratch("from-box");
        let _ = std::fs::remove_file(&local);
        self.verb(&["cp", &format!("{id}:{path}"), local.to_str().expect("UTF-8 path")])?;
        Ok(std::fs::read(&local).expect("the copied file"))
    }

    fn list_dir(&mut self, _id: &str, _path: &str) -> Answer<Vec<Entry>> {
        Err(Refused::Unoffered(
            "the CLI has no verb that lists a box's directory (`cp BOX:DIR -` copies it as a tar; `exec ls` runs a command)",
        ))
    }

    fn snapshot(&mut self, id: &str) -> Answer<String> {
        self.verb(&["snapshot", id])
    }

    fn remove(&mut self, id: &str) -> Answer<()> {
        self.verb(&["rm", id]).map(drop)
    }

    fn end_with_in_flight(&mut self, _running: &CliRunning) -> Answer<()> {
        Err(Refused::Unoffered(
            "the CLI is no server: a box outlives the tinybox process that made it, by design, until rm or its ttl",
        ))
    }
}
