//! Sync's fault cases over a real sshd: an unreachable host, a host without
//! tar, and the connection killed mid-transfer (the marker is not written,
//! so the next sync sends again). Each failure is prompt and leaves the
//! store as it was.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tinybox_core::model::{BoxSpec, HostName, Placement, SandboxName, WorkspaceSource};
use tinybox_tests::docker::run;
use tinybox_tests::sshd::{Sshd, engine, ensure_user};

fn spec(host: &str, ns: &str, dir: &Path) -> BoxSpec {
    let mut s = BoxSpec::new(Placement::new(HostName::new(host).unwrap(), SandboxName::passthrough()));
    s.namespace = ns.to_owned();
    s.source = Some(WorkspaceSource::LocalDir { path: dir.to_owned() });
    s
}

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "one\n").unwrap();
    // Enough bytes that the stream outlives a pipe buffer.
    std::fs::write(d.path().join("big.bin"), vec![7u8; 4 << 20]).unwrap();
    d
}

/// A directory of tools for a remote PATH: the named ones, linked to the real ones.
fn toolbox(tools: &[&str]) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("tbx-path").tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for t in tools {
        let real = ["/usr/bin", "/bin"].iter().map(|b| Path::new(b).join(t)).find(|p| p.exists()).unwrap();
        std::os::unix::fs::symlink(real, d.path().join(t)).unwrap();
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_host_fails_create_promptly_and_leaves_no_box() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_faults::an_unreachable_host_fails_create_promptly_and_leaves_no_box",
                &why,
            );
        }
    };
    let mut entry = sshd.entry("root", None);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    entry.config["port"] = closed.into();
    let tb = engine(&[("gone", entry)]);
    let ws = project();
    let started = Instant::now();
    let err = tb.create(spec("gone", "unreach", ws.path())).await.unwrap_err().to_string();
    assert!(err.contains("cannot reach ssh host") && err.contains("Connection refused"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(tb.list().unwrap().is_empty(), "a failed create leaves the store as it was");
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_tar_is_refused_by_name() {
    let tools = toolbox(&["sh", "cat", "mkdir", "rm", "mv", "env", "id"]);
    let sshd = match Sshd::start_with(&format!("SetEnv PATH={}", tools.path().display())) {
        Ok(s) => s,
        Err(why) => return tinybox_tests::skip("ssh_faults::a_host_without_tar_is_refused_by_name", &why),
    };
    let user = ensure_user("tbx-notar", "/bin/bash").unwrap();
    let tb = engine(&[("bare", sshd.entry(&user, None))]);
    // The host itself works: only tar is missing.
    let plain = tb
        .create(BoxSpec::new(Placement::new(HostName::new("bare").unwrap(), SandboxName::passthrough())))
        .await
        .unwrap();
    let out = run(&tb, &plain.id, &["id", "-un"]).await;
    assert_eq!(out.stdout, format!("{user}\n"), "{}", out.stderr);
    let ws = project();
    let err = tb.create(spec("bare", "notar", ws.path())).await.unwrap_err().to_string();
    assert!(err.contains("has no tar"), "{err}");
    assert_eq!(tb.list().unwrap().len(), 1, "only the plain box");
    tb.close().await;
}

/// The far side's marker, or "none".
async fn marker(tb: &tinybox_core::Tinybox, id: &tinybox_core::model::BoxId) -> String {
    run(tb, id, &["sh", "-c", "cat .tinybox-fingerprint 2>/dev/null || echo none"]).await.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_mid_transfer_writes_no_marker_and_the_next_sync_sends_again() {
    // A remote `tar` that, while the hang flag exists, reads nothing and waits:
    // the transfer is then in flight for as long as the test needs.
    let tools = tempfile::Builder::new().prefix("tbx-hang").tempdir().unwrap();
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (hang, started, pid) = (tools.path().join("hang"), tools.path().join("started"), tools.path().join("pid"));
    let script = format!(
        "#!/bin/sh\nif [ -e '{h}' ]; then echo $$ > '{p}'; touch '{s}'; exec sleep 1000; fi\nexec /bin/tar \"$@\"\n",
        h = hang.display(),
        p = pid.display(),
        s = started.display()
    );
    std::fs::write(tools.path().join("tar"), script).unwrap();
    std::fs::set_permissions(tools.path().join("tar"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sshd = match Sshd::start_with(&format!("SetEnv PATH={}:/usr/bin:/bin", tools.path().display())) {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_faults::a_connection_killed_mid_transfer_writes_no_marker_and_the_next_sync_sends_again",
                &why,
            );
        }
    };
    let user = ensure_user("tbx-kill", "/bin/bash").unwrap();
    let tb = engine(&[("far", sshd.entry(&user, None))]);
    let ws = project();
    let info = tb.create(spec("far", "kill", ws.path())).await.unwrap();
    let before = marker(&tb, &info.id).await;
    assert_eq!(before.trim().len(), 64, "{before}");

    // Change the tree, then kill the connection while its transfer is in flight.
    std::fs::write(ws.path().join("a.txt"), "two\n").unwrap();
    std::fs::write(&hang, "").unwrap();
    let sync = tb.sync(&info.id, ws.path());
    let killer = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !started.exists() {
            assert!(Instant::now() < deadline, "the transfer never reached the remote tar");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(sshd.kill_connections() > 0, "a connection was in flight");
    };
    let (result, ()) = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(sync, killer) })
        .await
        .expect("a killed transfer ends");
    let err = result.unwrap_err().to_string();
    assert!(err.contains("marker was not written"), "{err}");
    // The remote `tar` stand-in was under the killed connection.
    let stand_in: i32 = std::fs::read_to_string(&pid).unwrap().trim().parse().unwrap();
    assert!(
        !Path::new(&format!("/proc/{stand_in}/cmdline")).exists()
            || std::fs::read(format!("/proc/{stand_in}/cmdline")).unwrap().is_empty()
    );
    std::fs::remove_file(&hang).unwrap();
    assert_eq!(marker(&tb, &info.id).await, "none\n", "the old marker went before the transfer began");

    // Even back at the old tree, the next sync sends: nothing vouches for the far side.
    std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    let report = tb.sync(&info.id, ws.path()).await.unwrap();
    assert!(report.sent, "{report:?}");
    assert_eq!(marker(&tb, &info.id).await.trim(), report.fingerprint);
    assert_eq!(report.fingerprint, before.trim(), "the same tree, the same fingerprint");
    assert!(!tb.sync(&info.id, ws.path()).await.unwrap().sent);
    tb.remove(&info.id).await.unwrap();
    let (_, _, _) = sshd.ssh(&user, "rm -rf .tinybox");
    tb.close().await;
}
