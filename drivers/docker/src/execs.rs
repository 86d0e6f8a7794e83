//! The execs in flight, so a cancellation reaches a command inside its
//! container. Killing the local `docker exec` client (which core does when
//! it cancels the forwarded run) does not stop the process it started in
//! the container; whichever of `exec` (seeing its client killed) and
//! `cancel` gets there first stops it there, once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One exec whose `docker exec` client is running.
#[derive(Debug)]
pub struct Running {
    pub container: String,
    /// Where the command's process group is recorded, inside the container.
    pub pid_file: String,
    stopping: AtomicBool,
}

impl Running {
    /// True for the first caller only: that one stops the command.
    pub fn claim_stop(&self) -> bool {
        !self.stopping.swap(true, Ordering::SeqCst)
    }

    /// Whether something (a cancel, or exec itself) has stopped the command.
    pub fn stopped(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Table {
    running: HashMap<String, Arc<Running>>,
    /// Cancelled before they started (or after they ended): never start.
    cancelled: HashSet<String>,
}

#[derive(Default)]
pub struct Execs {
    table: Mutex<Table>,
}

impl Execs {
    /// Records an exec about to run; `None` when it was cancelled already.
    pub fn start(&self, exec_id: &str, container: &str, pid_file: &str) -> Option<Arc<Running>> {
        let mut t = self.table.lock().expect("exec table");
        if t.cancelled.remove(exec_id) {
            return None;
        }
        let running = Arc::new(Running {
            container: container.to_owned(),
            pid_file: pid_file.to_owned(),
            stopping: AtomicBool::new(false),
        });
        t.running.insert(exec_id.to_owned(), running.clone());
        Some(running)
    }

    pub fn finish(&self, exec_id: &str) {
        self.table.lock().expect("exec table").running.remove(exec_id);
    }

    /// The running exec this cancellation must stop, unless another caller
    /// already does; an exec not running yet is remembered and never starts.
    pub fn cancel(&self, exec_id: &str) -> Option<Arc<Running>> {
        let mut t = self.table.lock().expect("exec table");
        match t.running.get(exec_id) {
            Some(r) => r.claim_stop().then(|| r.clone()),
            None => {
                t.cancelled.insert(exec_id.to_owned());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_stopped_once_and_an_early_cancel_prevents_the_start() {
        let execs = Execs::default();
        let r = execs.start("x1-0", "c", "/tmp/f").unwrap();
        assert!(execs.cancel("x1-0").is_some(), "the first stopper");
        assert!(execs.cancel("x1-0").is_none(), "nobody stops it twice");
        assert!(!r.claim_stop());
        execs.finish("x1-0");

        assert!(execs.cancel("x1-1").is_none());
        assert!(execs.start("x1-1", "c", "/tmp/g").is_none(), "cancelled before it started");
        assert!(execs.start("x1-1", "c", "/tmp/g").is_some(), "the id is forgotten once refused");
    }
}
