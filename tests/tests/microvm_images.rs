//! MicroVM boxes booted from OCI images, live (ADR 0036): an image with a
//! real python3 (the host's, with the C library and modules it needs, so
//! nothing of it can come from the initramfs's busybox) is pushed to a
//! real registry on loopback, pulled into the store, and booted under
//! emulation. Every check runs inside the guest and is checked from outside.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tinybox_tests::microvm::{TCG, processes_under};
use tinybox_tests::registry::{self, Registry};
use tinybox_tests::{Cli, need_microvm, skip};

const PYTHON: &str = "/usr/bin/python3.11";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Why this suite cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if let Some(why) = registry::unavailable() {
        return Some(why);
    }
    if !Path::new(PYTHON).is_file() {
        return Some(format!("{PYTHON} is not installed (the test image copies it)"));
    }
    for tool in ["mkfs.ext4", "qemu-img"] {
        if !tinybox_tests::have(tool) {
            return Some(format!("{tool} is not installed (contrib/setup/install-deps installs it)"));
        }
    }
    None
}

/// The libraries `program` loads, from ldd.
fn libraries(program: &str) -> Vec<PathBuf> {
    let out = std::process::Command::new("ldd").arg(program).output().expect("ldd");
    text(&out.stdout).split_whitespace().filter(|w| w.starts_with('/')).map(PathBuf::from).collect()
}

/// A root filesystem with busybox (a shell), python3 with its libraries
/// and its standard library: a small Python image, as a tar layer.
fn python_layer() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    let dir = |tar: &mut tar::Builder<Vec<u8>>, name: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(if name == "tmp" { 0o1777 } else { 0o755 });
        h.set_size(0);
        tar.append_data(&mut h, name, std::io::empty()).unwrap();
    };
    let link = |tar: &mut tar::Builder<Vec<u8>>, name: &str, target: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        tar.append_link(&mut h, name, target).unwrap();
    };
    for d in ["bin", "etc", "tmp", "root", "usr", "usr/bin", "usr/lib", "lib", "lib64", "lib/x86_64-linux-gnu"] {
        dir(&mut tar, d);
    }
    tar.append_path_with_name("/bin/busybox", "bin/busybox").unwrap();
    for applet in ["sh", "cat", "echo", "env", "ls", "sleep", "test", "mkdir"] {
        link(&mut tar, &format!("bin/{applet}"), "busybox");
    }
    tar.append_path_with_name(PYTHON, "usr/bin/python3.11").unwrap();
    link(&mut tar, "bin/python3", "../usr/bin/python3.11");
    for lib in libraries(PYTHON) {
        let real = std::fs::canonicalize(&lib).unwrap();
        let name = lib.to_str().unwrap().trim_start_matches('/').replace("usr/lib/", "lib/");
        tar.append_path_with_name(&real, name).unwrap();
    }
    let stdlib = Path::new("/usr/lib/python3.11");
    for entry in std::fs::read_dir(stdlib).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // The test suites and GUI libraries are most of its size and no part of running it.
        if ["test", "idlelib", "tkinter", "ensurepip", "lib2to3", "__pycache__"].contains(&name.as_str()) {
            continue;
        }
        let inside = format!("usr/lib/python3.11/{name}");
        if entry.file_type().unwrap().is_dir() {
            tar.append_dir_all(&inside, entry.path()).unwrap();
        } else if entry.file_type().unwrap().is_file() {
            tar.append_path_with_name(entry.path(), &inside).unwrap();
        }
    }
    let mut h = tar::Header::new_gnu();
    let passwd = b"root:x:0:0:root:/root:/bin/sh\n";
    h.set_mode(0o644);
    h.set_size(passwd.len() as u64);
    tar.append_data(&mut h, "etc/passwd", &passwd[..]).unwrap();
    tar.into_inner().unwrap()
}

/// `tinybox` in `cli` with the registry's plain-http loopback allowed.
fn run(cli: &Cli, args: &[&str]) -> std::process::Output {
    let docker_config = cli.home.path().join("docker-config");
    std::fs::create_dir_all(&docker_config).unwrap();
    cli.cmd(args).env("DOCKER_CONFIG", &docker_config).stdin(Stdio::null()).output().expect("run tinybox")
}

fn ok(cli: &Cli, args: &[&str]) -> String {
    let out = run(cli, args);
    assert!(out.status.success(), "tinybox {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

fn exec_ok(cli: &Cli, id: &str, argv: &[&str]) -> String {
    let mut args = vec!["exec", id, "--"];
    args.extend_from_slice(argv);
    ok(cli, &args)
}

/// Kills what a failed test left running in its store.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for (pid, _) in processes_under(&self.0) {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid).expect("a pid"),
                rustix::process::Signal::KILL,
            );
        }
    }
}

