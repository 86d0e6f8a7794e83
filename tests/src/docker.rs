//! Helpers for the docker live suites: whether a daemon answers, the small
//! busybox image the suites run (imported from the host's busybox, since
//! no registry is reachable), namespaces that clean up after themselves,
//! and an engine with a template store and room for docker's latency.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tinybox_core::Tinybox;
use tinybox_core::clock::Clock;
use tinybox_core::driver::Timeouts;
use tinybox_core::model::{BoxId, BoxSpec, ExecRequest, ExitStatus, HostName, Placement, SandboxName};
use tinybox_core::store::{MemoryStore, TemplateStore};
use tinybox_sdk::stdio::StdioFds;

/// The driver's default base image; the suites import it when it is missing.
pub const BASE_IMAGE: &str = "busybox:latest";

/// Bounds a hung docker call in a test; asserts nothing about speed.
pub const GUARD: Duration = Duration::from_secs(60);

/// Runs `docker ARGS` to completion: (status, stdout, stderr).
pub fn docker(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("docker").args(args).stdin(Stdio::null()).output().expect("run docker");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `docker ARGS`, which must succeed; its stdout, trimmed.
pub fn docker_ok(args: &[&str]) -> String {
    let (code, out, err) = docker(args);
    assert_eq!(code, 0, "docker {args:?} failed: {err}");
    out.trim().to_owned()
}

/// Why the docker suites cannot run here, or `None` when they can. The
/// first call per process also makes sure the base image exists.
pub fn unavailable() -> Option<String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY.get_or_init(check).clone().err()
}

fn check() -> Result<(), String> {
    if !crate::have("docker") {
        return Err("no docker CLI on PATH (apt-get install docker.io)".into());
    }
    let (code, _, err) = docker(&["info", "--format", "{{.ServerVersion}}"]);
    if code != 0 {
        return Err(format!(
            "no docker daemon answers (contrib/setup/start-dockerd starts one as root): {}",
            err.trim().replace('\n', " ")
        ));
    }
    ensure_base_image()
}

