//! Workspace sync over a real sshd: create on a remote host syncs first and
//! places the box over the copy; an unchanged tree sends nothing; a changed
//! one is sent whole; exclusions follow .gitignore then .boxignore; the CLI's
//! `host add`, `--host ssh:DEST` (through the user's ~/.ssh/config) and
//! `sync` work end to end.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use tinybox_core::model::{BoxSpec, HostName, Placement, SandboxName, WorkspaceSource};
use tinybox_tests::docker::run;
use tinybox_tests::sshd::{Sshd, engine, ensure_user};

fn write(root: &Path, rel: &str, contents: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, contents).unwrap();
}

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "src/main.sh", "echo built\n");
    write(d.path(), ".gitignore", "target/\n.env\n");
    write(d.path(), ".boxignore", "!.env\n");
    write(d.path(), ".env", "TOKEN=for-the-box\n");
    write(d.path(), "target/big.bin", "derived");
    write(d.path(), "notes with spaces.txt", "v1\n");
    std::fs::set_permissions(d.path().join("src/main.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_on_a_remote_host_syncs_first_then_only_changes_are_sent() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_sync::create_on_a_remote_host_syncs_first_then_only_changes_are_sent",
                &why,
            );
        }
    };
    let user = ensure_user("tbx-sync", "/bin/bash").unwrap();
    let tb = engine(&[("far", sshd.entry(&user, None))]);
    let ws = project();
    let mut spec = BoxSpec::new(Placement::new(HostName::new("far").unwrap(), SandboxName::passthrough()));
    spec.namespace = format!("t{}", std::process::id());
    spec.source = Some(WorkspaceSource::LocalDir { path: ws.path().to_owned() });
    let info = tb.create(spec.clone()).await.unwrap();
    let remote = format!("/home/{user}/.tinybox/workspaces/{}-{}", spec.namespace, info.id);
    assert_eq!(info.workspace.as_ref().unwrap().workdir.as_deref(), Some(remote.as_str()));
    assert_eq!(info.spec.source, spec.source, "the record keeps the directory the caller named");

    // The box works on the synced copy, over there, as the remote user.
    let out = run(&tb, &info.id, &["sh", "-c", "pwd; id -un; ./src/main.sh; cat .env; ls -a"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(&lines[..4], [remote.as_str(), user.as_str(), "built", "TOKEN=for-the-box"]);
    assert!(!lines.contains(&"target"), ".gitignore'd target/ was not sent: {lines:?}");
    assert!(lines.contains(&".tinybox-fingerprint") && lines.contains(&"notes with spaces.txt"), "{lines:?}");

    // Unchanged: nothing is sent, so a remote edit survives.
    let out = run(&tb, &info.id, &["sh", "-c", "echo remote-edit > 'notes with spaces.txt'"]).await;
    assert!(out.status.success());
    let report = tb.sync(&info.id, ws.path()).await.unwrap();
    assert!(!report.sent, "{report:?}");
    assert_eq!((report.stream_bytes, report.files), (0, 5));
    let out = run(&tb, &info.id, &["cat", "notes with spaces.txt"]).await;
    assert_eq!(out.stdout, "remote-edit\n", "an unchanged tree sends nothing");
    // Touching files changes no content: still nothing to send.
    let f = std::fs::File::options().write(true).open(ws.path().join("src/main.sh")).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
    assert!(!tb.sync(&info.id, ws.path()).await.unwrap().sent);

    // Changed: the whole tree is sent, and the marker follows.
    write(ws.path(), "notes with spaces.txt", "v2\n");
    let report = tb.sync(&info.id, ws.path()).await.unwrap();
    assert!(report.sent && report.stream_bytes > 0, "{report:?}");
    let out = run(&tb, &info.id, &["sh", "-c", "cat 'notes with spaces.txt' .tinybox-fingerprint"]).await;
    assert_eq!(out.stdout, format!("v2\n{}\n", report.fingerprint));
    assert!(!tb.sync(&info.id, ws.path()).await.unwrap().sent);

    // A marker that cannot be read means "send".
    let out = run(&tb, &info.id, &["sh", "-c", "echo garbage > .tinybox-fingerprint"]).await;
    assert!(out.status.success());
    assert!(tb.sync(&info.id, ws.path()).await.unwrap().sent);
    tb.remove(&info.id).await.unwrap();
    let (_, _, _) = sshd.ssh(&user, &format!("rm -rf {remote}"));
    tb.close().await;
}

fn as_user(user: &str, program: &Path, args: &[&str]) -> Command {
    let mut c = tinybox_tests::sshd::principal(user).command(program, args);
    c.stdin(Stdio::null());
    c
}

fn out_of(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_cli_names_hosts_reaches_ssh_aliases_ad_hoc_and_syncs() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip("ssh_sync::the_cli_names_hosts_reaches_ssh_aliases_ad_hoc_and_syncs", &why);
        }
    };
    let remote_user = ensure_user("tbx-sync", "/bin/bash").unwrap();
    // A local user whose own ~/.ssh/config names the server: ssh:ALIAS works
    // with no tinybox configuration at all.
    let client = ensure_user("tbx-client", "/bin/bash").unwrap();
    let home = Path::new("/home").join(&client);
    let dot_ssh = home.join(".ssh");
    std::fs::create_dir_all(&dot_ssh).unwrap();
    std::fs::copy(&sshd.client_key, dot_ssh.join("tbx_key")).unwrap();
    let alias = format!("tbx-far-{}", sshd.port);
    std::fs::write(
        dot_ssh.join("config"),
        format!(
            "Host {alias}\n  HostName 127.0.0.1\n  Port {}\n  User {remote_user}\n  IdentityFile ~/.ssh/tbx_key\n  UserKnownHostsFile {}\n",
            sshd.port,
            sshd.known_hosts.display()
        ),
    )
    .unwrap();
    let chown = Command::new("chown").args(["-R", &format!("{client}:{client}")]).arg(&dot_ssh).status().unwrap();
    assert!(chown.success());
    std::fs::set_permissions(dot_ssh.join("tbx_key"), std::fs::Permissions::from_mode(0o600)).unwrap();

    let store = tempfile::tempdir().unwrap();
    let ws = project();
    for p in [store.path(), ws.path()] {
        let s = Command::new("chown").args(["-R", &format!("{client}:{client}")]).arg(p).status().unwrap();
        assert!(s.success());
    }
    let tb = tinybox_tests::bin("tinybox");
    let st = store.path().to_str().unwrap();
    let wsp = ws.path().to_str().unwrap();
    let cli = |args: &[&str]| {
        let mut all = vec!["--store", st];
        all.extend_from_slice(args);
        out_of(&mut as_user(&client, &tb, &all))
    };

    // Ad hoc: ssh:ALIAS, resolved by the user's own ssh configuration.
    let dest = format!("ssh:{alias}");
    let (code, id, err) = cli(&["create", "--host", &dest, "--sandbox", "passthrough", "--workspace", wsp]);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_owned();
    let (code, out, err) = cli(&["exec", &id, "--", "sh", "-c", "cat .env; id -un"]);
    assert_eq!((code, out.as_str()), (0, format!("TOKEN=for-the-box\n{remote_user}\n").as_str()), "{err}");
    let (code, out, _) = cli(&["host", "ls"]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("ssh-{alias}")) && out.contains(&alias), "{out}");

    // sync: quiet when not a terminal; --json reports what happened.
    let (code, out, err) = cli(&["--json", "sync", &id]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["sent"], false, "{report}");
    // Each file's hash is kept in the store (not in the workspace, which a
    // box can write), and it never hides a change made since.
    let caches = std::fs::read_dir(store.path().join("cache/sync")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(caches, 1, "one leaf cache for the one synced directory");
    write(ws.path(), "notes with spaces.txt", "v3\n");
    let (code, out, err) = cli(&["--json", "sync", &id, wsp]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["sent"], true, "{report}");
    let (code, err_line) = {
        let (c, _, e) = cli(&["sync", &id]);
        (c, e)
    };
    assert_eq!(code, 0);
    assert!(err_line.contains("unchanged") && !err_line.contains('\r'), "no progress bar off a terminal: {err_line:?}");

    // Named: host add with explicit settings; ls shows it; rm is refused while a box uses it.
    let port = sshd.port.to_string();
    let key = dot_ssh.join("tbx_key");
    let (code, _, err) = cli(&[
        "host",
        "add",
        "builder",
        "--ssh",
        "127.0.0.1",
        "--port",
        &port,
        "--user",
        &remote_user,
        "--identity",
        key.to_str().unwrap(),
        "--known-hosts",
        sshd.known_hosts.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&["host", "add", "bad", "--ssh=-oProxyCommand=x"]);
    assert_ne!(code, 0);
    assert!(err.contains("starts with '-'"), "{err}");
    let (code, _, err) = cli(&["host", "add", "bad", "--ssh", "h", "--inner", "nowhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("no host named nowhere"), "{err}");
    let (code, id2, err) = cli(&["create", "--host", "builder", "--sandbox", "passthrough", "--workspace", wsp]);
    assert_eq!(code, 0, "{err}");
    let id2 = id2.trim().to_owned();
    let (code, out, _) = cli(&["exec", &id2, "--", "cat", "notes with spaces.txt"]);
    assert_eq!((code, out.as_str()), (0, "v3\n"));
    let (code, _, err) = cli(&["host", "rm", "builder"]);
    assert_ne!(code, 0);
    assert!(err.contains(&id2), "{err}");
    for b in [&id, &id2] {
        assert_eq!(cli(&["rm", b]).0, 0);
    }
    let (code, out, err) = cli(&["host", "rm", "builder"]);
    assert_eq!((code, out.trim()), (0, "builder"), "{err}");
    let (code, _, err) = cli(&["host", "rm", "local"]);
    assert_ne!(code, 0);
    assert!(err.contains("built in"), "{err}");
    let (_, _, _) = sshd.ssh(&remote_user, "rm -rf .tinybox");
}