#[test]
fn an_image_box_runs_the_image_s_python_and_keeps_what_it_writes_across_stop_and_resume() {
    const TEST: &str =
        "microvm_images::an_image_box_runs_the_image_s_python_and_keeps_what_it_writes_across_stop_and_resume";
    need_microvm!(TEST);
    if let Some(why) = unavailable() {
        return skip(TEST, &why);
    }
    let reg = Registry::plain();
    let (_, image_id) = reg.push("mvm/python:1", &[python_layer()], "linux", "amd64");
    let reference = reg.reference("mvm/python:1");
    let cli = Cli::new();
    let _reaper = Reaper(cli.home.path().to_owned());
    ok(&cli, &["image", "pull", &reference]);

    let mut args = vec!["create", "--image", &reference, "--persistent"];
    args.extend_from_slice(TCG);
    let id = ok(&cli, &args).trim().to_owned();
    let inspect: serde_json::Value = serde_json::from_str(&ok(&cli, &["--json", "inspect", &id])).unwrap();
    let dir = PathBuf::from(inspect["workspace"]["handle"]["dir"].as_str().expect("the VM's directory"));
    let overlay = dir.join("disk.qcow2");
    assert!(overlay.is_file(), "the box's own overlay: {}", dir.display());
    let base = cli.home.path().join("images/disks/sha256").join(image_id.trim_start_matches("sha256:"));
    assert!(base.is_file(), "the image's base disk, built once: {}", base.display());

    // The image's python3 (a glibc program: the initramfs has no C library),
    // as the image's User, in its WorkingDir, with its Env.
    let py =
        "import os, sys; print(sys.version_info[0], os.getcwd(), os.environ.get('GREETING'), os.getuid(), os.getgid())";
    assert_eq!(
        exec_ok(&cli, &id, &["python3", "-c", py]).trim(),
        "3 /srv hello 1000 1000",
        "python, WorkingDir, Env, User"
    );
    // As that user, the guest's root-owned files are out of reach.
    let denied = run(&cli, &["exec", &id, "--", "sh", "-c", "echo x > /etc/passwd"]);
    assert!(!denied.status.success(), "the image's User 1000 wrote root's /etc/passwd");
    // A file written by one exec is there in the next.
    exec_ok(&cli, &id, &["python3", "-c", "open('/tmp/note', 'w').write('kept')"]);
    assert_eq!(exec_ok(&cli, &id, &["cat", "/tmp/note"]), "kept");
    // The root is the image's disk, not the initramfs.
    let mounts = exec_ok(&cli, &id, &["cat", "/proc/mounts"]);
    assert!(mounts.lines().any(|l| l.starts_with("/dev/vda / ext4 rw")), "{mounts}");

    // Stop ends the VM; resume boots a new one on what the box wrote.
    ok(&cli, &["stop", &id]);
    assert_eq!(processes_under(&dir), vec![], "stop left the VM running");
    ok(&cli, &["resume", &id]);
    assert_eq!(exec_ok(&cli, &id, &["cat", "/tmp/note"]), "kept", "the write survived stop and resume");
    assert_eq!(exec_ok(&cli, &id, &["python3", "-c", "print(1 + 1)"]).trim(), "2");

    // The image is in use while the box exists; rm leaves no overlay, no VM, no snapshot.
    let out = run(&cli, &["image", "rm", &reference]);
    assert!(!out.status.success(), "an image in use was removed");
    let inspect: serde_json::Value = serde_json::from_str(&ok(&cli, &["--json", "inspect", &id])).unwrap();
    let dir = PathBuf::from(inspect["workspace"]["handle"]["dir"].as_str().unwrap());
    ok(&cli, &["rm", &id]);
    assert!(!dir.exists(), "rm left {}", dir.display());
    assert_eq!(processes_under(cli.home.path()), vec![], "rm left processes");
    // The snapshot stop took outlives the box, as every sandbox's does, until prune.
    let snapshots = cli.home.path().join("drivers/microvm/snapshots");
    let listed = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
    };
    let kept = listed(&snapshots);
    assert_eq!(kept.len(), 1, "stop's snapshot: {kept:?}");
    assert!(kept[0].join("disk.qcow2").is_file(), "the snapshot holds the box's disk: {}", kept[0].display());
    ok(&cli, &["prune"]);
    assert_eq!(listed(&snapshots), Vec::<PathBuf>::new(), "prune left the snapshot");
    // With the box gone the image goes, its base disk with it.
    ok(&cli, &["image", "rm", &reference]);
    assert!(!base.exists(), "image rm left the base disk {}", base.display());
}

