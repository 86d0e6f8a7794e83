//! Resource limits: one cgroup per box, made when the box is created,
//! entered by every command before its first instruction, removed with the
//! box. Which limits this driver declares is decided in the handshake from
//! this machine's cgroup mounts and whether the caller may write them (root,
//! or a cgroup delegated to the caller: its part `cgroup/delegated.rs`); the scripts here
//! run on the box's host and do the work (ADR 0015).

pub mod delegated;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tinybox_sdk::model::{Limit, Resources};

/// The period cpu quotas are expressed in, microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;

/// What the handshake found: the limits this driver can apply here, why,
/// and where box cgroups go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    pub limits: BTreeSet<Limit>,
    pub why: String,
    /// cgroup v2: one directory per box; else a directory per controller.
    pub unified: bool,
    /// The directory each limit's box cgroups are made in, for a caller
    /// given a delegated cgroup; empty for root, whose boxes go where
    /// [`SETUP`] puts them by default.
    pub parents: BTreeMap<Limit, PathBuf>,
}

impl Support {
    /// No limits, and why.
    pub fn none(why: &str) -> Support {
        Support { limits: BTreeSet::new(), why: why.to_owned(), unified: false, parents: BTreeMap::new() }
    }
}

pub const CONTROLLERS: [(&str, Limit); 3] = [("pids", Limit::Pids), ("memory", Limit::Memory), ("cpu", Limit::Cpu)];

/// Who runs the driver (and so the box's commands).
#[derive(Debug, Clone)]
pub enum Caller<'a> {
    Root,
    Unprivileged(delegated::Caller<'a>),
}

/// What the driver serving the host its handshake `config` names can
/// enforce: nothing on another machine (`{"host": {"remote": true}}`),
/// whose cgroups this process cannot see; else what [`support`] finds here.
pub fn for_host(config: &serde_json::Value, root: &Path, caller: &Caller) -> Support {
    if is_remote(config) {
        return Support::none("boxes run on another machine, whose cgroups this driver cannot see");
    }
    support(root, caller)
}

/// Whether the handshake `config` says boxes run on another machine.
pub fn is_remote(config: &serde_json::Value) -> bool {
    config.pointer("/host/remote").and_then(|r| r.as_bool()).unwrap_or(false)
}

/// Decides from the cgroup mount at `root` (normally /sys/fs/cgroup): root
/// may make cgroups anywhere; any other caller only under a cgroup
/// delegated to it, and is told what it lacks.
pub fn support(root: &Path, caller: &Caller) -> Support {
    let Caller::Unprivileged(user) = caller else { return root_support(root) };
    delegated::find(&delegated::RealFiles, root, user)
}

fn root_support(root: &Path) -> Support {
    let none = Support::none;
    let (unified, limits): (bool, BTreeSet<Limit>) = match std::fs::read_to_string(root.join("cgroup.controllers")) {
        // cgroup v2: the controllers the root offers.
        Ok(listed) => (
            true,
            CONTROLLERS
                .iter()
                .filter(|(name, _)| listed.split_whitespace().any(|c| c == *name))
                .map(|(_, limit)| *limit)
                .collect(),
        ),
        // cgroup v1 (or hybrid): a hierarchy per controller.
        Err(_) => (
            false,
            CONTROLLERS
                .iter()
                .filter(|(name, _)| root.join(name).join("cgroup.procs").is_file())
                .map(|(_, limit)| *limit)
                .collect(),
        ),
    };
    if limits.is_empty() {
        return none(&format!("no resource limits: no pids, memory or cpu cgroup controller under {}", root.display()));
    }
    let names: Vec<&str> = limits.iter().map(|l| l.as_str()).collect();
    Support {
        limits,
        why: format!("limits {} in a cgroup per box", names.join(", ")),
        unified,
        parents: BTreeMap::new(),
    }
}

/// The name of a box's cgroup: deterministic, from the store (hashed: box
/// ids repeat across stores) and names core validated (letters, digits,
/// `.`, `_`, `-`); the prefix keeps it apart from every control file of a
/// cgroup directory.
pub fn name(store: &str, namespace: &str, box_id: &str) -> String {
    let tag = blake3::hash(store.as_bytes()).to_hex();
    format!("tinybox.{}.{namespace}.{box_id}", &tag[..12])
}

