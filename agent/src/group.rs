//! The processes of one command in the agent: a cgroup of its own under the
//! box's when the guest has one (a microVM's), else its process group.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use crate::port::log;

/// The cgroup every command's own cgroup lives under; the pids cap is here.
pub const BOX_CGROUP: &str = "/sys/fs/cgroup/box";

static NEXT_EXEC: AtomicU64 = AtomicU64::new(0);

/// The processes of one command: its cgroup when the guest has one, else
/// its process group.
#[derive(Clone)]
pub struct Group {
    pub cgroup: Option<PathBuf>,
}

impl Group {
    pub fn new() -> Group {
        if !Path::new(BOX_CGROUP).join("cgroup.procs").is_file() {
            return Group { cgroup: None };
        }
        let dir = Path::new(BOX_CGROUP).join(format!("exec-{}", NEXT_EXEC.fetch_add(1, Ordering::Relaxed)));
        match std::fs::create_dir(&dir) {
            Ok(()) => Group { cgroup: Some(dir) },
            Err(e) => {
                log(format_args!("cannot make {}: {e}; the command runs without a cgroup of its own", dir.display()));
                Group { cgroup: None }
            }
        }
    }

    pub fn signal(&self, pid: Pid, signal: i32) {
        if signal == 9 {
            return self.kill(pid);
        }
        if let Some(sig) = Signal::from_named_raw(signal) {
            let _ = kill_process_group(pid, sig);
        }
    }

    pub fn kill(&self, pid: Pid) {
        let _ = kill_process_group(pid, Signal::KILL);
        if let Some(cg) = &self.cgroup {
            let _ = std::fs::write(cg.join("cgroup.kill"), "1");
        }
    }

    pub fn remove(&self) {
        if let Some(cg) = &self.cgroup {
            // Killed processes leave the cgroup once init has reaped them.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(cg).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
