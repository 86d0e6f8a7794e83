//! `sandbox.run_once`: a box made for one command, as one `docker run --rm`
//! with the caller's streams passed straight through (ADR 0023). The
//! container is the one `sandbox.create` would make for the box — its name
//! (`tinybox-<namespace>-<box id>`, from core's record alone), labels,
//! hardening, limits, denied network and workspace bind — with the command
//! under the exec wrapper (127 and 126 named in one line) and docker's init
//! as pid 1, so a signal reaches the command and the container ends with it.
//!
//! When this answers, nothing it made remains: docker removes the
//! container when the command ends (`--rm`, which the client waits for); a
//! cancelled run's container is stopped (`docker stop`, SIGTERM then
//! SIGKILL after 2 s) and a killed client's removed here. A run whose end
//! is unknown (the daemon went away) answers `interrupted`, so core keeps
//! the record and `sandbox.destroy` of the interrupted box removes what
//! is left. A box that needs its container to outlive the command (ports,
//! a fenced or allowlisted network, a terminal) is refused: core sends
//! those through create and exec.

use tinybox_sdk::model::{ExitStatus, NetworkPolicy};
use tinybox_sdk::protocol::{DriverError, RunOnceParams, RunParams};

use crate::argv::{self, RunSpec};
use crate::execs::{self, Running};
use crate::failure::{self, Cause};
use crate::host::{Capture, Host};
use crate::sandbox::{Docker, Resolved};
use crate::state::ContainerState;

/// The client statuses after which docker itself may have failed: 125
/// (it could not make or start the container), 1 and 255 (it lost the
/// daemon). 126 and 127 are the wrapper's own, naming the program.
fn docker_may_have_failed(code: i32) -> bool {
    matches!(code, 1 | 125 | 255)
}

