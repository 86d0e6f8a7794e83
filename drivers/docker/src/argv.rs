//! The docker command lines this driver runs, built as argument vectors.
//! Pure functions: every decision about flags lives here and is unit-tested
//! without a daemon.

use std::collections::BTreeMap;
use std::path::Path;

use tinybox_sdk::model::{NetworkPolicy, PortMapping, Resources};

/// The command that keeps a container open. A container exits when its
/// entrypoint returns, and an exited container cannot be exec-ed into.
pub const KEEPALIVE: &str = "while :; do sleep 86400; done";

/// Where a local directory is mounted, and where its commands start.
pub const WORKSPACE: &str = "/workspace";

/// Where an allowlist box's container sees the static relay, the directory
/// of its egress proxy (bound whole, so a proxy started again after it died
/// is found at the same path: a bound socket file would keep the dead one),
/// and the proxy's socket in it.
pub const RELAY_IN_BOX: &str = "/run/tinybox/egress-relay";
pub const PROXY_DIR_IN_BOX: &str = "/run/tinybox/egress";
pub const PROXY_IN_BOX: &str = "/run/tinybox/egress/proxy.sock";

/// Where `docker run` reads a bound box's seccomp profile: the docker CLI
/// reads the file itself and sends its content to the daemon, so the
/// profile travels on the command's input and no file is left on the host.
pub const SECCOMP_FROM_STDIN: &str = "seccomp=/dev/stdin";

/// Runs the box's command under a shell that carries the exec's marker in
/// its arguments (its first one, otherwise unused) and leads the process
/// group, so a cancellation can find the group (killing the local `docker
/// exec` client does not stop the process in the container). `exec` in a
/// subshell forces the external program even where sh has a builtin of the
/// same name. A program that is not there ends with 127 and one that cannot
/// be run with 126, as in a shell, but with one line of tinybox's naming it
/// rather than the image's shell's own wording; only builtins check, so no
/// process is spent on it. Nothing is written, so nothing needs removing
/// after the command: a command that leaves the box's pids cap exhausted
/// would leave no room to fork a cleanup, and the wrapper would fail in its
/// place.
pub static EXEC_WRAPPER: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("shift\n{}\n(exec \"$@\"); exit $?", tinybox_sdk::process::PROGRAM_CHECK));

/// Finds the process whose arguments hold the marker (waiting, bounded,
/// for the command to start: a cancel may come just after `docker exec`
/// was started), sends its group SIGTERM, then SIGKILL if it is still there
/// after 2 s, and prints the signal that ended it (nothing when no such
/// process appeared). `$1` is the marker as a pattern that does not match
/// itself (`[/]tmp/...`), so neither this script nor its grep is taken for
/// the command.
const CANCEL_SCRIPT: &str = r#"m=$1; g=; i=0
while [ -z "$g" ] && [ $i -lt 50 ]; do
    for c in $(grep -l -- "$m" /proc/[0-9]*/cmdline 2>/dev/null); do
        read -r _ _ _ _ g _ < "${c%/cmdline}/stat" 2>/dev/null
    done
    [ -n "$g" ] || { sleep 0.1; i=$((i+1)); }
done
[ -n "$g" ] && [ "$g" != 1 ] || exit 0
kill -TERM -"$g" 2>/dev/null || exit 0
i=0
while kill -0 -"$g" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done
if kill -KILL -"$g" 2>/dev/null; then echo KILL; else echo TERM; fi
exit 0"#;

/// Keeps an exec's command from outliving the driver that started it.
/// Killing the `docker exec` client (the host kills it when the driver
/// dies and core goes away) leaves the command running in the container;
/// so beside the command, the driver runs this watcher in the container,
/// its input a pipe only the driver holds open. The daemon closes the
/// watcher's input when its client goes, and the driver's exit closes the
/// pipe: either way the watcher reads end of file without the driver's
/// `done`, and stops the command as a cancellation does ([`CANCEL_SCRIPT`],
/// which waits, bounded, for a command that has not started yet). The
/// driver writes `done` once it has seen the command end. One shell
/// builtin waits; nothing is polled.
fn lifeline_script() -> String {
    format!("read -r w; [ \"$w\" = done ] && exit 0\n{CANCEL_SCRIPT}")
}

