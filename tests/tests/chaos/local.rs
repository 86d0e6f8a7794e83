//! Namespace and microvm boxes interrupted: `tinybox` killed during create
//! and rm, and the sandbox's driver killed mid-call. A namespace box is a
//! workspace directory in the store's state directory and a cgroup per
//! controller (bwrap runs only while a command does); a microvm box is a
//! VM directory and a QEMU (with passt) under emulation, whose boots take
//! seconds, so its share of the points is small.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tinybox_tests::Cli;
use tinybox_tests::chaos::processes_named;
use tinybox_tests::microvm::TCG;

use crate::{Operation, Prepare, World, interrupt, interrupt_driver, rng, run_ok, store};

/// The entries of `dir` (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

pub struct Namespace {
    pub cli: Cli,
    pub ns: String,
}

impl Namespace {
    pub fn new(test: &str) -> Namespace {
        Namespace { cli: store(), ns: format!("c{}-{test}", std::process::id()) }
    }

    fn store(&self) -> &Path {
        self.cli.home.path()
    }

    fn workspaces(&self) -> PathBuf {
        self.store().join("drivers/namespace/workspaces")
    }

    /// The names of the cgroups made for this namespace's boxes (one per
    /// controller under cgroup v1).
    fn cgroups(&self) -> Vec<String> {
        let out = Command::new("find")
            .args(["-H", "/sys/fs/cgroup", "-mindepth", "1", "-type", "d", "-name"])
            .arg(format!("tinybox.*.{}.*", self.ns))
            .stderr(std::process::Stdio::null())
            .output()
            .expect("run find");
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.rsplit('/').next().map(str::to_owned)).collect()
    }

    fn create_args(&self) -> Vec<String> {
        ["create", "--sandbox", "namespace", "--namespace", &self.ns].map(String::from).into()
    }

    fn create(&self) -> String {
        let args = self.create_args();
        run_ok(self, &args.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

impl World for Namespace {
    fn counts(&self) -> Vec<(&'static str, usize)> {
        let store = self.store().to_string_lossy().into_owned();
        vec![
            ("workspaces", entries(&self.workspaces()).len()),
            ("bwrap processes", processes_named("bwrap", &store)),
            ("cgroups", self.cgroups().len()),
        ]
    }

    fn owners(&self) -> Vec<String> {
        let prefix = format!("{}-", self.ns);
        let tag = format!(".{}.", self.ns);
        let mut ids: Vec<String> =
            entries(&self.workspaces()).iter().filter_map(|n| n.strip_prefix(&prefix).map(str::to_owned)).collect();
        ids.extend(self.cgroups().iter().filter_map(|n| n.split_once(&tag).map(|(_, id)| id.to_owned())));
        ids
    }

    fn reality(&self, id: &str) -> &'static str {
        if self.workspaces().join(format!("{}-{id}", self.ns)).is_dir() { "ready" } else { "gone" }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        self.cli.cmd(args)
    }

    fn snapshots(&self) -> bool {
        false
    }
}

fn namespace_op(name: &'static str) -> Operation<Namespace> {
    let prepare: Prepare<Namespace> = match name {
        "create" => Box::new(|w| w.create_args()),
        "rm" => Box::new(|w| vec!["rm".into(), w.create()]),
        other => unreachable!("no operation {other}"),
    };
    Operation { name, prepare }
}

macro_rules! need_bwrap {
    ($test:expr) => {
        if !tinybox_tests::have("bwrap") {
            tinybox_tests::skip($test, "no bwrap on PATH (apt-get install bubblewrap)");
            return;
        }
    };
}

#[test]
fn namespace_cli_killed_during_create_and_rm() {
    let test = "chaos::chaos::local::namespace_cli_killed_during_create_and_rm";
    need_bwrap!(test);
    let world = Namespace::new("cli");
    let mut rng = rng(test);
    interrupt(&world, test, &namespace_op("create"), 6, &mut rng);
    interrupt(&world, test, &namespace_op("rm"), 6, &mut rng);
}

#[test]
fn namespace_driver_killed_mid_call() {
    let test = "chaos::chaos::local::namespace_driver_killed_mid_call";
    need_bwrap!(test);
    let world = Namespace::new("drv");
    let mut rng = rng(test);
    interrupt_driver(&world, test, "namespace", &namespace_op("create"), 2, Duration::from_millis(300), &mut rng);
    interrupt_driver(&world, test, "namespace", &namespace_op("rm"), 1, Duration::from_millis(300), &mut rng);
}

pub struct Microvm {
    cli: Cli,
}

impl Microvm {
    fn vms(&self) -> PathBuf {
        self.cli.home.path().join("drivers/microvm/vms")
    }

    fn create_args(&self) -> Vec<String> {
        let mut v = vec!["create".to_owned()];
        v.extend(TCG.iter().map(|s| s.to_string()));
        v
    }

    fn create(&self) -> String {
        let args = self.create_args();
        run_ok(self, &args.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

impl World for Microvm {
    fn counts(&self) -> Vec<(&'static str, usize)> {
        let store = self.cli.home.path().to_string_lossy().into_owned();
        vec![
            ("vm dirs", entries(&self.vms()).len()),
            ("qemu processes", processes_named("qemu-system", &store)),
            ("passt processes", processes_named("passt", &store)),
        ]
    }

    fn owners(&self) -> Vec<String> {
        entries(&self.vms())
    }

    fn reality(&self, id: &str) -> &'static str {
        let dir = format!("{}/", self.vms().join(id).display());
        if processes_named("qemu-system", &dir) > 0 { "ready" } else { "gone" }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        self.cli.cmd(args)
    }

    fn snapshots(&self) -> bool {
        false
    }
}

fn microvm_op(name: &'static str) -> Operation<Microvm> {
    let prepare: Prepare<Microvm> = match name {
        "create" => Box::new(|w| w.create_args()),
        "rm" => Box::new(|w| vec!["rm".into(), w.create()]),
        other => unreachable!("no operation {other}"),
    };
    Operation { name, prepare }
}

#[test]
fn microvm_cli_and_driver_killed() {
    let test = "chaos::chaos::local::microvm_cli_and_driver_killed";
    tinybox_tests::need_microvm!(test);
    let world = Microvm { cli: store() };
    let mut rng = rng(test);
    interrupt(&world, test, &microvm_op("create"), 2, &mut rng);
    interrupt(&world, test, &microvm_op("rm"), 2, &mut rng);
    interrupt_driver(&world, test, "microvm", &microvm_op("create"), 1, Duration::from_secs(3), &mut rng);
}
