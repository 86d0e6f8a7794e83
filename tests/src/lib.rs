//! Shared helpers for tinybox's cross-crate and live suites: where the built
//! binaries are, an engine wired to them, and the visible "skipped" line a
//! live test prints when this machine lacks the real part it needs.

pub mod docker;

pub mod api;
pub mod boxes;
pub mod chaos;
pub mod client_image;
pub mod dns;
pub mod dockerd;
pub mod e2b_session;
pub mod egress;
pub mod frontends;
pub mod microvm;
pub mod module;
pub mod netns;
pub mod registry;
pub mod secrets_scenario;
pub mod sshd;
pub mod tls_world;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tinybox_core::Tinybox;
use tinybox_core::clock::Clock;
use tinybox_core::driver::{DriverConfig, Timeouts};
use tinybox_core::store::MemoryStore;

/// The directory holding the workspace's built binaries (target/<profile>).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_path_buf();
    for needed in ["tinybox", "tinybox-driver-local"] {
        assert!(
            dir.join(needed).exists(),
            "{} is missing: build the workspace's binaries first (cargo build --workspace --bins)",
            dir.join(needed).display()
        );
    }
    dir
}

/// A built binary of this workspace.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Driver settings that find drivers in `extra` first, then the built ones.
pub fn driver_config(extra: &[PathBuf], timeouts: Timeouts) -> DriverConfig {
    let mut search_dirs = extra.to_vec();
    search_dirs.push(bin_dir());
    DriverConfig { search_dirs, timeouts, hosts: tinybox_core::hosts::local_only(), state_dir: None }
}

/// Short timeouts, so a misbehaving driver fails a test fast.
pub fn short_timeouts() -> Timeouts {
    Timeouts { handshake: Duration::from_secs(3), operation: Duration::from_secs(5), cancel: Duration::from_secs(4) }
}

/// An engine over a memory store, with drivers from `extra` and the build.
pub fn engine(extra: &[PathBuf], clock: Arc<dyn Clock>) -> Tinybox {
    Tinybox::with_parts(Arc::new(MemoryStore::new()), None, clock, driver_config(extra, short_timeouts()))
        .expect("engine")
}

/// The file each skip is appended to, one `test: reason` line (contrib/test-all sets it).
pub const SKIPS_FILE_VAR: &str = "TINYBOX_SKIPS_FILE";
/// When `1`, a skip fails its test unless the test is allowed to skip.
pub const REQUIRE_LIVE_VAR: &str = "TINYBOX_REQUIRE_LIVE";
/// The tests allowed to skip under [`REQUIRE_LIVE_VAR`], one name a line (.ci/run sets it).
pub const ALLOWED_SKIPS_VAR: &str = "TINYBOX_ALLOWED_SKIPS";

/// Says, visibly, that a live test (or the part of it in parentheses)
/// cannot run on this machine, and why. `test` is `<test file>::<test
/// function>`, optionally followed by ` (<part>)`: the stable name the
/// summary lists and the allow-list names. The line is printed and, when
/// [`SKIPS_FILE_VAR`] names a file, appended to it, so the skip reaches
/// contrib/test-all's summary even though libtest captures a passing
/// test's output. Under `TINYBOX_REQUIRE_LIVE=1` a skip not allowed by
/// [`ALLOWED_SKIPS_VAR`] panics: CI provides every live part.
pub fn skip(test: &str, reason: &str) {
    check_skip_name(test);
    let line = skip_line(test, reason);
    eprintln!("skipped: {line}");
    println!("skipped: {line}");
    if let Err(e) = SkipPolicy::from_env().apply(test, &line) {
        panic!("{e}");
    }
}