/// The arguments of [`SETUP`] after the name: pids, memory bytes, cpu
/// quota per period, each empty for a limit not in force; then the
/// directory each of those limits' cgroup goes in, empty for the default.
pub fn setup_args(r: &Resources, parents: &BTreeMap<Limit, PathBuf>) -> [String; 6] {
    let quota = r.cpus.map(|c| ((c * CPU_PERIOD_US as f64).round() as u64).max(1000));
    let parent = |limit: Limit| parents.get(&limit).map(|d| d.display().to_string()).unwrap_or_default();
    [
        r.pids.map(|p| p.to_string()).unwrap_or_default(),
        r.memory_bytes.map(|m| m.to_string()).unwrap_or_default(),
        quota.map(|q| q.to_string()).unwrap_or_default(),
        r.pids.map(|_| parent(Limit::Pids)).unwrap_or_default(),
        r.memory_bytes.map(|_| parent(Limit::Memory)).unwrap_or_default(),
        r.cpus.map(|_| parent(Limit::Cpu)).unwrap_or_default(),
    ]
}

/// Makes the box's cgroup(s) and sets their limits; prints one directory
/// per line. Under the parents given (a delegated cgroup: `delegated.rs`
/// checked they are the caller's); else, for root, with cgroup v2 one
/// directory under /sys/fs/cgroup/tinybox (only the root cgroup may hold
/// processes and hand out controllers at once), with v1 one per
/// controller under the caller's own cgroup in that hierarchy, so an outer
/// limit on the caller still holds.
/// `$1` name, `$2` pids, `$3` memory bytes, `$4` cpu quota (µs per 100 ms),
/// `$5` `$6` `$7` the pids, memory and cpu parents (v2: one directory).
pub const SETUP: &str = r#"
set -u
name=$1 pids=$2 mem=$3 cpu=$4 pids_in=$5 mem_in=$6 cpu_in=$7
fail() { echo "tinybox: $*" >&2; exit 1; }
put() { printf '%s\n' "$2" > "$1" || fail "cannot write $2 to $1"; }
enable() { grep -qw -- "$2" "$1/cgroup.subtree_control" || put "$1/cgroup.subtree_control" "+$2"; }
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    base=${pids_in:-${mem_in:-$cpu_in}}
    if [ -z "$base" ]; then
        base=/sys/fs/cgroup/tinybox
        mkdir -p "$base" || fail "cannot make $base"
        for c in pids memory cpu; do
            case $c in pids) v=$pids ;; memory) v=$mem ;; cpu) v=$cpu ;; esac
            [ -z "$v" ] || enable /sys/fs/cgroup "$c"
        done
    fi
    for c in pids memory cpu; do
        case $c in pids) v=$pids ;; memory) v=$mem ;; cpu) v=$cpu ;; esac
        [ -z "$v" ] || enable "$base" "$c"
    done
    d=$base/$name
    mkdir -p "$d" || fail "cannot make $d"
    [ -z "$pids" ] || put "$d/pids.max" "$pids"
    if [ -n "$mem" ]; then
        put "$d/memory.max" "$mem"
        [ ! -f "$d/memory.swap.max" ] || put "$d/memory.swap.max" 0
    fi
    [ -z "$cpu" ] || put "$d/cpu.max" "$cpu 100000"
    printf '%s\n' "$d"
    exit 0
fi
for c in pids memory cpu; do
    case $c in pids) v=$pids under=$pids_in ;; memory) v=$mem under=$mem_in ;; cpu) v=$cpu under=$cpu_in ;; esac
    [ -n "$v" ] || continue
    if [ -z "$under" ]; then
        [ -f "/sys/fs/cgroup/$c/cgroup.procs" ] || fail "no cgroup v1 $c hierarchy at /sys/fs/cgroup/$c"
        own=$(awk -F: -v c="$c" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) { sub(/^[^:]*:[^:]*:/, ""); print; exit } }' /proc/self/cgroup)
        under=/sys/fs/cgroup/$c${own%/}
    fi
    d=$under/$name
    mkdir -p "$d" || fail "cannot make $d"
    case $c in
        pids) put "$d/pids.max" "$v" ;;
        memory)
            put "$d/memory.limit_in_bytes" "$v"
            [ ! -f "$d/memory.memsw.limit_in_bytes" ] || put "$d/memory.memsw.limit_in_bytes" "$v" ;;
        cpu) put "$d/cpu.cfs_period_us" 100000; put "$d/cpu.cfs_quota_us" "$v" ;;
    esac
    printf '%s\n' "$d"
