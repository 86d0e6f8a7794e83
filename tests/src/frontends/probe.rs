//! What the use cases check from outside a box: its processes in this
//! machine's /proc (a namespace or passthrough box's processes are this
//! machine's), and what its record says it holds here (a workspace
//! directory, cgroups).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a poll waits before failing its test; it only stops a hung
/// test and asserts nothing about speed.
pub const GUARD: Duration = Duration::from_secs(120);

/// Waits (polling, bounded by [`GUARD`]) until `ready` holds; panics
/// saying `what` when it never does.
pub fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !ready() {
        assert!(Instant::now() < deadline, "{what} within {GUARD:?}");
        // Bounded poll of another process's state; nothing to wait on but it.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One process of this machine, named so a reused pid is not taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostProcess {
    pub pid: u32,
    /// Its start time (`/proc/PID/stat` field 22), in clock ticks since boot.
    pub started: u64,
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces: state is field 3.
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_owned).collect())
}

impl HostProcess {
    fn of(pid: u32) -> Option<HostProcess> {
        let started = stat_fields(pid)?.get(19)?.parse().ok()?;
        Some(HostProcess { pid, started })
    }

    /// Still running: the same process (not a reuse of its pid) and not a zombie.
    pub fn alive(&self) -> bool {
        stat_fields(self.pid)
            .is_some_and(|f| f[0] != "Z" && f.get(19).and_then(|s| s.parse().ok()) == Some(self.started))
    }

    /// Its pid in the innermost pid namespace it is in (`NSpid`'s last).
    pub fn pid_inside(&self) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
        line.split_whitespace().last()?.parse().ok()
    }
}

/// The processes whose argv is exactly `argv`.
pub fn processes_running(argv: &[&str]) -> Vec<HostProcess> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter_map(HostProcess::of)
        .filter(HostProcess::alive)
        .collect()
}

/// A `sleep` argument no other process on this machine has: 300 seconds
/// and a fraction of this test process's own.
pub fn unique_sleep() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!("300.{}{:03}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// What a box holds on this machine, from its record in `store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// Directories its sandbox made for it (workspace, cgroups).
    pub paths: Vec<PathBuf>,
}

impl Footprint {
    /// Read from `store`'s record of `id`; panics when there is none.
    pub fn of(store: &Path, id: &str) -> Footprint {
        let record = store.join("boxes").join(format!("{id}.json"));
        let text = std::fs::read_to_string(&record).unwrap_or_else(|e| panic!("no record {}: {e}", record.display()));
        let v: serde_json::Value = serde_json::from_str(&text).expect("a box record is JSON");
        let handle = &v["workspace"]["handle"];
        let mut paths: Vec<PathBuf> =
            handle["cgroups"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).map(PathBuf::from).collect();
        if let Some(ws) = handle["workspace"].as_str() {
            paths.push(PathBuf::from(ws));
        }
        Footprint { paths }
    }

    /// The paths still there.
    pub fn left(&self) -> Vec<&PathBuf> {
        self.paths.iter().filter(|p| p.exists()).collect()
    }
}

/// Whether `store` has a record of box `id`.
pub fn recorded(store: &Path, id: &str) -> bool {
    store.join("boxes").join(format!("{id}.json")).exists()
}

/// The store's box records as bytes ([`crate::Cli::store_bytes`]'s rule):
/// equal before and after a refusal means it changed no box.
pub fn store_bytes(store: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(store.join("boxes.json")).unwrap_or_default();
    let mut records: Vec<PathBuf> = std::fs::read_dir(store.join("boxes"))
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    records.sort();
    for path in records {
        bytes.extend_from_slice(path.to_string_lossy().as_bytes());
        bytes.extend(std::fs::read(&path).unwrap_or_default());
    }
    bytes
}