/// `test: reason` on one line, whatever the reason holds, so the skips
/// file stays one skip a line.
fn skip_line(test: &str, reason: &str) -> String {
    format!("{test}: {}", reason.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// What a skip does besides printing: where it is recorded and whether it
/// is allowed. Read from the environment contrib/test-all and .ci/run set.
#[derive(Debug, Clone, Default)]
pub struct SkipPolicy {
    /// [`SKIPS_FILE_VAR`].
    pub file: Option<PathBuf>,
    /// [`REQUIRE_LIVE_VAR`] is `1`.
    pub require_live: bool,
    /// [`ALLOWED_SKIPS_VAR`].
    pub allowed: String,
}

impl SkipPolicy {
    pub fn from_env() -> SkipPolicy {
        SkipPolicy {
            file: std::env::var_os(SKIPS_FILE_VAR).filter(|p| !p.is_empty()).map(PathBuf::from),
            require_live: std::env::var(REQUIRE_LIVE_VAR).is_ok_and(|v| v == "1"),
            allowed: std::env::var(ALLOWED_SKIPS_VAR).unwrap_or_default(),
        }
    }

    /// Records the skip `line` of `test`; an error when it is not allowed.
    pub fn apply(&self, test: &str, line: &str) -> Result<(), String> {
        if let Some(path) = &self.file {
            record_skip(path, line)?;
        }
        if self.require_live && !skip_allowed(&self.allowed, test) {
            return Err(format!(
                "skipped under {REQUIRE_LIVE_VAR}=1: {line}; CI provides every live part, so make contrib/setup \
                 provide this one, or, if no machine of this kind can have it, name the test in \
                 {ALLOWED_SKIPS_VAR} in .ci/run with the reason"
            ));
        }
        Ok(())
    }
}

/// Appends `line` to the skips file in one write, so the lines of test
/// binaries running at once do not interleave.
fn record_skip(path: &Path, line: &str) -> Result<(), String> {
    use std::io::Write;
    let why = |e: std::io::Error| format!("cannot append to the skips file {} ({SKIPS_FILE_VAR}): {e}", path.display());
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(why)?;
    f.write_all(format!("{line}\n").as_bytes()).map_err(why)
}

/// Whether `test` is on the allow-list: one name a line; blank lines and
/// `#` comments are ignored. A whole test's entry also allows its parts.
pub fn skip_allowed(allow_list: &str, test: &str) -> bool {
    allow_list
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .any(|entry| test == entry || test.strip_prefix(entry).is_some_and(|rest| rest.starts_with(" (")))
}

/// A skip's name must be the running test's own (`<file>::<function>`,
/// maybe with ` (<part>)`), so the summary and the allow-list can rely on
/// it. libtest names each test's thread after the function; a skip from
/// another thread is not checked.
fn check_skip_name(test: &str) {
    let Some(function) = std::thread::current().name().map(str::to_owned) else { return };
    if function == "main" || function.starts_with("tokio-") {
        return;
    }
    let Some(file) = std::env::current_exe().ok().and_then(|exe| {
        let stem = exe.file_stem()?.to_string_lossy().into_owned();
        // target/<profile>/deps/<file>-<hash>
        Some(stem.rsplit_once('-').map_or(stem.clone(), |(f, _)| f.to_owned()))
    }) else {
        return;
    };
    let name = format!("{file}::{function}");
    let ok = test == name || test.strip_prefix(&name).is_some_and(|rest| rest.starts_with(" ("));
    assert!(ok, "skip name {test:?} is not this test's: use {name:?}, or \"{name} (<part>)\" for a part of it");
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file())).unwrap_or(false)
}

/// A `tinybox` command against its own store in a temporary directory.
pub struct Cli {
    pub home: tempfile::TempDir,
}

impl Cli {
    pub fn new() -> Cli {
        Cli { home: tempfile::tempdir().expect("temp dir") }
    }

