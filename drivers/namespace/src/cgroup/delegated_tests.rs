//! Detection of a delegated cgroup against made-up layouts: who owns what,
//! which mode it has, what /proc/self/cgroup says. The live suite
//! (tests/tests/namespace_escape.rs) delegates a real v1 cgroup to the
//! test user and checks the limits hold.

use std::collections::BTreeMap;
use std::io::{Error, ErrorKind};

use super::*;

const ME: u32 = 1001;
const ROOT: &str = "/sys/fs/cgroup";

/// A file tree with owners and modes.
#[derive(Default)]
struct Layout(BTreeMap<PathBuf, (Stat, String)>);

impl Layout {
    fn dir(mut self, path: &str, uid: u32, mode: u32) -> Layout {
        self.0.insert(path.into(), (Stat { uid, mode, dir: true }, String::new()));
        self
    }

    fn file(mut self, path: &str, uid: u32, mode: u32, text: &str) -> Layout {
        self.0.insert(path.into(), (Stat { uid, mode, dir: false }, text.to_owned()));
        self
    }

    /// A cgroup directory whose directory and `cgroup.procs` `uid` owns.
    fn cgroup(self, path: &str, uid: u32) -> Layout {
        self.dir(path, uid, 0o755).file(&format!("{path}/cgroup.procs"), uid, 0o644, "")
    }

    /// The v1 hierarchies named, each root's cgroup root-owned.
    fn v1(self, controllers: &[&str]) -> Layout {
        controllers.iter().fold(self, |l, c| l.cgroup(&format!("{ROOT}/{c}"), 0))
    }
}

impl Files for Layout {
    fn stat(&self, path: &Path) -> std::io::Result<Stat> {
        self.0.get(path).map(|(s, _)| *s).ok_or_else(|| Error::from(ErrorKind::NotFound))
    }

    fn read(&self, path: &Path) -> std::io::Result<String> {
        match self.0.get(path) {
            Some((s, text)) if !s.dir => Ok(text.clone()),
            Some(_) => Err(Error::from(ErrorKind::IsADirectory)),
            None => Err(Error::from(ErrorKind::NotFound)),
        }
    }
}

fn caller<'a>(proc_cgroup: &'a str, parent: Option<&'a str>) -> Caller<'a> {
    Caller { uid: ME, proc_cgroup, parent }
}

fn parents(s: &Support) -> Vec<(Limit, String)> {
    s.parents.iter().map(|(l, d)| (*l, d.display().to_string())).collect()
}

const V1_AT_ROOT: &str = "4:pids:/\n3:memory:/\n2:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n";

#[test]
fn v1_uses_the_callers_own_cgroup_where_it_is_delegated_and_says_why_not_elsewhere() {
    let fs = Layout::default().v1(&["pids", "memory"]).cgroup("/sys/fs/cgroup/pids/u", ME);
    let s = find(&fs, Path::new(ROOT), &caller("4:pids:/u\n3:memory:/\n0::/\n", None));
    assert_eq!(parents(&s), [(Limit::Pids, "/sys/fs/cgroup/pids/u".to_owned())]);
    assert_eq!(s.limits, [Limit::Pids].into());
    assert!(!s.unified);
    assert!(
        s.why.starts_with("limits pids in cgroups delegated to uid 1001 (pids under /sys/fs/cgroup/pids/u)"),
        "{}",
        s.why
    );
    assert!(
        s.why.contains(
            "memory: its own cgroup: /sys/fs/cgroup/memory is owned by uid 0, not 1001, no cgroup_parent is configured"
        ),
        "{}",
        s.why
    );
    assert!(s.why.contains("cpu: no cgroup v1 hierarchy at /sys/fs/cgroup/cpu"), "{}", s.why);
}

