//! What each sandbox method does, as commands on the box's host: a probe
//! that checks the host and finds (or makes) the workspace, one bwrap per
//! command, `rm` and `test` for the rest. Written against the sdk's
//! `&dyn Host`, so `sandbox_tests.rs` runs it against a recording fake;
//! the `SandboxDriver` in main.rs only hands each call its host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tinybox_sdk::Host;
use tinybox_sdk::capture::capture;
use tinybox_sdk::fence::{Exception, Fence, NETWRAP, SLIRP_DNS};
use tinybox_sdk::model::{ExitStatus, Limit, NetworkPolicy, SnapshotSupport, WorkspaceSource};
use tinybox_sdk::protocol::{BoxRef, CreateParams, CreateResult, DriverError, EgressEndpoint, ExecParams, RunParams};

use tinybox_sdk::model::names::validate_name;

use crate::image_box::{self, Dirs, ImageHandle};
use crate::probe::{self, PROBE};
use crate::{bwrap, cgroup, holder, seccomp, snapshots};

/// Hands the seccomp program to the command after it on descriptor 3,
/// where `bwrap --seccomp 3` reads it: `file PATH` opens the driver's copy
/// on this machine (`seccomp::program_file`) and execs, no fork; `pipe
/// FORMAT` (another machine's box) feeds it from a printf format through a
/// pipe, so the program is never a file on that host. The command keeps
/// the caller's stdin either way.
pub const SECCOMP: &str = r#"if [ "$1" = file ]; then
    # A redirection that fails on exec ends the shell with its own words: check first.
    [ -f "$2" ] && [ -r "$2" ] || { echo "tinybox: cannot open the box's seccomp program $2" >&2; exit 125; }
    exec 3<"$2"
    shift 2
    exec "$@"
fi
shift
exec 4<&0
printf "$1" | { exec 3<&0 0<&4 4<&-; shift; exec "$@"; }
"#;

/// Hands the box's environment to bwrap on descriptor 5 (`bwrap::ENV_FD`,
/// read by `bwrap --args 5`) and then runs [`SECCOMP`] with the rest. `$1`
/// is how many variables carry it (`tinybox_sdk::carried_env`); each is
/// printed as the NUL-separated `--setenv NAME VALUE` bwrap reads, by a
/// forked shell feeding a pipe, and unset before anything else starts, so
/// the values are on no command line and in the environment of no host
/// program (docs/adr/0027-values-off-command-lines.md). A box with no
/// environment forks nothing more than before.
pub fn env_feed() -> String {
    use tinybox_sdk::carried_env::{each, unset_all};
    let print = each(r#"printf '%s\0%s\0%s\0' --setenv "${kv%%=*}" "${kv#*=}""#);
    format!(
        r#"seccomp() {{
{SECCOMP}}}
n=$1; shift
[ "$n" -gt 0 ] || {{ seccomp "$@"; exit $?; }}
exec 6<&0
{print} | {{
    exec 5<&0 0<&6 6<&-
    {}
    seccomp "$@"
}}
"#,
        unset_all()
    )
}

/// The one shell every command of a box starts in, as the caller: it
/// enters the box's cgroups (`cgroup::ENTER`; none for a box without
/// limits), puts the box's environment on descriptor 5 ([`env_feed`]),
/// then hands the seccomp program to the rest ([`SECCOMP`]): setpriv,
/// netwrap.sh and bwrap, each only where the box needs it, pass
/// descriptors 3 and 5 on to bwrap. One shell, not one per step: each is a
/// process start on every exec (docs/benchmarks.md, "Namespace sandbox").
pub fn start_script() -> String {
    format!("{}{}", cgroup::ENTER, env_feed())
}

/// What core stores for a box and hands back on every call.
#[derive(Debug, Clone, PartialEq)]
struct Handle {
    workspace: String,
    /// The workspace was made for the box (no directory was given) and goes with it.
    owned: bool,
    egress: bool,
    /// Loopback only, with the egress proxy core runs for it relayed in
    /// (the endpoint comes with each exec).
    allowlist: bool,
    /// With egress: what the caller let through its fence (every egress
    /// box is fenced; a record from before the fence has no exceptions).
    fence: Vec<Exception>,
    /// The uid and gid bwrap runs as: the workspace's owner, when the caller
    /// is root and the owner is not.
    runas: Option<(u32, u32)>,
    /// The host's machine (`uname -m`), which the seccomp program is built for;
    /// `None` for a box made before the program existed.
    arch: Option<seccomp::Arch>,
    /// The box's cgroup directories on the host; empty when no limit is in force.
    cgroups: Vec<String>,
    /// Those directories are cgroup v2's (one for every controller).
    cgroup_v2: bool,
    /// A box made from an image: a place held by one bwrap, whose agent
    /// runs each command (image_box.rs); `workspace` is its directory.
    image: Option<ImageHandle>,
    /// The box's namespace, kept for an image box's snapshots (snapshots.rs).
    namespace: String,
}