    /// `tinybox --store <home> ARGS`, with only the workspace's built drivers.
    pub fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(bin("tinybox"));
        c.arg("--store").arg(self.home.path()).args(args);
        c.env("TINYBOX_DRIVER_PATH", "").env("PATH", "/usr/local/bin:/usr/bin:/bin");
        c
    }

    /// `tinybox --store <home> ARGS`, finding drivers in `dirs` as well as
    /// the built ones (as a third party's installed driver is found).
    pub fn cmd_with_drivers(&self, dirs: &[&Path], args: &[&str]) -> std::process::Command {
        let mut c = self.cmd(args);
        c.env("TINYBOX_DRIVER_PATH", std::env::join_paths(dirs).expect("driver dirs"));
        c
    }

    /// Runs to completion with empty stdin; returns (status, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd(args).stdin(std::process::Stdio::null()).output().expect("run tinybox");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Creates a box and returns its identifier.
    pub fn create(&self, args: &[&str]) -> String {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        let (code, out, err) = self.run(&all);
        assert_eq!(code, 0, "create {args:?} failed: {err}");
        out.trim().to_owned()
    }

    /// The box records' bytes: the layout marker, then each record file by
    /// name (empty when nothing was ever recorded). Equal bytes before and
    /// after a command mean it changed no box.
    pub fn store_bytes(&self) -> Vec<u8> {
        frontends::probe::store_bytes(self.home.path())
    }
}

impl Default for Cli {
    fn default() -> Self {
        Cli::new()
    }
}

/// Reads one line from `r`, failing the test if none arrives within `guard`.
/// The guard only stops a hung test; it asserts nothing about speed.
pub fn read_line_within<R: std::io::BufRead + Send + 'static>(mut r: R, guard: Duration) -> (String, R) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let n = r.read_line(&mut line).expect("read line");
        let _ = tx.send((n, line, r));
    });
    match rx.recv_timeout(guard) {
        Ok((_, line, r)) => (line, r),
        Err(_) => panic!("no line within {guard:?}: output is not streaming or the command hung"),
    }
}

/// Streams for an in-process exec: empty stdin, stdout and stderr to pipes
/// the test reads.
pub fn piped_stdio() -> (tinybox_sdk::stdio::StdioFds, std::io::PipeReader, std::io::PipeReader) {
    let (out_r, out_w) = std::io::pipe().expect("pipe");
    let (err_r, err_w) = std::io::pipe().expect("pipe");
    let stdin = std::fs::File::open("/dev/null").expect("/dev/null");
    (tinybox_sdk::stdio::StdioFds { stdin: stdin.into(), stdout: out_w.into(), stderr: err_w.into() }, out_r, err_r)
}

/// Installs the test driver as `tinybox-driver-<mode>` in `dir`.
pub fn install_test_driver(dir: &Path, mode: &str) {
    let target = bin_dir().join("misbehaving-driver");
    std::os::unix::fs::symlink(target, dir.join(format!("tinybox-driver-{mode}"))).expect("symlink test driver");
}

/// Runs `argv` in box `id` and cancels it as soon as it has written its
/// first output (so the cancel surely finds it running); returns how it ended.
pub async fn exec_cancelled_once_started(
    tb: &Tinybox,
    id: &tinybox_core::model::BoxId,
    argv: &[&str],
) -> tinybox_core::ExecOutcome {
    use std::io::Read;
    let (stdio, mut out, _err) = piped_stdio();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut first = [0u8; 1];
        let _ = out.read(&mut first);
        let _ = started_tx.send(());
    });
    let cancel = async move {
        let _ = started_rx.await;
    };
    let req = tinybox_core::model::ExecRequest::new(argv.iter().copied());
    tokio::time::timeout(Duration::from_secs(30), tb.exec(id, req, stdio, tinybox_core::Target::Workspace, cancel))
        .await
        .expect("a cancelled exec ends")
        .expect("the exec ran")
}

