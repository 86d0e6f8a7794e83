//! Snapshots of microVM boxes booted from the initramfs (ADR 0036): a box
//! with a workspace of its own has it copied, so `stop`/`resume` keep its
//! files and a box made from the snapshot does not see later writes; a box
//! over the caller's directory is bound to that directory again. Checked
//! from outside (the host's files) and inside (the guest's commands).

use std::path::PathBuf;
use std::process::Stdio;

use tinybox_tests::microvm::{TCG, processes_under};
use tinybox_tests::{Cli, need_microvm};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(cli: &Cli, args: &[&str]) -> String {
    let out = cli.cmd(args).stdin(Stdio::null()).output().expect("run tinybox");
    assert!(out.status.success(), "tinybox {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

fn sh(cli: &Cli, id: &str, script: &str) -> String {
    ok(cli, &["exec", id, "--", "sh", "-c", script])
}

fn create(cli: &Cli, extra: &[&str]) -> String {
    let mut args = vec!["create", "--persistent"];
    args.extend_from_slice(TCG);
    args.extend_from_slice(extra);
    ok(cli, &args).trim().to_owned()
}

fn snapshots(cli: &Cli) -> Vec<PathBuf> {
    let dir = cli.home.path().join("drivers/microvm/snapshots");
    std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

#[test]
fn a_box_s_own_workspace_is_kept_across_stop_and_resume_and_a_snapshot_is_that_instant() {
    need_microvm!(
        "microvm_snapshots::a_box_s_own_workspace_is_kept_across_stop_and_resume_and_a_snapshot_is_that_instant"
    );
    let cli = Cli::new();
    let id = create(&cli, &[]);
    sh(&cli, &id, "echo before > /workspace/a && chmod 700 /workspace/a");
    let snap = ok(&cli, &["--json", "snapshot", &id]);
    let snap: serde_json::Value = serde_json::from_str(&snap).unwrap();
    let snap = snap["id"].as_str().expect("a snapshot id").to_owned();
    sh(&cli, &id, "echo after > /workspace/b");
    // A box from the snapshot has the file before it, its guest mode with it, and not the one after.
    let mut args = vec!["create", "--from-snapshot", &snap];
    args.extend_from_slice(TCG);
    let copy = ok(&cli, &args).trim().to_owned();
    let seen = sh(&cli, &copy, "cat /workspace/a; stat -c %a /workspace/a; test -e /workspace/b && echo b; true");
    assert_eq!(seen, "before\n700\n", "the box from the snapshot");
    ok(&cli, &["rm", &copy]);
    // Stop and resume: the box's own files come back.
    ok(&cli, &["stop", &id]);
    ok(&cli, &["resume", &id]);
    assert_eq!(sh(&cli, &id, "cat /workspace/a /workspace/b"), "before\nafter\n");
    ok(&cli, &["rm", &id]);
    ok(&cli, &["prune"]);
    assert_eq!(snapshots(&cli), Vec::<PathBuf>::new(), "prune left snapshots");
    assert_eq!(processes_under(cli.home.path()), vec![]);
}

#[test]
fn a_box_over_the_caller_s_directory_is_bound_to_it_again_after_resume() {
    need_microvm!("microvm_snapshots::a_box_over_the_caller_s_directory_is_bound_to_it_again_after_resume");
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let id = create(&cli, &["--workspace", ws.path().to_str().unwrap()]);
    sh(&cli, &id, "echo from-the-box > /workspace/note");
    ok(&cli, &["stop", &id]);
    // The directory is the caller's: what changes in it while the box is stopped is what it sees.
    std::fs::write(ws.path().join("host"), "from-the-host\n").unwrap();
    ok(&cli, &["resume", &id]);
    assert_eq!(sh(&cli, &id, "cat /workspace/note /workspace/host"), "from-the-box\nfrom-the-host\n");
    // Its snapshot holds no copy of the directory.
    let kept = snapshots(&cli);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(!kept[0].join("workspace").exists(), "a bound directory was copied into {}", kept[0].display());
    ok(&cli, &["rm", &id]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("note")).unwrap(),
        "from-the-box\n",
        "rm kept the caller's files"
    );
    ok(&cli, &["prune"]);
    assert_eq!(processes_under(cli.home.path()), vec![]);
}
