//! Running a command with its output captured for the caller, whole
//! (`exec`) or pulled in pieces while it runs (`exec.start`, `exec.read`,
//! `exec.wait`, `exec.cancel`).
//!
//! `exec` is core's captured exec (`tinybox_core::capture`), the one the
//! conformance kit uses too. The streaming calls keep their own machinery
//! here: their output outlives the call that started the command, is
//! pulled across separate host calls on any host thread, and holds the
//! command back when nobody reads (a bounded buffer per stream, a thread
//! each draining the pipes) — state between calls that a single awaited
//! capture has no place for. They share core's stdin file and drain grace.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tinybox_core::capture::{self, Capture, Captured, DRAIN_GRACE};
use tinybox_core::model::{BoxId, ExecRequest, ExitStatus, TtySize};
use tinybox_core::{ExecOutcome, Target, Tinybox};
use tinybox_sdk::stdio::StdioFds;

use crate::errors::{CallError, CallResult, Code};
use crate::state::State;
/// Default bound on what `exec` (or `exec.wait`) keeps of each stream.
pub const DEFAULT_MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// Default bound on the unread bytes a streaming exec buffers per stream;
/// past it the command waits until the host reads.
pub const DEFAULT_STREAM_BUFFER: usize = 1024 * 1024;

const STDOUT: usize = 0;
const STDERR: usize = 1;
const NAMES: [&str; 2] = ["stdout", "stderr"];

/// What to do with output nobody has read yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Streaming: hold at most this much unread; the command waits beyond it.
    Stream { buffer: usize },
    /// Waited for (`exec.wait`): keep at most this much, drop (and count) the rest.
    Capture { limit: usize },
}

#[derive(Debug, Default)]
struct StreamBuf {
    unread: Vec<u8>,
    eof: bool,
    dropped: u64,
}

struct Shared {
    mode: Mode,
    streams: [StreamBuf; 2],
    end: Option<CallResult<ExecOutcome>>,
    ended_at: Option<Instant>,
}

/// One command in flight.
pub struct Running {
    pub box_id: BoxId,
    shared: Mutex<Shared>,
    changed: Condvar,
    cancel: tokio::sync::Notify,
    cancelled: AtomicBool,
    timed_out: AtomicBool,
    /// New terminal sizes for core, when the command runs on a terminal.
    resizes: Option<tokio::sync::mpsc::UnboundedSender<TtySize>>,
}

/// What a caller asks to run.
pub struct Launch {
    pub box_id: BoxId,
    pub request: ExecRequest,
    pub target: Target,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
}

/// `exec`: runs `launch` to its end with core's captured exec, keeping at
/// most `max_output` of each stream.
pub fn captured(state: &State, engine: Arc<Tinybox>, launch: Launch, max_output: usize) -> CallResult<Value> {
    let Launch { box_id, request, target, stdin, timeout } = launch;
    let how = Capture { stdin, timeout, ..Capture::new(max_output) };
    let done: Captured =
        state.block_on(capture::run(&engine, &box_id, request, target, &how, std::future::pending()))?;
    let streams = [done.stdout, done.stderr].map(|s| (s.bytes, s.truncated));
    Ok(result(&box_id, done.status, done.cancelled, done.timed_out, streams))
}

/// The document `exec` and `exec.wait` return (docs/specs/json-shapes.md).
fn result(
    box_id: &BoxId,
    status: ExitStatus,
    cancelled: bool,
    timed_out: bool,
    streams: [(Vec<u8>, bool); 2],
) -> Value {
    let exit_code = match (timed_out, cancelled) {
        (true, _) => 124,
        (_, true) => 130,
        _ => status.shell_code(),
    };
    let mut out = Map::new();
    out.insert("id".into(), json!(box_id));
    out.insert("status".into(), json!(status));
    out.insert("exit_code".into(), json!(exit_code));
    out.insert("timed_out".into(), json!(timed_out));
    out.insert("cancelled".into(), json!(cancelled));
    for (which, (bytes, truncated)) in streams.into_iter().enumerate() {
        put_bytes(&mut out, NAMES[which], bytes);
        out.insert(format!("{}_truncated", NAMES[which]), json!(truncated));
    }
    Value::Object(out)
}

