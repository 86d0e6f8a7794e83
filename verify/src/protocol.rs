//! Protocol conformance: what every driver must do on the wire, whatever it
//! declares. The wire checks speak to a freshly started driver by hand, one
//! JSON line at a time, so they test the driver rather than our client; the
//! stream checks go through a real box like any command.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinybox_sdk::model::{BoxId, ExecRequest};
use tinybox_sdk::protocol::{ErrorCode, PROTOCOL_VERSION, method};
use tinybox_sdk::stdio::StdioFds;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use tinybox_core::{Target, Tinybox};

use super::run::{GUARD, run};
use super::{Claim, Status};

/// The claims the wire checks decide, in the order they are made.
const WIRE: [Claim; 4] = [
    Claim::ProtocolCallBeforeHandshake,
    Claim::ProtocolIncompatibleVersion,
    Claim::ProtocolUnknownMethod,
    Claim::ProtocolInvalidParams,
];

/// How long a driver may take to answer one line.
const ANSWER: Duration = Duration::from_secs(10);
/// How many commands run at once in the concurrency check.
const CONCURRENT: usize = 8;
/// The binary stream's size.
const STREAM_BYTES: usize = 16 * 1024 * 1024;

pub type Verdict = (Status, String);

/// A driver started by hand.
struct Raw {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Raw {
    fn start(path: &Path) -> std::io::Result<Raw> {
        let mut child = Command::new(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Ok(Raw { child, stdin, lines })
    }

    /// Sends one request and returns the answer with the same id.
    async fn call(&mut self, id: u64, method: &str, params: Value) -> Result<Value, String> {
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string() + "\n";
        self.stdin.write_all(line.as_bytes()).await.map_err(|e| format!("cannot write to the driver: {e}"))?;
        self.stdin.flush().await.map_err(|e| format!("cannot write to the driver: {e}"))?;
        let answer = tokio::time::timeout(ANSWER, self.lines.next_line())
            .await
            .map_err(|_| format!("no answer to {method} within {}s", ANSWER.as_secs()))?
            .map_err(|e| format!("cannot read from the driver: {e}"))?
            .ok_or_else(|| format!("the driver closed its output instead of answering {method}"))?;
        let v: Value =
            serde_json::from_str(&answer).map_err(|e| format!("the answer to {method} is not JSON ({e})"))?;
        if v.get("id") != Some(&json!(id)) {
            return Err(format!("the answer to {method} carries id {:?}, not {id}", v.get("id")));
        }
        Ok(v)
    }

    async fn finish(mut self) {
        drop(self.stdin);
        if tokio::time::timeout(ANSWER, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// PASS when `answer` is an error with `code`, FAIL otherwise.
fn expect_error(answer: Result<Value, String>, code: i32, what: &str) -> Verdict {
    match answer {
        Err(e) => (Status::Fail, e),
        Ok(v) => match v.pointer("/error/code").and_then(Value::as_i64) {
            Some(c) if c == i64::from(code) => (Status::Pass, format!("{what}: error {code}")),
            Some(c) => (Status::Fail, format!("{what}: error {c}, expected {code}")),
            None => (Status::Fail, format!("{what}: answered with a result, expected error {code}")),
        },
    }
}

fn handshake_params(protocol: &str) -> Value {
    json!({ "protocol": protocol, "core_version": env!("CARGO_PKG_VERSION"), "features": [] })
}

/// The wire checks, against the driver executable at `path`.
pub async fn wire(path: &Path) -> Vec<(Claim, Verdict, Duration)> {
    let t = Instant::now();
    let mut raw = match Raw::start(path) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("cannot start {}: {e}", path.display());
            return WIRE.iter().map(|c| (*c, (Status::Fail, why.clone()), t.elapsed())).collect();
        }
    };
    let mut out = Vec::new();
    let box_ref = json!({ "box_id": "box-0", "handle": null });
    let early = raw.call(1, method::SANDBOX_INSPECT, box_ref.clone()).await;
    out.push((
        WIRE[0],
        expect_error(early, ErrorCode::Handshake.code(), "sandbox.inspect before handshake"),
        t.elapsed(),
    ));

    let t = Instant::now();
    let wrong = raw.call(2, method::HANDSHAKE, handshake_params("99.0.0")).await;
    out.push((
        WIRE[1],
        expect_error(wrong, ErrorCode::Handshake.code(), "handshake with protocol 99.0.0"),
        t.elapsed(),
    ));

    let t = Instant::now();
    let refused = match raw.call(3, method::HANDSHAKE, handshake_params(PROTOCOL_VERSION)).await {
        Ok(v) if v.get("result").is_some() => None,
        Ok(v) => Some(format!("a compatible handshake was refused: {}", v.get("error").unwrap_or(&Value::Null))),
        Err(e) => Some(e),
    };
    if let Some(why) = refused {
        out.push((WIRE[2], (Status::Fail, why.clone()), t.elapsed()));
        out.push((WIRE[3], (Status::Fail, why), t.elapsed()));
        raw.finish().await;
        return out;
    }
    let unknown = raw.call(4, "tinybox.no_such_method", json!({})).await;
    out.push((WIRE[2], expect_error(unknown, -32601, "an unknown method"), t.elapsed()));

    let t = Instant::now();
    let bad = raw.call(5, method::SANDBOX_INSPECT, json!({ "box_id": "../not-a-name", "handle": null })).await;
    out.push((WIRE[3], expect_error(bad, -32602, "sandbox.inspect with an invalid box name"), t.elapsed()));
    raw.finish().await;
    out
}

/// Several commands at once in one box, over one driver connection: each
/// gets its own answer.
pub async fn concurrent_calls(tb: &Tinybox, id: &BoxId) -> Verdict {
    let words: Vec<String> = (0..CONCURRENT).map(|i| format!("call-{i}")).collect();
    let argvs: Vec<[&str; 2]> = words.iter().map(|w| ["echo", w.as_str()]).collect();
    let runs = argvs.iter().map(|argv| run(tb, id, argv, &[], std::future::pending()));
    let outputs = futures_util::future::join_all(runs).await;
    for (w, o) in words.iter().zip(outputs) {
        match o {
            Ok(o) if o.status.success() && o.stdout == format!("{w}\n") => {}
            Ok(o) => return (Status::Fail, format!("`echo {w}` answered {:?} ({})", o.stdout, o.status)),
            Err(e) => return (Status::Fail, format!("`echo {w}` failed: {e}")),
        }
    }
    (Status::Pass, format!("{CONCURRENT} commands at once each got their own output"))
}

/// 16 MiB of arbitrary bytes through `cat` in the box, compared by digest.
pub async fn large_binary_stream(tb: &Tinybox, id: &BoxId) -> Verdict {
    let result = async {
        let mut input = tempfile::tempfile().map_err(|e| e.to_string())?;
        let bytes = pseudo_random(STREAM_BYTES);
        input.write_all(&bytes).map_err(|e| e.to_string())?;
        use std::io::Seek;
        input.rewind().map_err(|e| e.to_string())?;
        let (out_r, out_w) = std::io::pipe().map_err(|e| e.to_string())?;
        let devnull = std::fs::File::options().write(true).open("/dev/null").map_err(|e| e.to_string())?;
        let fds = StdioFds { stdin: input.into(), stdout: out_w.into(), stderr: devnull.into() };
        let reader = tokio::task::spawn_blocking(move || {
            let mut got = Vec::with_capacity(STREAM_BYTES);
            let mut r = out_r;
            r.read_to_end(&mut got).map(|_| got)
        });
        let t = Instant::now();
        let outcome = tb
            .exec(id, ExecRequest::new(["cat"]), fds, Target::Workspace, tokio::time::sleep(GUARD))
            .await
            .map_err(|e| e.to_string())?;
        let got = reader.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        let secs = t.elapsed().as_secs_f64().max(1e-9);
        if !outcome.status.success() {
            return Err(format!("`cat` ended with {}", outcome.status));
        }
        if got.len() != bytes.len() || blake3::hash(&got) != blake3::hash(&bytes) {
            return Err(format!("{} bytes went in, {} different bytes came out", bytes.len(), got.len()));
        }
        Ok(format!("{} MiB byte-exact through `cat`, {:.0} MB/s", STREAM_BYTES >> 20, bytes.len() as f64 / secs / 1e6))
    };
    match result.await {
        Ok(detail) => (Status::Pass, detail),
        Err(e) => (Status::Fail, e),
    }
}

/// Every byte value, in an order no text path would preserve.
fn pseudo_random(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A running command cancelled once it has started ends, reported as
/// cancelled, within the kit's guard — and not by finishing on its own.
pub async fn cancellation(tb: &Tinybox, id: &BoxId) -> Verdict {
    let result = async {
        let (out_r, out_w) = std::io::pipe().map_err(|e| e.to_string())?;
        let devnull = || std::fs::File::options().read(true).write(true).open("/dev/null");
        let fds = StdioFds {
            stdin: devnull().map_err(|e| e.to_string())?.into(),
            stdout: out_w.into(),
            stderr: devnull().map_err(|e| e.to_string())?.into(),
        };
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let mut first = [0u8; 1];
            let mut r = out_r;
            let _ = r.read(&mut first);
            let _ = started_tx.send(());
        });
        let cancel = async move {
            let _ = started_rx.await;
        };
        let t = Instant::now();
        let req = ExecRequest::new(["sh", "-c", "echo started; exec sleep 1000"]);
        let run = tb.exec(id, req, fds, Target::Workspace, cancel);
        let outcome = tokio::time::timeout(GUARD, run)
            .await
            .map_err(|_| format!("the cancelled command still ran after {}s", GUARD.as_secs()))?
            .map_err(|e| e.to_string())?;
        if !outcome.cancelled || outcome.status.success() {
            return Err(format!("the command was not stopped: it ended with {}", outcome.status));
        }
        Ok(format!("stopped {} ms after it started ({})", t.elapsed().as_millis(), outcome.status))
    };
    match result.await {
        Ok(detail) => (Status::Pass, detail),
        Err(e) => (Status::Fail, e),
    }
}
