//! The use cases, each written once over [`FrontEnd`]. A verb a front end
//! does not offer must be one the test names in its `lacks` list, and the
//! other way round, so what each front end cannot do is stated, not skipped.

use tinybox_core::error::Capability;
use tinybox_core::model::{IsolationLevel, SandboxName};
use tinybox_tests::frontends::probe::{
    Footprint, HostProcess, processes_running, recorded, store_bytes, unique_sleep, until,
};
use tinybox_tests::frontends::{Answer, Ask, FrontEnd, Ran, Refused, core_words, one_line};

/// A verb a front end may not offer at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    ListDir,
    Snapshot,
    EndWithInFlight,
}

/// `answer`'s value; `None` when the verb is unoffered, which `lacks` must say.
fn offered<T, F: FrontEnd>(f: &F, lacks: &[Verb], verb: Verb, answer: Answer<T>) -> Option<T> {
    match answer {
        Ok(v) => {
            assert!(!lacks.contains(&verb), "{}: {verb:?} is offered after all: take it off the lacks list", f.name());
            Some(v)
        }
        Err(Refused::Unoffered(why)) => {
            assert!(lacks.contains(&verb), "{}: {verb:?} is unoffered ({why}) but the test expects it", f.name());
            eprintln!("{}: {verb:?} is not offered: {why}", f.name());
            None
        }
        Err(Refused::Line(line)) => panic!("{}: {verb:?} refused: {line}", f.name()),
    }
}

fn ok<T>(f: &impl FrontEnd, what: &str, answer: Answer<T>) -> T {
    answer.unwrap_or_else(|e| panic!("{}: {what}: {e:?}", f.name()))
}

fn made<F: FrontEnd>(f: &mut F) -> String {
    let id = f.create(&Ask::default());
    ok(f, "create", id)
}

fn removed<F: FrontEnd>(f: &mut F, id: &str) {
    let r = f.remove(id);
    ok(f, "remove", r)
}

/// Every byte value, then NUL and bytes that are no UTF-8 again.
fn awkward_bytes() -> Vec<u8> {
    (0..=255u8).chain([0, 0xff, 0xc3, 0x28, b'\n', 0, 0xfe]).collect()
}

/// (1) stdout, stderr, exit code and stdin bytes come back exactly.
pub fn exec_bytes_come_back_exactly<F: FrontEnd>(f: &mut F) {
    let id = made(f);
    let stdin = awkward_bytes();
    let ran = f.exec(&id, &["sh", "-c", "cat; printf 'e\\000rr\\377' >&2; exit 7"], &stdin);
    let ran = ok(f, "exec", ran);
    let want = Ran { stdout: stdin, stderr: b"e\0rr\xff".to_vec(), exit_code: 7 };
    assert_eq!(ran, want, "{}: the command's bytes and code", f.name());
    let plain = f.exec(&id, &["sh", "-c", "printf 'a\\000b'; exit 0"], b"");
    let plain = ok(f, "exec", plain);
    assert_eq!(plain, Ran { stdout: b"a\0b".to_vec(), stderr: Vec::new(), exit_code: 0 }, "{}", f.name());
    removed(f, &id);
}

/// The bytes `od -An -v -tx1` printed.
fn from_od(text: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(text)
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|e| panic!("od printed {h:?}: {e}")))
        .collect()
}

/// (2) Bytes with NUL and invalid UTF-8, written through the front end and
/// seen whole in the box, written in the box and read whole through it.
pub fn binary_files_round_trip<F: FrontEnd>(f: &mut F, lacks: &[Verb]) {
    let id = made(f);
    let bytes = awkward_bytes();
    let wrote = f.write_file(&id, "blob.bin", &bytes);
    ok(f, "write_file", wrote);
    let seen = f.exec(&id, &["od", "-An", "-v", "-tx1", "blob.bin"], b"");
    let seen = ok(f, "exec od", seen);
    assert_eq!(
        (seen.exit_code, from_od(&seen.stdout)),
        (0, bytes.clone()),
        "{}: the box sees the bytes written",
        f.name()
    );
    let back = f.read_file(&id, "blob.bin");
    assert_eq!(ok(f, "read_file", back), bytes, "{}: the bytes read back", f.name());

    let made_inside = f.exec(&id, &["sh", "-c", "printf '\\000\\377\\376a\\000' > made.bin"], b"");
    assert_eq!(ok(f, "exec printf", made_inside).exit_code, 0);
    let got = f.read_file(&id, "made.bin");
    assert_eq!(ok(f, "read_file", got), b"\0\xff\xfea\0", "{}: bytes the box wrote", f.name());

    let listed = f.list_dir(&id, ".");
    if let Some(entries) = offered(f, lacks, Verb::ListDir, listed) {
        let files: Vec<(&str, &str, u64)> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.kind.as_str(), e.size))
            .filter(|e| e.0.ends_with(".bin"))
            .collect();
        assert_eq!(files, [("blob.bin", "file", bytes.len() as u64), ("made.bin", "file", 5)], "{}", f.name());
    }
    removed(f, &id);
}

/// Starts the long command in `id` and waits until it runs; its process here.
fn started<F: FrontEnd>(f: &mut F, id: &str) -> (F::Running, HostProcess) {
    let marker = unique_sleep();
    let script = format!("echo $$ > started.pid; exec sleep {marker}");
    let running = f.start(id, &["sh", "-c", &script]);
    let running = ok(f, "start", running);
    let mut found = Vec::new();
    until(&format!("{}: the long command started", f.name()), || {
        found = processes_running(&["sleep", &marker]);
        !found.is_empty()
    });
    assert_eq!(found.len(), 1, "{}: one command was started: {found:?}", f.name());
    let process = found[0];
    // The pid it wrote from inside the box is this process's there.
    let written = f.read_file(id, "started.pid");
    let written = String::from_utf8(ok(f, "read started.pid", written)).expect("a pid");
    assert_eq!(written.trim().parse::<u32>().ok(), process.pid_inside(), "{}: the box's pid of {process:?}", f.name());
    (running, process)
}

