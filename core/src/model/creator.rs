//! Who is making a `creating` box: the process, told apart from a later
//! one that got its pid by the time it started, on this boot. What lets a
//! reaper remove a create whose creator died, and never one under way.

use serde::{Deserialize, Serialize};

/// The process that reserved a box and is making it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creator {
    pub pid: u32,
    /// When it started, in clock ticks since boot (`/proc/PID/stat`'s 22nd
    /// field): a pid reused by a later process has a later start.
    pub start: u64,
    /// The boot it ran in (`/proc/sys/kernel/random/boot_id`).
    pub boot: String,
    /// Its pid namespace (`/proc/PID/ns/pid`): a reader in another one
    /// cannot see it, and takes it to be running.
    pub pid_ns: String,
}

impl Creator {
    /// This process, when /proc says what it is.
    pub fn this_process() -> Option<Creator> {
        let pid = std::process::id();
        Some(Creator { pid, start: start_of(pid)?, boot: boot()?, pid_ns: pid_ns("self")? })
    }

    /// Whether this creator may still be at work: false once it has ended
    /// (or become a zombie), its pid went to a later process, or the
    /// machine booted again; true when this reader cannot tell (another
    /// pid namespace, no /proc).
    pub fn may_be_running(&self) -> bool {
        match (boot(), pid_ns("self")) {
            (Some(boot), _) if boot != self.boot => false,
            (Some(_), Some(ns)) if ns == self.pid_ns => start_of(self.pid) == Some(self.start),
            _ => true,
        }
    }
}

/// The start time of live (not zombie) process `pid`.
fn start_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    // After the state (field 3) the start time is field 22.
    fields.nth(18)?.parse().ok()
}

fn boot() -> Option<String> {
    Some(std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?.trim().to_owned())
}

fn pid_ns(pid: &str) -> Option<String> {
    Some(std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_creator_runs_until_it_ends_and_a_reused_pid_or_another_boot_is_not_it() {
        let me = Creator::this_process().expect("this machine has /proc");
        assert!(me.may_be_running());
        assert!(!Creator { start: me.start + 1, ..me.clone() }.may_be_running(), "a later process with its pid");
        assert!(!Creator { boot: "another-boot".into(), ..me.clone() }.may_be_running());
        assert!(Creator { pid_ns: "pid:[1]".into(), ..me.clone() }.may_be_running(), "unseen, so maybe running");

        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let start = start_of(child.id()).expect("a live child");
        let creator = Creator { pid: child.id(), start, ..me };
        assert!(creator.may_be_running());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!creator.may_be_running());
    }
}