/// Imports the host's busybox as [`BASE_IMAGE`] when no such image exists:
/// `/bin/busybox` plus a link for every applet, and the usual empty dirs.
/// contrib/bench/run imports the same image when it runs first; the two
/// must agree (suites here expect /root and /etc/passwd).
fn ensure_base_image() -> Result<(), String> {
    if docker(&["image", "inspect", BASE_IMAGE]).0 == 0 {
        return Ok(());
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or("no busybox on this machine to build an image from (apt-get install busybox-static)")?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("rootfs");
    for d in ["bin", "tmp", "root", "etc", "var", "home"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
    }
    let sticky = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o1777);
    std::fs::set_permissions(root.join("tmp"), sticky).map_err(|e| e.to_string())?;
    std::fs::copy(busybox, root.join("bin/busybox")).map_err(|e| e.to_string())?;
    let list = Command::new(busybox).arg("--list").output().map_err(|e| e.to_string())?;
    for applet in String::from_utf8_lossy(&list.stdout).lines().filter(|a| !a.is_empty() && *a != "busybox") {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").map_err(|e| e.to_string())?;
    let tar = dir.path().join("rootfs.tar");
    let packed = Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").status();
    if !packed.is_ok_and(|s| s.success()) {
        return Err("tar could not pack the busybox rootfs".into());
    }
    let tar = tar.to_string_lossy().into_owned();
    let (code, _, err) = docker(&["import", &tar, BASE_IMAGE]);
    if code != 0 {
        return Err(format!("docker import of a busybox image failed: {}", err.trim()));
    }
    let (code, _, err) = docker(&["run", "--rm", "--network", "none", BASE_IMAGE, "sh", "-c", "true"]);
    if code != 0 {
        return Err(format!(
            "the imported busybox image does not run (is {} static?): {}",
            busybox.display(),
            err.trim()
        ));
    }
    Ok(())
}

/// A docker namespace of one test's own: unique to this process and test,
/// so parallel tests and earlier runs never share a container name. Every
/// container and snapshot image made in it is removed when it is dropped.
pub struct Namespace {
    pub name: String,
}

impl Namespace {
    pub fn new(test: &str) -> Namespace {
        let mut name = format!("t{}-{test}", std::process::id());
        name.truncate(48);
        Namespace { name }
    }

    /// The container tinybox names for `box_id` in this namespace.
    pub fn container(&self, box_id: &str) -> String {
        format!("tinybox-{}-{box_id}", self.name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let label = format!("label=tinybox.namespace={}", self.name);
        let (_, containers, _) = docker(&["ps", "-aq", "--filter", &label]);
        let containers: Vec<&str> = containers.split_whitespace().collect();
        if !containers.is_empty() {
            let _ = docker(&[["rm", "-f"].as_slice(), &containers].concat());
        }
        // Committed images carry their container's labels.
        let (_, images, _) = docker(&["images", "-q", "--filter", &label]);
        let mut images: Vec<&str> = images.split_whitespace().collect();
        images.dedup();
        if !images.is_empty() {
            let _ = docker(&[["rmi", "-f"].as_slice(), &images].concat());
        }
    }
}

/// local/docker.
pub fn placement() -> Placement {
    Placement::new(HostName::local(), SandboxName::new("docker").unwrap())
}

/// A spec for a docker box in `ns`, from the base image.
pub fn spec(ns: &Namespace) -> BoxSpec {
    let mut spec = BoxSpec::new(placement());
    spec.namespace = ns.name.clone();
    spec
}

/// An engine over a memory store, with templates in their own temporary
/// directory and timeouts that allow for a busy daemon.
pub fn engine(clock: Arc<dyn Clock>) -> (Tinybox, tempfile::TempDir) {
    engine_over(Arc::new(MemoryStore::new()), clock)
}

/// [`engine`] over a store the test keeps, to read or mark records itself.
pub fn engine_over(store: Arc<MemoryStore>, clock: Arc<dyn Clock>) -> (Tinybox, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let templates = TemplateStore::open(dir.path()).expect("template store");
    let timeouts = Timeouts { handshake: Duration::from_secs(10), operation: GUARD, cancel: Duration::from_secs(15) };
    let tb = Tinybox::with_parts(store, Some(templates), clock, crate::driver_config(&[], timeouts)).expect("engine");
    (tb, dir)
}

/// What a command printed and how it ended.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Streams for an in-process exec: `stdin` as input, stdout and stderr read
/// to their end on threads of their own while the command runs.
pub fn streams(stdin: &[u8]) -> (StdioFds, impl FnOnce() -> (String, String)) {
    let (in_r, mut in_w) = std::io::pipe().expect("pipe");
    let (out_r, out_w) = std::io::pipe().expect("pipe");
    let (err_r, err_w) = std::io::pipe().expect("pipe");
    let input = stdin.to_vec();
    std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut in_w, &input);
    });
    let read = |mut r: std::io::PipeReader| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(out_r), read(err_r));
    let fds = StdioFds { stdin: in_r.into(), stdout: out_w.into(), stderr: err_w.into() };
    (fds, move || (out.join().expect("stdout reader"), err.join().expect("stderr reader")))
}

/// Runs `argv` in box `id` through the engine and collects its output.
pub async fn run(tb: &Tinybox, id: &BoxId, argv: &[&str]) -> Output {
    run_request(tb, id, ExecRequest::new(argv.iter().copied()), b"").await
}

/// Runs `request` with `stdin` as its input.
pub async fn run_request(tb: &Tinybox, id: &BoxId, request: ExecRequest, stdin: &[u8]) -> Output {
    let (fds, collect) = streams(stdin);
    let outcome =
        tokio::time::timeout(GUARD, tb.exec(id, request, fds, tinybox_core::Target::Workspace, std::future::pending()))
            .await
            .expect("exec finished within the guard")
            .expect("exec ran");
    let (stdout, stderr) = collect();
    Output { status: outcome.status, stdout, stderr }
}