impl Handle {
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "workspace": self.workspace,
            "owned": self.owned,
            "egress": self.egress,
            "allowlist": self.allowlist,
            "fence": self.fence,
            "runas": self.runas.map(|(u, g)| format!("{u}:{g}")),
            "arch": self.arch.map(seccomp::Arch::name),
            "cgroups": self.cgroups,
            "cgroup_v2": self.cgroup_v2,
        });
        if let Some(image) = &self.image {
            v["image"] = serde_json::json!(image);
            v["namespace"] = serde_json::json!(self.namespace);
        }
        v
    }

    fn parse(v: &serde_json::Value) -> Result<Handle, DriverError> {
        let workspace = v
            .get("workspace")
            .and_then(|w| w.as_str())
            .ok_or_else(|| DriverError::invalid("the box record has no workspace; it was not made by this driver"))?;
        let runas = match v.get("runas").and_then(|r| r.as_str()) {
            None => None,
            Some(text) => Some(
                parse_owner(text)
                    .ok_or_else(|| DriverError::invalid(format!("the box record's runas {text:?} is not uid:gid")))?,
            ),
        };
        let cgroups: Vec<String> = v
            .get("cgroups")
            .and_then(|c| c.as_array())
            .map(|a| a.iter().filter_map(|d| d.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let fence = match v.get("fence") {
            None => Vec::new(),
            Some(f) => serde_json::from_value(f.clone())
                .map_err(|e| DriverError::invalid(format!("the box record's fence exceptions do not parse: {e}")))?,
        };
        let image = match v.get("image") {
            None | Some(serde_json::Value::Null) => None,
            Some(i) => Some(
                serde_json::from_value(i.clone())
                    .map_err(|e| DriverError::invalid(format!("the box record's image does not parse: {e}")))?,
            ),
        };
        // A record from before the key: v2 boxes were all under /sys/fs/cgroup/tinybox.
        let cgroup_v2 = v
            .get("cgroup_v2")
            .and_then(|u| u.as_bool())
            .unwrap_or_else(|| cgroups.iter().any(|d| d.starts_with("/sys/fs/cgroup/tinybox/")));
        Ok(Handle {
            workspace: workspace.to_owned(),
            owned: v.get("owned").and_then(|o| o.as_bool()).unwrap_or(false),
            egress: v.get("egress").and_then(|e| e.as_bool()).unwrap_or(false),
            allowlist: v.get("allowlist").and_then(|e| e.as_bool()).unwrap_or(false),
            fence,
            runas,
            arch: v.get("arch").and_then(|a| a.as_str()).and_then(seccomp::Arch::from_uname),
            cgroups,
            cgroup_v2,
            image,
            namespace: v.get("namespace").and_then(|n| n.as_str()).unwrap_or_default().to_owned(),
        })
    }
}

/// `uid:gid`, both numbers.
fn parse_owner(text: &str) -> Option<(u32, u32)> {
    let (u, g) = text.split_once(':')?;
    Some((u.parse().ok()?, g.parse().ok()?))
}

fn host_env() -> BTreeMap<String, String> {
    [("PATH".to_owned(), bwrap::BWRAP_PATH.to_owned())].into()
}

/// Where a driver process keeps what it makes for its store's boxes, so
/// that each thing can be found again from a box's namespace and
/// identifier alone: a create whose answer was lost left no handle, and
/// `rm` of its record must still remove what it made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Site {
    /// Tells this store's boxes from another's: box ids are only unique
    /// within one store, and a cgroup is the whole host's.
    pub store: String,
    /// The directory under which a box given no workspace gets its own,
    /// `<namespace>-<box id>`: the store's state directory on this machine,
    /// a directory in the login directory on another. `None` (no state
    /// directory was offered) falls back to `mktemp`, which only the
    /// create's answer can name.
    pub workspaces: Option<String>,
    /// Where box cgroups go: what the handshake found (`cgroup::Support`).
    pub cgroups: Cgroups,
    /// On this machine: the driver's state directory (its agent and
    /// seccomp files). Image boxes are made only here.
    pub local: Option<PathBuf>,
}