#[test]
fn an_image_not_in_the_store_is_one_line_and_makes_nothing() {
    const TEST: &str = "microvm_images::an_image_not_in_the_store_is_one_line_and_makes_nothing";
    need_microvm!(TEST);
    let cli = Cli::new();
    let before = cli.store_bytes();
    // Not in the store, so pulled first: from a port where nothing listens.
    let mut args = vec!["create", "--image", "127.0.0.1:9/nowhere/nothing:1"];
    args.extend_from_slice(TCG);
    let out = run(&cli, &args);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "created from an image the store does not hold");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    assert!(err.contains("cannot reach registry 127.0.0.1:9"), "{err}");
    assert_eq!(cli.store_bytes(), before, "the refusal changed the store");
    let vms = cli.home.path().join("drivers/microvm/vms");
    let left: Vec<_> = std::fs::read_dir(&vms).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert_eq!(left, Vec::<PathBuf>::new(), "a VM directory was made");
    assert_eq!(processes_under(cli.home.path()), vec![]);
}

/// busybox alone, as a tar layer: enough for a shell and `sleep`.
fn busybox_layer() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for d in ["bin", "tmp", "root"] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        tar.append_data(&mut h, d, std::io::empty()).unwrap();
    }
    tar.append_path_with_name("/bin/busybox", "bin/busybox").unwrap();
    for applet in ["sh", "cat", "echo", "sleep", "grep", "date", "setsid", "nc", "timeout"] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        tar.append_link(&mut h, format!("bin/{applet}"), "busybox").unwrap();
    }
    tar.into_inner().unwrap()
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn a_running_process_survives_stop_and_resume_through_the_memory_snapshot_and_the_clock_is_set() {
    const TEST: &str =
        "microvm_images::a_running_process_survives_stop_and_resume_through_the_memory_snapshot_and_the_clock_is_set";
    need_microvm!(TEST);
    if let Some(why) = unavailable() {
        return skip(TEST, &why);
    }
    let reg = Registry::plain();
    reg.push_with_config(
        "mvm/busybox:1",
        &[busybox_layer()],
        "linux",
        "amd64",
        serde_json::json!({"Env": ["PATH=/bin"]}),
    );
    let reference = reg.reference("mvm/busybox:1");
    let cli = Cli::new();
    let _reaper = Reaper(cli.home.path().to_owned());
    ok(&cli, &["image", "pull", &reference]);
    let mut args = vec!["create", "--image", &reference, "--persistent"];
    args.extend_from_slice(TCG);
    let id = ok(&cli, &args).trim().to_owned();

    // A process that outlives its exec (out of the command's cgroup and
    // process group, which the agent kills when the command ends), holding
    // a value of its own.
    let marker = format!("{}", 1_000_000 + u64::from(std::process::id()));
    let start = format!(
        "setsid sh -c 'echo $$ > /sys/fs/cgroup/cgroup.procs; exec sleep {marker}' </dev/null >/dev/null 2>&1 & \
         pid=$!; while ! grep -qx 0::/ /proc/$pid/cgroup; do :; done; echo $pid"
    );
    let pid = exec_ok(&cli, &id, &["sh", "-c", &start]).trim().to_owned();
    let cmdline = |cli: &Cli| exec_ok(cli, &id, &["cat", &format!("/proc/{pid}/cmdline")]);
    assert_eq!(cmdline(&cli), format!("sleep\0{marker}\0"), "the process runs before the stop");

    ok(&cli, &["stop", &id]);
    let snapshots = cli.home.path().join("drivers/microvm/snapshots");
    let taken: Vec<PathBuf> = std::fs::read_dir(&snapshots).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert!(taken[0].join("memory").is_file(), "the snapshot holds the guest's memory: {}", taken[0].display());
    let before_resume = now();
    ok(&cli, &["resume", &id]);
    assert!(ok(&cli, &["inspect", &id]).contains("carried on from a memory snapshot"), "inspect says how it came back");
    // The same process, with its value: only a restored memory has it (a cold boot of the disk has no such pid).
    assert_eq!(cmdline(&cli), format!("sleep\0{marker}\0"), "the process did not survive stop and resume");
    // The guest's clock is the host's, not the snapshot's.
    let guest_now: u64 = exec_ok(&cli, &id, &["date", "+%s"]).trim().parse().unwrap();
    assert!(guest_now >= before_resume, "the guest's clock {guest_now} is behind the host's {before_resume} at resume");

    ok(&cli, &["rm", &id]);
    ok(&cli, &["prune"]);
    let left: Vec<PathBuf> =
        std::fs::read_dir(&snapshots).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert_eq!(left, Vec::<PathBuf>::new(), "prune left the memory snapshot");
    assert_eq!(processes_under(cli.home.path()), vec![], "rm left processes");
}