done
"#;

/// Moves itself into each directory given (`$2` of them, after `$1`, the
/// file that takes a member: [`member_file`]), then goes on with what
/// follows them: the start of [`crate::sandbox::start_script`], the one
/// shell every command of a box with limits begins in, so the command's
/// first instruction already runs under the limits.
///
/// It writes 0, itself. On cgroup v1 that goes to `tasks`, which moves one
/// thread (all a shell has) without the lock that moving a whole process
/// through `cgroup.procs` takes: that lock waits for an RCU grace period,
/// 4 to 18 ms here on every exec (docs/benchmarks.md, "Namespace sandbox").
pub const ENTER: &str = r#"f=$1 n=$2; shift 2
while [ "$n" -gt 0 ]; do
    echo 0 > "$1/$f" || { echo "tinybox: cannot enter cgroup $1" >&2; exit 125; }
    shift; n=$((n - 1))
done
"#;

/// The file [`ENTER`] writes itself into: v1's `tasks` (this thread; the
/// shell has one), v2's `cgroup.procs` (v2 moves threads only within a
/// threaded subtree).
pub fn member_file(unified: bool) -> &'static str {
    if unified { "cgroup.procs" } else { "tasks" }
}

/// Prints the directory of every cgroup named `$1` (what [`SETUP`] made
/// for a box), found by name alone: a create whose answer was lost left no
/// list of them. The name holds the store's hash, so nothing else matches.
/// The arguments after it are the delegated parents (v2 has no hierarchy
/// per controller to search; v1's search finds them too).
pub const LOCATE: &str = r#"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    name=$1; shift
    for base in /sys/fs/cgroup/tinybox "$@"; do
        [ ! -d "$base/$name" ] || printf '%s\n' "$base/$name"
    done | sort -u
    exit 0
fi
for c in pids memory cpu; do
    [ -d "/sys/fs/cgroup/$c" ] || continue
    find -H "/sys/fs/cgroup/$c" -mindepth 1 -type d -name "$1" -prune -print 2>/dev/null
done
exit 0
"#;

/// Kills whatever is left in each directory given and removes it. Bounded:
/// a process that will not die leaves the directory, and says so.
pub const REMOVE: &str = r#"
status=0
for d in "$@"; do
    [ -d "$d" ] || continue
    [ ! -f "$d/cgroup.kill" ] || printf '1\n' > "$d/cgroup.kill" 2>/dev/null
    i=0
    until rmdir "$d" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 500 ]; then echo "tinybox: cannot remove cgroup $d" >&2; status=1; break; fi
        for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        sleep 0.01
    done
done
exit $status
"#;

