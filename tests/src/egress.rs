//! Helpers for the egress live suites (egress_namespace, egress_docker):
//! the CLI with the proxy resolving through the kit's DNS server, a
//! command in a box, and a box's proxy directory and process.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::boxes::BoxEnv;
use crate::dns::DnsServer;

/// Bounds a wait for a proxy process to end; asserts nothing about speed.
pub const GUARD: Duration = Duration::from_secs(30);

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tinybox ARGS` as the principal, with the proxy resolving through `dns`.
pub fn run(env: &BoxEnv, dns: &DnsServer, args: &[&str]) -> Output {
    env.cli(args)
        .env("TINYBOX_EGRESS_RESOLVER", dns.addr.to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tinybox")
}

/// `sh -c SCRIPT` in the box, which must succeed; its stdout.
pub fn in_box(env: &BoxEnv, dns: &DnsServer, id: &str, script: &str) -> String {
    let out = run(env, dns, &["exec", id, "--", "sh", "-c", script]);
    assert!(out.status.success(), "{}: {script}: {}{}", env.who.label(), text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// The box's proxy directory: the one entry under `<store>/egress`.
pub fn proxy_dir(env: &BoxEnv) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(env.store.path().join("egress"))
        .expect("the store has an egress directory")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "one box, one proxy directory: {dirs:?}");
    dirs[0].clone()
}

pub fn proxy_pid(dir: &Path) -> i32 {
    std::fs::read_to_string(dir.join("pid")).expect("the proxy's pid file").trim().parse().expect("a pid")
}

/// Whether `pid` runs (exists and is not a zombie).
pub fn running(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next());
    !matches!(state, None | Some("Z") | Some("X"))
}

/// Waits (bounded by [`GUARD`]) until `pid` no longer runs.
pub fn wait_gone(pid: i32, what: &str) {
    let start = Instant::now();
    while running(pid) {
        assert!(start.elapsed() < GUARD, "{what}: process {pid} still runs");
        std::thread::yield_now();
    }
}

/// Kills box's proxy `pid` with SIGKILL and waits until it is gone.
pub fn kill_proxy(pid: i32) {
    let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL);
    wait_gone(pid, "the killed proxy");
}

/// A shell line sending `GET http://AUTHORITY/PATH` in the proxy's form to
/// the host and port `$http_proxy` names, with busybox `nc`; prints the answer.
pub fn fetch_script(authority: &str, path: &str) -> String {
    format!(
        "p=${{http_proxy#http://}}; \
         printf 'GET http://{authority}{path} HTTP/1.1\\r\\nHost: {authority}\\r\\n\\r\\n' | nc -w 20 ${{p%:*}} ${{p##*:}}"
    )
}

/// What comes before an answer's status line ends, and its body.
pub fn answer(got: &str) -> (&str, &str) {
    let (head, body) = got.split_once("\r\n\r\n").unwrap_or((got, ""));
    (head.split("\r\n").next().unwrap_or(head), body)
}