/// What the driver writes to an exec's lifeline once the command has ended.
pub const LIFELINE_RELEASE: &[u8] = b"done\n";

/// Runs the `docker exec` client on the box's host under a shell that
/// waits for it. When core cancels the run, the host signals the whole
/// group: the client, terminated, exits 0 as if its command had succeeded,
/// but this shell dies of the signal, so the driver sees that the client
/// was killed (and stops the command inside the container) even when
/// core's cancel reaches the driver after the run has ended. `exit $?`
/// keeps a shell from exec-ing the client in its own place.
pub(crate) const CLIENT_WRAPPER: &str = r#""$@"; exit $?"#;

/// Everything `docker run` needs to make a box's container.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec<'a> {
    pub container: &'a str,
    pub box_id: &'a str,
    pub namespace: &'a str,
    pub image: &'a str,
    /// A host directory to bind at /workspace, and the `uid:gid` owning it,
    /// which the box's processes run as.
    pub workspace: Option<(&'a Path, &'a str)>,
    pub resources: &'a Resources,
    pub network: NetworkPolicy,
    /// Ports to publish; empty when the network is denied.
    pub ports: &'a [PortMapping],
    /// Never pull: the image must already be on the host (snapshots are).
    pub local_only: bool,
    /// An allowlist box's egress: the relay and the proxy's directory on
    /// this machine, from the box's own create (never from an image).
    pub egress: Option<Egress<'a>>,
    /// An egress box's fenced network namespace: the holder container it
    /// joins (fence.rs), which publishes its ports in its place.
    pub netns: Option<&'a str>,
}

/// What an allowlist box's container binds and runs for its egress proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct Egress<'a> {
    /// The static relay on the box's host.
    pub relay: &'a Path,
    /// The directory holding the proxy's socket on the box's host.
    pub proxy_dir: &'a Path,
    /// The endpoint core sent (its port is the relay's).
    pub endpoint: &'a tinybox_sdk::protocol::EgressEndpoint,
}

pub(crate) fn docker(args: &[&str]) -> Vec<String> {
    std::iter::once("docker").chain(args.iter().copied()).map(str::to_owned).collect()
}

/// `tinybox-<namespace>-<box id>`: box ids are unique within a store,
/// container names across a daemon, so the namespace keeps two stores apart.
pub fn container_name(namespace: &str, box_id: &str) -> String {
    format!("tinybox-{namespace}-{box_id}")
}

/// `docker run -d ...`: a detached, hardened container held open by [`KEEPALIVE`].
pub fn run(spec: &RunSpec<'_>) -> Vec<String> {
    let mut a = docker(&["run", "-d"]);
    a.extend(box_flags(spec, None, SECCOMP_FROM_STDIN));
    let keepalive = ["sh", "-c", KEEPALIVE].map(String::from);
    match &spec.egress {
        None => {
            a.extend(["--entrypoint".into(), "sh".into(), spec.image.into()]);
            a.extend(keepalive.into_iter().skip(1));
        }
        Some(egress) => {
            // The keepalive runs under the relay, which binds 127.0.0.1:PORT
            // first; every `docker exec` shares the container's network
            // namespace, so each command reaches it there.
            a.extend(["--mount".into(), bind_mount(&egress.relay.to_string_lossy(), RELAY_IN_BOX, true)]);
            a.extend(["--mount".into(), bind_mount(&egress.proxy_dir.to_string_lossy(), PROXY_DIR_IN_BOX, true)]);
            a.extend(["--entrypoint".into(), RELAY_IN_BOX.into(), spec.image.into()]);
            a.extend(egress.endpoint.relay_argv(RELAY_IN_BOX, PROXY_IN_BOX, &keepalive).into_iter().skip(1));
        }
    }
    a
}

/// Where a one-step run's client wrapper hands the docker CLI a bound
/// box's seccomp profile: its stdin is the command's, so the profile comes
/// on descriptor 3, from a here-document of its client wrapper.
pub const SECCOMP_FROM_FD3: &str = "seccomp=/dev/fd/3";