/// Where the box sees its own cgroup directory `host_dir`, read-only: at
/// /sys/fs/cgroup (v2, `unified`) or /sys/fs/cgroup/<controller> (v1), as
/// a container does, so a program can read the limits it runs under.
pub fn in_box(host_dir: &str, unified: bool) -> Option<String> {
    let rest = host_dir.strip_prefix("/sys/fs/cgroup/")?;
    if unified {
        return Some("/sys/fs/cgroup".into());
    }
    let controller = rest.split('/').next()?;
    CONTROLLERS.iter().any(|(c, _)| *c == controller).then(|| format!("/sys/fs/cgroup/{controller}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_serving_another_machine_declares_no_limits() {
        let remote = serde_json::json!({"host": {"remote": true}});
        let here = for_host(&remote, Path::new("/sys/fs/cgroup"), &Caller::Root);
        assert!(here.limits.is_empty());
        assert!(here.why.contains("another machine"), "{}", here.why);
        let gone = Path::new("/nonexistent-cgroup-root");
        let local = for_host(&serde_json::Value::Null, gone, &Caller::Root);
        assert_eq!(local.limits, support(gone, &Caller::Root).limits, "this machine: as found");
    }

    fn files(entries: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (path, content) in entries {
            let p = d.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        d
    }

    #[test]
    fn root_gets_the_v1_hierarchies_that_exist() {
        let d = files(&[("pids/cgroup.procs", ""), ("memory/cgroup.procs", ""), ("blkio/cgroup.procs", "")]);
        let s = support(d.path(), &Caller::Root);
        assert_eq!(s.limits, [Limit::Pids, Limit::Memory].into());
        assert_eq!(s.why, "limits memory, pids in a cgroup per box");
        assert!(!s.unified && s.parents.is_empty(), "root's boxes go where SETUP puts them: {s:?}");
    }

    #[test]
    fn root_gets_the_v2_controllers_the_root_offers() {
        let d = files(&[("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n"), ("cpu/cgroup.procs", "")]);
        let s = support(d.path(), &Caller::Root);
        assert_eq!(s.limits, [Limit::Cpu, Limit::Memory, Limit::Pids].into());
        assert!(s.unified);
        let d = files(&[("cgroup.controllers", "hugetlb\n")]);
        let s = support(d.path(), &Caller::Root);
        assert!(s.limits.is_empty());
        assert!(s.why.starts_with("no resource limits: no pids, memory or cpu"), "{}", s.why);
    }

    #[test]
    fn an_unprivileged_caller_with_no_delegated_cgroup_declares_none_whatever_is_mounted() {
        let d = files(&[("pids/cgroup.procs", ""), ("memory/cgroup.procs", ""), ("cpu/cgroup.procs", "")]);
        let user =
            delegated::Caller { uid: u32::MAX - 1, proc_cgroup: "3:pids:/\n2:memory:/\n1:cpu:/\n", parent: None };
        let s = support(d.path(), &Caller::Unprivileged(user));
        assert!(s.limits.is_empty());
        assert!(s.why.contains("not root"), "{}", s.why);
    }

    #[test]
    fn setup_args_are_numbers_or_empty_and_the_quota_is_per_100ms() {
        let r = Resources { cpus: Some(1.5), memory_bytes: Some(64 << 20), pids: Some(64), disk_bytes: None };
        let e = String::new;
        let none = BTreeMap::new();
        assert_eq!(
            setup_args(&r, &none),
            ["64".to_owned(), (64u64 << 20).to_string(), "150000".to_owned(), e(), e(), e()]
        );
        assert_eq!(setup_args(&Resources::default(), &none), [e(), e(), e(), e(), e(), e()]);
        let tiny = Resources { cpus: Some(0.001), ..Default::default() };
        assert_eq!(setup_args(&tiny, &none)[2], "1000", "the kernel's smallest quota");
        let n = name("/s1", "default", "b-1");
        assert!(n.starts_with("tinybox.") && n.ends_with(".default.b-1"), "{n}");
        assert_eq!(n, name("/s1", "default", "b-1"));
        assert_ne!(n, name("/s2", "default", "b-1"), "another store's box-1 is another cgroup");
    }

    #[test]
    fn setup_args_name_the_delegated_parent_of_each_limit_in_force() {
        let parents: BTreeMap<Limit, PathBuf> = [
            (Limit::Pids, PathBuf::from("/sys/fs/cgroup/pids/u")),
            (Limit::Memory, PathBuf::from("/sys/fs/cgroup/memory/u")),
        ]
        .into();
        let r = Resources { pids: Some(64), ..Default::default() };
        let args = setup_args(&r, &parents);
        assert_eq!(args[3..], ["/sys/fs/cgroup/pids/u".to_owned(), String::new(), String::new()], "only pids is set");
    }

    #[test]
    fn the_box_sees_its_cgroup_where_a_container_would() {
        assert_eq!(in_box("/sys/fs/cgroup/tinybox/tinybox.a.b", true).as_deref(), Some("/sys/fs/cgroup"));
        assert_eq!(in_box("/sys/fs/cgroup/user.slice/u/tinybox.a.b", true).as_deref(), Some("/sys/fs/cgroup"));
        assert_eq!(in_box("/sys/fs/cgroup/pids/tinybox.a.b", false).as_deref(), Some("/sys/fs/cgroup/pids"));
        assert_eq!(in_box("/sys/fs/cgroup/memory/x/y/tinybox.a.b", false).as_deref(), Some("/sys/fs/cgroup/memory"));
        assert_eq!(in_box("/elsewhere/pids/x", false), None);
        assert_eq!(in_box("/elsewhere/x", true), None);
        assert_eq!(in_box("/sys/fs/cgroup/blkio/x", false), None);
    }
}
