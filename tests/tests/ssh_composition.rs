//! Composition, live: an ssh host under every sandbox, with no code naming
//! any pairing. ssh + docker (the remote's docker CLI and daemon, a local
//! directory synced first), ssh + namespace (bwrap over there, rootless), and
//! ssh over ssh (a jump host reaching a second sshd through its own ssh
//! configuration).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use tinybox_core::hosts::HostEntry;
use tinybox_core::model::{BoxSpec, ExecRequest, HostName, Placement, SandboxName, WorkspaceSource};
use tinybox_tests::docker::{self, Namespace, run, run_request};
use tinybox_tests::sshd::{Sshd, engine, ensure_user};

fn project(marker: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("hello.txt"), format!("{marker}\n")).unwrap();
    std::fs::write(d.path().join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir(d.path().join("target")).unwrap();
    std::fs::write(d.path().join("target/junk"), "x").unwrap();
    d
}

fn spec(host: &str, sandbox: &str, ns: &str, dir: &Path) -> BoxSpec {
    let mut s = BoxSpec::new(Placement::new(HostName::new(host).unwrap(), SandboxName::new(sandbox).unwrap()));
    s.namespace = ns.to_owned();
    s.source = Some(WorkspaceSource::LocalDir { path: dir.to_owned() });
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_and_docker_is_docker_over_there_with_the_directory_synced_first() {
    if let Some(why) = docker::unavailable() {
        return tinybox_tests::skip(
            "ssh_composition::ssh_and_docker_is_docker_over_there_with_the_directory_synced_first",
            &why,
        );
    }
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_composition::ssh_and_docker_is_docker_over_there_with_the_directory_synced_first",
                &why,
            );
        }
    };
    // The remote user is root on this machine's sshd, with the test dockerd's socket.
    let tb = engine(&[("far", sshd.entry("root", None))]);
    let ns = Namespace::new("sshdock");
    let ws = project("from-the-laptop");
    let info = tb.create(spec("far", "docker", &ns.name, ws.path())).await.unwrap();
    let remote = format!("/root/.tinybox/workspaces/{}-{}", ns.name, info.id);

    let out = run(&tb, &info.id, &["sh", "-c", "pwd; cat hello.txt; ls"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "/workspace\nfrom-the-laptop\nhello.txt\n", "synced, with target/ left out");
    // The container's workspace is the synced copy on the far side, not the local directory.
    let source =
        docker::docker_ok(&["inspect", "-f", "{{range .Mounts}}{{.Source}}{{end}}", &ns.container(info.id.as_str())]);
    assert_eq!(source, remote);

    // A change is synced into the running box.
    std::fs::write(ws.path().join("hello.txt"), "changed\n").unwrap();
    assert!(tb.sync(&info.id, ws.path()).await.unwrap().sent);
    let out = run(&tb, &info.id, &["cat", "hello.txt"]).await;
    assert_eq!(out.stdout, "changed\n");
    // Quoted arguments survive ssh's command string and docker exec.
    let out = run_request(&tb, &info.id, ExecRequest::new(["printf", "%s|", "a b", "'q'", "$x", ""]), b"").await;
    assert_eq!(out.stdout, "a b|'q'|$x||");
    tb.remove(&info.id).await.unwrap();
    let _ = std::fs::remove_dir_all(&remote);
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_and_namespace_is_bwrap_over_there_rootless() {
    if !tinybox_tests::have("bwrap") {
        return tinybox_tests::skip(
            "ssh_composition::ssh_and_namespace_is_bwrap_over_there_rootless",
            "no bwrap (apt-get install bubblewrap)",
        );
    }
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip("ssh_composition::ssh_and_namespace_is_bwrap_over_there_rootless", &why);
        }
    };
    let user = ensure_user("tbx-ns", "/bin/bash").unwrap();
    let tb = engine(&[("far", sshd.entry(&user, None))]);
    let ws = project("confined-over-there");
    let info = tb.create(spec("far", "namespace", "nsbox", ws.path())).await.unwrap();
    assert_eq!(info.workspace.as_ref().unwrap().isolation.to_string(), "kernel");
    let out =
        run(&tb, &info.id, &["sh", "-c", "pwd; cat hello.txt; echo made > out.txt; ls /proc | grep -c '^[0-9]'"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(&lines[..2], ["/workspace", "confined-over-there"]);
    let pids: u32 = lines[2].parse().unwrap();
    assert!(pids < 10, "a pid namespace of its own: it sees {pids} processes");
    // The write landed in the remote user's synced copy.
    let (code, out, err) = sshd.ssh(&user, "cat .tinybox/workspaces/nsbox-box-0/out.txt && rm -rf .tinybox");
    assert_eq!((code, out.as_str()), (0, "made\n"), "{err}");
    tb.remove(&info.id).await.unwrap();
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_over_ssh_reaches_a_second_sshd_through_a_jump_host() {
    let (a, b) = match (Sshd::start(), Sshd::start()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => {
            return tinybox_tests::skip(
                "ssh_composition::ssh_over_ssh_reaches_a_second_sshd_through_a_jump_host",
                &why,
            );
        }
    };
    let jump = ensure_user("tbx-jump", "/bin/bash").unwrap();
    let far = ensure_user("tbx-far", "/bin/dash").unwrap();
    // Only the jump user knows how to reach B: an alias in its own ssh config
    // and a key only it holds. Nothing on this side names B at all.
    let dot_ssh = Path::new("/home").join(&jump).join(".ssh");
    std::fs::create_dir_all(&dot_ssh).unwrap();
    std::fs::copy(&b.client_key, dot_ssh.join("b_key")).unwrap();
    let alias = format!("tbx-b-{}", b.port);
    std::fs::write(
        dot_ssh.join("config"),
        format!(
            "Host {alias}\n  HostName 127.0.0.1\n  Port {}\n  IdentityFile ~/.ssh/b_key\n  UserKnownHostsFile {}\n",
            b.port,
            b.known_hosts.display()
        ),
    )
    .unwrap();
    assert!(Command::new("chown").args(["-R", &format!("{jump}:{jump}")]).arg(&dot_ssh).status().unwrap().success());
    std::fs::set_permissions(dot_ssh.join("b_key"), std::fs::Permissions::from_mode(0o600)).unwrap();

    let far_entry = HostEntry {
        driver: "ssh".into(),
        config: serde_json::json!({ "destination": format!("{far}@{alias}") }),
        inner: Some(HostName::new("jump").unwrap()),
    };
    let tb = engine(&[("jump", a.entry(&jump, None)), ("far", far_entry)]);
    let ws = project("two-hops");
    let info = tb.create(spec("far", "passthrough", "hop", ws.path())).await.unwrap();
    let out =
        run(&tb, &info.id, &["sh", "-c", "id -un; cat hello.txt; echo \"$SSH_CONNECTION\" | cut -d' ' -f4"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, format!("{far}\ntwo-hops\n{}\n", b.port), "ran on B as {far}, through A");
    // Two rounds of quoting (B's dash inside A's bash) keep every byte.
    let args = ["", "'", "\"'\"", "$(id)", "a\\b", "x y\nz", ";|&"];
    let mut argv = vec!["printf", "%s|"];
    argv.extend(args);
    let out = run(&tb, &info.id, &argv).await;
    assert_eq!(out.stdout, args.iter().map(|a| format!("{a}|")).collect::<String>());
    // A's log shows the jump user logging in; B's shows the far user.
    assert!(a.log().contains(&format!("Accepted publickey for {jump}")), "{}", a.log());
    assert!(b.log().contains(&format!("Accepted publickey for {far}")), "{}", b.log());
    tb.remove(&info.id).await.unwrap();
    let (_, _, _) = b.ssh(&far, "rm -rf .tinybox");
    tb.close().await;
}