/// `docker run --rm -i --init ...` of one command in a box made for it
/// (`sandbox.run_once`), under [`CLIENT_WRAPPER`] (a killed client shows
/// as a signal): the box's hardening, limits and network as [`run`] gives
/// them, the command under [`EXEC_WRAPPER`] with its marker, docker's
/// init as pid 1 (a signal the client proxies, or `docker stop`, reaches
/// the command, and the container ends with it), streams passed through.
/// `seccomp`: a bound box's profile, which the wrapper hands over.
pub fn run_once(
    spec: &RunSpec<'_>,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
    marker: &str,
    argv: &[String],
    seccomp: Option<&str>,
) -> Vec<String> {
    let mut a = client(env, seccomp);
    a.extend(docker(&["run", "--rm", "-i", "--init"]));
    a.extend(box_flags(spec, cwd, SECCOMP_FROM_FD3));
    a.extend(env_file(env));
    a.extend(["--entrypoint".into(), "sh".into(), spec.image.into()]);
    a.extend(["-c", EXEC_WRAPPER.as_str(), "sh", marker].map(String::from));
    a.extend(argv.iter().cloned());
    a
}

/// The client wrapper a docker command runs under: [`CLIENT_WRAPPER`]; with
/// a seccomp profile, [`ONCE_SECCOMP_WRAPPER`]; with a box environment,
/// the one that feeds it as an env file (`env_file::wrapper`), its values
/// carried in the wrapper's environment (`tinybox_sdk::carried_env::vars`,
/// which the caller puts in `host.run`'s `env`), never in these arguments.
pub fn client(env: &BTreeMap<String, String>, seccomp: Option<&str>) -> Vec<String> {
    let mut a: Vec<String> = vec!["sh".into(), "-c".into()];
    match (env.is_empty(), seccomp) {
        (true, None) => a.extend([CLIENT_WRAPPER.into(), "sh".into()]),
        (true, Some(profile)) => a.extend([ONCE_SECCOMP_WRAPPER.into(), "sh".into(), profile.into()]),
        (false, profile) => {
            a.extend([crate::env_file::wrapper(profile.is_some()), "sh".into(), env.len().to_string()]);
            a.extend(profile.map(str::to_owned));
        }
    }
    a
}

/// `--env-file` for a box with an environment: read from the wrapper's pipe.
fn env_file(env: &BTreeMap<String, String>) -> Vec<String> {
    if env.is_empty() { Vec::new() } else { vec!["--env-file".into(), crate::env_file::ENV_FILE.into()] }
}

/// [`CLIENT_WRAPPER`] for a one-step run of a bound box: `$1` is the
/// seccomp profile, fed to the client on descriptor 3 by a here-document
/// (the expansion of `$p` in it is not scanned again, and the profile,
/// ours, has no line equal to the delimiter).
pub(crate) const ONCE_SECCOMP_WRAPPER: &str =
    "p=$1; shift\n\"$@\" 3<<TINYBOX_SECCOMP_END\n$p\nTINYBOX_SECCOMP_END\nexit $?";

