//! Helpers for the chaos suite: a seeded generator of kill points, SIGKILL
//! of a running `tinybox` (or of one of its drivers) at such a point, and
//! waiting until everything the killed command started has ended, so the
//! checks that follow see the state the interruption left.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The variable that fixes the suite's seed, to replay a failing run.
pub const SEED_VAR: &str = "TINYBOX_CHAOS_SEED";

/// The suite's seed: [`SEED_VAR`] when set, else one drawn from the clock.
/// Printed by the caller with the way to replay it.
pub fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(v) => {
            v.trim().parse().unwrap_or_else(|_| panic!("{SEED_VAR}={v:?} is not a number; give an unsigned integer"))
        }
        Err(_) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            // Small enough to read and type back.
            now.as_nanos() as u64 % 1_000_000_007
        }
    }
}

/// xorshift64*: a few lines, reproducible everywhere, enough to spread kill
/// points; nothing here needs more than that.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// One stream per `(seed, name)`, so each test's points do not depend on
    /// which other tests ran first.
    pub fn new(seed: u64, name: &str) -> Rng {
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        for b in name.bytes() {
            state = (state ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
        Rng(state.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` kill points spread over `span` (one in each of `n` equal slices,
    /// at a seeded place in it), a little past its end too, so the last
    /// points fall after the operation has answered.
    pub fn points(&mut self, n: usize, span: Duration) -> Vec<Duration> {
        (0..n).map(|i| span.mul_f64(1.1 * (i as f64 + self.unit()) / n as f64)).collect()
    }
}

/// How an injected command ended.
#[derive(Debug)]
pub enum Injected {
    /// Killed at the point; how many of its processes were waited for.
    Killed { after: Duration, processes: usize },
    /// It had ended before the point, with this status and stderr.
    Finished { code: Option<i32>, stderr: String },
}

impl Injected {
    pub fn label(&self) -> String {
        match self {
            Injected::Killed { after, processes } => {
                format!("killed at {} ms ({processes} processes)", after.as_millis())
            }
            Injected::Finished { code, .. } => format!("finished first (exit {code:?})"),
        }
    }
}

/// Runs `cmd` and SIGKILLs it `at` after it started, unless it ended first;
/// then waits (bounded by `guard`) until every process it started has
/// ended, except the long-lived ones a box is made of (QEMU, passt), which
/// the checks that follow count instead.
pub fn kill_cli_at(mut cmd: Command, at: Duration, guard: Duration) -> Injected {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn tinybox");
    let start = Instant::now();
    let mut tree = Tree::new(child.id());
    loop {
        if let Some(status) = child.try_wait().expect("wait for tinybox") {
            let stderr = read_stderr(&mut child);
            tree.wait_gone(guard);
            return Injected::Finished { code: status.code(), stderr };
        }
        tree.follow();
        if start.elapsed() >= at {
            break;
        }
        std::thread::sleep(Duration::from_millis(2).min(at.saturating_sub(start.elapsed())));
    }
    let after = start.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    let processes = tree.wait_gone(guard);
    Injected::Killed { after, processes }
}

/// Runs `cmd`, SIGKILLs its `tinybox-driver-<driver>` child `at` after the
/// start (if one runs then), and waits (bounded) for the command to end.
/// Returns whether a driver was killed, the command's exit code and stderr.
/// The driver is told by its program's file name: `comm` holds only
/// `tinybox-driver-`, the same for every driver (the host driver too).
pub fn kill_driver_at(mut cmd: Command, driver: &str, at: Duration, guard: Duration) -> (bool, Option<i32>, String) {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn tinybox");
    let start = Instant::now();
    let name = format!("tinybox-driver-{driver}");
    let (mut killed, mut done) = (false, false);
    let mut tree = Tree::new(child.id());
    while child.try_wait().expect("wait for tinybox").is_none() {
        tree.follow();
        if !done && start.elapsed() >= at {
            match children(child.id()).into_iter().find(|pid| program(*pid).as_deref() == Some(name.as_str())) {
                Some(pid) => {
                    kill(pid);
                    (killed, done) = (true, true);
                }
                // None yet (or none any more): look again until the chance has passed.
                None => done = start.elapsed() >= at + Duration::from_secs(2),
            }
        }
        assert!(start.elapsed() < guard, "tinybox did not end within {guard:?} after its driver was killed");
        std::thread::sleep(Duration::from_millis(2));
    }
    let status = child.wait().expect("wait for tinybox");
    let stderr = read_stderr(&mut child);
    tree.wait_gone(guard);
    (killed, status.code(), stderr)
}

fn read_stderr(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// The processes a command started, followed while they live: a child
/// outlives its parent (it is given to init), so each is noted while its
/// parent still runs.
struct Tree {
    seen: BTreeSet<u32>,
}

impl Tree {
    fn new(root: u32) -> Tree {
        Tree { seen: [root].into() }
    }

    /// Notes every child of a process already seen.
    fn follow(&mut self) {
        let mut grew = true;
        while grew {
            grew = false;
            for (pid, parent) in parents() {
                if self.seen.contains(&parent)
                    && !LONG_LIVED.iter().any(|n| comm(pid).is_some_and(|c| c.starts_with(n)))
                {
                    grew |= self.seen.insert(pid);
                }
            }
        }
    }

    /// Waits until every process seen (and any child they start meanwhile)
    /// has ended; how many there were. Fails the test past `guard`.
    fn wait_gone(&mut self, guard: Duration) -> usize {
        let start = Instant::now();
        loop {
            self.follow();
            let alive: Vec<u32> = self.seen.iter().copied().filter(|p| alive(*p)).collect();
            if alive.is_empty() {
                return self.seen.len();
            }
            assert!(
                start.elapsed() < guard,
                "processes of a killed tinybox still run after {guard:?}: {:?}",
                alive.iter().map(|p| (p, comm(*p))).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// What a box is made of and outlives the command that made it: counted by
/// the checks, never waited for.
const LONG_LIVED: &[&str] = &["qemu-system", "passt"];

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A process's name (`comm`, at most 15 bytes).
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|c| c.trim_end().to_owned())
}

/// The file name of the program a process runs (its `argv[0]`, the way
/// core starts a driver: by its full path).
pub fn program(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = cmdline.split(|b| *b == 0).next()?;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(argv0));
    Some(path.file_name()?.to_string_lossy().into_owned())
}

/// (pid, parent pid) of every process.
fn parents() -> Vec<(u32, u32)> {
    crate::processes().into_iter().map(|(pid, parent, _)| (pid, parent)).collect()
}

/// The children of `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    crate::processes().into_iter().filter(|(_, parent, _)| *parent == pid).map(|(p, _, _)| p).collect()
}

/// SIGKILL to a process found by pid; it may have gone already.
pub fn kill(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Live processes named `name` (by `comm`) whose command line holds `needle`.
pub fn processes_named(name: &str, needle: &str) -> usize {
    parents()
        .into_iter()
        .filter(|(pid, _)| alive(*pid) && comm(*pid).is_some_and(|c| c.starts_with(name)))
        .filter(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_points_and_they_cover_the_span() {
        let span = Duration::from_millis(1000);
        let a = Rng::new(42, "create").points(20, span);
        assert_eq!(a, Rng::new(42, "create").points(20, span));
        assert_ne!(a, Rng::new(43, "create").points(20, span));
        assert_ne!(a, Rng::new(42, "rm").points(20, span));
        for (i, p) in a.iter().enumerate() {
            let slice = span.mul_f64(1.1 / 20.0);
            assert!(*p >= slice * i as u32 && *p < slice * (i as u32 + 1), "point {i} at {p:?} is outside its slice");
        }
    }
}
