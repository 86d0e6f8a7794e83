//! envd's process service (`process.Process`), served over a box: Start
//! runs the command through core's exec and streams its events (start with
//! a pid, stdout/stderr data, end with the exit code); Connect joins a
//! running one's stream; List, SendInput, CloseStdin and SendSignal act on
//! the commands this server started. A pid is this server's number for
//! the command (the box's own pid is the sandbox's business), unique among
//! every box it serves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use tinybox_core::model::{BoxId, TtySize};
use tinybox_core::request::ExecOptions;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::connect::{self, RpcError};
use crate::Api;
use crate::stream::{self, Chunk, Stop};

type St = State<Arc<Api>>;

pub fn routes() -> axum::Router<Arc<Api>> {
    axum::Router::new()
        .route("/process.Process/Start", post(start))
        .route("/process.Process/Connect", post(connect_to))
        .route("/process.Process/List", post(list))
        .route("/process.Process/SendInput", post(send_input))
        .route("/process.Process/CloseStdin", post(close_stdin))
        .route("/process.Process/SendSignal", post(send_signal))
        .route("/process.Process/Update", post(update))
        .route("/process.Process/StreamInput", post(stream_input))
}

/// A command this server started and has not yet seen end.
struct Entry {
    box_id: BoxId,
    config: Value,
    tag: Option<String>,
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
    /// Set for a command on a terminal: where its new sizes go.
    resize: Option<mpsc::UnboundedSender<TtySize>>,
    stop: Stop,
    /// Every stream following the command (Start's, and each Connect's).
    followers: Mutex<Vec<mpsc::UnboundedSender<Value>>>,
}

/// The commands this server runs, by pid.
#[derive(Default)]
pub struct Table {
    next: AtomicU32,
    running: Mutex<BTreeMap<u32, Arc<Entry>>>,
}

impl Table {
    fn get(&self, box_id: &BoxId, pid: u32) -> Result<Arc<Entry>, RpcError> {
        let running = self.running.lock().expect("processes");
        running.get(&pid).filter(|e| &e.box_id == box_id).cloned().ok_or_else(|| {
            RpcError::new("not_found", format!("tinybox: box {box_id} runs no process {pid} started here"))
        })
    }

    fn by_tag(&self, box_id: &BoxId, tag: &str) -> Result<(u32, Arc<Entry>), RpcError> {
        let running = self.running.lock().expect("processes");
        running
            .iter()
            .find(|(_, e)| &e.box_id == box_id && e.tag.as_deref() == Some(tag))
            .map(|(p, e)| (*p, e.clone()))
            .ok_or_else(|| RpcError::new("not_found", format!("tinybox: box {box_id} runs no process tagged {tag:?}")))
    }