impl Running {
    fn new(box_id: BoxId, buffer: usize, resizes: Option<tokio::sync::mpsc::UnboundedSender<TtySize>>) -> Running {
        Running {
            resizes,
            box_id,
            shared: Mutex::new(Shared {
                mode: Mode::Stream { buffer: buffer.max(1) },
                streams: Default::default(),
                end: None,
                ended_at: None,
            }),
            changed: Condvar::new(),
            cancel: tokio::sync::Notify::new(),
            cancelled: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_changed<'a>(&self, guard: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `launch` in `engine`, holding at most `buffer` unread bytes
    /// of each stream before the command waits for the host to read.
    pub fn start(state: &State, engine: Arc<Tinybox>, launch: Launch, buffer: usize) -> CallResult<Arc<Running>> {
        let stdin = capture::stdin_file(launch.stdin.as_deref())?;
        let pipe = || std::io::pipe().map_err(|e| CallError::new(Code::Io, format!("cannot make a pipe: {e}")));
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (resizes, resized) = match launch.request.tty {
            Some(_) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let run = Arc::new(Running::new(launch.box_id.clone(), buffer, resizes));
        for (which, reader) in [(STDOUT, out_r), (STDERR, err_r)] {
            let run = run.clone();
            std::thread::Builder::new()
                .name(format!("tinybox-{}", NAMES[which]))
                .spawn(move || run.pump(which, reader))
                .map_err(|e| CallError::new(Code::Io, format!("cannot start an output reader: {e}")))?;
        }
        let fds = StdioFds { stdin, stdout: out_w.into(), stderr: err_w.into() };
        let task_run = run.clone();
        state.handle().spawn(async move {
            let Launch { box_id, request, target, timeout, .. } = launch;
            let watcher = task_run.clone();
            let cancel = async move {
                match timeout {
                    Some(limit) => tokio::select! {
                        () = watcher.cancel.notified() => {}
                        () = tokio::time::sleep(limit) => watcher.timed_out.store(true, Ordering::SeqCst),
                    },
                    None => watcher.cancel.notified().await,
                }
            };
            // On an error before the command started, `fds` is dropped
            // here, so the readers see end of file at once.
            let end =
                engine.exec_resizable(&box_id, request, fds, target, cancel, resized).await.map_err(CallError::from);
            task_run.finish(end);
        });
        Ok(run)
    }

    /// Drains one stream until end of file.
    fn pump(&self, which: usize, mut reader: impl Read) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            self.arrived(which, &chunk[..n]);
        }
        self.lock().streams[which].eof = true;
        self.changed.notify_all();
    }

    /// Takes `bytes` the command wrote on stream `which`: buffers them,
    /// first waiting for room while streaming, or keeps what the bound
    /// allows once waited for.
    fn arrived(&self, which: usize, bytes: &[u8]) {
        let mut s = self.lock();
        while let Mode::Stream { buffer } = s.mode {
            if s.streams[which].unread.len() < buffer {
                break;
            }
            s = self.wait_changed(s);
        }
        let room = match s.mode {
            Mode::Stream { .. } => bytes.len(),
            Mode::Capture { limit } => limit.saturating_sub(s.streams[which].unread.len()).min(bytes.len()),
        };
        let stream = &mut s.streams[which];
        stream.unread.extend_from_slice(&bytes[..room]);
        stream.dropped += (bytes.len() - room) as u64;
        drop(s);
        self.changed.notify_all();
    }

    fn finish(&self, end: CallResult<ExecOutcome>) {
        let mut s = self.lock();
        s.end = Some(end);
        s.ended_at = Some(Instant::now());
        drop(s);
        self.changed.notify_all();
    }

    /// Gives the command's terminal a new size; a command that has ended
    /// is left alone.
    pub fn resize(&self, handle: &str, size: TtySize) -> CallResult<()> {
        let Some(resizes) = &self.resizes else {
            return Err(CallError::invalid(format!(
                "exec.resize: {handle} runs without a terminal; pass tty {{rows, cols}} to exec.start for one"
            )));
        };
        let _ = resizes.send(size);
        Ok(())
    }

    /// Asks the command to stop; `exec.wait` still reports how it ended.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.notify_one();
    }

