//! The execs in flight, so a cancellation reaches a command inside its
//! container. Killing the local `docker exec` client (which core does when
//! it cancels the forwarded run) does not stop the process it started in
//! the container; whichever of `exec` (seeing its client killed) and
//! `cancel` gets there first stops it there, once, and the exec answers
//! only when that stop is over, so a cancelled command is dead when its
//! exec says so.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// One exec whose `docker exec` client is running.
#[derive(Debug)]
pub struct Running {
    pub container: String,
    /// The marker in the command's wrapper's arguments, inside the container.
    pub marker: String,
    /// A one-step run (`sandbox.run_once`): the container is the command's
    /// own, and stopping it stops the command.
    pub once: bool,
    stopping: AtomicBool,
    /// The signal that ended the command, once its stop is over.
    stopped_by: watch::Sender<Option<i32>>,
}

impl Running {
    /// True for the first caller only: that one stops the command, then
    /// calls [`Running::stop_done`].
    pub fn claim_stop(&self) -> bool {
        !self.stopping.swap(true, Ordering::SeqCst)
    }

    /// Whether something (a cancel, or exec itself) is stopping the command.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The stop is over: the command ended by `signal` (or was already gone).
    pub fn stop_done(&self, signal: i32) {
        self.stopped_by.send_replace(Some(signal));
    }

    /// Waits until the claimed stop is over; the signal that ended the command.
    pub async fn stopped(&self) -> i32 {
        let mut rx = self.stopped_by.subscribe();
        // The sender lives in self, so the channel cannot close while we wait.
        rx.wait_for(Option::is_some).await.ok().and_then(|s| *s).unwrap_or(SIGTERM)
    }
}

/// The signal a stop sends first.
pub const SIGTERM: i32 = 15;

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
    pub fn start(&self, exec_id: &str, container: &str, marker: &str) -> Option<Arc<Running>> {
        self.start_as(exec_id, container, marker, false)
    }

    /// Records a one-step run about to start; `None` when it was cancelled already.
    pub fn start_once(&self, exec_id: &str, container: &str) -> Option<Arc<Running>> {
        self.start_as(exec_id, container, "", true)
    }

    fn start_as(&self, exec_id: &str, container: &str, marker: &str, once: bool) -> Option<Arc<Running>> {
        let mut t = self.table.lock().expect("exec table");
        if t.cancelled.remove(exec_id) {
            return None;
        }
        let running = Arc::new(Running {
            container: container.to_owned(),
            marker: marker.to_owned(),
            once,
            stopping: AtomicBool::new(false),
            stopped_by: watch::Sender::new(None),
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

    #[tokio::test]
    async fn whoever_did_not_stop_the_command_waits_for_the_stop_to_end() {
        let execs = Execs::default();
        let r = execs.start("x1-2", "c", "/tmp/h").unwrap();
        let stopper = execs.cancel("x1-2").unwrap();
        let waiter = tokio::spawn({
            let r = r.clone();
            async move { r.stopped().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the stop is not over yet");
        stopper.stop_done(9);
        assert_eq!(waiter.await.unwrap(), 9);
    }
}