/// Runs `argv` in box `id`, which must succeed; its stdout.
pub async fn run_ok(tb: &Tinybox, id: &BoxId, argv: &[&str]) -> String {
    let out = run(tb, id, argv).await;
    assert!(out.status.success(), "{argv:?} ended with {}: {}", out.status, out.stderr);
    out.stdout
}

/// An image built from [`BASE_IMAGE`] that claims, by label, the host
/// directory `dir` as its workspace: what any image could carry. Tagged
/// `name`, and labelled with `ns` so the namespace's cleanup removes it.
pub fn image_claiming(ns: &Namespace, name: &str, dir: &Path) -> String {
    let container = format!("{name}-src");
    docker_ok(&["create", "--name", &container, BASE_IMAGE, "true"]);
    let claim = format!("LABEL tinybox.workspace={}", dir.display());
    let owner = format!("LABEL tinybox.namespace={}", ns.name);
    let made = docker(&["commit", "--change", &claim, "--change", &owner, &container, name]);
    docker_ok(&["rm", &container]);
    assert_eq!(made.0, 0, "docker commit failed: {}", made.2);
    name.to_owned()
}

/// A static probe run inside a box: it tries every system call that can
/// give a file S_ISUID or S_ISGID (creating with such a mode, changing to
/// one), by number so libc chooses none for it, and prints `<call>=made`
/// or `<call>=<error>` for each. Built once per process with `cc -static`.
pub fn set_id_probe() -> std::path::PathBuf {
    const SOURCE: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
struct how { unsigned long long flags, mode, resolve; };
static void say(const char *call, long r) { printf("%s=%s\n", call, r >= 0 ? "made" : strerror(errno)); }
int main(void) {
    say("open", syscall(SYS_open, "p_open", O_CREAT | O_WRONLY, 04755));
    say("openat", syscall(SYS_openat, AT_FDCWD, "p_openat", O_CREAT | O_WRONLY, 02755));
    say("creat", syscall(SYS_creat, "p_creat", 06755));
    say("mknod", syscall(SYS_mknod, "p_mknod", S_IFREG | 04755, 0));
    say("mknodat", syscall(SYS_mknodat, AT_FDCWD, "p_mknodat", S_IFREG | 02755, 0));
    struct how how = { O_CREAT | O_WRONLY, 04755, 0 };
    say("openat2", syscall(437, AT_FDCWD, "p_openat2", &how, sizeof how));
    int fd = open("p_plain", O_CREAT | O_WRONLY, 0644);
    say("fchmod", syscall(SYS_fchmod, fd, 04755));
    say("fchmodat", syscall(SYS_fchmodat, AT_FDCWD, "p_plain", 02755));
    say("fchmodat2", syscall(452, AT_FDCWD, "p_plain", 04755, 0));
    say("chmod", syscall(SYS_chmod, "p_plain", 06755));
    say("chmod_plain", syscall(SYS_chmod, "p_plain", 0640));
    return 0;
}
"#;
    static PROBE: OnceLock<std::path::PathBuf> = OnceLock::new();
    PROBE.get_or_init(|| crate::compiled_probe("setid", SOURCE)).clone()
}

/// The host's address on docker's default bridge.
pub fn bridge_address() -> String {
    let gateway = docker_ok(&["network", "inspect", "bridge", "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"]);
    if !gateway.is_empty() {
        return gateway;
    }
    // An older daemon leaves the gateway out; it is the bridge device's address.
    let device = docker_ok(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{index .Options \"com.docker.network.bridge.name\"}}",
    ]);
    let out = std::process::Command::new("ip").args(["-4", "-o", "addr", "show", "dev", &device]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let cidr =
        text.split_whitespace().skip_while(|w| *w != "inet").nth(1).unwrap_or_else(|| panic!("{device}: {text}"));
    cidr.split('/').next().unwrap().to_owned()
}
