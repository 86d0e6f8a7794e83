//! Limits for a caller that is not root: box cgroups go under a cgroup
//! delegated to it — its own cgroup, or the `cgroup_parent` its operator
//! configured — when the kernel would let it make children there and move
//! its own processes into them. Decided in the handshake from what the
//! files say (owners, modes, /proc/self/cgroup), read through [`Files`], so
//! every rule is tested against a made-up layout; `SETUP` does the work.
//!
//! Delegated means what systemd's `Delegate=` or an administrator's
//! `chown` leaves: the directory and its `cgroup.procs` owned by the
//! caller's uid and writable by their owner. cgroup v1 also lets a process
//! move only processes of its own uid, which a box's commands always are.
//! cgroup v2 adds two rules: a process moves only within a subtree whose
//! top (the common ancestor) the mover may write, so the caller's cgroup
//! must be the parent or inside it; and a cgroup holding processes hands
//! no controller to children, so the controller must already be enabled
//! in the parent's `cgroup.subtree_control`, or the parent must be empty
//! and its `cgroup.subtree_control` the caller's to write.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use tinybox_sdk::model::Limit;

use super::{CONTROLLERS, Support};

/// What a file's inode says, as far as the kernel's permission checks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub mode: u32,
    pub dir: bool,
}

/// The files detection reads: the real ones, or a test's layout.
pub trait Files {
    fn stat(&self, path: &Path) -> std::io::Result<Stat>;
    fn read(&self, path: &Path) -> std::io::Result<String>;
}

/// This machine's files.
pub struct RealFiles;

impl Files for RealFiles {
    fn stat(&self, path: &Path) -> std::io::Result<Stat> {
        let meta = std::fs::metadata(path)?;
        Ok(Stat { uid: meta.uid(), mode: meta.mode(), dir: meta.is_dir() })
    }

    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// What the handshake knows of an unprivileged caller.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    pub uid: u32,
    /// The text of /proc/self/cgroup: the driver runs in the caller's cgroups.
    pub proc_cgroup: &'a str,
    /// `cgroup_parent` from the driver's configuration: a cgroup path from
    /// the hierarchy's root (`/a/b`), in each v1 hierarchy or the v2 one.
    pub parent: Option<&'a str>,
}

/// The configuration key naming a delegated parent.
pub const PARENT_KEY: &str = "cgroup_parent";

/// Reads `cgroup_parent` from `config.json` in the driver's state
/// directory (the store's `drivers/namespace/`): absent file or key, none;
/// anything else there, or a path that is not a plain cgroup path, an error.
pub fn parent_setting(state_dir: Option<&Path>) -> Result<Option<String>, String> {
    let Some(dir) = state_dir else { return Ok(None) };
    let path = dir.join("config.json");
    let shown = path.display();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    let doc: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{shown} is not json ({e}); its one key: {PARENT_KEY}"))?;
    let object = doc.as_object().ok_or_else(|| format!("{shown} is not a json object; its one key: {PARENT_KEY}"))?;
    if let Some(other) = object.keys().find(|k| *k != PARENT_KEY) {
        return Err(format!("{shown} has unknown key {other:?}; its one key: {PARENT_KEY}"));
    }
    match object.get(PARENT_KEY) {
        None => Ok(None),
        Some(serde_json::Value::String(p)) if plain_cgroup_path(p) => Ok(Some(p.clone())),
        Some(other) => Err(format!(
            "{shown}: {PARENT_KEY} {other} is not a cgroup path like \"/tinybox-alice\" (no \".\" or \"..\" parts)"
        )),
    }
}

/// `/a/b` or `a/b`: named parts only, at least one.
fn plain_cgroup_path(p: &str) -> bool {
    let rel = p.trim_start_matches('/');
    !rel.is_empty() && !rel.contains("//") && Path::new(rel).components().all(|c| matches!(c, Component::Normal(_)))
}

/// A cgroup path (`/a/b`) as a directory under `base`.
fn under(base: &Path, cgroup_path: &str) -> PathBuf {
    let rel = cgroup_path.trim_start_matches('/');
    if rel.is_empty() { base.to_path_buf() } else { base.join(rel) }
}

