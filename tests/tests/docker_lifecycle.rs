//! Live suite, part two: what a docker box keeps over time — snapshots and
//! forks, templates, stop and resume, autosnapshots on their cadence — and
//! namespaces that let two stores share one daemon. Each test skips,
//! saying why, when no daemon answers.

use std::sync::Arc;

use tinybox_core::clock::{ManualClock, SystemClock};
use tinybox_core::engine::Autosnapshot;
use tinybox_core::model::{BoxSpec, Lifecycle, Placement, WorkspaceSource};
use tinybox_tests::docker::{self, Namespace, docker, docker_ok, run, run_ok};
use tinybox_tests::{Cli, skip};

macro_rules! need_docker {
    ($test:expr) => {
        if let Some(why) = docker::unavailable() {
            skip($test, &why);
            return;
        }
    };
}

fn is_snapshot_id(id: &str) -> bool {
    id.strip_prefix("sha-").is_some_and(|h| h.len() == 12 && h.chars().all(|c| c.is_ascii_hexdigit()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_sees_the_files_written_before_its_snapshot_and_not_after() {
    need_docker!("docker_lifecycle::a_fork_sees_the_files_written_before_its_snapshot_and_not_after");
    let ns = Namespace::new("fork");
    let (tb, _dir) = docker::engine(Arc::new(SystemClock));
    let original = tb.create(docker::spec(&ns)).await.unwrap();
    run_ok(&tb, &original.id, &["sh", "-c", "mkdir /data && echo before > /data/a"]).await;

    // The id is the whole record: docker resolves it as an image reference.
    let snap = tb.snapshot(&original.id).await.unwrap();
    assert!(is_snapshot_id(snap.id.as_str()), "{}", snap.id);
    assert_eq!(docker_ok(&["image", "inspect", "--format", "{{.Id}}", snap.id.as_str()])[7..19], snap.id.as_str()[4..]);

    let fork = tb.fork(&original.id).await.unwrap();
    assert_ne!(fork.id, original.id);
    run_ok(&tb, &original.id, &["sh", "-c", "echo after > /data/b"]).await;
    assert_eq!(run_ok(&tb, &fork.id, &["cat", "/data/a"]).await, "before\n");
    assert!(!run(&tb, &fork.id, &["test", "-e", "/data/b"]).await.status.success(), "the fork saw a later write");

    // A box started from the first snapshot directly sees the same.
    let mut spec = docker::spec(&ns);
    spec.source = Some(WorkspaceSource::Snapshot { id: snap.id.clone() });
    let from_snapshot = tb.create(spec).await.unwrap();
    assert_eq!(run_ok(&tb, &from_snapshot.id, &["cat", "/data/a"]).await, "before\n");
    tb.close().await;
}

#[test]
fn a_template_names_a_snapshot_that_new_boxes_start_from() {
    need_docker!("docker_lifecycle::a_template_names_a_snapshot_that_new_boxes_start_from");
    let ns = Namespace::new("template");
    let cli = Cli::new();
    let docker_args = ["--sandbox", "docker", "--namespace", ns.name.as_str()];
    let id = cli.create(&docker_args);
    assert_eq!(cli.run(&["exec", &id, "--", "sh", "-c", "echo provisioned > /etc/marker"]).0, 0);
    let (code, out, err) = cli.run(&["template", "save", "tools", &id]);
    assert_eq!(code, 0, "{err}");
    let snapshot = out.split_whitespace().nth(1).unwrap().to_owned();
    assert!(is_snapshot_id(&snapshot), "{out}");
    assert!(cli.run(&["template", "ls"]).1.contains(&format!("tools  {snapshot}")));

    let from = cli.create(&[docker_args.as_slice(), &["--from-template", "tools"]].concat());
    assert_ne!(from, id);
    assert_eq!(cli.run(&["exec", &from, "--", "cat", "/etc/marker"]).1, "provisioned\n");
    let (_, out, _) = cli.run(&["inspect", &from]);
    assert!(out.contains(&format!("snapshot {snapshot}")), "{out}");
    // A template of another sandbox's snapshot is refused by name.
    let (code, _, err) = cli.run(&["create", "--sandbox", "passthrough", "--from-template", "tools"]);
    assert_eq!(code, 1);
    assert!(err.contains("template tools is a docker snapshot"), "{err}");
}

#[test]
fn stop_and_resume_keep_the_workspace_and_the_files_written_elsewhere() {
    need_docker!("docker_lifecycle::stop_and_resume_keep_the_workspace_and_the_files_written_elsewhere");
    let ns = Namespace::new("stop");
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let docker_args = ["--sandbox", "docker", "--namespace", ns.name.as_str()];
    let id =
        cli.create(&[docker_args.as_slice(), &["--persistent", "--workspace", ws.path().to_str().unwrap()]].concat());
    let write = "echo kept > /workspace/w.txt && mkdir -p /data && echo inside > /data/r.txt";
    assert_eq!(cli.run(&["exec", &id, "--", "sh", "-c", write]).0, 0);

    // An ephemeral box has nothing to resume into.
    let ephemeral = cli.create(&docker_args);
    let (code, _, err) = cli.run(&["stop", &ephemeral]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("box {ephemeral} is ephemeral")) && err.contains("--persistent"), "{err}");

    let (code, out, err) = cli.run(&["stop", &id]);
    assert_eq!((code, out.trim()), (0, id.as_str()), "{err}");
    assert_ne!(docker(&["container", "inspect", &ns.container(&id)]).0, 0, "stop removes the container");
    let (_, out, _) = cli.run(&["inspect", &id]);
    assert!(out.contains("stopped (stopped by `tinybox stop`"), "{out}");
    let (code, _, err) = cli.run(&["exec", &id, "--", "true"]);
    assert_eq!(code, 125);
    assert!(err.contains(&format!("box {id} is stopped; `tinybox resume {id}` brings it back")), "{err}");
    let (code, out, _) = cli.run(&["autosnapshot"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with(&id) && l.contains("stopped")), "{out}");
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_eq!(code, 1);
    assert!(err.contains("already stopped"), "{err}");

    let (code, out, err) = cli.run(&["resume", &id]);
    assert_eq!((code, out.trim()), (0, id.as_str()), "{err}");
    assert!(err.contains("resumed from snapshot sha-"), "{err}");
    let (code, out, err) = cli.run(&["exec", &id, "--", "cat", "/workspace/w.txt", "/data/r.txt"]);
    assert_eq!((code, out.as_str()), (0, "kept\ninside\n"), "{err}");
    assert_eq!(docker_ok(&["inspect", "--format", "{{.State.Status}}", &ns.container(&id)]), "running");
    let (code, _, err) = cli.run(&["resume", &id]);
    assert_eq!(code, 1);
    assert!(err.contains("is not stopped"), "{err}");
    assert_eq!(cli.run(&["rm", &id, &ephemeral]).0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autosnapshots_are_taken_when_due_by_exec_and_by_the_cron_command() {
    need_docker!("docker_lifecycle::autosnapshots_are_taken_when_due_by_exec_and_by_the_cron_command");
    let ns = Namespace::new("autosnap");
    let clock = Arc::new(ManualClock::new(1_000_000));
    let (tb, _dir) = docker::engine(clock.clone());
    let mut spec = docker::spec(&ns);
    spec.lifecycle = Lifecycle::Persistent { autosnapshot_secs: 60 };
    let kept = tb.create(spec).await.unwrap();
    let ephemeral = tb.create(docker::spec(&ns)).await.unwrap();
    let mut unconfined = BoxSpec::new(Placement::local_passthrough());
    unconfined.lifecycle = Lifecycle::Persistent { autosnapshot_secs: 1 };
    let unconfined = tb.create(unconfined).await.unwrap();
    let snapshots = |tb: &tinybox_core::Tinybox| tb.get(&kept.id).unwrap().snapshots;

    let report = tb.autosnapshot().await.unwrap();
    assert_eq!(report.len(), 2, "ephemeral boxes have no autosnapshot: {report:?}");
    assert_eq!((&report[0].id, &report[0].outcome), (&kept.id, &Autosnapshot::NotDue { due_at: 1_000_060 }));
    assert_eq!(report[1].id, unconfined.id);
    assert_eq!(report[1].outcome, Autosnapshot::NotDue { due_at: 1_000_001 });
    run_ok(&tb, &kept.id, &["true"]).await;
    assert!(snapshots(&tb).is_empty(), "not due yet");

    // Due: the next command in the box takes it first, and it holds what was there.
    run_ok(&tb, &kept.id, &["sh", "-c", "echo one > /etc/gen"]).await;
    clock.advance(60);
    run_ok(&tb, &kept.id, &["sh", "-c", "echo two > /etc/gen"]).await;
    let taken = snapshots(&tb);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].taken_at, Some(1_000_060));
    let mut spec = docker::spec(&ns);
    spec.source = Some(WorkspaceSource::Snapshot { id: taken[0].id.clone() });
    let restored = tb.create(spec).await.unwrap();
    assert_eq!(run_ok(&tb, &restored.id, &["cat", "/etc/gen"]).await, "one\n", "taken before the command ran");

    // The cron command takes what is due, and only that.
    let report = tb.autosnapshot().await.unwrap();
    assert_eq!(report[0].outcome, Autosnapshot::NotDue { due_at: 1_000_120 });
    clock.advance(60);
    let report = tb.autosnapshot().await.unwrap();
    let Autosnapshot::Taken { snapshot } = &report[0].outcome else { panic!("{report:?}") };
    let reason = "sandbox passthrough does not support snapshot".to_owned();
    assert_eq!(report[1].outcome, Autosnapshot::Unsupported { reason }, "due, but nothing can take it");
    assert_eq!(snapshots(&tb).last().map(|s| &s.id), Some(snapshot));
    assert_eq!(snapshots(&tb).len(), 2);
    assert!(tb.get(&ephemeral.id).unwrap().snapshots.is_empty());
    tb.close().await;
}

#[test]
fn two_stores_in_different_namespaces_both_have_a_box_0_on_one_daemon() {
    need_docker!("docker_lifecycle::two_stores_in_different_namespaces_both_have_a_box_0_on_one_daemon");
    let (a, b, c) = (Namespace::new("ns-a"), Namespace::new("ns-b"), Namespace::new("ns-c"));
    // One by flag, one by its store's config.json.
    let first = Cli::new();
    let second = Cli::new();
    std::fs::write(second.home.path().join("config.json"), format!("{{\"namespace\": \"{}\"}}", b.name)).unwrap();
    let id_a = first.create(&["--sandbox", "docker", "--namespace", &a.name]);
    let id_b = second.create(&["--sandbox", "docker"]);
    assert_eq!((id_a.as_str(), id_b.as_str()), ("box-0", "box-0"));
    assert_eq!(first.run(&["exec", &id_a, "--", "sh", "-c", "echo a > /tmp/who"]).0, 0);
    assert_eq!(second.run(&["exec", &id_b, "--", "sh", "-c", "echo b > /tmp/who"]).0, 0);
    assert_eq!(first.run(&["exec", &id_a, "--", "cat", "/tmp/who"]).1, "a\n");
    assert_eq!(second.run(&["exec", &id_b, "--", "cat", "/tmp/who"]).1, "b\n");
    docker_ok(&["container", "inspect", &a.container("box-0")]);
    docker_ok(&["container", "inspect", &b.container("box-0")]);

    // A flag beats the file.
    let third = Cli::new();
    std::fs::write(third.home.path().join("config.json"), format!("{{\"namespace\": \"{}\"}}", b.name)).unwrap();
    assert_eq!(third.create(&["--sandbox", "docker", "--namespace", &c.name]), "box-0");
    docker_ok(&["container", "inspect", &c.container("box-0")]);

    // Two stores that share a namespace would fight over the name: refused, and said so.
    let clash = Cli::new();
    let (code, _, err) = clash.run(&["create", "--sandbox", "docker", "--namespace", &a.name]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("another store uses namespace {}", a.name)), "{err}");
    assert_eq!(first.run(&["exec", &id_a, "--", "cat", "/tmp/who"]).1, "a\n", "the other store's box is untouched");

    assert_eq!(first.run(&["rm", &id_a]).0, 0);
    assert_eq!(second.run(&["exec", &id_b, "--", "cat", "/tmp/who"]).1, "b\n", "removing one leaves the other");
}

/// What box `id` shows under /workspace (an error line when it has none).
fn workspace_listing(cli: &Cli, id: &str) -> String {
    let (_, out, err) = cli.run(&["exec", id, "--", "sh", "-c", "ls -A /workspace; cat /workspace/secret.txt"]);
    format!("{out}{err}")
}

#[test]
fn an_image_label_never_chooses_the_host_directory_a_box_binds() {
    need_docker!("docker_lifecycle::an_image_label_never_chooses_the_host_directory_a_box_binds");
    let ns = Namespace::new("label");
    let cli = Cli::new();
    let secret_dir = tempfile::tempdir().unwrap();
    std::fs::write(secret_dir.path().join("secret.txt"), "host secret\n").unwrap();
    let image = docker::image_claiming(&ns, &format!("tbx-claim-{}", std::process::id()), secret_dir.path());
    let args = ["--sandbox", "docker", "--namespace", ns.name.as_str()];
    let shows_secret = |id: &str| {
        let seen = workspace_listing(&cli, id);
        seen.contains("secret.txt\n") || seen.contains("host secret")
    };

    let original = cli.create(&[args.as_slice(), &["--untrusted", "--persistent", "--image", &image]].concat());
    assert!(!shows_secret(&original), "the image's own box bound the claimed directory");
    let (code, fork, err) = cli.run(&["fork", &original]);
    assert_eq!(code, 0, "{err}");
    let fork = fork.trim().to_owned();
    assert!(!shows_secret(&fork), "a fork bound the directory its image's label claims");

    let (code, snap, err) = cli.run(&["snapshot", &original]);
    assert_eq!(code, 0, "{err}");
    let from_snapshot = cli.create(&[args.as_slice(), &["--from-snapshot", snap.trim()]].concat());
    assert!(!shows_secret(&from_snapshot), "--from-snapshot bound the claimed directory");

    assert_eq!(cli.run(&["template", "save", "claimed", &original]).0, 0);
    let from_template = cli.create(&[args.as_slice(), &["--from-template", "claimed"]].concat());
    assert!(!shows_secret(&from_template), "--from-template bound the claimed directory");

    assert_eq!(cli.run(&["stop", &original]).0, 0);
    let (code, _, err) = cli.run(&["resume", &original]);
    assert_eq!(code, 0, "{err}");
    assert!(!shows_secret(&original), "resume bound the claimed directory");

    // Any local image is not a snapshot of this store, whatever it claims.
    // Ids and states only: the table's AGE and EXPIRES columns tick while the test runs.
    let boxes = || {
        let listed: serde_json::Value = serde_json::from_str(&cli.run(&["--json", "ls"]).1).expect("ls --json is JSON");
        let rows = listed.as_array().cloned().unwrap_or_default();
        rows.iter().map(|b| format!("{} {}", b["id"], b["state"])).collect::<Vec<_>>()
    };
    let before = boxes();
    let containers = || docker_ok(&["ps", "-aq", "--filter", &format!("label=tinybox.namespace={}", ns.name)]);
    let running = containers();
    let (code, out, err) = cli.run(&[["create"].as_slice(), &args, &["--from-snapshot", &image]].concat());
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains(&format!("snapshot {image} was not made by this store")), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(boxes(), before, "a refused create left a box behind");
    assert_eq!(containers(), running, "a refused create left a container behind");

    let listed: Vec<_> = std::fs::read_dir(secret_dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(listed, ["secret.txt"], "a box wrote into the claimed directory");
    assert_eq!(cli.run(&["rm", &original, &fork, &from_snapshot, &from_template]).0, 0);
}

#[test]
fn a_fork_of_a_workspace_box_still_binds_its_directory_as_its_owner() {
    use std::os::unix::fs::MetadataExt;
    need_docker!("docker_lifecycle::a_fork_of_a_workspace_box_still_binds_its_directory_as_its_owner");
    let ns = Namespace::new("wsfork");
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("mine.txt"), "the caller's\n").unwrap();
    let args = ["--sandbox", "docker", "--namespace", ns.name.as_str()];
    let id = cli.create(&[args.as_slice(), &["--persistent", "--workspace", ws.path().to_str().unwrap()]].concat());
    let (code, fork, err) = cli.run(&["fork", &id]);
    assert_eq!(code, 0, "{err}");
    let fork = fork.trim().to_owned();
    let (code, out, err) = cli.run(&["exec", &fork, "--", "sh", "-c", "cat mine.txt && echo forked > f.txt"]);
    assert_eq!((code, out.as_str()), (0, "the caller's\n"), "{err}");
    let owner = std::fs::metadata(ws.path()).unwrap();
    let made = std::fs::metadata(ws.path().join("f.txt")).unwrap();
    assert_eq!((made.uid(), made.gid()), (owner.uid(), owner.gid()));
    // ...and so does a box from a template of it, after the box is gone.
    assert_eq!(cli.run(&["template", "save", "ws", &id]).0, 0);
    assert_eq!(cli.run(&["rm", &id, &fork]).0, 0);
    let from = cli.create(&[args.as_slice(), &["--from-template", "ws"]].concat());
    let (code, out, err) = cli.run(&["exec", &from, "--", "cat", "/workspace/f.txt"]);
    assert_eq!((code, out.as_str()), (0, "forked\n"), "{err}");
    assert_eq!(cli.run(&["rm", &from]).0, 0);
}

/// A create that never answered (its caller killed after `docker run`)
/// leaves a `creating` record and a running container. `rm` finds the
/// container from the record alone — its namespace and identifier — and
/// removes both; the leftover is made here by hand, so the test does not
/// depend on winning a race with a kill.
#[test]
fn rm_removes_what_an_interrupted_create_left() {
    need_docker!("docker_lifecycle::rm_removes_what_an_interrupted_create_left");
    let ns = Namespace::new("interrupted");
    let cli = Cli::new();
    let id = tinybox_core::model::BoxId::new("box-0").unwrap();
    let mut spec = BoxSpec::new(Placement::new(
        tinybox_core::model::HostName::local(),
        tinybox_core::model::SandboxName::new("docker").unwrap(),
    ));
    spec.namespace = ns.name.clone();
    let store = tinybox_core::store::FileStore::open(cli.home.path()).unwrap();
    tinybox_core::store::Store::insert(&store, tinybox_core::model::BoxInfo::creating(id, spec, Some(1))).unwrap();
    let container = ns.container("box-0");
    let label = format!("tinybox.namespace={}", ns.name);
    docker_ok(&["run", "-d", "--name", &container, "--label", &label, docker::BASE_IMAGE, "sleep", "600"]);

    let (_, listing, _) = cli.run(&["--json", "ls"]);
    let boxes: serde_json::Value = serde_json::from_str(&listing).unwrap();
    assert_eq!(boxes[0]["phase"], "creating", "{listing}");
    let (code, _, err) = cli.run(&["rm", "box-0"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(docker(&["container", "inspect", &container]).0, 0, "rm left the container {container} behind");
    assert_eq!(cli.run(&["--json", "ls"]).1.trim(), "[]");
    // Nothing there any more: a second leftover record is still forgotten.
    let id = tinybox_core::model::BoxId::new("box-0").unwrap();
    let mut spec = BoxSpec::new(Placement::new(
        tinybox_core::model::HostName::local(),
        tinybox_core::model::SandboxName::new("docker").unwrap(),
    ));
    spec.namespace = ns.name.clone();
    tinybox_core::store::Store::insert(&store, tinybox_core::model::BoxInfo::creating(id, spec, Some(1))).unwrap();
    assert_eq!(cli.run(&["rm", "box-0"]).0, 0);
}

/// The namespace a store recorded for itself on its first create.
fn store_namespace(cli: &Cli) -> Namespace {
    let text =
        std::fs::read_to_string(cli.home.path().join("config.json")).expect("the first create records config.json");
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    // Dropping it removes whatever the test left in that namespace.
    Namespace { name: config["namespace"].as_str().expect("a namespace").to_owned() }
}

#[test]
fn two_fresh_stores_without_a_namespace_never_touch_each_others_box_0() {
    need_docker!("docker_lifecycle::two_fresh_stores_without_a_namespace_never_touch_each_others_box_0");
    let (first, second) = (Cli::new(), Cli::new());
    let id_a = first.create(&["--sandbox", "docker"]);
    let ns_a = store_namespace(&first);
    let id_b = second.create(&["--sandbox", "docker"]);
    let ns_b = store_namespace(&second);
    assert_eq!((id_a.as_str(), id_b.as_str()), ("box-0", "box-0"));
    assert_ne!(ns_a.name, ns_b.name, "two fresh stores share a namespace");
    assert_ne!(ns_a.name, "default");
    let running = |c: &str| docker_ok(&["container", "inspect", "--format", "{{.State.Running}}", c]);
    assert_eq!(running(&ns_a.container("box-0")), "true");
    assert_eq!(running(&ns_b.container("box-0")), "true");

    let (code, _, err) = first.run(&["rm", &id_a]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(docker(&["container", "inspect", &ns_a.container("box-0")]).0, 0, "rm left its own container");
    assert_eq!(running(&ns_b.container("box-0")), "true", "rm in one store removed the other's box-0");
    assert_eq!(second.run(&["exec", &id_b, "--", "true"]).0, 0);
}

/// Whether the daemon has an image by this name.
fn has_image(name: &str) -> bool {
    docker(&["image", "inspect", "--format", "{{.Id}}", name]).0 == 0
}

/// `tinybox --json ARGS`, parsed; the command must succeed.
fn json_of(cli: &Cli, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = cli.run(&[&["--json"], args].concat());
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} printed {out:?}: {e}"))
}

#[test]
fn prune_removes_the_snapshots_of_removed_boxes_and_keeps_a_templates_and_a_stopped_boxs() {
    need_docker!(
        "docker_lifecycle::prune_removes_the_snapshots_of_removed_boxes_and_keeps_a_templates_and_a_stopped_boxs"
    );
    let ns = Namespace::new("prune");
    let cli = Cli::new();
    let args = ["--sandbox", "docker", "--namespace", ns.name.as_str()];
    let original = cli.create(&args);
    let (code, out, err) = cli.run(&["snapshot", &original]);
    assert_eq!(code, 0, "{err}");
    let taken = out.trim().to_owned();
    let (code, fork, err) = cli.run(&["fork", &original]);
    assert_eq!(code, 0, "{err}");
    let fork = fork.trim().to_owned();
    let forked_from = json_of(&cli, &["inspect", &fork])["spec"]["source"]["id"].as_str().unwrap().to_owned();

    let saved = cli.create(&args);
    let template = json_of(&cli, &["template", "save", "keep", &saved])["snapshot"].as_str().unwrap().to_owned();
    let stopped = cli.create(&[args.as_slice(), &["--persistent"]].concat());
    assert_eq!(cli.run(&["stop", &stopped]).0, 0);
    let newest = json_of(&cli, &["inspect", &stopped])["snapshots"][0]["id"].as_str().unwrap().to_owned();
    for id in [&original, &fork, &saved] {
        assert_eq!(cli.run(&["rm", id]).0, 0);
    }
    let all = [&taken, &forked_from, &template, &newest];
    assert!(all.iter().all(|s| is_snapshot_id(s) && has_image(s)), "{all:?}");

    // The store still knows the removed boxes' snapshots, and why the others stay.
    let listed = json_of(&cli, &["snapshot", "ls"]);
    let kept = |id: &str| listed.as_array().unwrap().iter().find(|s| s["id"] == id).unwrap()["kept_by"].clone();
    assert_eq!(kept(&taken), serde_json::json!([]));
    assert_eq!(kept(&forked_from), serde_json::json!([]));
    assert_eq!(kept(&template), serde_json::json!([{"kind": "template", "template": "keep"}]));
    assert_eq!(kept(&newest), serde_json::json!([{"kind": "resume", "box": stopped}]));

    let mut unkept = vec![taken.clone(), forked_from.clone()];
    unkept.sort();
    let ids = |v: &serde_json::Value, result: &str| {
        let mut ids: Vec<String> = v.as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap().to_owned()).collect();
        ids.sort();
        assert!(v.as_array().unwrap().iter().all(|o| o["result"] == result), "{v}");
        ids
    };
    let dry = json_of(&cli, &["prune", "--dry-run"]);
    assert_eq!(ids(&dry, "would_remove"), unkept);
    assert!(all.iter().all(|s| has_image(s)), "a dry run removed an image");

    let pruned = json_of(&cli, &["prune"]);
    assert_eq!(ids(&pruned, "removed"), unkept);
    assert!(!has_image(&taken) && !has_image(&forked_from), "prune left an image behind");
    assert!(has_image(&template), "prune removed a template's snapshot");
    assert!(has_image(&newest), "prune removed the snapshot a stopped box resumes from");
    assert_eq!(json_of(&cli, &["prune", "--dry-run"]), serde_json::json!([]));
    let left: Vec<String> = json_of(&cli, &["snapshot", "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&template) && left.contains(&newest), "{left:?}");
    // The stopped box still comes back from what prune kept.
    assert_eq!(cli.run(&["resume", &stopped]).0, 0);
}

#[test]
fn a_persistent_box_stopped_outside_tinybox_is_resumed_with_its_files() {
    need_docker!("docker_lifecycle::a_persistent_box_stopped_outside_tinybox_is_resumed_with_its_files");
    let ns = Namespace::new("lostbox");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", ns.name.as_str(), "--persistent"]);
    let (code, _, err) = cli.run(&["exec", &id, "--", "sh", "-c", "echo kept > /root/note"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli.run(&["resume", &id]);
    assert_eq!(code, 1, "a box that runs is not resumed: {err}");
    assert!(err.contains("is not stopped"), "{err}");

    // Behind tinybox's back, as a daemon restart would.
    docker_ok(&["stop", "--time", "0", &ns.container(&id)]);
    let (code, out, err) = cli.run(&["inspect", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("`tinybox resume {id}` brings it back with its files")), "{out}");

    let (code, _, err) = cli.run(&["resume", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli.run(&["exec", &id, "--", "cat", "/root/note"]);
    assert_eq!((code, out.as_str()), (0, "kept\n"), "{err}");
    let (_, out, _) = cli.run(&["inspect", &id]);
    assert!(out.contains("running"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_snapshot_s_image_goes_with_its_box_and_recorded_snapshots_stay() {
    use tinybox_core::model::PendingSnapshot;
    use tinybox_core::store::{MemoryStore, Store};
    need_docker!("docker_lifecycle::an_interrupted_snapshot_s_image_goes_with_its_box_and_recorded_snapshots_stay");
    let ns = Namespace::new("sweep");
    let store = Arc::new(MemoryStore::new());
    let (tb, _dir) = docker::engine_over(store.clone(), Arc::new(SystemClock));
    let info = tb.create(docker::spec(&ns)).await.unwrap();
    let kept = tb.snapshot(&info.id).await.unwrap();
    assert!(store.get(&info.id).unwrap().unwrap().pending_snapshots.is_empty(), "a finished snapshot leaves no mark");
    // What a snapshot killed after `docker commit` and before its record
    // leaves: its mark in the record, and an image no record names.
    store
        .update(&info.id, &mut |i| {
            i.pending_snapshots.push(PendingSnapshot { token: "killed".into(), started_at: None })
        })
        .unwrap();
    let lost = docker_ok(&["commit", &ns.container(info.id.as_str())]).trim().to_owned();
    let labelled = || docker_ok(&["images", "-a", "-q", "--filter", &format!("label=tinybox.namespace={}", ns.name)]);
    assert_eq!(labelled().lines().count(), 2, "the recorded snapshot and the lost commit");
    tb.remove(&info.id).await.unwrap();
    assert_ne!(docker(&["image", "inspect", &lost]).0, 0, "rm of the box left the unrecorded image {lost}");
    assert_eq!(docker(&["image", "inspect", kept.id.as_str()]).0, 0, "rm removed recorded snapshot {}", kept.id);
    assert_eq!(labelled().lines().count(), 1, "only the recorded snapshot is left for prune");
    let pruned = tb.prune(false).await.unwrap();
    assert_eq!(pruned.len(), 1, "{pruned:?}");
    assert_eq!(labelled().lines().count(), 0);
}
