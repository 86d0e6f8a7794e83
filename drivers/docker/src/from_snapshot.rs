//! `sandbox.snapshot_exec`: one command (a copy's `tar -c` out of a
//! stopped box) run from a snapshot image in a short-lived container that
//! can only read it: no network, a read-only root, no capabilities, no
//! privilege gain, a small pids cap, no log of its output (a copy's bytes
//! never land in docker's logs), never a pull. The image is the snapshot
//! core's record names; the box's own container is not involved, so the
//! box is not resumed.
//!
//! The container is `tinybox-<namespace>-<box id>-cp`, labelled as the
//! box's, and removed by docker when the command ends (`--rm`, which the
//! daemon honours even when the client was killed); a client that was
//! killed gets a `docker rm --force` too. A leftover that is not running
//! (its daemon went away mid-copy) is removed before the next copy; one
//! still running is another copy, which is waited for by asking again.
//! `sandbox.destroy` of the box (its `tinybox rm`) removes a leftover too,
//! running or not, by `helper_of` the container its handle names, so an
//! interrupted copy leaves nothing once the box is gone.

use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::{BoxState, DriverError, RunParams, SnapshotExecParams};

use crate::argv;
use crate::failure::{self, Cause};
use crate::host::{Capture, Host};
use crate::sandbox::is_snapshot_name;
use crate::state;

/// The pids a copy's container may hold: sh, tar, and docker's init.
const PIDS: &str = "64";

/// The container a snapshot exec of box `box_id` runs in.
pub fn container_name(namespace: &str, box_id: &str) -> String {
    helper_of(&argv::container_name(namespace, box_id))
}

/// The copy container of the box whose own container is `container`.
pub fn helper_of(container: &str) -> String {
    format!("{container}-cp")
}

/// `docker run --rm -i ...` of `argv` from image `snapshot`, under the
/// client wrapper (a killed client shows as a signal).
pub fn run_argv(container: &str, p: &SnapshotExecParams) -> Vec<String> {
    let mut a = argv::client(&p.request.env, None);
    a.extend(argv::docker(&["run", "--rm", "-i", "--name", container]));
    a.extend(["--label".into(), format!("tinybox.box={}", p.box_id)]);
    a.extend(["--label".into(), format!("tinybox.namespace={}", p.namespace)]);
    a.extend(["--label".into(), "tinybox.role=snapshot-exec".into()]);
    a.extend(
        [
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            PIDS,
            "--log-driver",
            "none",
            "--pull",
            "never",
        ]
        .map(String::from),
    );
    if let Some(dir) = &p.request.cwd {
        a.extend(["--workdir".into(), dir.clone()]);
    }
    if !p.request.env.is_empty() {
        a.extend(["--env-file".into(), crate::env_file::ENV_FILE.into()]);
    }
    let (program, args) = p.request.argv.split_first().map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
    a.extend(["--entrypoint".into(), program.into(), p.snapshot.to_string()]);
    a.extend(args.iter().cloned());
    a
}

/// Runs the command from the snapshot with the caller's streams; how it ended.
pub async fn snapshot_exec(host: &dyn Host, p: SnapshotExecParams) -> Result<ExitStatus, DriverError> {
    let snapshot = p.snapshot.as_str();
    if !is_snapshot_name(snapshot) {
        return Err(DriverError::invalid(format!(
            "snapshot {snapshot} is not one this driver takes (sha- and 12 hex digits); nothing was run"
        )));
    }
    if p.request.argv.first().is_none_or(|a| a.is_empty() || a.starts_with('-')) {
        return Err(DriverError::invalid("a snapshot exec needs a program to run, and was sent none"));
    }
    if let Some(why) = crate::env_file::refusal(&p.request.env) {
        return Err(DriverError::invalid(why));
    }
    let container = container_name(&p.namespace, p.box_id.as_str());
    clear_leftover(host, &container, &p).await?;
    let mut params = RunParams::forwarded(&p.exec_id, run_argv(&container, &p), p.stdio.clone(), None);
    params.env = tinybox_sdk::carried_env::vars(&p.request.env);
    let status = host.run(params).await;
    // `--rm` removed it unless the client was killed before the command
    // ended (or the run itself failed): then it goes here.
    if status.as_ref().is_err() || status.as_ref().is_ok_and(|s| s.signal.is_some()) {
        let _ = host.capture(argv::remove(&container)).await;
    }
    status
}