impl Docker {
    pub async fn run_once(&self, host: &dyn Host, p: RunOnceParams) -> Result<ExitStatus, DriverError> {
        let c = &p.create;
        let plain = matches!(c.network, None | Some(NetworkPolicy::Denied))
            && c.ports.is_empty()
            && c.egress.is_none()
            && c.egress_exceptions.is_empty()
            && p.request.tty.is_none();
        if !plain {
            return Err(DriverError::invalid(format!(
                "box {} cannot be made for one command: a one-step run has a denied network, no ports and no \
                 terminal; create the box and exec in it instead",
                c.box_id
            )));
        }
        let mut env = c.env.clone();
        env.extend(p.request.env.clone());
        if let Some(why) = crate::env_file::refusal(&env) {
            return Err(DriverError::invalid(why));
        }
        let resolved = self.resolve(host, c).await?;
        let Resolved { container, image, workspace, owner, local_only } = &resolved;
        let spec = RunSpec {
            container,
            box_id: c.box_id.as_str(),
            namespace: &c.namespace,
            image,
            workspace: workspace.as_deref().zip(owner.as_deref()),
            resources: &c.resources,
            network: NetworkPolicy::Denied,
            ports: &[],
            local_only: *local_only,
            egress: None,
            netns: None,
        };
        let box_workdir = workspace.as_ref().map(|_| argv::WORKSPACE);
        let cwd = argv::workdir(p.request.cwd.as_deref(), box_workdir);
        let marker = argv::marker(&p.exec_id);
        let profile = spec.workspace.map(|_| crate::seccomp::profile().to_string());
        let command = argv::run_once(&spec, cwd.as_deref(), &env, &marker, &p.request.argv, profile.as_deref());
        let Some(running) = self.execs.start_once(&p.exec_id, container) else {
            // Cancelled before it started: nothing is made.
            return Ok(ExitStatus { code: None, signal: Some(execs::SIGTERM) });
        };
        let mut params = RunParams::forwarded(&p.exec_id, command, p.stdio.clone(), None);
        params.env = tinybox_sdk::carried_env::vars(&env);
        let status = host.run(params).await;
        // A signal ended the client's shell (core cancelled the forwarded
        // run, or the host went): the container may run on.
        if status.as_ref().is_ok_and(|s| s.signal.is_some()) && running.claim_stop() {
            self.stop(host, &running).await;
        }
        let stopped = running.stopping();
        if stopped {
            running.stopped().await;
        }
        self.execs.finish(&p.exec_id);
        if stopped {
            self.remove_left(host, container).await?;
            // docker's init ends with 128 + the signal that ended the command.
            let signal = match status {
                Ok(ExitStatus { code: Some(137), .. }) => 9,
                _ => execs::SIGTERM,
            };
            return Ok(ExitStatus { code: None, signal: Some(signal) });
        }
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                // How far the client got is unknown: what it made goes now,
                // or the run stays unsettled.
                self.remove_left(host, container).await?;
                return Err(e);
            }
        };
        match status.code.filter(|c| docker_may_have_failed(*c)) {
            Some(code) => self.settle(host, &p, &resolved, code, status).await,
            None => Ok(status),
        }
    }

    /// After a client status docker may have given itself: what is left
    /// says whether it was the command's. No container of the box's: it was
    /// (or docker never made one, and says why: an image not on the host is
    /// named here). A container left after 125 is another's holding the
    /// name; after 1 or 255, the box's own, whose client lost the daemon.
    async fn settle(
        &self,
        host: &dyn Host,
        p: &RunOnceParams,
        resolved: &Resolved,
        code: i32,
        status: ExitStatus,
    ) -> Result<ExitStatus, DriverError> {
        let (box_id, container) = (&p.create.box_id, &resolved.container);
        let seen = host.capture(argv::inspect_state(container)).await?;
        if !seen.success() {
            return match failure::cause(&seen) {
                Cause::NoSuchContainer if code == 125 => self.image_missing(host, p, resolved).await.map(|()| status),
                Cause::NoSuchContainer => Ok(status),
                _ => Err(DriverError::interrupted(format!(
                    "box {box_id}'s docker run ended with status {code} and docker cannot say what it left ({}); \
                     `tinybox rm {box_id}` removes it",
                    seen.stderr_text().trim()
                ))),
            };
        }
        let passing = serde_json::from_slice::<ContainerState>(&seen.stdout)
            .is_ok_and(|s| matches!(s.status.as_str(), "removing"));
        if passing {
            // docker is removing it as `--rm` asks: it was the command's status.
            return Ok(status);
        }
        if code == 125 {
            return Err(DriverError::failed(format!(
                "container {container} already exists on the box's host, so another store uses namespace {ns}; \
                 give this store its own namespace (--namespace, or \"namespace\" in its config.json) \
                 or remove the container with `docker rm -f {container}`",
                ns = p.create.namespace
            )));
        }
        self.remove_left(host, container).await?;
        Err(DriverError::unavailable(format!(
            "box {box_id}'s command lost docker (the client ended with status {code}), so how it ended is unknown; \
             its container is removed"
        )))
    }

    /// Whether docker refused the run for want of its image: then the
    /// error names it.
    async fn image_missing(&self, host: &dyn Host, p: &RunOnceParams, resolved: &Resolved) -> Result<(), DriverError> {
        let seen = host.capture(argv::image_exists(&resolved.image)).await?;
        if seen.success() || failure::cause(&seen) != Cause::NoSuchImage {
            return Ok(());
        }
        Err(match &p.create.source {
            Some(tinybox_sdk::model::WorkspaceSource::Snapshot { id }) => {
                DriverError::not_found(format!("snapshot {id} does not exist on the box's host"))
            }
            _ => DriverError::not_found(format!("image {} is not on the box's host", resolved.image)),
        })
    }

    /// Removes what a run left; gone already, or going, is done. A
    /// container docker cannot remove now leaves the run unsettled.
    async fn remove_left(&self, host: &dyn Host, container: &str) -> Result<(), DriverError> {
        let removed = host.capture(argv::remove(container)).await;
        match removed {
            Ok(r) if r.success() => Ok(()),
            Ok(r) if matches!(failure::cause(&r), Cause::NoSuchContainer | Cause::RemovalInProgress) => Ok(()),
            Ok(r) => Err(DriverError::interrupted(format!(
                "container {container} of a one-step run could not be removed ({}); `tinybox rm` removes it",
                r.stderr_text().trim()
            ))),
            Err(e) => Err(DriverError::interrupted(format!(
                "container {container} of a one-step run could not be removed ({}); `tinybox rm` removes it",
                e.message
            ))),
        }
    }

    /// Stops a one-step run's container: SIGTERM through docker's init to
    /// the command, SIGKILL 2 s later; `--rm` removes it.
    pub(crate) async fn stop_once(&self, host: &dyn Host, running: &Running) {
        let _ = host.capture(argv::stop(&running.container)).await;
        running.stop_done(execs::SIGTERM);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tinybox_sdk::model::{BoxId, ExecRequest, Resources, WorkspaceSource};
    use tinybox_sdk::protocol::{CreateParams, ErrorCode, StdioRef};
    use tinybox_sdk::testing::{FakeHost, Reply};

    use super::*;
    use crate::sandbox::Config;

    const SOCKET: &str = "/run/once.sock";

    /// The box's run: the client under its wrapper, which feeds the box's
    /// environment (`BOXV`) as an env file.
    fn is_client(a: &[String]) -> bool {
        a[0] == "sh" && a.windows(3).any(|w| w == ["docker", "run", "--rm"])
    }

    fn params(network: NetworkPolicy, source: Option<WorkspaceSource>) -> RunOnceParams {
        RunOnceParams {
            create: CreateParams {
                box_id: BoxId::new("box-3").unwrap(),
                namespace: "ns1".into(),
                source,
                resources: Resources {
                    cpus: Some(2.0),
                    memory_bytes: Some(64 << 20),
                    pids: Some(100),
                    disk_bytes: None,
                },
                network: Some(network),
                ports: Vec::new(),
                env: [("BOXV".to_owned(), "box".to_owned())].into(),
                options: Default::default(),
                workspace_dir: None,
                egress: None,
                egress_exceptions: Vec::new(),
                image: None,
            },
            exec_id: "x9-1".into(),
            request: ExecRequest::new(["printf", "%s", "-n"]),
            stdio: StdioRef { socket: SOCKET.into() },
        }
    }

    fn docker() -> Docker {
        Docker::new(Config { base_image: "base:1".into() })
    }

    fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
        argv.windows(2).any(|w| w[0] == flag && w[1] == value)
    }

    /// The helper commands the driver ran (everything but the box's run).
    fn helpers(host: &FakeHost) -> Vec<Vec<String>> {
        host.calls()
            .into_iter()
            .filter(|c| c.params.stdio.socket.as_path() != Path::new(SOCKET))
            .map(|c| c.params.argv)
            .collect()
    }

    #[tokio::test]
    async fn one_docker_run_rm_makes_the_box_runs_the_command_with_the_callers_streams_and_leaves_nothing() {
        let host = FakeHost::new().on(is_client, Reply::exit(ExitStatus::code(0)));
        let status = docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap();
        assert_eq!(status, ExitStatus::code(0));
        let calls = host.calls();
        assert_eq!(calls.len(), 1, "one docker round trip: {:?}", host.argvs());
        let run = &calls[0].params;
        assert_eq!(run.stdio.socket, Path::new(SOCKET), "the caller's streams, passed through");
        let a = &run.argv;
        assert_eq!(a[..5], ["sh", "-c", &crate::env_file::wrapper(false), "sh", "1"]);
        assert_eq!(a[5..10], ["docker", "run", "--rm", "-i", "--init"]);
        assert!(!a.iter().any(|w| w.contains("BOXV=box")), "no value on a command line: {a:?}");
        assert_eq!(run.env, [("TINYBOX_BOXENV_0".to_owned(), "BOXV=box".to_owned())].into());
        for (flag, value) in [
            ("--name", "tinybox-ns1-box-3"),
            ("--label", "tinybox.box=box-3"),
            ("--label", "tinybox.namespace=ns1"),
            ("--security-opt", "no-new-privileges"),
            ("--cap-drop", "ALL"),
            ("--network", "none"),
            ("--cpus", "2"),
            ("--memory", "67108864"),
            ("--memory-swap", "67108864"),
            ("--pids-limit", "100"),
            ("--env-file", "/dev/fd/5"),
            ("--entrypoint", "sh"),
        ] {
            assert!(has_pair(a, flag, value), "{flag} {value} missing from {a:?}");
        }
        // The image, then the exec wrapper with its marker and the argv as given.
        let at = a.iter().position(|w| w == "base:1").unwrap();
        assert_eq!(a[at + 1..at + 3], ["-c", argv::EXEC_WRAPPER.as_str()]);
        assert_eq!(a[at + 3..], ["sh", "/tmp/.tinybox-exec-x9-1.pid", "printf", "%s", "-n"]);
        assert!(!a.contains(&"-d".to_owned()) && !a.contains(&"--publish".to_owned()), "{a:?}");
    }

    #[tokio::test]
    async fn a_bound_box_runs_as_the_directorys_owner_with_its_profile_on_fd_3_not_stdin() {
        let host = FakeHost::new()
            .on_prefix(&["stat"], Reply::ok("1001:1002\n"))
            .on(is_client, Reply::exit(ExitStatus::code(0)));
        let mut p = params(NetworkPolicy::Denied, Some(WorkspaceSource::LocalDir { path: "/home/me/w".into() }));
        p.request.cwd = Some("sub".into());
        docker().run_once(&host, p).await.unwrap();
        let run = host.calls().into_iter().find(|c| c.params.stdio.socket == Path::new(SOCKET)).unwrap().params;
        let a = &run.argv;
        assert_eq!(a[..5], ["sh", "-c", &crate::env_file::wrapper(true), "sh", "1"]);
        assert_eq!(a[5], crate::seccomp::profile().to_string(), "the profile follows the variables' count");
        assert!(has_pair(a, "--security-opt", argv::SECCOMP_FROM_FD3) && has_pair(a, "--user", "1001:1002"), "{a:?}");
        assert!(has_pair(a, "--workdir", "/workspace/sub"), "the command's directory, from the box's: {a:?}");
        assert_eq!(a.iter().filter(|w| *w == "--workdir").count(), 1, "{a:?}");
        assert!(!a.iter().any(|w| w == argv::SECCOMP_FROM_STDIN), "stdin is the command's: {a:?}");
    }

    #[tokio::test]
    async fn what_needs_the_box_after_its_command_is_refused_before_docker_hears_of_it() {
        let host = FakeHost::new();
        for p in [params(NetworkPolicy::Egress, None), params(NetworkPolicy::Allowlist, None), {
            let mut p = params(NetworkPolicy::Denied, None);
            p.request.tty = Some(tinybox_sdk::model::TtySize { rows: 24, cols: 80 });
            p
        }] {
            let err = docker().run_once(&host, p).await.unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidRequest, "{}", err.message);
            assert!(err.message.contains("box box-3 cannot be made for one command"), "{}", err.message);
        }
        assert!(host.argvs().is_empty());
    }

    #[tokio::test]
    async fn a_status_docker_may_give_itself_is_settled_by_what_is_left() {
        // 125 and no container: the image is named when it is missing...
        let host = FakeHost::new()
            .on(is_client, Reply::exit(ExitStatus::code(125)))
            .on_prefix(&["docker", "container", "inspect"], Reply::fail(1, "Error: No such container: x"))
            .on_prefix(&["docker", "image", "inspect"], Reply::fail(1, "Error: No such image: base:1"));
        let err = docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (ErrorCode::NotFound, "image base:1 is not on the box's host"));
        // ...and is the command's own when it is there.
        let host = FakeHost::new()
            .on(is_client, Reply::exit(ExitStatus::code(125)))
            .on_prefix(&["docker", "container", "inspect"], Reply::fail(1, "Error: No such container: x"));
        assert_eq!(docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap(), ExitStatus::code(125));
        // 125 with a container of the name: another store's, left alone.
        let host = FakeHost::new()
            .on(is_client, Reply::exit(ExitStatus::code(125)))
            .on_prefix(&["docker", "container", "inspect"], Reply::ok(r#"{"Status":"running"}"#));
        let err = docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap_err();
        assert!(err.message.contains("another store uses namespace ns1"), "{}", err.message);
        assert!(!helpers(&host).iter().any(|a| a[1] == "rm"), "{:?}", host.argvs());
        // 255 with the box's container still there: removed, the end unknown.
        let host = FakeHost::new()
            .on(is_client, Reply::exit(ExitStatus::code(255)))
            .on_prefix(&["docker", "container", "inspect"], Reply::ok(r#"{"Status":"running"}"#));
        let err = docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable, "{}", err.message);
        assert_eq!(helpers(&host).last().unwrap(), &argv::remove("tinybox-ns1-box-3"));
        // A daemon that cannot say: the run is unsettled, for `rm`.
        let host = FakeHost::new()
            .on(is_client, Reply::exit(ExitStatus::code(1)))
            .on_prefix(&["docker", "container", "inspect"], Reply::fail(1, "Cannot connect to the Docker daemon"));
        let err = docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Interrupted, "{}", err.message);
        // Any other status is the command's, with no second call.
        let host = FakeHost::new().on(is_client, Reply::exit(ExitStatus::code(3)));
        assert_eq!(docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap(), ExitStatus::code(3));
        assert_eq!(host.calls().len(), 1);
    }

    #[tokio::test]
    async fn a_killed_client_has_its_container_stopped_and_removed_and_reads_as_a_signal() {
        let host = FakeHost::new().on(is_client, Reply::exit(ExitStatus { code: None, signal: Some(15) }));
        let status = docker().run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap();
        assert_eq!(status, ExitStatus { code: None, signal: Some(15) });
        let verbs: Vec<String> = helpers(&host).iter().map(|a| a[1].clone()).collect();
        assert_eq!(verbs, ["stop", "rm"], "{:?}", host.argvs());
        assert_eq!(helpers(&host)[0], argv::stop("tinybox-ns1-box-3"));
    }

    #[tokio::test]
    async fn a_run_cancelled_before_it_starts_makes_nothing() {
        let d = docker();
        let host = FakeHost::new();
        d.cancel(&host, "x9-1").await.unwrap();
        let status = d.run_once(&host, params(NetworkPolicy::Denied, None)).await.unwrap();
        assert_eq!(status.signal, Some(execs::SIGTERM));
        assert!(host.argvs().is_empty(), "{:?}", host.argvs());
    }
}