#[test]
fn a_damaged_memory_snapshot_resumes_the_box_from_its_disk() {
    const TEST: &str = "microvm_images::a_damaged_memory_snapshot_resumes_the_box_from_its_disk";
    need_microvm!(TEST);
    if let Some(why) = unavailable() {
        return skip(TEST, &why);
    }
    let reg = Registry::plain();
    reg.push_with_config(
        "mvm/busybox:1",
        &[busybox_layer()],
        "linux",
        "amd64",
        serde_json::json!({"Env": ["PATH=/bin"]}),
    );
    let reference = reg.reference("mvm/busybox:1");
    let cli = Cli::new();
    let _reaper = Reaper(cli.home.path().to_owned());
    ok(&cli, &["image", "pull", &reference]);
    let mut args = vec!["create", "--image", &reference, "--persistent"];
    args.extend_from_slice(TCG);
    let id = ok(&cli, &args).trim().to_owned();
    exec_ok(&cli, &id, &["sh", "-c", "echo kept > /root/file"]);
    ok(&cli, &["stop", &id]);
    let snapshots = cli.home.path().join("drivers/microvm/snapshots");
    let taken: Vec<PathBuf> = std::fs::read_dir(&snapshots).unwrap().flatten().map(|e| e.path()).collect();
    let memory = taken[0].join("memory");
    let len = std::fs::metadata(&memory).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&memory).unwrap().set_len(len / 2).unwrap();
    // The stream does not load; the box comes back from its disk, with its files.
    ok(&cli, &["resume", &id]);
    assert_eq!(exec_ok(&cli, &id, &["cat", "/root/file"]), "kept\n");
    let inspect = ok(&cli, &["inspect", &id]);
    assert!(!inspect.contains("carried on from a memory snapshot"), "{inspect}");
    ok(&cli, &["rm", &id]);
    ok(&cli, &["prune"]);
    assert_eq!(processes_under(cli.home.path()), vec![], "rm left processes");
}

#[test]
fn an_image_box_with_egress_resolves_through_the_fence_and_reaches_a_listed_host() {
    const TEST: &str = "microvm_images::an_image_box_with_egress_resolves_through_the_fence_and_reaches_a_listed_host";
    need_microvm!(TEST);
    if let Some(why) = unavailable() {
        return skip(TEST, &why);
    }
    let Some(peer) = tinybox_tests::netns::TestHost::start("vmimage") else {
        return skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
    };
    for program in ["slirp4netns", "iptables", "hostname", "passt"] {
        if !tinybox_tests::have(program) && !Path::new("/usr/sbin").join(program).exists() {
            return skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
        }
    }
    let reg = Registry::plain();
    reg.push_with_config(
        "mvm/busybox:1",
        &[busybox_layer()],
        "linux",
        "amd64",
        serde_json::json!({"Env": ["PATH=/bin"]}),
    );
    let reference = reg.reference("mvm/busybox:1");
    let cli = Cli::new();
    let _reaper = Reaper(cli.home.path().to_owned());
    ok(&cli, &["image", "pull", &reference]);
    let listed = format!("{}:{}", peer.addr, peer.port);
    let mut args = vec!["create", "--image", &reference, "--network", "egress", "--allow-host", &listed];
    args.extend_from_slice(TCG);
    let id = ok(&cli, &args).trim().to_owned();
    // The image's own root gets the guest's resolver, and the NIC is up in it.
    let resolv = exec_ok(&cli, &id, &["cat", "/etc/resolv.conf"]);
    assert_eq!(resolv.trim(), "nameserver 10.0.2.3", "{resolv}");
    let script = "echo probe | timeout 10 nc -w 2 \"$1\" \"$2\" >/dev/null 2>&1; echo $?";
    let port = peer.port.to_string();
    let rc = exec_ok(&cli, &id, &["sh", "-c", script, "probe", &peer.addr, &port]);
    assert!(["0", "143"].contains(&rc.trim()), "the listed host was not reached from the image box: {rc}");
    ok(&cli, &["rm", &id]);
    assert_eq!(processes_under(cli.home.path()), vec![], "rm left processes");
}
