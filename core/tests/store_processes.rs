//! The file store shared by real processes: concurrent writers and writers
//! killed mid-write. Child processes are this test executable run again with
//! `--exact child_process_entry` and the store directory in the environment.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use tinybox_core::model::{BoxId, BoxInfo, BoxSpec, Phase, Placement};
use tinybox_core::store::{FileStore, Store, insert_new};

const CHILD_DIR: &str = "TINYBOX_STORE_CHILD_DIR";
const CHILD_MODE: &str = "TINYBOX_STORE_CHILD_MODE";
const PROCESSES: usize = 16;
const CREATES_EACH: usize = 20;
const CRASH_ROUNDS: usize = 30;
/// How long a poll may wait for a child's progress before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

fn make(id: BoxId) -> BoxInfo {
    BoxInfo::creating(id, BoxSpec::new(Placement::local_passthrough()), Some(1))
}

/// Not a test of its own: the body a child process runs. Run without the
/// environment variable (as every ordinary `cargo test` does), it does nothing.
#[test]
fn child_process_entry() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let store = FileStore::open(dir).expect("child opens the store");
    match std::env::var(CHILD_MODE).as_deref() {
        Ok("create") => {
            for _ in 0..CREATES_EACH {
                insert_new(&store, &mut make).expect("child creates a box");
            }
        }
        Ok("churn") => churn(&store),
        other => panic!("child mode {other:?} is unknown; expected \"create\" or \"churn\""),
    }
}

/// Inserts, updates and removes boxes until killed. The deadline only
/// stops an orphan if the parent itself died before killing it.
fn churn(store: &FileStore) {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut n = 0usize;
    while Instant::now() < deadline {
        let id = insert_new(store, &mut make).expect("churn inserts");
        store.update(&id, &mut |b| b.phase = Phase::Created).expect("churn updates");
        let boxes = store.list().expect("churn lists");
        if boxes.len() > 6 {
            store.remove(&boxes[n % boxes.len()].id).expect("churn removes");
        }
        n += 1;
    }
}

/// A child that is killed if the test unwinds before it finished, so a
/// failed assertion cannot strand a process looping forever.
struct ChildGuard(Option<Child>);

impl ChildGuard {
    fn spawn(dir: &Path, mode: &str) -> ChildGuard {
        let child = Command::new(std::env::current_exe().expect("test executable path"))
            .args(["--exact", "child_process_entry", "--nocapture"])
            .env(CHILD_DIR, dir)
            .env(CHILD_MODE, mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        ChildGuard(Some(child))
    }

    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("child not yet reaped")
    }

    fn finish(mut self) -> Output {
        self.0.take().expect("child not yet reaped").wait_with_output().expect("wait for child")
    }

    fn kill(mut self) -> ExitStatus {
        let mut child = self.0.take().expect("child not yet reaped");
        child.kill().expect("SIGKILL child");
        child.wait().expect("reap child")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn sixteen_processes_creating_twenty_boxes_each_get_distinct_ids() {
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<ChildGuard> = (0..PROCESSES).map(|_| ChildGuard::spawn(dir.path(), "create")).collect();
    for child in children {
        let out = child.finish();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // A misspelt test name would run nothing and still exit 0.
        assert!(stdout.contains("1 passed"), "child did not run the entry test:\n{stdout}");
    }

    let text = fs::read(dir.path().join("boxes.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&text).expect("the marker parses");
    assert_eq!(doc["version"], 2);
    assert_eq!(records(dir.path()).len(), PROCESSES * CREATES_EACH, "one record file per box");

    let boxes = FileStore::open(dir.path()).unwrap().list().unwrap();
    let ids: BTreeSet<String> = boxes.iter().map(|b| b.id.to_string()).collect();
    assert_eq!(boxes.len(), PROCESSES * CREATES_EACH);
    assert_eq!(ids.len(), boxes.len(), "identifiers are not unique");
    // Nothing was removed, so lowest-free allocation leaves no gaps.
    let expected: BTreeSet<String> = (0..PROCESSES * CREATES_EACH).map(|n| format!("box-{n}")).collect();
    assert_eq!(ids, expected);
}

/// Every box record file's name and bytes, each checked to be a whole record.
fn records(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir.join("boxes")) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        match fs::read(entry.path()) {
            Ok(bytes) => {
                // Even without the lock a reader sees a whole record: each
                // is only ever replaced by rename.
                let parsed = serde_json::from_slice::<BoxInfo>(&bytes);
                assert!(parsed.is_ok(), "partial record {name} observed: {parsed:?}");
                out.push((name, bytes));
            }
            // Removed between the listing and the read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("read {name}: {e}"),
        }
    }
    out.sort();
    out
}

#[test]
fn a_writer_killed_at_any_point_leaves_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..CRASH_ROUNDS {
        let mut last = records(dir.path());
        let mut child = ChildGuard::spawn(dir.path(), "churn");
        // Vary how far the writer gets, so the kill lands at different
        // points of its insert/update/remove cycle.
        let wanted = 1 + (round * 7) % 13;
        let mut seen = 0;
        let deadline = Instant::now() + PATIENCE;
        while seen < wanted {
            assert!(Instant::now() < deadline, "round {round}: writer made {seen} of {wanted} changes in {PATIENCE:?}");
            if let Some(status) = child.child().try_wait().unwrap() {
                panic!("round {round}: writer exited on its own ({status}) instead of churning");
            }
            let now = records(dir.path());
            if now != last {
                seen += 1;
                last = now;
            }
            std::thread::yield_now();
        }
        let status = child.kill();
        assert_eq!(status.signal(), Some(libc_sigkill()), "round {round}: writer was not killed: {status}");

        let store = FileStore::open(dir.path()).unwrap();
        let boxes = store.list().unwrap_or_else(|e| panic!("round {round}: store unreadable after a kill: {e}"));
        assert!(!boxes.is_empty(), "round {round}: the writer's changes were lost");
        let id = insert_new(&store, &mut make).unwrap_or_else(|e| panic!("round {round}: next writer failed: {e}"));
        assert_eq!(store.remove(&id).unwrap().map(|b| b.id), Some(id));
    }

    // Temporary files of killed writers are cleared by the next write.
    let leftovers: Vec<String> = fs::read_dir(dir.path().join(".boxes.tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "leftover temporary files: {leftovers:?}");
}

fn libc_sigkill() -> i32 {
    rustix::process::Signal::KILL.as_raw()
}