/// Where this caller's box cgroups go on this machine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cgroups {
    /// cgroup v2: one directory per box.
    pub unified: bool,
    /// Each limit's delegated parent; empty for root (`cgroup::SETUP`'s defaults).
    pub parents: BTreeMap<Limit, PathBuf>,
}

impl Site {
    /// The workspace a box given none gets, from its namespace and identifier.
    fn own_workspace(&self, namespace: &str, box_id: &str) -> Option<String> {
        self.workspaces.as_ref().map(|base| format!("{base}/{namespace}-{box_id}"))
    }
}

pub async fn create(host: &dyn Host, site: &Site, p: CreateParams) -> Result<CreateResult, DriverError> {
    // An image box's image, and the snapshot whose layer it starts from.
    let (image, seed) = match (&p.source, &p.image, &site.local) {
        (Some(WorkspaceSource::OciImage { .. }), Some(image), _) => (Some(ImageHandle::of(image)?), None),
        (Some(WorkspaceSource::Snapshot { id }), _, Some(local)) => {
            let (dir, image) = snapshots::find(local, &p.namespace, id)?;
            (Some(image), Some(dir))
        }
        _ => (None, None),
    };
    if image.is_some() && site.local.is_none() {
        return Err(DriverError::unsupported(
            "namespace boxes from an image are made on this machine only: the image's root is in this machine's store",
        ));
    }
    let given = match &p.source {
        None => None,
        Some(WorkspaceSource::LocalDir { path }) => Some(path.to_string_lossy().into_owned()),
        Some(WorkspaceSource::OciImage { .. } | WorkspaceSource::Snapshot { .. }) if image.is_some() => None,
        Some(other) => {
            return Err(DriverError::unsupported(format!(
                "the namespace sandbox binds a directory you already have; it cannot start from {}",
                other.kind()
            )));
        }
    };
    validate_name("namespace", &p.namespace).map_err(|e| DriverError::invalid(e.to_string()))?;
    let egress = p.network == Some(NetworkPolicy::Egress);
    let allowlist = p.network == Some(NetworkPolicy::Allowlist);
    let endpoint = match (&p.egress, allowlist) {
        (Some(e), true) => Some(e),
        (None, true) => {
            return Err(DriverError::invalid("an allowlist box needs its egress endpoint, and core sent none"));
        }
        (_, false) => None,
    };
    let own = if given.is_none() { site.own_workspace(&p.namespace, p.box_id.as_str()) } else { None };
    let argv = vec![
        "sh".into(),
        "-c".into(),
        PROBE.into(),
        "tinybox-probe".into(),
        given.clone().unwrap_or_default(),
        p.box_id.to_string(),
        match (egress, allowlist) {
            (true, _) => "egress".into(),
            (_, true) => "allowlist".into(),
            _ => "denied".into(),
        },
        own.clone().unwrap_or_default(),
        endpoint.map(|e| e.relay.to_string_lossy().into_owned()).unwrap_or_default(),
        endpoint.map(|e| e.socket.to_string_lossy().into_owned()).unwrap_or_default(),
    ];
    let out = capture(host, argv, host_env(), b"").await?;
    if out.status.code != Some(0)
        && let Some(own) = &own
    {
        // A check that failed after the workspace was made: it goes.
        discard(host, own, true, &[]).await;
    }
    let (runas, machine, workspace) = probe::read(&out, given.as_deref(), own.as_deref(), endpoint)?;
    let runas = match runas.as_str() {
        "" => None,
        text => Some(
            parse_owner(text).ok_or_else(|| DriverError::failed(format!("the host check printed owner {text:?}")))?,
        ),
    };
    let owned = given.is_none();
    let Some(arch) = seccomp::Arch::from_uname(&machine) else {
        discard(host, &workspace, owned, &[]).await;
        return Err(DriverError::unsupported(format!(
            "the namespace sandbox filters system calls on x86_64 and aarch64 hosts; this host is {machine}"
        )));
    };
    let mut handle = Handle {
        workspace,
        owned,
        egress,
        allowlist,
        fence: if egress { p.egress_exceptions.clone() } else { Vec::new() },
        runas,
        arch: Some(arch),
        cgroups: Vec::new(),
        cgroup_v2: site.cgroups.unified,
        image,
        namespace: p.namespace.clone(),
    };
    if !p.resources.set().is_empty() {
        let mut argv = vec!["sh".into(), "-c".into(), cgroup::SETUP.into(), "tinybox-cgroup".into()];
        argv.push(cgroup::name(&site.store, &p.namespace, p.box_id.as_str()));
        argv.extend(cgroup::setup_args(&p.resources, &site.cgroups.parents));
        let out = capture(host, argv, host_env(), b"").await?;
        let dirs: Vec<String> = out.stdout_text().lines().map(str::to_owned).collect();
        if !out.success() || dirs.is_empty() {
            discard(host, &handle.workspace, owned, &dirs).await;
            return Err(DriverError::unavailable(format!(
                "cannot apply the box's limits on the host ({}): {}; run as root, or give the caller a delegated cgroup (cgroup_parent in the driver's config.json)",
                out.status,
                out.stderr_text()
            )));
        }
        handle.cgroups = dirs;
    }
    if let (Some(image), Some(local)) = (&handle.image, &site.local) {
        if let Err(e) = start_image_box(host, &handle, image, arch, (local, seed.as_deref()), endpoint).await {
            image_box::kill(&Dirs::new(Path::new(&handle.workspace)));
            discard(host, &handle.workspace, true, &handle.cgroups).await;
            return Err(e);
        }
        return Ok(CreateResult {
            handle: handle.json(),
            workdir: Some(image.working_dir.clone().unwrap_or_else(|| "/".to_owned())),
            isolation: None,
            // A place: everything it writes stays.
            persistent_paths: None,
            snapshot: None,
        });
    }
    // Every command gets a fresh view of all but the workspace (bwrap.rs).
    let persistent_paths = Some(vec![bwrap::WORKSPACE.to_owned()]);
    Ok(CreateResult {
        handle: handle.json(),
        workdir: Some(bwrap::WORKSPACE.into()),
        isolation: None,
        persistent_paths,
        // Nothing of it outside the caller's directory lasts to be taken.
        snapshot: Some(SnapshotSupport::None),
    })
}