/// The flags every box's container gets from its spec: its name and
/// labels, the hardening, the network, the limits, the ports, a bound
/// workspace (its owner, the seccomp profile at `seccomp`, the bind, the
/// directory commands start in unless `workdir` names another) and the pull.
fn box_flags(spec: &RunSpec<'_>, workdir: Option<&str>, seccomp: &str) -> Vec<String> {
    let mut a: Vec<String> = vec!["--name".into(), spec.container.into()];
    a.extend(["--label".into(), format!("tinybox.box={}", spec.box_id)]);
    a.extend(["--label".into(), format!("tinybox.namespace={}", spec.namespace)]);
    // Hardening that costs nothing: no privilege gain through setuid
    // binaries, and no capabilities at all.
    a.extend(["--security-opt", "no-new-privileges", "--cap-drop", "ALL"].map(String::from));
    let network = match (spec.network, spec.netns) {
        // An allowlist box has no network but its loopback, where the relay
        // listens; its proxy's socket is bound in.
        (NetworkPolicy::Denied | NetworkPolicy::Allowlist, _) => "none".to_owned(),
        (NetworkPolicy::Egress, Some(holder)) => format!("container:{holder}"),
        (NetworkPolicy::Egress, None) => "bridge".to_owned(),
    };
    a.extend(["--network".into(), network]);
    if let Some(cpus) = spec.resources.cpus {
        a.extend(["--cpus".into(), format!("{cpus}")]);
    }
    if let Some(memory) = spec.resources.memory_bytes {
        // Swap equal to memory: the cap is on memory, not memory plus swap.
        a.extend(["--memory".into(), memory.to_string(), "--memory-swap".into(), memory.to_string()]);
    }
    if let Some(pids) = spec.resources.pids {
        a.extend(["--pids-limit".into(), pids.to_string()]);
    }
    // A joined namespace's ports are its holder's to publish.
    for p in spec.ports.iter().filter(|_| spec.netns.is_none()) {
        // Loopback only: a box's port is for this machine, not its network.
        a.extend(["--publish".into(), format!("127.0.0.1:{}:{}", p.host, p.guest)]);
    }
    if let Some((dir, owner)) = spec.workspace {
        // What the box writes lands on the host as the directory's owner,
        // and the profile (on stdin) refuses setuid and setgid bits: a
        // process may set them on its own files without any capability.
        a.extend(["--user".into(), owner.into(), "--security-opt".into(), seccomp.into()]);
        let bind = bind_mount(&dir.to_string_lossy(), WORKSPACE, false);
        a.extend(["--mount".into(), bind]);
    }
    match (workdir, spec.workspace) {
        (Some(dir), _) => a.extend(["--workdir".into(), dir.into()]),
        (None, Some(_)) => a.extend(["--workdir".into(), WORKSPACE.into()]),
        (None, None) => {}
    }
    if spec.local_only {
        a.extend(["--pull".into(), "never".into()]);
    }
    a
}

/// `--mount` takes CSV: a field holding a comma or a quote is quoted, with
/// quotes doubled, so no directory name can add an option of its own.
fn bind_mount(source: &str, target: &str, readonly: bool) -> String {
    let field = format!("source={source}");
    let field =
        if field.contains([',', '"', '\n', '\r']) { format!("\"{}\"", field.replace('"', "\"\"")) } else { field };
    let readonly = if readonly { ",readonly" } else { "" };
    format!("type=bind,{field},target={target}{readonly}")
}

/// Whether the container's own user can reach its relay and its proxy's
/// socket: it runs the relay, as the workspace's owner for a bound box.
pub fn egress_check(container: &str) -> Vec<String> {
    docker(&[
        "exec",
        container,
        "sh",
        "-c",
        r#"[ -x "$1" ] && [ -S "$2" ] && [ -w "$2" ]"#,
        "tinybox-egress-check",
        RELAY_IN_BOX,
        PROXY_IN_BOX,
    ])
}

/// The marker an exec's wrapper carries in its arguments, by which a
/// cancellation finds it inside the container. It looks like a path, but
/// no file is written.
pub fn marker(exec_id: &str) -> String {
    format!("/tmp/.tinybox-exec-{}.pid", marker_word(exec_id))
}

/// An exec id as a plain word: exec ids are core's (`x<pid>-<n>`); keep
/// whatever else arrives from reaching a path or a pattern as anything else.
pub fn marker_word(exec_id: &str) -> String {
    exec_id.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect()
}

/// `docker exec -i ...` under [`CLIENT_WRAPPER`]: one docker call per
/// command, streams passed through.
pub fn exec(
    container: &str,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
    marker: &str,
    argv: &[String],
    terminal: bool,
) -> Vec<String> {
    let mut a = client(env, None);
    // With -t docker makes a terminal in the container and mirrors the
    // client's own (the one its host made for this run): raw mode, and its
    // size on every SIGWINCH the host's resize sends.
    a.extend(docker(if terminal { &["exec", "-i", "-t"] } else { &["exec", "-i"] }));
    if let Some(dir) = cwd {
        a.extend(["--workdir".into(), dir.into()]);
    }
    a.extend(env_file(env));
    a.extend([container, "sh", "-c", EXEC_WRAPPER.as_str(), "sh", marker].map(String::from));
    a.extend(argv.iter().cloned());
    a
}

/// The watcher that stops the command whose wrapper carries `marker` when
/// its input ends without [`LIFELINE_RELEASE`].
pub fn lifeline(container: &str, marker: &str) -> Vec<String> {
    let script = lifeline_script();
    docker(&["exec", "-i", container, "sh", "-c", &script, "sh", &marker_pattern(marker)])
}