#[test]
fn v1_uses_a_configured_parent_in_each_hierarchy_that_delegates_it() {
    let p = "/tinybox-alice";
    let fs = Layout::default()
        .v1(&["pids", "memory", "cpu"])
        .cgroup("/sys/fs/cgroup/pids/tinybox-alice", ME)
        .cgroup("/sys/fs/cgroup/memory/tinybox-alice", ME)
        // cpu: the directory was handed over, its cgroup.procs was not.
        .dir("/sys/fs/cgroup/cpu/tinybox-alice", ME, 0o755)
        .file("/sys/fs/cgroup/cpu/tinybox-alice/cgroup.procs", 0, 0o644, "");
    let s = find(&fs, Path::new(ROOT), &caller(V1_AT_ROOT, Some(p)));
    assert_eq!(
        parents(&s),
        [
            (Limit::Memory, "/sys/fs/cgroup/memory/tinybox-alice".to_owned()),
            (Limit::Pids, "/sys/fs/cgroup/pids/tinybox-alice".to_owned()),
        ]
    );
    assert!(
        s.why.contains("none for cpu: its own cgroup: /sys/fs/cgroup/cpu is owned by uid 0, not 1001, cgroup_parent: /sys/fs/cgroup/cpu/tinybox-alice/cgroup.procs is owned by uid 0, not 1001"),
        "{}",
        s.why
    );
}

#[test]
fn v1_refuses_what_another_uid_owns_or_its_owner_cannot_write() {
    let fs = Layout::default()
        .v1(&["pids", "memory", "cpu"])
        .cgroup("/sys/fs/cgroup/pids/p", 1002)
        .dir("/sys/fs/cgroup/memory/p", ME, 0o555)
        .file("/sys/fs/cgroup/memory/p/cgroup.procs", ME, 0o644, "")
        .dir("/sys/fs/cgroup/cpu/p", ME, 0o755)
        .file("/sys/fs/cgroup/cpu/p/cgroup.procs", ME, 0o444, "");
    let s = find(&fs, Path::new(ROOT), &caller(V1_AT_ROOT, Some("p")));
    assert!(s.limits.is_empty() && s.parents.is_empty(), "{s:?}");
    assert!(s.why.starts_with("no resource limits: the caller is not root and no cgroup is delegated to uid 1001 ("));
    for part in [
        "/sys/fs/cgroup/pids/p is owned by uid 1002, not 1001",
        "/sys/fs/cgroup/memory/p is not writable by its owner",
        "/sys/fs/cgroup/cpu/p/cgroup.procs is not writable by its owner",
    ] {
        assert!(s.why.contains(part), "{part}: {}", s.why);
    }
    // Nothing delegated and nothing configured: each controller says so.
    let s = find(&Layout::default().v1(&["pids", "memory", "cpu"]), Path::new(ROOT), &caller(V1_AT_ROOT, None));
    assert!(s.limits.is_empty());
    assert_eq!(s.why.matches("no cgroup_parent is configured").count(), 3, "{}", s.why);
}

/// A v2 mount whose root offers `offered`, with the caller's cgroup `own`.
fn v2(offered: &str) -> Layout {
    Layout::default().cgroup(ROOT, 0).file("/sys/fs/cgroup/cgroup.controllers", 0, 0o444, offered).file(
        "/sys/fs/cgroup/cgroup.subtree_control",
        0,
        0o644,
        offered,
    )
}

/// A delegated v2 cgroup at `path` offering `offered`, with `enabled` for
/// its children, `procs` in it, and its `cgroup.subtree_control` owned by `control_uid`.
fn v2_cgroup(l: Layout, path: &str, offered: &str, enabled: &str, procs: &str, control_uid: u32) -> Layout {
    l.dir(path, ME, 0o755)
        .file(&format!("{path}/cgroup.procs"), ME, 0o644, procs)
        .file(&format!("{path}/cgroup.controllers"), 0, 0o444, offered)
        .file(&format!("{path}/cgroup.subtree_control"), control_uid, 0o644, enabled)
}

#[test]
fn v2_refuses_the_callers_own_cgroup_because_it_holds_processes() {
    let fs = v2_cgroup(v2("cpu memory pids"), "/sys/fs/cgroup/u", "cpu memory pids", "", "4242\n", ME);
    let s = find(&fs, Path::new(ROOT), &caller("0::/u\n", None));
    assert!(s.limits.is_empty(), "{s:?}");
    assert!(s.unified);
    assert!(
        s.why.contains("pids: its own cgroup: /sys/fs/cgroup/u holds processes, so cgroup v2 lets it hand no controller to a child, no cgroup_parent is configured"),
        "{}",
        s.why
    );
}