/// Undoes a create that failed half-way; what cannot be undone is left.
async fn discard(host: &dyn Host, workspace: &str, owned: bool, cgroups: &[String]) {
    let _ = remove_cgroups(host, cgroups).await;
    if owned {
        let _ =
            capture(host, vec!["rm".into(), "-rf".into(), "--".into(), workspace.to_owned()], host_env(), b"").await;
    }
}

async fn remove_cgroups(host: &dyn Host, cgroups: &[String]) -> Result<(), DriverError> {
    if cgroups.is_empty() {
        return Ok(());
    }
    let mut argv = vec!["sh".to_owned(), "-c".to_owned(), cgroup::REMOVE.to_owned(), "tinybox-cgroup-rm".to_owned()];
    argv.extend(cgroups.iter().cloned());
    let out = capture(host, argv, host_env(), b"").await?;
    if !out.success() {
        return Err(DriverError::failed(format!("cannot remove the box's cgroups: {}", out.stderr_text())));
    }
    Ok(())
}

/// The whole command the host runs for one exec, outermost first: one
/// shell that enters the box's cgroups (as the caller, who may write them)
/// and opens the seccomp program on descriptor 3, then become the
/// workspace's owner, make the egress namespace, bwrap.
fn command(
    handle: &Handle,
    arch: seccomp::Arch,
    program: Option<&Path>,
    env_count: usize,
    inner: Vec<String>,
) -> Vec<String> {
    let mut v = inner;
    if handle.egress {
        let fence = Fence { exceptions: handle.fence.clone(), resolvers: vec![SLIRP_DNS] };
        let v4 = fence.v4();
        let mut outer = vec!["sh".to_owned(), "-c".to_owned(), NETWRAP.to_owned(), "tinybox-netwrap".to_owned()];
        outer.extend([v4.head, v4.tail, fence.v6()]);
        outer.extend(v);
        v = outer;
    }
    if let Some((uid, gid)) = handle.runas {
        let mut outer = vec![
            "setpriv".to_owned(),
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--clear-groups".to_owned(),
            "--".to_owned(),
        ];
        outer.extend(v);
        v = outer;
    }
    let mut outer = vec!["sh".to_owned(), "-c".to_owned(), start_script(), "tinybox-start".to_owned()];
    outer.push(cgroup::member_file(handle.cgroup_v2).to_owned());
    outer.push(handle.cgroups.len().to_string());
    outer.extend(handle.cgroups.iter().cloned());
    outer.push(env_count.to_string());
    match program {
        Some(file) => outer.extend(["file".to_owned(), file.display().to_string()]),
        None => outer.extend(["pipe".to_owned(), seccomp::printf_format(&seccomp::bytes(arch))]),
    }
    outer.extend(v);
    outer
}

