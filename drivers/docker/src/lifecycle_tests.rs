//! The driver's logic after a create, against the recording fake host:
//! inspect, snapshots, destroy, and the sweep of what an interrupted create
//! or snapshot left.

use super::*;

#[tokio::test]
async fn inspect_maps_docker_states() {
    let d = docker();
    let target = || BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    for (reply, state) in [
        (ok(r#"{"Status":"running","OOMKilled":false}"#), BoxState::Ready),
        (ok(r#"{"Status":"exited","ExitCode":0}"#), BoxState::Stopped),
        (failed(1, "Error: No such container: tinybox-ns1-box-0"), BoxState::Gone),
    ] {
        let host = FakeHost::replying(move |_| reply.clone());
        assert_eq!(d.inspect(&host, target()).await.unwrap().state, state);
    }
    let host = FakeHost::replying(|_| ok("not json"));
    assert!(d.inspect(&host, target()).await.is_err());
    // A host whose calls fail before any command runs.
    let unreachable = FakeHost::new().otherwise(Reply::error(DriverError::failed("host.run: connection closed")));
    let err = d.inspect(&unreachable, target()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Failed);
}

#[tokio::test]
async fn inspect_waits_out_a_commit_s_pause_and_a_removal() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let target = || BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    // A commit pauses the container for two looks, then it runs again.
    let looks = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = looks.clone();
    let host = FakeHost::replying(move |_| match seen.fetch_add(1, Ordering::SeqCst) {
        0 | 1 => ok(r#"{"Status":"paused"}"#),
        _ => ok(r#"{"Status":"running"}"#),
    });
    assert_eq!(docker().inspect(&host, target()).await.unwrap().state, BoxState::Ready);
    assert_eq!(looks.load(Ordering::SeqCst), 3);
    // A removal under way ends with the container gone.
    let looks = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = looks.clone();
    let host = FakeHost::replying(move |_| match seen.fetch_add(1, Ordering::SeqCst) {
        0 => ok(r#"{"Status":"removing"}"#),
        _ => failed(1, "Error: No such container: tinybox-ns1-box-0"),
    });
    assert_eq!(docker().inspect(&host, target()).await.unwrap().state, BoxState::Gone);
}

#[tokio::test]
async fn snapshot_commits_and_tags_the_short_id() {
    let host =
        FakeHost::replying(
            |argv| if argv[1] == "commit" { ok(&format!("sha256:{}\n", "ab12".repeat(16))) } else { ok("") },
        );
    let target = BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    let id = docker().snapshot(&host, target).await.unwrap();
    assert_eq!(id.as_str(), "sha-ab12ab12ab12");
    let cmds = commands(&host);
    assert_eq!(cmds[0], ["docker", "commit", "tinybox-ns1-box-0"]);
    assert_eq!(cmds[1], ["docker", "tag", &format!("sha256:{}", "ab12".repeat(16)), "sha-ab12ab12ab12"]);
    assert_eq!(snapshot_id("sha256:xyz"), None);
    assert_eq!(snapshot_id("0123456789abcdef"), None);
}

#[tokio::test]
async fn destroy_of_a_missing_container_is_not_found() {
    let target = || BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    let host = FakeHost::replying(|_| failed(1, "Error: No such container: tinybox-ns1-box-0"));
    assert_eq!(docker().destroy(&host, target()).await.unwrap_err().code, ErrorCode::NotFound);
    let host = FakeHost::replying(|_| ok("tinybox-ns1-box-0"));
    docker().destroy(&host, target()).await.unwrap();
    // The box's container, then the one an interrupted copy out of it left.
    assert_eq!(
        commands(&host),
        [
            ["docker", "rm", "--force", "--volumes", "tinybox-ns1-box-0"],
            ["docker", "rm", "--force", "--volumes", "tinybox-ns1-box-0-cp"]
        ]
    );
    // A stopped box has no container of its own; its copy's is still removed.
    let host = FakeHost::replying(|argv| {
        if argv.last().is_some_and(|c| c.ends_with("-cp")) {
            ok("tinybox-ns1-box-0-cp")
        } else {
            failed(1, "Error: No such container: tinybox-ns1-box-0")
        }
    });
    assert_eq!(docker().destroy(&host, target()).await.unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(commands(&host).len(), 2);
    // A copy container that cannot be removed is the answer.
    let host = FakeHost::replying(|argv| {
        if argv.last().is_some_and(|c| c.ends_with("-cp")) {
            failed(1, "Error response from daemon: boom")
        } else {
            ok("")
        }
    });
    let err = docker().destroy(&host, target()).await.unwrap_err();
    assert!(err.message.contains("docker rm tinybox-ns1-box-0-cp"), "{err:?}");
    let bad = BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: serde_json::json!({"workdir": null}) };
    assert_eq!(docker().destroy(&host, bad).await.unwrap_err().code, ErrorCode::InvalidRequest);
}

/// A commit that succeeded and a tag that did not (the daemon went away
/// between them) is an interrupted snapshot, never a clean refusal: the
/// image exists, so core keeps the pending mark and `rm` sweeps it (the
/// chaos suite's crashed dockerd left an image otherwise).
#[tokio::test]
async fn a_tag_failing_after_the_commit_is_an_interrupted_snapshot() {
    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let host = FakeHost::replying(|argv| {
        if argv[1] == "commit" {
            ok(DIGEST)
        } else {
            failed(1, "Cannot connect to the Docker daemon at unix:///x.sock. Is the docker daemon running?")
        }
    });
    let target = BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    let err = docker().snapshot(&host, target).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Interrupted, "{err:?}");
    assert!(err.message.contains("docker commit made sha256:0123"), "{err:?}");
}

/// An `rm` whose driver was killed leaves its removal going on in the
/// daemon; the next `rm` waits it out and reports the box removed (the
/// chaos suite's `driver_killed_mid_call` found it reported as a failure).
#[tokio::test]
async fn destroy_waits_out_a_removal_already_in_progress() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let target = || BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    const IN_PROGRESS: &str =
        "Error response from daemon: removal of container tinybox-ns1-box-0 is already in progress";
    let looks = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = looks.clone();
    let host = FakeHost::replying(move |_| match seen.fetch_add(1, Ordering::SeqCst) {
        0 | 1 => failed(1, IN_PROGRESS),
        _ => failed(1, "Error: No such container: tinybox-ns1-box-0"),
    });
    docker().destroy(&host, target()).await.unwrap();
    assert_eq!(
        looks.load(Ordering::SeqCst),
        4,
        "rm again until the daemon's removal has ended, then the copy container's"
    );
    // Any other failure is still the answer.
    let host = FakeHost::replying(|_| failed(1, "Error response from daemon: something else"));
    assert!(docker().destroy(&host, target()).await.is_err());
}

const NO_SUCH_CONTAINER: &str = "Error response from daemon: No such container: tinybox-ns1-box-3";
const NAME_IN_USE: &str = "Error response from daemon: Conflict. The container name \"/tinybox-ns1-box-3\" is \
                           already in use by container \"abc\".";

#[tokio::test]
async fn an_interrupted_box_is_found_by_its_name_alone_and_its_name_claimed_before_it_is_done() {
    let host = FakeHost::replying(|_| ok(""));
    let target = BoxRef::interrupted(BoxId::new("box-3").unwrap(), "ns1");
    docker().destroy(&host, target.clone()).await.unwrap();
    let (rm, claim) = (argv::remove("tinybox-ns1-box-3"), argv::claim("tinybox-ns1-box-3", "box-3", "ns1", "base:1"));
    // Then the egress fence's holder, claimed the same way, and its fence container.
    let holder = "tinybox.net-ns1-box-3";
    let (rm_holder, claim_holder) = (argv::remove(holder), argv::claim(holder, "box-3", "ns1", "base:1"));
    assert_eq!(
        commands(&host),
        [
            rm.clone(),
            claim.clone(),
            rm.clone(),
            rm_holder.clone(),
            claim_holder,
            rm_holder,
            argv::remove("tinybox.fence-ns1-box-3")
        ]
    );
    assert!(has_pair(&claim, "--pull", "never") && has_pair(&claim, "--label", "tinybox.namespace=ns1"), "{claim:?}");
    // Nothing there, and the name free: read as already gone, so core forgets the record.
    let host = FakeHost::replying(|argv| if argv[1] == "rm" { failed(1, NO_SUCH_CONTAINER) } else { ok("") });
    let err = docker().destroy(&host, target).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err:?}");
}

#[tokio::test]
async fn a_container_the_daemon_finishes_after_the_first_rm_is_removed_too() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The daemon holds the name from the interrupted create's start, and
    // registers the container only at its third look.
    let looks = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = looks.clone();
    let host = FakeHost::replying(move |argv| match argv[1].as_str() {
        "rm" if seen.load(Ordering::SeqCst) < 3 => failed(1, NO_SUCH_CONTAINER),
        "rm" => ok("tinybox-ns1-box-3"),
        _ if seen.fetch_add(1, Ordering::SeqCst) < 3 => failed(125, NAME_IN_USE),
        _ => ok("0123abcd"),
    });
    let target = BoxRef::interrupted(BoxId::new("box-3").unwrap(), "ns1");
    docker().destroy(&host, target).await.unwrap();
    let mut expected = vec!["rm", "create", "rm", "create", "rm", "create", "rm", "create", "rm"];
    expected.extend(["rm", "create", "rm", "rm"]);
    assert_eq!(verbs(&host), expected, "the box's name, then its holder's and its fence container's");
    assert_eq!(looks.load(Ordering::SeqCst), 5, "claimed again until the name was free (4), then the holder's (1)");
}

#[tokio::test]
async fn without_the_base_image_an_interrupted_box_gets_one_rm() {
    let host = FakeHost::replying(|argv| {
        if argv[1] == "rm" { ok("") } else { failed(125, "Error response from daemon: No such image: base:1") }
    });
    docker().destroy(&host, BoxRef::interrupted(BoxId::new("box-3").unwrap(), "ns1")).await.unwrap();
    assert_eq!(verbs(&host), ["rm", "create", "rm", "create", "rm"], "the box's name, its holder's, its fence's");
}

#[tokio::test]
async fn snapshot_rm_removes_only_a_snapshot_name_and_a_missing_one_is_not_found() {
    use tinybox_sdk::protocol::SnapshotRmParams;
    let params = |id: &str| SnapshotRmParams { id: SnapshotId::new(id).unwrap(), namespace: "ns1".into() };
    let host = FakeHost::replying(|_| ok("Untagged: sha-ab12ab12ab12:latest\n"));
    docker().snapshot_rm(&host, params("sha-ab12ab12ab12")).await.unwrap();
    assert_eq!(commands(&host), [["docker", "rmi", "sha-ab12ab12ab12"]]);

    // Any other image on the daemon is out of reach, whatever the caller names.
    for other in ["busybox", "sha-ab12", "sha-AB12AB12AB12", "--force", "sha-ab12ab12ab12x"] {
        let host = FakeHost::new();
        let err = docker().snapshot_rm(&host, params(other)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest, "{other}");
        assert!(host.calls().is_empty(), "{other} reached docker");
    }

    let host = FakeHost::replying(|_| failed(1, "Error response from daemon: No such image: sha-ab12ab12ab12:latest"));
    assert_eq!(docker().snapshot_rm(&host, params("sha-ab12ab12ab12")).await.unwrap_err().code, ErrorCode::NotFound);
    let host = FakeHost::replying(|_| {
        failed(
            1,
            "Error response from daemon: conflict: unable to remove repository reference \"sha-ab12ab12ab12\" (must force) - container 0f3 is using its referenced image",
        )
    });
    let err = docker().snapshot_rm(&host, params("sha-ab12ab12ab12")).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Failed);
    assert!(err.message.contains("is using its referenced image"), "{}", err.message);
}

#[tokio::test]
async fn a_sweep_removes_only_the_box_s_images_core_does_not_keep() {
    use tinybox_sdk::protocol::SnapshotSweepParams;
    let kept = format!("sha256:ab12ab12ab12{}", "0".repeat(52));
    let lost = format!("sha256:cd34cd34cd34{}", "0".repeat(52));
    let used = format!("sha256:ef56ef56ef56{}", "0".repeat(52));
    let listing = format!("{kept}\n{lost}\n{used}\n{lost}\n");
    let (lost_rm, used_rm) = (lost.clone(), used.clone());
    let host = FakeHost::replying(move |argv| match argv[1].as_str() {
        "images" => ok(&listing),
        "rmi" if argv[2] == lost_rm => ok("Deleted: x"),
        "rmi" if argv[2] == used_rm => failed(
            1,
            "Error response from daemon: conflict: unable to delete (image is being used by stopped container abc)",
        ),
        _ => failed(1, "unexpected"),
    });
    let params = SnapshotSweepParams {
        namespace: "ns1".into(),
        box_id: BoxId::new("box-3").unwrap(),
        keep: vec![SnapshotId::new("sha-ab12ab12ab12").unwrap()],
    };
    let swept = docker().snapshot_sweep(&host, params).await.unwrap();
    assert_eq!(swept.removed, ["sha-cd34cd34cd34"], "the kept image and the one in use stay");
    let cmds = commands(&host);
    assert_eq!(cmds[0], argv::images_of("ns1", "box-3"));
    assert!(has_pair(&cmds[0], "--filter", "label=tinybox.box=box-3"), "{:?}", cmds[0]);
    assert!(has_pair(&cmds[0], "--filter", "label=tinybox.namespace=ns1"), "{:?}", cmds[0]);
    assert_eq!(verbs(&host), ["images", "rmi", "rmi"], "one rmi per image not kept, duplicates once");
}