    /// The output that arrived since the last read, at most `max_bytes` of
    /// each stream, waiting up to `wait` (forever when `None`) for some to
    /// arrive, or for both streams to end.
    pub fn read(&self, wait: Option<Duration>, max_bytes: usize) -> Value {
        let asked = wait.map(|w| Instant::now() + w);
        let mut s = self.lock();
        loop {
            if s.streams.iter().any(|b| emittable(b) > 0) || s.streams.iter().all(|b| b.eof) {
                break;
            }
            // Once the command has ended, a stream still open after the
            // grace is held by something it left behind: stop waiting for it.
            let deadline = match (asked, s.ended_at.map(|t| t + DRAIN_GRACE)) {
                (Some(a), Some(g)) => Some(a.min(g)),
                (a, g) => a.or(g),
            };
            s = match deadline {
                None => self.wait_changed(s),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    self.changed.wait_timeout(s, d - now).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
        let mut out = Map::new();
        for which in [STDOUT, STDERR] {
            let b = &mut s.streams[which];
            // The bound is the caller's, exactly: a character longer than
            // it is handed out in pieces (as base64) rather than overrun it.
            let mut n = emittable(b).min(max_bytes);
            if n < b.unread.len() {
                // Never split a UTF-8 sequence between two reads when it can be helped.
                let cut = n - incomplete_tail(&b.unread[..n]);
                if cut > 0 {
                    n = cut;
                }
            }
            let bytes: Vec<u8> = b.unread.drain(..n).collect();
            put_bytes(&mut out, NAMES[which], bytes);
            out.insert(format!("{}_eof", NAMES[which]), json!(b.eof && b.unread.is_empty()));
        }
        out.insert("done".into(), json!(s.end.is_some()));
        drop(s);
        // Room was made: a reader waiting on a full buffer may go on.
        self.changed.notify_all();
        Value::Object(out)
    }

    /// Waits for the command's end and returns how it ended with all the
    /// output not read yet, at most `max_output` of each stream.
    pub fn wait(&self, max_output: usize) -> CallResult<Value> {
        let mut s = self.lock();
        // Nobody reads from here on: stop holding the command back, and
        // bound what was buffered while streaming as what arrives later.
        s.mode = Mode::Capture { limit: max_output };
        for b in &mut s.streams {
            if b.unread.len() > max_output {
                b.dropped += (b.unread.len() - max_output) as u64;
                b.unread.truncate(max_output);
            }
        }
        self.changed.notify_all();
        while s.end.is_none() {
            s = self.wait_changed(s);
        }
        let grace = s.ended_at.unwrap_or_else(Instant::now) + DRAIN_GRACE;
        while !s.streams.iter().all(|b| b.eof) {
            let now = Instant::now();
            if now >= grace {
                break;
            }
            s = self.changed.wait_timeout(s, grace - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        let outcome = s.end.clone().expect("ended")?;
        let timed_out = self.timed_out.load(Ordering::SeqCst) && outcome.cancelled;
        let cancelled = outcome.cancelled && !timed_out;
        let streams = [STDOUT, STDERR].map(|which| {
            let b = &mut s.streams[which];
            let truncated = b.dropped > 0 || !b.eof;
            (std::mem::take(&mut b.unread), truncated)
        });
        drop(s);
        self.changed.notify_all();
        Ok(result(&self.box_id, outcome.status, cancelled, timed_out, streams))
    }
}

fn emittable(b: &StreamBuf) -> usize {
    if b.eof { b.unread.len() } else { b.unread.len() - incomplete_tail(&b.unread) }
}

/// How many bytes at the end of `b` begin a UTF-8 sequence that is not complete yet.
pub fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue;
        }
        let need = match c {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// `name` as text when the bytes are UTF-8, else `name_base64`.
pub fn put_bytes(out: &mut Map<String, Value>, name: &str, bytes: Vec<u8>) {
    match String::from_utf8(bytes) {
        Ok(text) => out.insert(name.into(), json!(text)),
        Err(e) => out.insert(format!("{name}_base64"), json!(crate::base64::encode(e.as_bytes()))),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streaming exec whose command printed `stdout` and nothing on stderr.
    fn printed(stdout: &[u8], buffer: usize) -> Running {
        let run = Running::new(BoxId::new("box-0").unwrap(), buffer, None);
        run.pump(STDOUT, stdout);
        run.pump(STDERR, &b""[..]);
        run
    }

    fn ended(run: &Running) {
        run.finish(Ok(ExecOutcome { status: ExitStatus::code(0), cancelled: false }));
    }

    #[test]
    fn exec_wait_keeps_its_bound_after_an_exec_read() {
        let run = printed(&[b'x'; 65_536][..], DEFAULT_STREAM_BUFFER);
        let first = run.read(Some(Duration::ZERO), 10);
        assert_eq!(first["stdout"].as_str().unwrap().len(), 10);
        ended(&run);
        let end = run.wait(20).unwrap();
        assert_eq!(end["stdout"].as_str().unwrap().len(), 20, "max_output_bytes 20 after a read of 10");
        assert_eq!(end["stdout_truncated"], true, "65,506 bytes were dropped");
        assert_eq!(end["stderr_truncated"], false);
        assert_eq!(end["exit_code"], 0);
    }

    #[test]
    fn output_arriving_after_exec_wait_is_bounded_too() {
        let run = Arc::new(Running::new(BoxId::new("box-0").unwrap(), DEFAULT_STREAM_BUFFER, None));
        run.pump(STDERR, &b""[..]);
        ended(&run);
        // The command's output arrives while (or before) wait runs: bounded either way.
        let late = run.clone();
        let writer = std::thread::spawn(move || late.pump(STDOUT, &[b'y'; 1000][..]));
        let end = run.wait(20).unwrap();
        writer.join().unwrap();
        assert_eq!(end["stdout"], "y".repeat(20));
        assert_eq!(end["stdout_truncated"], true);
    }

    #[test]
    fn exec_read_never_returns_more_than_max_bytes() {
        for max in 1..=5 {
            let run = printed(b"abcdefgh", 1024);
            let got = run.read(Some(Duration::ZERO), max);
            assert_eq!(got["stdout"], &"abcdefgh"[..max], "max_bytes {max}");
            assert_eq!(got["stdout_eof"], false);
        }
        // A character longer than the bound comes out in pieces, byte-exact.
        let snow = "☃".as_bytes();
        let run = printed(snow, 1024);
        let mut got = Vec::new();
        for _ in 0..snow.len() {
            let piece = run.read(Some(Duration::ZERO), 1);
            let bytes = crate::base64::decode(piece["stdout_base64"].as_str().expect("a lone byte is base64")).unwrap();
            assert_eq!(bytes.len(), 1, "{piece}");
            got.extend(bytes);
        }
        assert_eq!(got, snow);
        // Whole characters that fit are never split.
        let run = printed("a☃".as_bytes(), 1024);
        assert_eq!(run.read(Some(Duration::ZERO), 3)["stdout"], "a");
        assert_eq!(run.read(Some(Duration::ZERO), 3)["stdout"], "☃");
    }

    #[test]
    fn an_incomplete_utf8_sequence_at_the_end_is_held_back() {
        let snow = "a☃".as_bytes(); // ☃ is three bytes
        assert_eq!(incomplete_tail(snow), 0);
        assert_eq!(incomplete_tail(&snow[..snow.len() - 1]), 2);
        assert_eq!(incomplete_tail(&snow[..snow.len() - 2]), 1);
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail(&[0x80, 0x80, 0x80]), 0, "not UTF-8 at all: nothing to wait for");
    }

    #[test]
    fn bytes_are_text_when_they_can_be_and_base64_otherwise() {
        let mut m = Map::new();
        put_bytes(&mut m, "stdout", b"hi \"there\"\n".to_vec());
        put_bytes(&mut m, "stderr", vec![0xff, 0x00]);
        assert_eq!(m["stdout"], "hi \"there\"\n");
        assert_eq!(m["stderr_base64"], "/wA=");
        assert!(!m.contains_key("stderr"));
    }
}
