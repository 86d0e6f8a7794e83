//! Running one command in a box with its output kept for the caller: the
//! captured exec that the conformance kit's probes and the module's `exec`
//! share. The command's stdout and stderr are pipes drained concurrently
//! while it runs (so one it fills while nobody reads the other cannot
//! stall), each kept up to a bound and the rest counted as truncated; its
//! stdin is `/dev/null` or given bytes in a private, already-unlinked file,
//! so feeding it can never block or raise SIGPIPE.
//!
//! Output still arriving after the command ended comes from something it
//! left running that holds the pipes: it is awaited for a short grace, then
//! what arrived is returned and the stream is marked truncated.

use std::future::Future;
use std::io::{Seek, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tinybox_sdk::model::{BoxId, ExecRequest, ExitStatus};
use tinybox_sdk::stdio::StdioFds;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use crate::engine::{Target, Tinybox};
use crate::error::{Error, Result};

/// How long, after the command ended, its streams may stay open (held by
/// something it left running) before what arrived is returned as is.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// How to run a captured command.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The command's stdin; `None` is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// What is kept of each stream; the rest is read and dropped.
    pub max_output: usize,
    /// Cancels the command when it passes (reported as `timed_out`).
    pub timeout: Option<Duration>,
    /// See [`DRAIN_GRACE`].
    pub drain_grace: Duration,
}

impl Capture {
    /// Empty stdin, no timeout, the default grace, `max_output` per stream.
    pub fn new(max_output: usize) -> Capture {
        Capture { stdin: None, max_output, timeout: None, drain_grace: DRAIN_GRACE }
    }
}

/// What one stream of the command printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stream {
    pub bytes: Vec<u8>,
    /// Bytes were dropped past the bound, or the stream was still open
    /// when the grace ran out.
    pub truncated: bool,
    /// How many bytes past the bound were read and dropped (a stream
    /// still open at the end may have had more to say, uncounted).
    pub dropped_bytes: u64,
}

/// A finished captured command.
#[derive(Debug, Clone)]
pub struct Captured {
    pub status: ExitStatus,
    /// The caller's cancellation stopped it.
    pub cancelled: bool,
    /// The timeout stopped it.
    pub timed_out: bool,
    pub stdout: Stream,
    pub stderr: Stream,
    /// From the exec's start to its end (the grace not included).
    pub elapsed: Duration,
}

/// Runs `request` in box `id` as `capture` says. `cancel` resolving, or
/// the timeout passing, stops the command; its end is still awaited.
pub async fn run(
    tb: &Tinybox,
    id: &BoxId,
    request: ExecRequest,
    target: Target,
    capture: &Capture,
    cancel: impl Future<Output = ()>,
) -> Result<Captured> {
    let io = |e| Error::io("cannot prepare a captured command's streams", e);
    let stdin = stdin_file(capture.stdin.as_deref())?;
    let (out_w, out_r) = pipe::pipe().map_err(io)?;
    let (err_w, err_r) = pipe::pipe().map_err(io)?;
    let fds = StdioFds {
        stdin,
        stdout: out_w.into_blocking_fd().map_err(io)?,
        stderr: err_w.into_blocking_fd().map_err(io)?,
    };

    let timed_out = AtomicBool::new(false);
    let stop = async {
        match capture.timeout {
            Some(limit) => tokio::select! {
                () = cancel => {}
                () = tokio::time::sleep(limit) => timed_out.store(true, Ordering::SeqCst),
            },
            None => cancel.await,
        }
    };
    let (mut stdout, mut stderr) = (Collected::default(), Collected::default());
    let started = Instant::now();
    let outcome = {
        let drain =
            async { tokio::join!(stdout.fill(out_r, capture.max_output), stderr.fill(err_r, capture.max_output)) };
        tokio::pin!(drain);
        // The engine drops its copies of the write ends when the exec ends,
        // so the readers see end of file then, unless the command left
        // something running that holds them.
        let exec = tb.exec(id, request, fds, target, stop);
        tokio::pin!(exec);
        let mut drained = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut exec => break outcome,
                _ = &mut drain, if !drained => drained = true,
            }
        };
        let elapsed = started.elapsed();
        if !drained {
            let _ = tokio::time::timeout(capture.drain_grace, &mut drain).await;
        }
        outcome.map(|o| (o, elapsed))
    };
    let (outcome, elapsed) = outcome?;
    let timed_out = outcome.cancelled && timed_out.load(Ordering::SeqCst);
    Ok(Captured {
        status: outcome.status,
        cancelled: outcome.cancelled && !timed_out,
        timed_out,
        stdout: stdout.into_stream(),
        stderr: stderr.into_stream(),
        elapsed,
    })
}