/// A child process killed (and reaped) when dropped, so a failing test
/// never leaves one holding the test runner's output pipe open.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A C probe compiled from `source` (statically, so it runs in any box),
/// once per source text, into the build's own directory
/// (`target/<profile>/tinybox-probes/`) rather than /tmp: a test run leaves
/// nothing behind outside the build, and the next run reuses it. Built
/// under a name of this process's, then renamed, so concurrent test
/// processes never see half a binary.
pub fn compiled_probe(name: &str, source: &str) -> PathBuf {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::PermissionsExt;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut hasher);
    let dir = bin_dir().join("tinybox-probes");
    std::fs::create_dir_all(&dir).expect("probe dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod probe dir");
    let out = dir.join(format!("{name}-{:016x}", hasher.finish()));
    if out.exists() {
        return out;
    }
    let partial = dir.join(format!(".{name}-{}", std::process::id()));
    let src = partial.with_extension("c");
    std::fs::write(&src, source).expect("write probe source");
    let status = std::process::Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&partial)
        .arg(&src)
        .status()
        .expect("run cc");
    let _ = std::fs::remove_file(&src);
    assert!(status.success(), "cc could not build the {name} probe");
    std::fs::rename(&partial, &out).expect("put the probe in place");
    out
}

/// Every process: (pid, parent pid, arguments joined by spaces).
pub fn processes() -> Vec<(u32, u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let parent = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            let args = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, parent, String::from_utf8_lossy(&args).replace('\0', " ")))
        })
        .collect()
}

/// The workspace's own packages, as `cargo metadata --no-deps` lists them
/// (the tidy suites read the crates, their targets and their arrows here).
pub fn workspace_packages() -> Vec<serde_json::Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--offline", "--no-deps", "--format-version", "1"])
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    v["packages"].as_array().expect("packages").clone()
}

/// Every file under `dir` with its contents, in order: a store as a value,
/// to show a refused request changed nothing.
pub fn tree_contents(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut all = Vec::new();
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            all.push((path.clone(), Vec::new()));
            all.extend(tree_contents(&path));
        } else {
            all.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOWED: &str = "
        # KVM cannot run a guest here
        microvm_box::a_test   # trailing comment
        verify::whole
    ";

    #[test]
    fn the_allow_list_names_whole_tests_and_their_parts_and_nothing_else() {
        assert!(skip_allowed(ALLOWED, "microvm_box::a_test"));
        assert!(skip_allowed(ALLOWED, "verify::whole (rootless)"), "a whole test's entry allows its parts");
        assert!(!skip_allowed(ALLOWED, "microvm_box::a_test_too"), "a prefix of a name is not the name");
        assert!(!skip_allowed(ALLOWED, "verify::other"));
        assert!(!skip_allowed(ALLOWED, "# KVM cannot run a guest here"));
        assert!(!skip_allowed("", "verify::whole"));
    }

    #[test]
    fn a_skip_is_recorded_and_fails_under_require_live_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("skips.txt");
        let policy = SkipPolicy { file: Some(file.clone()), require_live: false, allowed: String::new() };
        let line = skip_line("verify::other", "no  thing\nhere");
        assert_eq!(line, "verify::other: no thing here");
        policy.apply("verify::other", &line).unwrap();
        let strict = SkipPolicy { require_live: true, allowed: ALLOWED.into(), ..policy };
        strict.apply("verify::whole", "verify::whole: why").unwrap();
        let err = strict.apply("verify::other", &line).unwrap_err();
        assert!(err.contains("verify::other: no thing here") && err.contains(ALLOWED_SKIPS_VAR), "{err}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "verify::other: no thing here\nverify::whole: why\nverify::other: no thing here\n",
            "every skip is recorded, allowed or not"
        );
    }

    #[test]
    fn a_skip_names_the_running_test() {
        check_skip_name("tinybox_tests::tests::a_skip_names_the_running_test");
        check_skip_name("tinybox_tests::tests::a_skip_names_the_running_test (part)");
        let wrong = std::panic::catch_unwind(|| check_skip_name("some other name"));
        assert!(wrong.is_err(), "a name that is not the test's is refused");
    }
}
