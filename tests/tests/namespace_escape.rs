//! The namespace sandbox's boundary, attacked from inside: a probe program
//! (tests/probes/escape.c) runs in a box and every result is checked from
//! outside. Each test runs as this user and, when we are root, rootless as
//! an unprivileged user too.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tinybox_tests::boxes::{BoxEnv, DelegatedCgroup, Principal, probe_value};
use tinybox_tests::{KillOnDrop, have, skip};

const GUARD: Duration = Duration::from_secs(30);

/// Principals to run as, or none (with a visible skip) when bwrap is missing.
fn principals(test: &str) -> Vec<Principal> {
    if !have("bwrap") {
        skip(test, "bwrap is not installed (apt-get install bubblewrap)");
        return Vec::new();
    }
    Principal::all(test)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A namespace box over a fresh workspace holding the probe.
fn probed_box(who: &Principal, extra: &[&str]) -> (BoxEnv, String) {
    let env = BoxEnv::new(who);
    env.install_probe();
    let mut args = vec!["--sandbox", "namespace"];
    args.extend_from_slice(extra);
    let id = env.create(&args);
    (env, id)
}

fn probe(env: &BoxEnv, id: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["exec", id, "--", "/workspace/escape"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    assert!(out.status.success(), "{}: probe {args:?}: {}", env.who.label(), text(&out.stderr));
    out
}

/// A long-lived process on the host, owned by `who`.
fn host_sleeper(who: &Principal) -> KillOnDrop {
    KillOnDrop(who.command(std::path::Path::new("/usr/bin/sleep"), &["1000"]).spawn().expect("spawn sleep"))
}

#[test]
fn host_processes_are_invisible_and_unsignalable() {
    for who in principals("namespace_escape::host_processes_are_invisible_and_unsignalable") {
        let (env, id) = probed_box(&who, &[]);
        let mut sleeper = host_sleeper(&who);
        let host_pid = sleeper.0.id().to_string();

        let out = probe(&env, &id, &["pids"]);
        let pids = probe_value(&out.stdout, "pids").unwrap();
        assert_eq!(pids, "1,2,", "{}: /proc shows only bwrap's init and the probe", who.label());

        let out = probe(&env, &id, &["signal", &host_pid]);
        assert_eq!(probe_value(&out.stdout, "kill0").as_deref(), Some("No such process"), "{}", who.label());
        assert_eq!(probe_value(&out.stdout, "ptrace").as_deref(), Some("No such process"), "{}", who.label());

        // kill -9 -1 inside reaches the box's own processes (a tagged sleep),
        // never the host's. The probe is the box's first process (the shell
        // execs it): were it a child of a shell that kill -1 takes, the pid
        // namespace could be torn down before the probe printed its answer.
        let tag = format!("{}", 800_000 + std::process::id() % 99_999);
        let script = format!("sleep {tag} & exec /workspace/escape killall");
        let out = env.run(&["exec", &id, "--", "sh", "-c", &script]);
        assert_eq!(
            probe_value(&out.stdout, "killall").as_deref(),
            Some("ok"),
            "{}: {}",
            who.label(),
            text(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{}: the probe itself outlives kill -1", who.label());
        let start = Instant::now();
        while sleepers(&tag) > 0 {
            assert!(start.elapsed() < GUARD, "{}: the box's own sleep outlived kill -1", who.label());
            std::thread::yield_now();
        }
        assert!(sleeper.0.try_wait().unwrap().is_none(), "{}: a host process died from kill -1 in a box", who.label());
    }
}

#[test]
fn the_terminal_cannot_be_injected_into() {
    for who in principals("namespace_escape::the_terminal_cannot_be_injected_into") {
        let (env, id) = probed_box(&who, &[]);
        // `script` gives tinybox a terminal as stdout; the probe pushes a
        // character into it. The probe run straight in that terminal is the
        // control that shows it detects an injection (tinybox hands no box
        // the terminal itself, passthrough included: tests/stdio_handles.rs).
        let run_in_tty = |line: &str| {
            let out = env
                .who
                .command(std::path::Path::new("/usr/bin/script"), &["-qec", line, "/dev/null"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            text(&out.stdout)
        };
        let probe_on_host = env.workspace.path().join("escape");
        let control = run_in_tty(&format!("{} tiocsti 1", probe_on_host.display()));
        assert!(
            control.contains("tiocsti=ok"),
            "{}: control failed, the test cannot see injection: {control}",
            who.label()
        );
        let store = env.store.path().to_str().unwrap().to_owned();
        let boxed = run_in_tty(&format!(
            "{} --store {store} exec {id} -- /workspace/escape tiocsti 1",
            tinybox_tests::bin("tinybox").display()
        ));
        assert!(boxed.contains("tiocsti="), "{}: probe did not run: {boxed}", who.label());
        assert!(!boxed.contains("tiocsti=ok"), "{}: TIOCSTI succeeded from inside the box: {boxed}", who.label());
        assert!(!boxed.contains("devtty=opened"), "{}: the box has a controlling terminal: {boxed}", who.label());
    }
}

#[test]
fn no_host_secret_reaches_the_box() {
    for who in principals("namespace_escape::no_host_secret_reaches_the_box") {
        let (env, id) = probed_box(&who, &["--env", "BOXVAR=1"]);
        let (head, tail) = ("tbx-secret-", format!("{}", std::process::id()));
        let out = env
            .cli(&["exec", &id, "--", "/workspace/escape", "secret", head, &tail])
            .env("API_TOKEN", format!("{head}{tail}"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            probe_value(&out.stdout, "secret").as_deref(),
            Some("absent"),
            "{}: {}",
            who.label(),
            text(&out.stdout)
        );

        // The environment is exactly the box's and the command's, plus the
        // PWD bwrap always sets to the in-box working directory.
        let out = env
            .cli(&["exec", &id, "--env", "CMD=2", "--", "/usr/bin/env"])
            .env("API_TOKEN", "x")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        // (Order is the shell's that checks the program, not a property.)
        let mut env_lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
        env_lines.sort();
        assert_eq!(env_lines, ["BOXVAR=1", "CMD=2", "PWD=/workspace"], "{}", who.label());
    }
}

#[test]
fn the_filesystem_is_the_declared_one() {
    for who in principals("namespace_escape::the_filesystem_is_the_declared_one") {
        let (env, id) = probed_box(&who, &[]);
        let out = env.run(&["exec", &id, "--", "ls", "-A", "/etc"]);
        let etc: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
        for entry in &etc {
            assert!(
                ["group", "passwd", "resolv.conf", "ssl"].contains(&entry.as_str()),
                "{}: /etc/{entry}",
                who.label()
            );
        }
        assert!(etc.contains(&"passwd".to_string()) && etc.contains(&"group".to_string()));
        let script = "for p in /home /root /root/.ssh /etc/shadow /etc/ssh; do test -e $p && echo present:$p; done; \
                      touch /usr/x 2>/dev/null && echo wrote:/usr; touch /x 2>/dev/null && echo wrote:/; \
                      mkdir /etc/x 2>/dev/null && echo wrote:/etc; echo done";
        let out = env.run(&["exec", &id, "--", "sh", "-c", script]);
        assert_eq!(text(&out.stdout), "done\n", "{}: {}", who.label(), text(&out.stderr));
    }
}

#[test]
fn only_the_workspace_survives_between_commands() {
    for who in principals("namespace_escape::only_the_workspace_survives_between_commands") {
        let (env, id) = probed_box(&who, &[]);
        let marker = format!("tbx-escape-{}-{}", std::process::id(), who.label().len());
        let script = format!("echo kept > /workspace/kept && echo gone > /tmp/{marker} && echo done");
        let out = env.run(&["exec", &id, "--", "sh", "-c", &script]);
        assert_eq!(text(&out.stdout), "done\n", "{}: {}", who.label(), text(&out.stderr));
        assert_eq!(std::fs::read_to_string(env.workspace.path().join("kept")).unwrap(), "kept\n");
        assert!(!std::path::Path::new("/tmp").join(&marker).exists(), "the box's /tmp is not the host's");
        let out =
            env.run(&["exec", &id, "--", "sh", "-c", &format!("test -e /tmp/{marker} && echo survived || echo fresh")]);
        assert_eq!(text(&out.stdout), "fresh\n", "{}", who.label());
    }
}

#[test]
fn only_stdio_descriptors_reach_the_box() {
    for who in principals("namespace_escape::only_stdio_descriptors_reach_the_box") {
        let (env, id) = probed_box(&who, &[]);
        // The shell leaves descriptor 7 open without close-on-exec, as an
        // unwary parent would; tinybox must not pass it on.
        let store = env.store.path().to_str().unwrap().to_owned();
        let line = format!(
            "exec 7</etc/hostname; exec {} --store {store} exec {id} -- /workspace/escape fds",
            tinybox_tests::bin("tinybox").display()
        );
        let out =
            env.who.command(std::path::Path::new("/bin/sh"), &["-c", &line]).stdin(Stdio::null()).output().unwrap();
        assert_eq!(
            probe_value(&out.stdout, "fds").as_deref(),
            Some("0,1,2,"),
            "{}: {}",
            who.label(),
            text(&out.stderr)
        );
    }
}

#[test]
fn a_denied_network_has_only_loopback_and_reaches_no_host_listener() {
    for who in principals("namespace_escape::a_denied_network_has_only_loopback_and_reaches_no_host_listener") {
        let (env, id) = probed_box(&who, &[]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        let out = env.run(&["exec", &id, "--", "sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"]);
        assert_eq!(text(&out.stdout), "lo\n", "{}", who.label());
        let out = probe(&env, &id, &["connect", "127.0.0.1", &port]);
        assert_ne!(probe_value(&out.stdout, "connect").as_deref(), Some("ok"), "{}", who.label());
        assert!(listener.accept().is_err(), "{}: the host listener got a connection", who.label());
    }
}

#[test]
fn kernel_floor_admits_namespace_and_refuses_passthrough() {
    for who in principals("namespace_escape::kernel_floor_admits_namespace_and_refuses_passthrough") {
        let env = BoxEnv::new(&who);
        env.create(&["--untrusted", "--sandbox", "namespace"]);
        let out = env.run(&["create", "--untrusted", "--sandbox", "passthrough"]);
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains("does not support isolation kernel or stronger"), "{}", text(&out.stderr));
        // With no --sandbox, --untrusted picks a sandbox at or above kernel
        // (which one depends on what is installed; whether this user may use
        // it is the sandbox's business, and not what is tested here).
        let ns = format!("floor{}", std::process::id());
        let out = env.run(&["create", "--untrusted", "--namespace", &ns]);
        let err = text(&out.stderr);
        assert!(
            err.contains("using sandbox") && err.contains("(isolation kernel") || err.contains("(isolation hardware"),
            "{err}"
        );
        assert!(!err.contains("using sandbox passthrough"), "{err}");
        if out.status.success() {
            let id = text(&out.stdout).trim().to_owned();
            assert!(env.run(&["rm", &id]).status.success());
        }
    }
}

#[test]
fn killing_tinybox_mid_exec_leaves_no_box_process() {
    for who in principals("namespace_escape::killing_tinybox_mid_exec_leaves_no_box_process") {
        let (env, id) = probed_box(&who, &[]);
        let tag = format!("{}", 900_000 + std::process::id() % 99_999);
        let mut child = tinybox_tests::KillOnDrop(
            env.cli(&["exec", &id, "--", "sh", "-c", &format!("echo started; exec sleep {tag}")])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line, "started\n");
        // The shell printed before it exec'd sleep: poll (bounded) until it has.
        let start = Instant::now();
        while sleepers(&tag) == 0 {
            assert!(start.elapsed() < GUARD, "the box's command never showed on the host before the kill");
            std::thread::yield_now();
        }
        child.0.kill().unwrap(); // SIGKILL: tinybox gets no chance to clean up
        child.0.wait().unwrap();
        let start = Instant::now();
        while sleepers(&tag) > 0 {
            assert!(start.elapsed() < GUARD, "{}: box process outlived a SIGKILLed tinybox", who.label());
            std::thread::yield_now();
        }
    }
}

/// Live processes on the host running `sleep TAG`.
fn sleepers(tag: &str) -> usize {
    let needle = format!("sleep\0{tag}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| {
            let mut buf = Vec::new();
            let alive = std::fs::read_to_string(e.path().join("stat"))
                .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
            alive
                && std::fs::File::open(e.path().join("cmdline")).and_then(|mut f| f.read_to_end(&mut buf)).is_ok()
                && buf == needle.as_bytes()
        })
        .count()
}

/// This machine's own IPv4 addresses, as `hostname -I` lists them: a
/// service listening on 0.0.0.0 answers on every one.
fn host_addresses() -> Vec<String> {
    let out = std::process::Command::new("hostname").arg("-I").output().expect("hostname -I");
    text(&out.stdout).split_whitespace().filter(|a| !a.contains(':')).map(str::to_owned).collect()
}

#[test]
fn egress_is_fenced_from_the_host_and_private_ranges_unless_an_address_is_listed() {
    const TEST: &str =
        "namespace_escape::egress_is_fenced_from_the_host_and_private_ranges_unless_an_address_is_listed";
    let tests = principals(TEST);
    if tests.is_empty() {
        return;
    }
    let Some(peer) = tinybox_tests::netns::TestHost::start("egress") else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    for program in ["slirp4netns", "iptables", "hostname"] {
        if !have(program) && !std::path::Path::new("/usr/sbin").join(program).exists() {
            skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return;
        }
    }
    // A service of the host's on every address, the way a careless daemon listens.
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut host_side: Vec<String> = host_addresses();
    host_side.extend(["127.0.0.1".to_owned(), "10.0.2.2".to_owned(), peer.host_addr.clone()]);
    assert!(host_side.len() > 3, "hostname -I listed no address of this machine's");
    let listed = format!("{}:{}", peer.addr, peer.port);
    for who in tests {
        let connect = |env: &BoxEnv, id: &str, addr: &str, port: &str| {
            probe_value(&probe(env, id, &["connect", addr, port]).stdout, "connect")
        };
        // The test host's address is private: plain egress does not reach it...
        let (env, fenced) = probed_box(&who, &["--network", "egress"]);
        // The command behind the fence (a background job of netwrap.sh)
        // still reads the caller's stdin, not /dev/null.
        let mut cat = env.cli(&["exec", &fenced, "--", "cat"]);
        let mut child = cat.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"through the fence\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            text(&out.stdout),
            "through the fence\n",
            "{}: stdin of an egress box: {}",
            who.label(),
            text(&out.stderr)
        );
        let got = connect(&env, &fenced, &peer.addr, &peer.port.to_string());
        assert_ne!(got.as_deref(), Some("ok"), "{}: plain egress reached the private test host", who.label());
        for addr in &host_side {
            let got = connect(&env, &fenced, addr, &port);
            assert_ne!(got.as_deref(), Some("ok"), "{}: egress reached the host's own service on {addr}", who.label());
        }
        // ...and it does once the caller lists it, on that port only.
        let (env, listing) = probed_box(&who, &["--network", "egress", "--allow-host", &listed]);
        let got = connect(&env, &listing, &peer.addr, &peer.port.to_string());
        assert_eq!(got.as_deref(), Some("ok"), "{}: egress to the listed test host", who.label());
        for addr in &host_side {
            let got = connect(&env, &listing, addr, &port);
            assert_ne!(
                got.as_deref(),
                Some("ok"),
                "{}: a listing box reached the host's service on {addr}",
                who.label()
            );
        }
        assert!(listener.accept().is_err(), "{}: the host's service was reached", who.label());
        let out = env.run(&["--json", "inspect", &listing]);
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect --json");
        assert_eq!(info["workspace"]["network"], "egress", "{}", text(&out.stdout));
        assert_eq!(info["workspace"]["allow_hosts"], serde_json::json!([listed]), "{}", text(&out.stdout));
        let shown = text(&env.run(&["inspect", &listing]).stdout);
        assert!(shown.contains(&format!("not the host, private or local ranges, but for {listed})")), "{shown}");
        // A name is not an exception: one line, and no box.
        let before = env.run(&["--json", "ls"]).stdout;
        let out = env.run(&["create", "--sandbox", "namespace", "--network", "egress", "--allow-host", "allowed.test"]);
        assert_eq!(out.status.code(), Some(1), "{}", who.label());
        assert!(
            text(&out.stderr).contains(r#"allow entry "allowed.test" with network egress"#),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stderr).lines().count(), 1, "{}", text(&out.stderr));
        assert_eq!(env.run(&["--json", "ls"]).stdout, before, "{}: a refused create changed the store", who.label());
    }
}

#[test]
fn exec_basics_through_the_namespace_sandbox() {
    for who in principals("namespace_escape::exec_basics_through_the_namespace_sandbox") {
        let (env, id) = probed_box(&who, &[]);
        let tricky = ["a b", "'q'", ";", "$(id)", "new\nline", ""];
        let mut args = vec!["exec", &id, "--cwd", "sub", "--", "printf", "%s|"];
        std::fs::create_dir(env.workspace.path().join("sub")).unwrap();
        env.who.own(&env.workspace.path().join("sub"));
        args.extend(tricky);
        let out = env.run(&args);
        assert_eq!(text(&out.stdout), "a b|'q'|;|$(id)|new\nline||", "{}: {}", who.label(), text(&out.stderr));
        let mut child = env
            .cli(&["exec", &id, "--", "sh", "-c", "cat; pwd; exit 9"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"piped in\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(9));
        assert_eq!(text(&out.stdout), "piped in\n/workspace\n");
        // A program that is not there is 127, one that cannot run 126, each
        // named in one line of tinybox's (not bwrap's `execvp ...`).
        let out = env.run(&["exec", &id, "--", "no-such-program", "arg"]);
        assert_eq!(out.status.code(), Some(127), "{}", who.label());
        assert_eq!(text(&out.stderr), "tinybox: no program no-such-program in the box\n", "{}", who.label());
        std::fs::write(env.workspace.path().join("notes.txt"), "echo ran\n").unwrap();
        env.who.own(&env.workspace.path().join("notes.txt"));
        let out = env.run(&["exec", &id, "--", "/workspace/notes.txt"]);
        assert_eq!(out.status.code(), Some(126), "{}", who.label());
        assert_eq!(
            text(&out.stderr),
            "tinybox: /workspace/notes.txt in the box is not an executable file\n",
            "{}",
            who.label()
        );
        let out = env.run(&["rm", &id]);
        assert!(out.status.success());
        assert!(env.workspace.path().join("escape").exists(), "rm leaves the caller's own directory alone");
    }
}

/// A static helper that tries every system call route to a setuid or setgid
/// bit, a device and a root owner in the directory it runs in, printing
/// `route=result` for each.
fn privilege_probe() -> std::path::PathBuf {
    const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
static void say(const char *what, long rc) { printf("%s=%s\n", what, rc >= 0 ? "ok" : strerror(errno)); }
static void plain(const char *name) { int fd = open(name, O_CREAT | O_WRONLY, 0755); if (fd >= 0) close(fd); }
int main(void) {
    struct { unsigned long long flags, mode, resolve; } how = { O_CREAT | O_WRONLY, 04755, 0 };
    say("creat", creat("creat", 04755));
    say("open", open("open", O_CREAT | O_WRONLY, 06755));
    say("openat", openat(AT_FDCWD, "openat", O_CREAT | O_WRONLY, 04755));
    say("openat2", syscall(437, AT_FDCWD, "openat2", &how, sizeof how));
    say("tmpfile", open(".", O_TMPFILE | O_WRONLY, 04755));
    say("mknod", mknod("mknod", S_IFREG | 04755, 0));
    say("mkdir", mkdir("mkdir", 02775));
    plain("chmod"); say("chmod", chmod("chmod", 04755));
    plain("chmod_g"); say("chmod_g", chmod("chmod_g", 02755));
    int fd = open("fchmod", O_CREAT | O_WRONLY, 0755); say("fchmod", fchmod(fd, 04755));
    plain("fchmodat"); say("fchmodat", fchmodat(AT_FDCWD, "fchmodat", 06755, 0));
    plain("fchmodat2"); say("fchmodat2", syscall(452, AT_FDCWD, "fchmodat2", 04755, 0));
    mkdir("dir", 0755); say("chmod_dir", chmod("dir", 02775));
    say("device", mknod("device", S_IFCHR | 0666, makedev(1, 3)));
    plain("chowned"); say("chown", chown("chowned", 0, 0));
    return 0;
}
"#;
    static PROBE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| tinybox_tests::compiled_probe("modes", SOURCE)).clone()
}

#[test]
fn nothing_a_box_writes_into_the_workspace_reaches_the_host_with_privilege() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const TEST: &str = "namespace_escape::nothing_a_box_writes_into_the_workspace_reaches_the_host_with_privilege";
    // (who runs tinybox, who owns the workspace): each caller over its own
    // workspace, and root over an unprivileged user's.
    let mut cases: Vec<(Principal, Principal)> = principals(TEST).into_iter().map(|p| (p.clone(), p)).collect();
    if let Some(user) = cases.iter().map(|c| c.0.clone()).find(|p| matches!(p, Principal::User { .. })) {
        cases.push((Principal::Me, user));
    }
    for (runner, owner) in cases {
        let label = format!("{} over a workspace of {:?}", runner.label(), owner);
        let env = BoxEnv::new(&runner);
        let ws = env.workspace.path().to_owned();
        for (helper, name) in
            [(privilege_probe(), "modes"), (tinybox_tests::microvm::file_capability_probe(), "setcap")]
        {
            std::fs::copy(&helper, ws.join(name)).unwrap();
            std::fs::set_permissions(ws.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::create_dir(ws.join("in")).unwrap();
        owner.own_tree(&ws);
        let ws_meta = std::fs::metadata(&ws).unwrap();
        let (uid, gid) = (ws_meta.uid(), ws_meta.gid());
        let id = env.create(&["--sandbox", "namespace"]);

        // The shell's way, the system calls' ways, and file capabilities
        // directly and from a nested user namespace (where the box would
        // hold CAP_SETFCAP over its own files).
        let attack = "cd /workspace; cp /bin/sh x; chmod 4755 x; cp /bin/sh g; chmod g+s g; chown 0:0 x; \
            (cd in && ../modes); ./setcap x; unshare -Ur ./setcap g; echo from the box > note; echo done";
        let out = env.run(&["exec", &id, "--", "sh", "-c", attack]);
        let said = text(&out.stdout);
        assert!(
            said.contains("creat=") && said.ends_with("done\n"),
            "{label}: the attack did not run: {said}{}",
            text(&out.stderr)
        );

        // From outside: every entry is the workspace owner's, and none has a
        // setuid or setgid bit, a file capability, or is a device.
        let mut todo = vec![ws.clone()];
        let mut seen = 0;
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let m = std::fs::symlink_metadata(&path).unwrap();
                let name = path.strip_prefix(&ws).unwrap().display().to_string();
                assert_eq!(m.mode() & 0o6000, 0, "{label}: {name} is {:o} on the host\n{said}", m.mode());
                assert_eq!((m.uid(), m.gid()), (uid, gid), "{label}: {name} is not the workspace owner's\n{said}");
                let xattrs = tinybox_tests::microvm::xattr_names(&path);
                assert!(
                    !xattrs.iter().any(|x| x == "security.capability"),
                    "{label}: {name} has a file capability\n{said}"
                );
                assert!(m.file_type().is_file() || m.file_type().is_dir(), "{label}: {name} is a {:?}", m.file_type());
                if m.is_dir() {
                    todo.push(path.clone());
                }
                seen += 1;
            }
        }
        assert!(seen >= 13, "{label}: the box wrote only {seen} entries: {said}");
        assert_eq!(std::fs::read_to_string(ws.join("note")).unwrap(), "from the box\n", "{label}");
        // The box still makes plain files, executables and directories as it likes.
        for plain in ["in/chmod", "in/fchmod", "x"] {
            assert_eq!(std::fs::metadata(ws.join(plain)).unwrap().mode() & 0o7777, 0o755, "{label}: {plain}");
        }
        assert!(env.run(&["rm", &id]).status.success());
    }
}

#[path = "namespace_escape/limits.rs"]
mod limits;