/// (3) A long command cancelled the front end's own way is gone from the
/// box, as this machine's /proc shows; the box goes on serving.
pub fn a_cancelled_command_is_gone<F: FrontEnd>(f: &mut F) {
    let id = made(f);
    let (running, process) = started(f, &id);
    let cancelled = f.cancel(running);
    ok(f, "cancel", cancelled);
    until(&format!("{}: the cancelled command ended", f.name()), || !process.alive());
    let after = f.exec(&id, &["echo", "still here"], b"");
    assert_eq!(ok(f, "exec after cancel", after).stdout, b"still here\n", "{}", f.name());
    removed(f, &id);
}

/// (4) After remove the box is gone from the store and from this machine.
pub fn a_removed_box_is_gone<F: FrontEnd>(f: &mut F) {
    let id = made(f);
    let wrote = f.write_file(&id, "kept.txt", b"something to remove\n");
    ok(f, "write_file", wrote);
    let footprint = Footprint::of(f.store(), &id);
    assert!(!footprint.paths.is_empty(), "{}: the box holds nothing here? {footprint:?}", f.name());
    assert_eq!(footprint.left().len(), footprint.paths.len(), "{}: {footprint:?}", f.name());
    removed(f, &id);
    assert!(!recorded(f.store(), &id), "{}: {id} is still in the store", f.name());
    assert!(footprint.left().is_empty(), "{}: {id} left {:?} behind", f.name(), footprint.left());
}

/// (4) A server ended with a command in flight stops the command and removes
/// the boxes it made; a front end that is no server says so, and its box
/// is cancelled and removed the ordinary way.
pub fn ending_with_a_command_in_flight<F: FrontEnd>(f: &mut F, lacks: &[Verb]) {
    let id = made(f);
    let footprint = Footprint::of(f.store(), &id);
    let (running, process) = started(f, &id);
    let ended = f.end_with_in_flight(&running);
    if offered(f, lacks, Verb::EndWithInFlight, ended).is_some() {
        until(&format!("{}: the command in flight ended with its server", f.name()), || !process.alive());
        assert!(!recorded(f.store(), &id), "{}: {id} outlived its server", f.name());
        assert!(footprint.left().is_empty(), "{}: {id} left {:?} behind", f.name(), footprint.left());
        return;
    }
    let cancelled = f.cancel(running);
    ok(f, "cancel", cancelled);
    until(&format!("{}: the cancelled command ended", f.name()), || !process.alive());
    removed(f, &id);
}

/// (5) A snapshot of a namespace box made without an image (its driver keeps
/// nothing to take) is core's refusal, word for word, and changes no record.
pub fn a_snapshot_the_box_cannot_take_is_refused<F: FrontEnd>(f: &mut F, lacks: &[Verb]) {
    let id = made(f);
    let before = store_bytes(f.store());
    let want = tinybox_core::Error::Unsupported {
        sandbox: SandboxName::new("namespace").unwrap(),
        capability: Capability::BoxSnapshot,
    }
    .to_string();
    match f.snapshot(&id) {
        Ok(snapshot) => panic!("{}: a snapshot was taken: {snapshot}", f.name()),
        Err(Refused::Line(text)) => {
            let line = one_line(f.name(), &text);
            assert_eq!(core_words(&line), want, "{}: core's refusal, as it is", f.name());
        }
        Err(unoffered) => {
            offered::<(), F>(f, lacks, Verb::Snapshot, Err(unoffered));
        }
    }
    assert!(store_bytes(f.store()) == before, "{}: the refusal changed the store", f.name());
    removed(f, &id);
}

/// (5) A box for untrusted code (the kernel isolation floor) on passthrough,
/// which declares no isolation, is refused before any box is made, in
/// core's words, and the store is unchanged. The servers ask for that
/// floor on every box; the CLI and the module are asked to.
pub fn a_floor_the_sandbox_cannot_meet_is_refused<F: FrontEnd>(f: &mut F) {
    let before = store_bytes(f.store());
    let want = tinybox_core::Error::Unsupported {
        sandbox: SandboxName::passthrough(),
        capability: Capability::Isolation { floor: IsolationLevel::UNTRUSTED_FLOOR, declared: IsolationLevel::None },
    }
    .to_string();
    let text = match f.create(&Ask { untrusted: true, ..Ask::default() }) {
        Ok(id) => panic!("{}: {id} was made for untrusted code on passthrough", f.name()),
        Err(refused) => refused.line("create"),
    };
    let line = one_line(f.name(), &text);
    assert_eq!(core_words(&line), want, "{}: core's refusal, as it is", f.name());
    assert!(store_bytes(f.store()) == before, "{}: the refusal changed the store", f.name());
}

/// (6) A box id no one made is one line naming it, and changes nothing.
pub fn an_unknown_box_is_one_line_naming_it<F: FrontEnd>(f: &mut F) {
    let before = store_bytes(f.store());
    let text = match f.exec("box-424242", &["true"], b"") {
        Ok(ran) => panic!("{}: ran in a box no one made: {ran:?}", f.name()),
        Err(refused) => refused.line("exec"),
    };
    let line = one_line(f.name(), &text);
    assert!(line.contains("box-424242"), "{}: the refusal names the id: {line}", f.name());
    assert!(store_bytes(f.store()) == before, "{}: the refusal changed the store", f.name());
}
