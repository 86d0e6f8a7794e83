//! tinybox's own routes, under `/v1`: the MCP server's use cases over
//! HTTP (create under the ceiling, list, inspect, remove, exec buffered or
//! streamed, files, directories, snapshots). Each handler maps its body
//! onto core's request types and core's answer onto JSON.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use tinybox_core::capture::{self, Capture};
use tinybox_core::ceiling::AgentCreate;
use tinybox_core::model::{BoxInfo, IsolationLevel};
use tinybox_core::request::{ExecOptions, StdinGiven};

use crate::body::JsonBody;
use crate::registry::Made;
use crate::stream::{self, Chunk};
use crate::{Api, ApiError};

type Result<T> = std::result::Result<T, ApiError>;
type St = State<Arc<Api>>;

pub fn routes() -> axum::Router<Arc<Api>> {
    axum::Router::new()
        .route("/v1/boxes", get(list).post(create))
        .route("/v1/boxes/{id}", get(inspect).delete(remove))
        .route("/v1/boxes/{id}/exec", post(exec))
        .route("/v1/boxes/{id}/exec/stream", post(exec_stream))
        .route(
            "/v1/boxes/{id}/files",
            get(read_file).put(write_file).layer(DefaultBodyLimit::max(crate::MAX_FILE_BODY)),
        )
        .route("/v1/boxes/{id}/dir", get(list_dir))
        .route("/v1/boxes/{id}/snapshots", post(snapshot))
}

/// A box in the terms a caller needs: what confines it, and whether that
/// is fit for untrusted code (the isolation floor, verified).
pub fn summary(info: &BoxInfo) -> Value {
    let mut v = json!({ "id": info.id, "lifecycle": info.spec.lifecycle, "created_at": info.created_at,
        "expires_at": info.expires_at() });
    if let Some(ws) = &info.workspace {
        v["sandbox"] = json!(ws.placement.sandbox);
        v["host"] = json!(ws.placement.host);
        v["isolation"] = json!(ws.isolation);
        v["verified"] = json!(ws.verified);
        v["suitable_for_untrusted_code"] = json!(ws.isolation >= IsolationLevel::UNTRUSTED_FLOOR && ws.verified);
        v["network"] = json!(ws.network);
        v["limits"] = json!(ws.limits);
        v["workdir"] = json!(ws.workdir);
    }
    v
}

async fn create(State(api): St, JsonBody(ask): JsonBody<AgentCreate>) -> Result<Response> {
    let request = api.config.ceiling.request(&ask)?;
    let created = api.engine.create_requested(&request).await?;
    api.registry.insert(created.info.id.clone(), Made::default());
    let mut v = summary(&created.info);
    v["warnings"] = json!(created.warnings);
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

async fn list(State(api): St) -> Json<Value> {
    let boxes: Vec<Value> =
        api.registry.ids().iter().filter_map(|id| api.engine.get(id).ok()).map(|i| summary(&i)).collect();
    Json(Value::Array(boxes))
}

async fn inspect(State(api): St, Path(id): Path<String>) -> Result<Json<Value>> {
    let id = api.registry.mine(&id)?;
    let view = api.engine.inspect(&id).await?;
    let mut v = summary(&view.info);
    v["state"] = json!(view.state);
    v["state_detail"] = json!(view.state_detail);
    Ok(Json(v))
}

async fn remove(State(api): St, Path(id): Path<String>) -> Result<Json<Value>> {
    let id = api.registry.mine(&id)?;
    api.processes.cut_box(&id);
    api.engine.remove(&id).await?;
    api.registry.remove(&id);
    Ok(Json(json!({ "removed": id })))
}

/// One command, as `POST /v1/boxes/{id}/exec` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecBody {
    /// The program and its arguments, as they are (no shell).
    argv: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    stdin_base64: Option<String>,
    #[serde(default)]
    timeout_secs: Option<f64>,
}

impl ExecBody {
    /// Core's plan for it, with the server's timeout as default and ceiling.
    fn plan(self, api: &Api) -> Result<(tinybox_core::request::ExecPlan, Option<Vec<u8>>)> {
        let plan = ExecOptions {
            argv: self.argv,
            env: self.env,
            cwd: self.cwd,
            stdin: self.stdin,
            stdin_base64: self.stdin_base64,
            timeout_secs: Some(self.timeout_secs.unwrap_or(api.config.timeout.as_secs_f64())),
            ..ExecOptions::default()
        }
        .plan()?;
        let timeout = plan.timeout.unwrap_or(api.config.timeout);
        if timeout > api.config.timeout {
            return Err(tinybox_core::Error::from(tinybox_core::ceiling::CeilingError::Over {
                what: "timeout_secs",
                asked: format!("{}", timeout.as_secs_f64()),
                ceiling: api.config.timeout.as_secs().to_string(),
            })
            .into());
        }
        let stdin = match &plan.stdin {
            Some(StdinGiven::Text(t)) => Some(t.clone().into_bytes()),
            Some(StdinGiven::Base64(b)) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| ApiError::Body(format!("stdin_base64 is not base64 ({e}): send standard base64")))?,
            ),
            None => None,
        };
        Ok((plan, stdin))
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn exec(State(api): St, Path(id): Path<String>, JsonBody(body): JsonBody<ExecBody>) -> Result<Json<Value>> {
    let id = api.registry.mine(&id)?;
    let (plan, stdin) = body.plan(&api)?;
    let mut how = Capture::new(usize::try_from(api.config.max_output).unwrap_or(usize::MAX));
    how.stdin = stdin;
    how.timeout = plan.timeout;
    let got = capture::run(&api.engine, &id, plan.request, plan.target, &how, std::future::pending()).await?;
    let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_owned);
    Ok(Json(json!({
        "exit_code": got.status.code,
        "signal": got.status.signal,
        "timed_out": got.timed_out,
        "stdout": text(&got.stdout.bytes),
        "stdout_base64": b64(&got.stdout.bytes),
        "stdout_truncated": got.stdout.truncated,
        "stdout_dropped_bytes": got.stdout.dropped_bytes,
        "stderr": text(&got.stderr.bytes),
        "stderr_base64": b64(&got.stderr.bytes),
        "stderr_truncated": got.stderr.truncated,
        "stderr_dropped_bytes": got.stderr.dropped_bytes,
    })))
}

