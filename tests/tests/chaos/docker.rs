//! Docker boxes interrupted: `tinybox` killed during create (also with
//! egress, whose fence makes two containers first), rm, a one-step run
//! (`tinybox run`, one `docker run --rm`), snapshot, fork, stop and resume, and the docker driver killed mid-call, on the
//! shared daemon in a namespace of the test's own (so the counts are its
//! containers and snapshot images alone).

use std::process::Command;
use std::time::Duration;

use tinybox_tests::Cli;
use tinybox_tests::docker::{self, Namespace};

use crate::{Operation, Prepare, World, interrupt, interrupt_driver, rng, run_ok, store};

/// A store whose boxes live in one docker namespace, on the shared daemon
/// or on a daemon of the suite's own (`docker_host`).
pub struct Docker {
    pub cli: Cli,
    pub ns: Namespace,
    pub docker_host: Option<String>,
}

impl Docker {
    pub fn new(test: &str) -> Docker {
        Docker { cli: store(), ns: Namespace::new(test), docker_host: None }
    }

    pub fn docker(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = Command::new("docker");
        c.args(args).stdin(std::process::Stdio::null());
        if let Some(h) = &self.docker_host {
            c.env("DOCKER_HOST", h);
        }
        let out = c.output().expect("run docker");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }

    fn label(&self) -> String {
        format!("label=tinybox.namespace={}", self.ns.name)
    }

    /// (name, state) of every container of the namespace.
    fn containers(&self) -> Vec<(String, String)> {
        let (code, out, err) =
            self.docker(&["ps", "-a", "--filter", &self.label(), "--format", "{{.Names}} {{.State}}"]);
        assert_eq!(code, 0, "docker ps: {err}");
        out.lines().filter_map(|l| l.split_once(' ')).map(|(n, s)| (n.to_owned(), s.to_owned())).collect()
    }

    /// Every image made from the namespace's containers (snapshots; a
    /// commit interrupted before its tag is one too).
    fn images(&self) -> usize {
        let (code, out, err) = self.docker(&["images", "-a", "-q", "--filter", &self.label()]);
        assert_eq!(code, 0, "docker images: {err}");
        let mut ids: Vec<&str> = out.split_whitespace().collect();
        ids.sort();
        ids.dedup();
        ids.len()
    }

    /// `create` arguments for a box of this namespace.
    pub fn create_args(&self, extra: &[&str]) -> Vec<String> {
        let mut v: Vec<String> =
            ["create", "--sandbox", "docker", "--namespace", &self.ns.name].map(String::from).into();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    }

    pub fn create(&self, extra: &[&str]) -> String {
        let args = self.create_args(extra);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ok(self, &argv)
    }
}

impl World for Docker {
    fn counts(&self) -> Vec<(&'static str, usize)> {
        vec![("containers", self.containers().len()), ("snapshot images", self.images())]
    }

    fn owners(&self) -> Vec<String> {
        let prefix = format!("tinybox-{}-", self.ns.name);
        self.containers().into_iter().filter_map(|(n, _)| n.strip_prefix(&prefix).map(str::to_owned)).collect()
    }

    fn reality(&self, id: &str) -> &'static str {
        match self.containers().into_iter().find(|(n, _)| *n == self.ns.container(id)) {
            None => "gone",
            Some((_, s)) if s == "running" => "ready",
            Some(_) => "stopped",
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.cli.cmd(args);
        if let Some(h) = &self.docker_host {
            c.env("DOCKER_HOST", h);
        }
        c
    }

    fn snapshots(&self) -> bool {
        true
    }
}

macro_rules! need_docker {
    ($test:expr) => {
        if let Some(why) = docker::unavailable() {
            tinybox_tests::skip($test, &why);
            return;
        }
    };
}

/// Each docker operation of the suite, with what it needs made first.
fn operation(name: &'static str) -> Operation<Docker> {
    let prepare: Prepare<Docker> = match name {
        "create" => Box::new(|d| d.create_args(&[])),
        // Egress: the fence's holder and fence container come first (ADR 0021).
        "create-egress" => Box::new(|d| d.create_args(&["--network", "egress"])),
        "rm" => Box::new(|d| vec!["rm".into(), d.create(&[])]),
        // One `docker run --rm` (sandbox.run_once, ADR 0023): the record is
        // `creating` while it runs.
        "run" => Box::new(|d| {
            ["run", "--sandbox", "docker", "--namespace", &d.ns.name, "--", "sleep", "0.2"].map(String::from).into()
        }),
        "snapshot" => Box::new(|d| vec!["snapshot".into(), d.create(&[])]),
        "fork" => Box::new(|d| vec!["fork".into(), d.create(&[])]),
        "stop" => Box::new(|d| vec!["stop".into(), d.create(&["--persistent"])]),
        "resume" => Box::new(|d| {
            let id = d.create(&["--persistent"]);
            run_ok(d, &["stop", &id]);
            vec!["resume".into(), id]
        }),
        other => unreachable!("no operation {other}"),
    };
    Operation { name, prepare }
}

/// Points per operation on docker: snapshot, fork, stop and resume happen
/// only here, so all 20 of theirs; create and rm share theirs with the
/// other sandboxes.
fn points(op: &str) -> usize {
    match op {
        "create" | "rm" | "run" => 12,
        "create-egress" => 12,
        _ => 20,
    }
}

fn cli_killed_during(op: &'static str) {
    let test = format!("chaos::chaos::docker::cli_killed_during_{op}");
    need_docker!(&test);
    let world = Docker::new(&format!("chaos-{op}"));
    let mut rng = rng(&test);
    interrupt(&world, &test, &operation(op), points(op), &mut rng);
}

#[test]
fn cli_killed_during_create() {
    cli_killed_during("create");
}

#[test]
fn cli_killed_during_an_egress_create() {
    cli_killed_during("create-egress");
}

#[test]
fn cli_killed_during_rm() {
    cli_killed_during("rm");
}

#[test]
fn cli_killed_during_a_one_step_run() {
    cli_killed_during("run");
}

#[test]
fn cli_killed_during_snapshot() {
    cli_killed_during("snapshot");
}

#[test]
fn cli_killed_during_fork() {
    cli_killed_during("fork");
}

#[test]
fn cli_killed_during_stop() {
    cli_killed_during("stop");
}

#[test]
fn cli_killed_during_resume() {
    cli_killed_during("resume");
}

#[test]
fn driver_killed_mid_call() {
    let test = "chaos::chaos::docker::driver_killed_mid_call";
    need_docker!(test);
    let world = Docker::new("chaos-driver");
    let mut rng = rng(test);
    // The driver starts some 100 ms in and answers within the operation's time.
    for (op, span) in [("create", 700), ("snapshot", 400), ("stop", 500), ("rm", 500)] {
        interrupt_driver(&world, test, "docker", &operation(op), 2, Duration::from_millis(span), &mut rng);
    }
    // The host driver beneath, which runs the docker driver's commands:
    // killed, it takes a `docker run` or `docker commit` with it mid-way.
    for (op, span) in [("create", 700), ("snapshot", 400)] {
        interrupt_driver(&world, test, "local", &operation(op), 2, Duration::from_millis(span), &mut rng);
    }
}
