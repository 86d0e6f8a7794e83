//! Running a command with its output captured for the caller, whole
//! (`exec`) or pulled in pieces while it runs (`exec.start`, `exec.read`,
//! `exec.wait`, `exec.cancel`). Both are one mechanism: the command's
//! stdout and stderr are pipes that a thread each drains into a buffer,
//! read concurrently so a command that fills one while nobody reads the
//! other cannot stall; its stdin is a private, already-unlinked file, so
//! feeding it can never block or raise SIGPIPE.

use std::io::{Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::{ExecOutcome, Target, Tinybox};
use tinybox_sdk::stdio::StdioFds;

use crate::errors::{CallError, CallResult, Code};
use crate::state::State;

/// How long, after the command ended, its streams may stay open (held by
/// something it left running) before what arrived is returned as is.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);
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
    /// Capturing: keep at most this much, drop (and count) the rest.
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
}

/// What a caller asks to run.
pub struct Launch {
    pub box_id: BoxId,
    pub request: ExecRequest,
    pub target: Target,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
}

impl Running {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_changed<'a>(&self, guard: MutexGuard<'a, Shared>) -> MutexGuard<'a, Shared> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `launch` in `engine`: streaming when `stream_buffer` is set,
    /// capturing up to `max_output` otherwise.
    pub fn start(
        state: &State,
        engine: Arc<Tinybox>,
        launch: Launch,
        stream_buffer: Option<usize>,
        max_output: usize,
    ) -> CallResult<Arc<Running>> {
        let stdin = stdin_file(launch.stdin.as_deref())?;
        let pipe = || std::io::pipe().map_err(|e| CallError::new(Code::Io, format!("cannot make a pipe: {e}")));
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let mode = match stream_buffer {
            Some(buffer) => Mode::Stream { buffer: buffer.max(1) },
            None => Mode::Capture { limit: max_output },
        };
        let run = Arc::new(Running {
            box_id: launch.box_id.clone(),
            shared: Mutex::new(Shared { mode, streams: Default::default(), end: None, ended_at: None }),
            changed: Condvar::new(),
            cancel: tokio::sync::Notify::new(),
            cancelled: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
        });
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
            let end = engine.exec(&box_id, request, fds, target, cancel).await.map_err(CallError::from);
            task_run.finish(end);
        });
        Ok(run)
    }

    /// Drains one stream into its buffer until end of file.
    fn pump(&self, which: usize, mut reader: std::io::PipeReader) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let mut s = self.lock();
            while let Mode::Stream { buffer } = s.mode {
                if s.streams[which].unread.len() < buffer {
                    break;
                }
                s = self.wait_changed(s);
            }
            let room = match s.mode {
                Mode::Stream { .. } => n,
                Mode::Capture { limit } => limit.saturating_sub(s.streams[which].unread.len()).min(n),
            };
            let stream = &mut s.streams[which];
            stream.unread.extend_from_slice(&chunk[..room]);
            stream.dropped += (n - room) as u64;
            drop(s);
            self.changed.notify_all();
        }
        self.lock().streams[which].eof = true;
        self.changed.notify_all();
    }

    fn finish(&self, end: CallResult<ExecOutcome>) {
        let mut s = self.lock();
        s.end = Some(end);
        s.ended_at = Some(Instant::now());
        drop(s);
        self.changed.notify_all();
    }

    /// Asks the command to stop; `exec.wait` still reports how it ended.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.notify_one();
    }

    /// The output that arrived since the last read, waiting up to `wait`
    /// (forever when `None`) for some to arrive, or for both streams to end.
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
            let mut n = emittable(b).min(max_bytes.max(4));
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
    /// output not read yet (at most `max_output` more of each stream).
    pub fn wait(&self, max_output: usize) -> CallResult<Value> {
        let mut s = self.lock();
        if let Mode::Stream { .. } = s.mode {
            // Nobody reads from here on: stop holding the command back.
            s.mode = Mode::Capture { limit: max_output };
            self.changed.notify_all();
        }
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
        let exit_code = match (timed_out, cancelled) {
            (true, _) => 124,
            (_, true) => 130,
            _ => outcome.status.shell_code(),
        };
        let mut out = Map::new();
        out.insert("id".into(), json!(self.box_id));
        out.insert("status".into(), json!(outcome.status));
        out.insert("exit_code".into(), json!(exit_code));
        out.insert("timed_out".into(), json!(timed_out));
        out.insert("cancelled".into(), json!(cancelled));
        for which in [STDOUT, STDERR] {
            let b = &mut s.streams[which];
            let truncated = b.dropped > 0 || !b.eof;
            put_bytes(&mut out, NAMES[which], std::mem::take(&mut b.unread));
            out.insert(format!("{}_truncated", NAMES[which]), json!(truncated));
        }
        drop(s);
        self.changed.notify_all();
        Ok(Value::Object(out))
    }
}

/// The unread bytes that may be handed out now: all of them at end of
/// file, otherwise all but an incomplete UTF-8 sequence at the end.
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

/// The command's stdin: `/dev/null`, or the given bytes in a file of this
/// user's private runtime directory, unlinked before the command sees it.
fn stdin_file(bytes: Option<&[u8]>) -> CallResult<OwnedFd> {
    let io = |what: &str, e: std::io::Error| CallError::new(Code::Io, format!("{what}: {e}"));
    let Some(bytes) = bytes else {
        return Ok(std::fs::File::open("/dev/null").map_err(|e| io("cannot open /dev/null", e))?.into());
    };
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = tinybox_core::paths::runtime_dir()?;
    let path = dir.join(format!("stdin-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io(&format!("cannot create {}", path.display()), e))?;
    let _ = std::fs::remove_file(&path);
    file.write_all(bytes).map_err(|e| io("cannot write the command's stdin", e))?;
    file.rewind().map_err(|e| io("cannot write the command's stdin", e))?;
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;

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