/// The caller's cgroup path for v1 controller `controller`, or (with
/// `None`) its v2 path: the third field of the matching /proc/self/cgroup line.
fn own_path<'a>(proc_cgroup: &'a str, controller: Option<&str>) -> Option<&'a str> {
    proc_cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, list, path) = (fields.next()?, fields.next()?, fields.next()?);
        let matches = match controller {
            None => list.is_empty(),
            Some(c) => list.split(',').any(|l| l == c),
        };
        matches.then_some(path)
    })
}

/// Whether `path` is owned by `uid` and writable by its owner (and, for a
/// directory, searchable): the kernel's DAC check for that owner.
fn owned_writable(fs: &dyn Files, path: &Path, uid: u32, dir: bool) -> Result<(), String> {
    let meta = fs.stat(path).map_err(|e| format!("{} cannot be read ({e})", path.display()))?;
    if meta.dir != dir {
        let kind = if dir { "a directory" } else { "a file" };
        return Err(format!("{} is not {kind}", path.display()));
    }
    if meta.uid != uid {
        return Err(format!("{} is owned by uid {}, not {uid}", path.display(), meta.uid));
    }
    let need = if dir { 0o300 } else { 0o200 };
    if meta.mode & need != need {
        return Err(format!("{} is not writable by its owner", path.display()));
    }
    Ok(())
}

/// The directory and its `cgroup.procs` are the caller's.
fn delegated_to(fs: &dyn Files, dir: &Path, uid: u32) -> Result<(), String> {
    owned_writable(fs, dir, uid, true)?;
    owned_writable(fs, &dir.join("cgroup.procs"), uid, false)
}

fn listed(fs: &dyn Files, file: &Path, controller: &str) -> bool {
    fs.read(file).is_ok_and(|text| text.split_whitespace().any(|c| c == controller))
}

fn is_file(fs: &dyn Files, path: &Path) -> bool {
    fs.stat(path).is_ok_and(|s| !s.dir)
}

/// Decides, for the cgroup mount at `root` (normally /sys/fs/cgroup), which
/// limits `caller` can have and under which directories.
pub fn find(fs: &dyn Files, root: &Path, caller: &Caller) -> Support {
    let unified = is_file(fs, &root.join("cgroup.controllers"));
    let (parents, missing) = if unified { v2(fs, root, caller) } else { v1(fs, root, caller) };
    let limits: BTreeSet<Limit> = parents.keys().copied().collect();
    let missing = missing.iter().map(|(c, why)| format!("{c}: {why}")).collect::<Vec<_>>().join("; ");
    let why = if limits.is_empty() {
        format!(
            "no resource limits: the caller is not root and no cgroup is delegated to uid {} ({missing})",
            caller.uid
        )
    } else {
        let names: Vec<&str> = limits.iter().map(|l| l.as_str()).collect();
        let places: Vec<String> =
            parents.iter().map(|(l, d)| format!("{} under {}", l.as_str(), d.display())).collect();
        let mut why =
            format!("limits {} in cgroups delegated to uid {} ({})", names.join(", "), caller.uid, places.join(", "));
        if !missing.is_empty() {
            why.push_str(&format!("; none for {missing}"));
        }
        why
    };
    Support { limits, why, unified, parents }
}