    /// Cuts the streams of a box about to be removed and forgets its
    /// commands: envd's streams break when its sandbox dies (no end event),
    /// and the SDKs then ask `/health`, which says the box is gone.
    pub fn cut_box(&self, box_id: &BoxId) {
        let mut running = self.running.lock().expect("processes");
        for entry in running.values().filter(|e| &e.box_id == box_id) {
            let mut followers = entry.followers.lock().expect("followers");
            for f in followers.drain(..) {
                let _ = f.send(json!({ "__cut": true }));
            }
        }
        running.retain(|_, e| &e.box_id != box_id);
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
struct StartRequest {
    process: ProcessConfig,
    #[serde(default)]
    pty: Option<Value>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    stdin: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Selector {
    pid: Option<u32>,
    tag: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Selected {
    process: Selector,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The box a data-plane call names, when this server made it.
pub fn target(api: &Api, headers: &HeaderMap) -> Result<BoxId, RpcError> {
    let id = super::sandbox_id(headers).ok_or_else(|| {
        RpcError::invalid("no sandbox named: send the E2b-Sandbox-Id header (the SDKs do when E2B_SANDBOX_URL is set)")
    })?;
    Ok(api.registry.mine(&id)?)
}

fn select(api: &Api, box_id: &BoxId, s: &Selector) -> Result<(u32, Arc<Entry>), RpcError> {
    match (s.pid, &s.tag) {
        (Some(pid), _) => Ok((pid, api.processes.get(box_id, pid)?)),
        (None, Some(tag)) => api.processes.by_tag(box_id, tag),
        (None, None) => Err(RpcError::invalid("the process selector names no pid and no tag")),
    }
}

/// A streamed answer: `first` events, then what `events` yields, then the
/// end of the stream (an error when `end` says so).
fn streamed(first: Vec<Value>, events: mpsc::UnboundedReceiver<Value>) -> Response {
    let head = futures_util::stream::iter(first.into_iter().map(|v| Ok(connect::message(&v))));
    let body = futures_util::stream::unfold((events, false), |(mut events, done)| async move {
        if done {
            return None;
        }
        match events.recv().await {
            Some(v) if v.get("__cut").is_some() => {
                Some((Err(std::io::Error::other("the sandbox was removed")), (events, true)))
            }
            Some(v) if v.get("__end").is_some() => {
                let end = match v["__end"].as_object().and_then(|o| o.get("error")) {
                    Some(e) => RpcError::new(
                        leak_code(e["code"].as_str().unwrap_or("internal")),
                        e["message"].as_str().unwrap_or_default().to_owned(),
                    )
                    .end_envelope(),
                    None => connect::end_ok(),
                };
                Some((Ok::<_, std::io::Error>(end), (events, true)))
            }
            Some(v) => Some((Ok(connect::message(&v)), (events, false))),
            None => Some((Ok(connect::end_ok()), (events, true))),
        }
    });
    use futures_util::StreamExt;
    (connect::stream_headers(), Body::from_stream(head.chain(body))).into_response()
}

/// Connect's code words are a fixed set: map a string back onto one.
fn leak_code(code: &str) -> &'static str {
    match code {
        "deadline_exceeded" => "deadline_exceeded",
        "not_found" => "not_found",
        "invalid_argument" => "invalid_argument",
        "unavailable" => "unavailable",
        "failed_precondition" => "failed_precondition",
        _ => "internal",
    }
}

async fn start(State(api): St, headers: HeaderMap, body: Bytes) -> Response {
    match start_in(&api, &headers, &body) {
        Ok(r) => r,
        Err(e) => (connect::stream_headers(), e.end_envelope()).into_response(),
    }
}

fn start_in(api: &Arc<Api>, headers: &HeaderMap, body: &Bytes) -> Result<Response, RpcError> {
    let req: StartRequest = connect::streamed(headers, body)?;
    let box_id = target(api, headers)?;
    let tty = match &req.pty {
        Some(p) => Some(pty_size(p)?),
        None => None,
    };
    let timeout = connect::timeout(headers).unwrap_or(api.config.timeout);
    if timeout > api.config.timeout {
        return Err(RpcError::invalid(format!(
            "a command's timeout of {}s is over this server's ceiling of {}s: ask for less (or 0 for the ceiling)",
            timeout.as_secs(),
            api.config.timeout.as_secs()
        )));
    }
    let config =
        json!({ "cmd": req.process.cmd, "args": req.process.args, "envs": req.process.envs, "cwd": req.process.cwd });
    let mut argv = vec![req.process.cmd];
    argv.extend(req.process.args);
    let plan =
        ExecOptions { argv, env: req.process.envs, cwd: req.process.cwd, tty, ..ExecOptions::default() }.plan()?;
    let (resize, resizes) = match tty {
        Some(_) => {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    // A terminal's input is always open: it is how keys reach it.
    let stdin = req.stdin == Some(true) || tty.is_some();
    let running = stream::start(api.engine.clone(), box_id.clone(), plan.request, stdin, Some(timeout), resizes)?;
    let on_tty = tty.is_some();
    let pid = api.processes.next.fetch_add(1, Ordering::SeqCst) + 1;
    let (tx, rx) = mpsc::unbounded_channel();
    let entry = Arc::new(Entry {
        box_id,
        config,
        tag: req.tag,
        stdin: tokio::sync::Mutex::new(running.stdin),
        resize,
        stop: running.stop,
        followers: Mutex::new(vec![tx]),
    });
    api.processes.running.lock().expect("processes").insert(pid, entry.clone());
    let table = api.clone();
    let mut chunks = running.chunks;
    tokio::spawn(async move {
        while let Some(chunk) = chunks.recv().await {
            let (event, last) = match chunk {
                Chunk::Stdout(b) | Chunk::Stderr(b) if on_tty => {
                    (json!({ "event": { "data": { "pty": b64(&b) } } }), None)
                }
                Chunk::Stdout(b) => (json!({ "event": { "data": { "stdout": b64(&b) } } }), None),
                Chunk::Stderr(b) => (json!({ "event": { "data": { "stderr": b64(&b) } } }), None),
                Chunk::End { outcome: Ok(o), timed_out } => {
                    let (code, status) = match (o.status.code, o.status.signal) {
                        (Some(c), _) => (c, format!("exit status {c}")),
                        (None, Some(s)) => (-1, format!("signal: {}", signal_name(s))),
                        (None, None) => (-1, "ended without a status".to_owned()),
                    };
                    let end = json!({ "event": { "end": { "exitCode": code, "exited": o.status.code.is_some(), "status": status } } });
                    let last = if timed_out {
                        json!({ "__end": { "error": { "code": "deadline_exceeded", "message": format!("tinybox: the command ran past its timeout of {}s and was stopped", timeout.as_secs_f64()) } } })
                    } else {
                        json!({ "__end": {} })
                    };
                    (end, Some(last))
                }
                Chunk::End { outcome: Err(e), .. } => {
                    let e = RpcError::from(e);
                    (json!({ "__end": { "error": e.body() } }), Some(Value::Null))
                }
            };
            if last.is_some() {
                // Gone from List before anyone hears it ended.
                table.processes.running.lock().expect("processes").remove(&pid);
            }
            let mut followers = entry.followers.lock().expect("followers");
            followers.retain(|f| f.send(event.clone()).is_ok());
            if let Some(last) = last {
                if !last.is_null() {
                    followers.retain(|f| f.send(last.clone()).is_ok());
                }
                followers.clear();
                break;
            }
        }
        table.processes.running.lock().expect("processes").remove(&pid);
    });
    Ok(streamed(vec![json!({ "event": { "start": { "pid": pid } } })], rx))
}

fn signal_name(s: i32) -> String {
    match s {
        9 => "killed".into(),
        15 => "terminated".into(),
        2 => "interrupt".into(),
        n => format!("signal {n}"),
    }
}

async fn connect_to(State(api): St, headers: HeaderMap, body: Bytes) -> Response {
    let run = || -> Result<Response, RpcError> {
        let req: Selected = connect::streamed(&headers, &body)?;
        let box_id = target(&api, &headers)?;
        let (pid, entry) = select(&api, &box_id, &req.process)?;
        let (tx, rx) = mpsc::unbounded_channel();
        entry.followers.lock().expect("followers").push(tx);
        Ok(streamed(vec![json!({ "event": { "start": { "pid": pid } } })], rx))
    };
    run().unwrap_or_else(|e| (connect::stream_headers(), e.end_envelope()).into_response())
}

async fn list(State(api): St, headers: HeaderMap) -> Result<axum::Json<Value>, RpcError> {
    let box_id = target(&api, &headers)?;
    let running = api.processes.running.lock().expect("processes");
    let processes: Vec<Value> = running
        .iter()
        .filter(|(_, e)| e.box_id == box_id)
        .map(|(pid, e)| json!({ "config": e.config, "pid": pid, "tag": e.tag }))
        .collect();
    Ok(axum::Json(json!({ "processes": processes })))
}

#[derive(Debug, Deserialize)]
struct SendInput {
    process: Selector,
    #[serde(default)]
    input: InputBytes,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InputBytes {
    stdin: Option<String>,
    pty: Option<String>,
}

async fn send_input(State(api): St, headers: HeaderMap, body: Bytes) -> Result<axum::Json<Value>, RpcError> {
    let req: SendInput = connect::unary(&body)?;
    let box_id = target(&api, &headers)?;
    let (pid, entry) = select(&api, &box_id, &req.process)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(req.input.pty.or(req.input.stdin).unwrap_or_default())
        .map_err(|e| RpcError::invalid(format!("input.stdin is not base64: {e}")))?;
    let mut stdin = entry.stdin.lock().await;
    let Some(pipe) = stdin.as_mut() else {
        return Err(RpcError::new(
            "failed_precondition",
            format!("tinybox: process {pid} has no stdin open: start it with stdin=True, and send before closing it"),
        ));
    };
    pipe.write_all(&bytes)
        .await
        .map_err(|e| RpcError::new("internal", format!("tinybox: cannot write to process {pid}'s stdin: {e}")))?;
    Ok(axum::Json(json!({})))
}

async fn close_stdin(State(api): St, headers: HeaderMap, body: Bytes) -> Result<axum::Json<Value>, RpcError> {
    let req: Selected = connect::unary(&body)?;
    let box_id = target(&api, &headers)?;
    let (_, entry) = select(&api, &box_id, &req.process)?;
    entry.stdin.lock().await.take();
    Ok(axum::Json(json!({})))
}

#[derive(Debug, Deserialize)]
struct SendSignal {
    process: Selector,
    #[serde(default)]
    signal: Option<Value>,
}

/// SIGKILL and SIGTERM both stop the command the way core stops a
/// cancelled exec (the sandbox chooses how).
async fn send_signal(State(api): St, headers: HeaderMap, body: Bytes) -> Result<axum::Json<Value>, RpcError> {
    let req: SendSignal = connect::unary(&body)?;
    let box_id = target(&api, &headers)?;
    let (_, entry) = select(&api, &box_id, &req.process)?;
    match req.signal.as_ref().and_then(Value::as_str).unwrap_or("SIGNAL_SIGKILL") {
        "SIGNAL_SIGKILL" | "SIGNAL_SIGTERM" => {}
        other => {
            return Err(RpcError::invalid(format!(
                "signal {other} is not one envd sends (SIGNAL_SIGKILL, SIGNAL_SIGTERM)"
            )));
        }
    }
    entry.stop.stop();
    Ok(axum::Json(json!({})))
}

/// A terminal's size from envd's `PTY` message: at least a row and a column.
fn pty_size(pty: &Value) -> Result<TtySize, RpcError> {
    let n = |k: &str| pty["size"][k].as_u64().and_then(|v| u16::try_from(v).ok()).unwrap_or(0);
    let size = TtySize { rows: n("rows"), cols: n("cols") };
    tinybox_core::request::exec::check_tty(size).map_err(|e| RpcError::from(tinybox_core::Error::from(e)))
}

#[derive(Debug, Deserialize)]
struct UpdateRequest {
    process: Selector,
    #[serde(default)]
    pty: Option<Value>,
}

/// Resizes a command's terminal.
async fn update(State(api): St, headers: HeaderMap, body: Bytes) -> Result<axum::Json<Value>, RpcError> {
    let req: UpdateRequest = connect::unary(&body)?;
    let box_id = target(&api, &headers)?;
    let (pid, entry) = select(&api, &box_id, &req.process)?;
    let (Some(pty), Some(resize)) = (req.pty.as_ref(), entry.resize.as_ref()) else {
        return Err(RpcError::new("failed_precondition", format!("tinybox: process {pid} has no terminal to resize")));
    };
    let _ = resize.send(pty_size(pty)?);
    Ok(axum::Json(json!({})))
}

async fn stream_input() -> RpcError {
    RpcError::new("unimplemented", "tinybox: StreamInput is not served: send input with SendInput")
}