/// `[/]` matches the marker's first "/" but not the pattern's own text.
fn marker_pattern(marker: &str) -> String {
    format!("[/]{}", marker.trim_start_matches('/'))
}

/// Stops the command whose wrapper carries `marker`.
pub fn cancel(container: &str, marker: &str) -> Vec<String> {
    docker(&["exec", container, "sh", "-c", CANCEL_SCRIPT, "sh", &marker_pattern(marker)])
}

/// `docker stop` with the exec path's grace: SIGTERM, SIGKILL 2 s later.
pub fn stop(container: &str) -> Vec<String> {
    docker(&["stop", "--time", "2", container])
}

/// Whether an image is on the host (its id, or "No such image").
pub fn image_exists(image: &str) -> Vec<String> {
    docker(&["image", "inspect", "--format", "{{.Id}}", image])
}

/// The container's state as JSON.
pub fn inspect_state(container: &str) -> Vec<String> {
    docker(&["container", "inspect", "--format", "{{json .State}}", container])
}

/// The `uid:gid` owning a directory (following a symbolic link, as the bind does).
pub fn owner(dir: &Path) -> Vec<String> {
    ["stat", "-L", "-c", "%u:%g", "--"].into_iter().map(String::from).chain([dir.to_string_lossy().into()]).collect()
}

/// `docker create` of a container that only holds `container`'s name (it
/// is never started): labelled as the box's own, so a claim left by a
/// killed driver is still this store's, found and removed with the box.
pub fn claim(container: &str, box_id: &str, namespace: &str, image: &str) -> Vec<String> {
    let mut a = docker(&["create", "--name", container]);
    a.extend(["--label".into(), format!("tinybox.box={box_id}")]);
    a.extend(["--label".into(), format!("tinybox.namespace={namespace}")]);
    a.extend(["--network", "none", "--pull", "never", "--entrypoint", "true", image].map(String::from));
    a
}

pub fn remove(container: &str) -> Vec<String> {
    // --volumes: the anonymous volumes the image declares (VOLUME) go
    // with the container, and what the box wrote in them.
    docker(&["rm", "--force", "--volumes", container])
}

pub fn commit(container: &str) -> Vec<String> {
    docker(&["commit", container])
}

pub fn tag(image: &str, name: &str) -> Vec<String> {
    docker(&["tag", image, name])
}

/// Every image committed from box `box_id`'s containers in `namespace`,
/// by full id: `docker commit` copies the container's labels, and a
/// commit interrupted before its tag is listed too (`-a`).
pub fn images_of(namespace: &str, box_id: &str) -> Vec<String> {
    let (ns, b) = (format!("label=tinybox.namespace={namespace}"), format!("label=tinybox.box={box_id}"));
    docker(&["images", "-a", "--no-trunc", "--filter", &ns, "--filter", &b, "--format", "{{.ID}}"])
}

/// `docker rmi NAME`: removes the tag, and the image with its last tag.
pub fn remove_image(name: &str) -> Vec<String> {
    docker(&["rmi", name])
}

/// The working directory a command starts in: its own, else the box's.
/// docker wants an absolute path; a relative one is taken from the box's
/// directory, or from `/` when the image decides.
pub fn workdir(cwd: Option<&str>, box_workdir: Option<&str>) -> Option<String> {
    match (cwd, box_workdir) {
        (Some(c), _) if c.starts_with('/') => Some(c.to_owned()),
        (Some(c), base) => Some(format!("{}/{c}", base.unwrap_or("").trim_end_matches('/'))),
        (None, base) => base.map(str::to_owned),
    }
}

/// The signal [`CANCEL_SCRIPT`] says ended the command: SIGKILL when it
/// had to send it, else SIGTERM (also when the command was already gone:
/// a cancelled command reads as stopped, never as a success).
pub fn stopped_by(cancel_stdout: &str) -> i32 {
    if cancel_stdout.trim() == "KILL" { 9 } else { crate::execs::SIGTERM }
}

#[cfg(test)]
#[path = "argv_tests.rs"]
mod tests;