/// One stream as it is read.
#[derive(Default)]
struct Collected {
    bytes: Vec<u8>,
    dropped: u64,
    eof: bool,
}

impl Collected {
    /// Reads `from` to its end, keeping at most `limit` bytes.
    async fn fill(&mut self, mut from: pipe::Receiver, limit: usize) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // Nothing more can come from a pipe that fails: what was read stands.
                Err(_) => return,
            };
            let room = limit.saturating_sub(self.bytes.len()).min(n);
            self.bytes.extend_from_slice(&chunk[..room]);
            self.dropped += (n - room) as u64;
        }
        self.eof = true;
    }

    fn into_stream(self) -> Stream {
        Stream { truncated: self.dropped > 0 || !self.eof, bytes: self.bytes, dropped_bytes: self.dropped }
    }
}

/// A command's stdin: `/dev/null`, or `bytes` in a file of this user's
/// private runtime directory that is unlinked before the command sees it.
pub fn stdin_file(bytes: Option<&[u8]>) -> Result<OwnedFd> {
    let Some(bytes) = bytes else {
        let null = std::fs::File::open("/dev/null").map_err(|e| Error::io("cannot open /dev/null", e))?;
        return Ok(null.into());
    };
    let dir = crate::paths::runtime_dir()?;
    let io = |e| Error::io("cannot write the command's stdin", e);
    let mut file = tempfile::tempfile_in(&dir).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.rewind().map_err(io)?;
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn stdin_bytes_are_read_back_from_the_start() {
        let mut file = std::fs::File::from(stdin_file(Some(b"one\0two")).unwrap());
        let mut got = Vec::new();
        file.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"one\0two");
        let mut null = std::fs::File::from(stdin_file(None).unwrap());
        assert_eq!(null.read(&mut [0u8; 4]).unwrap(), 0, "no stdin is /dev/null");
    }

    #[tokio::test]
    async fn a_stream_keeps_its_bound_and_says_what_it_dropped() {
        for (written, limit, kept, truncated) in [(10usize, 20usize, 10usize, false), (100_000, 20, 20, true)] {
            let (tx, rx) = pipe::pipe().unwrap();
            let mut w = std::fs::File::from(tx.into_blocking_fd().unwrap());
            let writer = std::thread::spawn(move || w.write_all(&vec![b'x'; written]));
            let mut c = Collected::default();
            c.fill(rx, limit).await;
            writer.join().unwrap().unwrap();
            let s = c.into_stream();
            assert_eq!((s.bytes.len(), s.truncated), (kept, truncated), "{written} bytes, bound {limit}");
            assert_eq!(s.dropped_bytes, (written - kept) as u64, "{written} bytes, bound {limit}");
        }
    }

    #[tokio::test]
    async fn a_stream_still_open_is_truncated() {
        let (tx, rx) = pipe::pipe().unwrap();
        let mut w = std::fs::File::from(tx.into_blocking_fd().unwrap());
        w.write_all(b"early").unwrap();
        let mut c = Collected::default();
        // The writer is still open: the read is given up, as after the grace.
        let _ = tokio::time::timeout(Duration::from_millis(50), c.fill(rx, 100)).await;
        let s = c.into_stream();
        assert_eq!(s.bytes, b"early");
        assert!(s.truncated, "a stream that never ended is not whole");
        drop(w);
    }
}