/// Runs one command in a box. `programs`: where this machine's copies of
/// the seccomp program live, for a box on this machine; `None` feeds it
/// through a pipe. `remote`: the box's host is another machine, whose host
/// driver (ssh) makes a terminal as the controlling terminal of a session
/// of its own, so a terminal run stays in that session
/// (`bwrap::Terminal::HostSession`); on this machine the host leaves it
/// unowned and the box takes it in a session inside its pid namespace.
pub async fn exec(
    host: &dyn Host,
    p: ExecParams,
    programs: Option<&Path>,
    remote: bool,
    running: &tinybox_agent::host::Running,
) -> Result<ExitStatus, DriverError> {
    let handle = Handle::parse(&p.target.handle)?;
    if let Some(image) = &handle.image {
        return image_box::exec(&Dirs::new(Path::new(&handle.workspace)), image, p, running).await;
    }
    let Some(arch) = handle.arch else {
        return Err(DriverError::unsupported(format!(
            "box {} was made by an older namespace driver that let it set setuid bits in its workspace; remove it and create it again",
            p.target.box_id
        )));
    };
    let egress = match (&p.egress, handle.allowlist) {
        (Some(e), true) => Some(e),
        (None, true) => {
            return Err(DriverError::invalid(format!(
                "box {} has an allowlist, and core sent no egress endpoint for its proxy",
                p.target.box_id
            )));
        }
        (_, false) => None,
    };
    let terminal = match (p.request.tty.is_some(), remote) {
        (false, _) => bwrap::Terminal::None,
        (true, false) => bwrap::Terminal::Unowned,
        (true, true) => bwrap::Terminal::HostSession,
    };
    let mut env = p.box_env;
    env.extend(p.request.env);
    // With egress, the network namespace is the one netwrap.sh prepared.
    let layout = bwrap::Layout {
        workspace: &handle.workspace,
        cwd: p.request.cwd.as_deref(),
        env: &env,
        share_net: handle.egress,
        cgroups: &handle.cgroups,
        cgroup_v2: handle.cgroup_v2,
        terminal,
        egress,
    };
    let program = programs.and_then(|dir| seccomp::program_file(dir, arch));
    let mut inner = vec!["bwrap".to_owned()];
    inner.extend(bwrap::args(&layout, &p.request.argv));
    let argv = command(&handle, arch, program.as_deref(), env.len(), inner);
    // The values travel in the start shell's environment, which only its
    // user can read, under names no host program reads (tinybox_sdk::carried_env).
    let mut run_env = host_env();
    run_env.extend(tinybox_sdk::carried_env::vars(&env));
    host.run(RunParams {
        exec_id: p.exec_id,
        argv,
        env: run_env,
        clear_env: true,
        cwd: None,
        stdio: p.stdio,
        tty: p.request.tty,
        // On this machine the box's command takes the terminal in a session
        // of its own (setsid -c, see bwrap.rs): one made outside the box's
        // pid namespace would hold process groups invisible inside it. An
        // ssh host cannot leave its terminal unowned (sshd's session holds
        // it), so there the box joins that session (docs/adr/0025).
        tty_session_inside: terminal == bwrap::Terminal::Unowned,
    })
    .await
}

pub async fn destroy(host: &dyn Host, site: &Site, target: BoxRef) -> Result<(), DriverError> {
    if let Some(namespace) = target.interrupted_namespace() {
        return destroy_interrupted(host, site, namespace, target.box_id.as_str()).await;
    }
    let handle = Handle::parse(&target.handle)?;
    if handle.image.is_some() {
        image_box::kill(&Dirs::new(Path::new(&handle.workspace)));
    }
    remove_cgroups(host, &handle.cgroups).await?;
    if !handle.owned {
        // The directory is the caller's own; the box never owned it.
        return Ok(());
    }
    let argv = match handle.image {
        Some(_) => vec!["sh".into(), "-c".into(), REMOVE_OWN.into(), "tinybox-rm".into(), handle.workspace.clone()],
        None => vec!["rm".into(), "-rf".into(), "--".into(), handle.workspace.clone()],
    };
    let out = capture(host, argv, host_env(), b"").await?;
    // REMOVE_OWN's 1: the directory was already gone.
    let removed = match handle.image {
        Some(_) => matches!(out.status.code, Some(0 | 1)),
        None => out.status.code == Some(0),
    };
    if !removed {
        return Err(DriverError::failed(format!("cannot remove {}: {}", handle.workspace, out.stderr_text())));
    }
    Ok(())
}