/// Removes a leftover container of an earlier copy that is not running;
/// one that runs is another copy's, and this one is refused meanwhile.
async fn clear_leftover(host: &dyn Host, container: &str, p: &SnapshotExecParams) -> Result<(), DriverError> {
    let seen = host.capture(argv::inspect_state(container)).await?;
    if !seen.success() {
        return match failure::cause(&seen) {
            Cause::NoSuchContainer => Ok(()),
            _ => Err(failure::error("docker container inspect", &seen)),
        };
    }
    let running = serde_json::from_slice::<state::ContainerState>(&seen.stdout)
        .map(|s| state::to_box_state(p.box_id.as_str(), container, &s).state == BoxState::Ready)
        .unwrap_or(false);
    if running {
        return Err(DriverError::unavailable(format!(
            "another copy out of stopped box {} is reading its snapshot (container {container} runs); \
             try again when it ends",
            p.box_id
        )));
    }
    let removed = host.capture(argv::remove(container)).await?;
    match failure::cause(&removed) {
        _ if removed.success() => Ok(()),
        Cause::NoSuchContainer => Ok(()),
        _ => Err(failure::error(&format!("docker rm {container}"), &removed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinybox_sdk::model::{BoxId, ExecRequest, SnapshotId};
    use tinybox_sdk::protocol::StdioRef;
    use tinybox_sdk::testing::{FakeHost, Reply};

    fn params(snapshot: &str) -> SnapshotExecParams {
        SnapshotExecParams {
            namespace: "ns".into(),
            box_id: BoxId::new("box-1").unwrap(),
            snapshot: SnapshotId::new(snapshot).unwrap(),
            exec_id: "x1-0".into(),
            request: ExecRequest::new(["sh", "-c", "tar -c -f - x", "sh"]),
            stdio: StdioRef { socket: "/nonexistent/tinybox-test.sock".into() },
        }
    }

    #[test]
    fn the_container_reads_only_and_is_named_for_the_box() {
        let a = run_argv(&container_name("ns", "box-1"), &params("sha-0123456789ab"));
        let joined = a.join(" ");
        for flag in [
            "run --rm -i --name tinybox-ns-box-1-cp",
            "--network none",
            "--read-only",
            "--cap-drop ALL",
            "--security-opt no-new-privileges",
            "--log-driver none",
            "--pull never",
            "--label tinybox.role=snapshot-exec",
            "--entrypoint sh sha-0123456789ab -c tar -c -f - x sh",
        ] {
            assert!(joined.contains(flag), "{flag} missing from {joined}");
        }
        assert!(!joined.contains("--mount") && !joined.contains("--privileged"), "{joined}");
    }

    #[tokio::test]
    async fn a_name_this_driver_never_makes_is_refused_before_docker_hears_of_it() {
        let host = FakeHost::new();
        let err = snapshot_exec(&host, params("busybox")).await.unwrap_err();
        assert!(err.message.contains("busybox is not one this driver takes"), "{}", err.message);
        assert!(host.argvs().is_empty());
    }

    #[tokio::test]
    async fn a_stopped_leftover_is_removed_and_a_running_one_refuses() {
        let exited = r#"{"Status":"exited","ExitCode":0}"#;
        let host =
            FakeHost::new().on_prefix(&["docker", "container", "inspect"], Reply::ok(exited)).otherwise(Reply::ok(""));
        snapshot_exec(&host, params("sha-0123456789ab")).await.unwrap();
        let argvs = host.argvs();
        assert_eq!(argvs[1], ["docker", "rm", "--force", "--volumes", "tinybox-ns-box-1-cp"]);
        assert!(argvs[2].contains(&"run".to_owned()), "{argvs:?}");

        let host = FakeHost::new()
            .on_prefix(&["docker", "container", "inspect"], Reply::ok(r#"{"Status":"running"}"#))
            .otherwise(Reply::ok(""));
        let err = snapshot_exec(&host, params("sha-0123456789ab")).await.unwrap_err();
        assert!(err.message.contains("another copy out of stopped box box-1"), "{}", err.message);
        assert_eq!(host.argvs().len(), 1, "nothing is run or removed");
    }
}