#[test]
fn v2_uses_a_configured_parent_above_the_caller_with_the_controllers_it_hands_out() {
    let fs = v2_cgroup(v2("cpu memory pids"), "/sys/fs/cgroup/d", "memory pids", "pids", "", 0);
    let fs = v2_cgroup(fs, "/sys/fs/cgroup/d/leaf", "pids", "", "4242\n", ME);
    let s = find(&fs, Path::new(ROOT), &caller("0::/d/leaf\n", Some("/d")));
    // pids already enabled; memory offered but the caller may not enable it.
    assert_eq!(parents(&s), [(Limit::Pids, "/sys/fs/cgroup/d".to_owned())]);
    assert!(s.why.contains("memory is not enabled for its children and /sys/fs/cgroup/d/cgroup.subtree_control is owned by uid 0, not 1001"), "{}", s.why);
    assert!(s.why.contains("cgroup_parent: /sys/fs/cgroup/d is not offered the cpu controller"), "{}", s.why);

    // Its cgroup.subtree_control the caller's, and no process of its own: enableable.
    let fs = v2_cgroup(v2("cpu memory pids"), "/sys/fs/cgroup/d", "cpu memory pids", "", "", ME);
    let fs = v2_cgroup(fs, "/sys/fs/cgroup/d/leaf", "", "", "4242\n", ME);
    let s = find(&fs, Path::new(ROOT), &caller("0::/d/leaf\n", Some("d")));
    assert_eq!(s.limits, [Limit::Cpu, Limit::Memory, Limit::Pids].into());
    assert!(s.parents.values().all(|d| d == Path::new("/sys/fs/cgroup/d")), "one directory: {s:?}");
}

#[test]
fn v2_refuses_a_parent_the_caller_is_not_inside() {
    let fs = v2_cgroup(v2("pids"), "/sys/fs/cgroup/d", "pids", "pids", "", ME);
    let s = find(&fs, Path::new(ROOT), &caller("0::/elsewhere\n", Some("/d")));
    assert!(s.limits.is_empty(), "{s:?}");
    assert!(s.why.contains("the caller's cgroup /elsewhere is not inside /d"), "{}", s.why);
    // A name that merely starts the same is not inside.
    let s = find(&fs, Path::new(ROOT), &caller("0::/dx/leaf\n", Some("/d")));
    assert!(s.limits.is_empty(), "{s:?}");
}

#[test]
fn the_callers_cgroup_is_read_per_controller_from_proc_self_cgroup() {
    let text = "5:cpu,cpuacct:/a\n4:pids:/b\n1:name=systemd:/c\n0::/d\n";
    assert_eq!(own_path(text, Some("cpu")), Some("/a"));
    assert_eq!(own_path(text, Some("cpuacct")), Some("/a"));
    assert_eq!(own_path(text, Some("pids")), Some("/b"));
    assert_eq!(own_path(text, Some("memory")), None);
    assert_eq!(own_path(text, None), Some("/d"));
    assert_eq!(own_path("0::/x:y\n", None), Some("/x:y"), "a path may hold a colon");
    assert_eq!(under(Path::new(ROOT), "/"), Path::new(ROOT));
    assert_eq!(under(Path::new(ROOT), "/a/b"), Path::new("/sys/fs/cgroup/a/b"));
}

#[test]
fn cgroup_parent_is_read_from_config_json_in_the_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(parent_setting(None), Ok(None), "no state directory");
    assert_eq!(parent_setting(Some(dir.path())), Ok(None), "no config.json");
    let write = |text: &str| std::fs::write(dir.path().join("config.json"), text).unwrap();
    write("{}");
    assert_eq!(parent_setting(Some(dir.path())), Ok(None));
    write(r#"{"cgroup_parent": "/tinybox-alice/boxes"}"#);
    assert_eq!(parent_setting(Some(dir.path())), Ok(Some("/tinybox-alice/boxes".to_owned())));
    for (bad, says) in [
        (r#"{"cgroup_parent": "/a/../b"}"#, "is not a cgroup path"),
        (r#"{"cgroup_parent": "/"}"#, "is not a cgroup path"),
        (r#"{"cgroup_parent": "a//b"}"#, "is not a cgroup path"),
        (r#"{"cgroup_parent": 7}"#, "is not a cgroup path"),
        (r#"{"cgroup_parrent": "/a"}"#, "unknown key \"cgroup_parrent\""),
        ("[]", "is not a json object"),
        ("{", "is not json"),
    ] {
        write(bad);
        let err = parent_setting(Some(dir.path())).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
}