/// Streams the command's output as JSON lines: `{"stdout": B64}`,
/// `{"stderr": B64}`, and last `{"exit_code", "signal", "timed_out"}` or
/// `{"error": {"kind", "message"}}`.
async fn exec_stream(State(api): St, Path(id): Path<String>, JsonBody(body): JsonBody<ExecBody>) -> Result<Response> {
    let id = api.registry.mine(&id)?;
    let (plan, stdin) = body.plan(&api)?;
    let given = stdin.is_some();
    let mut running = stream::start(api.engine.clone(), id, plan.request, given, plan.timeout, None)?;
    if let (Some(bytes), Some(mut tx)) = (stdin, running.stdin.take()) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = tx.write_all(&bytes).await;
        });
    }
    // The response's stream holds the command: a client that drops the
    // connection (its way of cancelling) drops the stream, and that stops
    // the command in the box rather than leaving it to its timeout.
    let guard = StopOnDrop(running.stop.clone());
    let held = (running, guard);
    let lines = futures_util::stream::unfold(held, |(mut r, guard)| async move {
        let chunk = r.chunks.recv().await?;
        let line = match chunk {
            Chunk::Stdout(b) => json!({ "stdout": b64(&b) }),
            Chunk::Stderr(b) => json!({ "stderr": b64(&b) }),
            Chunk::End { outcome: Ok(o), timed_out } => {
                json!({ "exit_code": o.status.code, "signal": o.status.signal, "timed_out": timed_out })
            }
            Chunk::End { outcome: Err(e), .. } => {
                let e = ApiError::Core(e);
                json!({ "error": { "kind": e.kind(), "message": format!("tinybox: {e}") } })
            }
        };
        Some((Ok::<_, std::convert::Infallible>(format!("{line}\n")), (r, guard)))
    });
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response())
}

/// Stops a streamed command when dropped (after its end, a stop does nothing).
struct StopOnDrop(stream::Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathQuery {
    path: String,
    #[serde(default)]
    mode: Option<String>,
}

fn query<T: serde::de::DeserializeOwned>(
    q: std::result::Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T> {
    q.map(|Query(v)| v).map_err(|e| ApiError::Query(format!("the query does not fit this route: {}", e.body_text())))
}

async fn read_file(
    State(api): St,
    Path(id): Path<String>,
    q: std::result::Result<Query<PathQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let q = query(q)?;
    let id = api.registry.mine(&id)?;
    let bytes = api.engine.read_file(&id, &q.path, api.config.max_output).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

async fn write_file(
    State(api): St,
    Path(id): Path<String>,
    q: std::result::Result<Query<PathQuery>, axum::extract::rejection::QueryRejection>,
    body: std::result::Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<Value>> {
    let q = query(q)?;
    let body = body.map_err(|_| ApiError::TooLarge { limit: crate::MAX_FILE_BODY })?;
    let mode = match &q.mode {
        Some(m) => u32::from_str_radix(m, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| ApiError::Query(format!("mode {m} is not octal permission bits (like 644 or 755)")))?,
        None => 0o644,
    };
    let id = api.registry.mine(&id)?;
    let written = api.engine.write_file(&id, &q.path, body.to_vec(), mode).await?;
    Ok(Json(json!({ "path": q.path, "bytes": written.bytes })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DirQuery {
    path: String,
}

async fn list_dir(
    State(api): St,
    Path(id): Path<String>,
    q: std::result::Result<Query<DirQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>> {
    let q = query(q)?;
    let id = api.registry.mine(&id)?;
    let entries = api.engine.list_dir(&id, &q.path).await?;
    Ok(Json(json!(entries)))
}

async fn snapshot(State(api): St, Path(id): Path<String>) -> Result<Response> {
    let id = api.registry.mine(&id)?;
    let record = api.engine.snapshot(&id).await?;
    Ok((StatusCode::CREATED, Json(json!(record))).into_response())
}