/// Removes what a create whose answer was lost made, found from the box's
/// namespace and identifier alone: its own workspace and its cgroups (a
/// create starts no process that outlives it). Not found when there was
/// nothing; a workspace made by `mktemp` (no state directory) cannot be
/// found and is left to the system's temporary-file cleaning.
async fn destroy_interrupted(host: &dyn Host, site: &Site, namespace: &str, box_id: &str) -> Result<(), DriverError> {
    validate_name("namespace", namespace).map_err(|e| DriverError::invalid(e.to_string()))?;
    let name = cgroup::name(&site.store, namespace, box_id);
    let mut argv = vec!["sh".into(), "-c".into(), cgroup::LOCATE.into(), "tinybox-cgroup-find".into(), name];
    let parents: std::collections::BTreeSet<String> =
        site.cgroups.parents.values().map(|d| d.display().to_string()).collect();
    argv.extend(parents);
    let found = capture(host, argv, host_env(), b"").await?;
    let cgroups: Vec<String> = found.stdout_text().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    remove_cgroups(host, &cgroups).await?;
    let mut removed = !cgroups.is_empty();
    if let Some(own) = site.own_workspace(namespace, box_id) {
        // An image box's processes, from what its bwrap wrote there.
        if site.local.is_some() {
            image_box::kill(&Dirs::new(Path::new(&own)));
        }
        let argv = vec!["sh".into(), "-c".into(), REMOVE_OWN.into(), "tinybox-rm".into(), own.clone()];
        let out = capture(host, argv, host_env(), b"").await?;
        match out.status.code {
            Some(0) => removed = true,
            Some(1) => {}
            _ => return Err(DriverError::failed(format!("cannot remove {own}: {}", out.stderr_text().trim()))),
        }
    }
    if removed { Ok(()) } else { Err(DriverError::not_found(format!("box {box_id} left nothing behind"))) }
}

/// Removes `$1` when it is there (exit 0), says 1 when it is not. An
/// image box's layer may hold directories the box made unreadable: made
/// the owner's again first (chmod -R follows no link it meets).
const REMOVE_OWN: &str = r#"[ -e "$1" ] || [ -L "$1" ] || exit 1
[ -L "$1" ] || chmod -R u+rwX -- "$1" 2>/dev/null
rm -rf -- "$1" || exit 2
"#;

#[path = "inspect.rs"]
mod inspect;
pub use inspect::inspect;

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;

/// Starts the bwrap that holds an image box (holder.rs), inside the start
/// shell every command of the box's gets ([`command`]).
async fn start_image_box(
    host: &dyn Host,
    handle: &Handle,
    image: &ImageHandle,
    arch: seccomp::Arch,
    (local, seed): (&Path, Option<&Path>),
    egress: Option<&EgressEndpoint>,
) -> Result<(), DriverError> {
    let dirs = Dirs::new(Path::new(&handle.workspace));
    let start = holder::Start {
        dirs: &dirs,
        image,
        local,
        seed,
        share_net: handle.egress,
        cgroups: &handle.cgroups,
        cgroup_v2: handle.cgroup_v2,
        arch,
        egress,
    };
    holder::start(host, start, |inner, program| command(handle, arch, Some(program), 0, inner)).await
}

/// Takes a snapshot of an image box (snapshots.rs); a box made without an
/// image says at create that it takes none, and core refuses before this.
pub async fn snapshot(
    host: &dyn Host,
    site: &Site,
    target: BoxRef,
) -> Result<tinybox_sdk::model::SnapshotId, DriverError> {
    let handle = Handle::parse(&target.handle)?;
    let (Some(image), Some(local)) = (&handle.image, &site.local) else {
        return Err(DriverError::unsupported(
            "this namespace box was made without an image: nothing of it outside its workspace lasts to be taken",
        ));
    };
    snapshots::take(host, local, &handle.namespace, &target.box_id, &Dirs::new(Path::new(&handle.workspace)), image)
        .await
}