type Found = (BTreeMap<Limit, PathBuf>, Vec<(&'static str, String)>);

/// v1: a hierarchy per controller, each with its own delegated directory.
fn v1(fs: &dyn Files, root: &Path, caller: &Caller) -> Found {
    let mut parents = BTreeMap::new();
    let mut missing = Vec::new();
    for (controller, limit) in CONTROLLERS {
        let hierarchy = root.join(controller);
        if !is_file(fs, &hierarchy.join("cgroup.procs")) {
            missing.push((controller, format!("no cgroup v1 hierarchy at {}", hierarchy.display())));
            continue;
        }
        let candidates = [
            own_path(caller.proc_cgroup, Some(controller)).map(|p| ("its own cgroup", under(&hierarchy, p))),
            caller.parent.map(|p| (PARENT_KEY, under(&hierarchy, p))),
        ];
        let mut refusals = Vec::new();
        for (label, dir) in candidates.into_iter().flatten() {
            match delegated_to(fs, &dir, caller.uid) {
                Ok(()) => {
                    parents.insert(limit, dir);
                    break;
                }
                Err(why) => refusals.push(format!("{label}: {why}")),
            }
        }
        if !parents.contains_key(&limit) {
            if caller.parent.is_none() {
                refusals.push(format!("no {PARENT_KEY} is configured"));
            }
            missing.push((controller, refusals.join(", ")));
        }
    }
    (parents, missing)
}

/// v2: one directory for every controller, the first candidate that hands
/// out at least one.
fn v2(fs: &dyn Files, root: &Path, caller: &Caller) -> Found {
    let Some(own) = own_path(caller.proc_cgroup, None) else {
        return (BTreeMap::new(), vec![("cgroup", "/proc/self/cgroup has no cgroup v2 line".into())]);
    };
    let mut candidates = vec![("its own cgroup", own)];
    candidates.extend(caller.parent.map(|p| (PARENT_KEY, p)));
    let mut refusals: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (label, path) in candidates {
        let parent = V2Parent::check(fs, under(root, path), path, own, caller.uid);
        let mut parents = BTreeMap::new();
        for (controller, limit) in CONTROLLERS {
            match parent.as_ref().map_err(String::clone).and_then(|p| p.offers(fs, controller).map(|()| p)) {
                Ok(p) => {
                    parents.insert(limit, p.dir.clone());
                }
                Err(why) => refusals.entry(controller).or_default().push(format!("{label}: {why}")),
            }
        }
        if !parents.is_empty() {
            let missing = CONTROLLERS
                .iter()
                .filter(|(_, l)| !parents.contains_key(l))
                .map(|(c, _)| (*c, refusals.remove(c).unwrap_or_default().join(", ")))
                .collect();
            return (parents, missing);
        }
    }
    let missing = CONTROLLERS
        .iter()
        .map(|(c, _)| {
            let mut why = refusals.remove(c).unwrap_or_default();
            if caller.parent.is_none() {
                why.push(format!("no {PARENT_KEY} is configured"));
            }
            (*c, why.join(", "))
        })
        .collect();
    (BTreeMap::new(), missing)
}

/// A v2 directory the caller may make children in and move its processes into.
struct V2Parent {
    dir: PathBuf,
    /// Processes of its own (a cgroup holding them hands out no controller).
    holds_processes: bool,
    /// Whether the caller may write its `cgroup.subtree_control`, and why not.
    can_enable: Result<(), String>,
}

impl V2Parent {
    /// Checks directory `dir`, cgroup path `path`, for a caller whose
    /// processes are in cgroup path `own`.
    fn check(fs: &dyn Files, dir: PathBuf, path: &str, own: &str, uid: u32) -> Result<V2Parent, String> {
        delegated_to(fs, &dir, uid)?;
        let inside = Path::new(own.trim_start_matches('/')).starts_with(path.trim_start_matches('/'));
        if !inside {
            return Err(format!(
                "the caller's cgroup {own} is not inside {path}, and cgroup v2 moves a process only within a subtree whose top the mover may write"
            ));
        }
        let holds_processes = fs.read(&dir.join("cgroup.procs")).map(|t| !t.trim().is_empty()).unwrap_or(true);
        let can_enable = owned_writable(fs, &dir.join("cgroup.subtree_control"), uid, false);
        Ok(V2Parent { dir, holds_processes, can_enable })
    }

    /// Whether a child made here can have `controller`.
    fn offers(&self, fs: &dyn Files, controller: &str) -> Result<(), String> {
        if listed(fs, &self.dir.join("cgroup.subtree_control"), controller) {
            return Ok(());
        }
        let shown = self.dir.display();
        if !listed(fs, &self.dir.join("cgroup.controllers"), controller) {
            return Err(format!("{shown} is not offered the {controller} controller"));
        }
        if self.holds_processes {
            return Err(format!("{shown} holds processes, so cgroup v2 lets it hand no controller to a child"));
        }
        self.can_enable.clone().map_err(|why| format!("{controller} is not enabled for its children and {why}"))
    }
}

#[cfg(test)]
#[path = "delegated_tests.rs"]
mod tests;
