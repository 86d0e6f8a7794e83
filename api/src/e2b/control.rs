//! E2B's control plane: the `/sandboxes` routes the SDKs call, in E2B's
//! JSON (camelCase, `templateID`, `sandboxID`, RFC 3339 times) and with
//! E2B's error shape, `{"code": STATUS, "message": ...}`, carrying
//! tinybox's refusal. A create goes through the operator's ceiling like
//! any other; what a sandbox did not declare (pause on an ephemeral box, a
//! snapshot on a sandbox without them) is core's refusal, never an
//! emulation.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tinybox_core::ceiling::AgentCreate;
use tinybox_core::model::{BoxInfo, IsolationLevel, TemplateName};
use tinybox_core::request::NetworkChoice;

use crate::registry::Made;
use crate::{Api, ApiError};

type St = State<Arc<Api>>;

/// E2B's error body.
#[derive(Debug)]
pub struct E2bError {
    pub code: u16,
    pub message: String,
}

impl E2bError {
    pub fn new(code: u16, message: impl Into<String>) -> E2bError {
        E2bError { code, message: message.into() }
    }
}

impl From<ApiError> for E2bError {
    fn from(e: ApiError) -> E2bError {
        E2bError { code: e.status().as_u16(), message: format!("tinybox: {e}") }
    }
}

impl From<tinybox_core::Error> for E2bError {
    fn from(e: tinybox_core::Error) -> E2bError {
        ApiError::Core(e).into()
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(json!({ "code": self.code, "message": self.message }))).into_response()
    }
}

type Result<T> = std::result::Result<T, E2bError>;

pub fn routes() -> axum::Router<Arc<Api>> {
    axum::Router::new()
        .route("/sandboxes", get(list).post(create))
        .route("/v2/sandboxes", get(list).post(create))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/snapshots", post(snapshot))
}

/// A create, as the SDKs send it. Fields tinybox has no counterpart for
/// are refused when they ask for something (`autoPause: true`, volume
/// mounts, network rules), and ignored when they ask for nothing.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    /// Seconds the sandbox lives; E2B's default is 300.
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    auto_pause: Option<bool>,
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(default)]
    volume_mounts: Option<Vec<Value>>,
    #[serde(default)]
    network: Option<Value>,
}

/// E2B's default sandbox lifetime.
const DEFAULT_TIMEOUT: u64 = 300;

fn bad(message: String) -> E2bError {
    E2bError::new(400, format!("tinybox: {message}"))
}

async fn create(
    State(api): St,
    body: std::result::Result<Json<NewSandbox>, axum::extract::rejection::JsonRejection>,
) -> Result<Response> {
    let Json(new) = body.map_err(crate::body::refusal)?;
    if new.auto_pause == Some(true) {
        return Err(bad("autoPause asks for a memory snapshot when the timeout passes, which tinybox does not make: create without it".into()));
    }
    if new.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(bad(
            "volume mounts are E2B's cloud volumes, which tinybox has none of: create without volumeMounts".into(),
        ));
    }
    if new.network.as_ref().is_some_and(|n| !n.is_null() && n.as_object().is_none_or(|o| !o.is_empty())) {
        return Err(bad("network rules are not mapped onto tinybox's allowlist yet: create without network (the box gets the ceiling's network)".into()));
    }
    let ask = AgentCreate {
        // E2B's default, or the ceiling when that is lower; a timeout asked
        // for over the ceiling is refused, never cut.
        ttl_secs: Some(new.timeout.unwrap_or(DEFAULT_TIMEOUT.min(api.config.ceiling.ttl_secs))),
        network: new.allow_internet_access.map(|allow| if allow { NetworkChoice::Egress } else { NetworkChoice::Deny }),
        ..AgentCreate::default()
    };
    let mut request = api.config.ceiling.request(&ask)?;
    request.env = new.env_vars.unwrap_or_default();
    // A template: a tinybox template by that name, else `base` (the
    // server's base image, or the sandbox's default), else an image.
    let template = new.template_id.clone();
    let saved = TemplateName::new(&template)
        .ok()
        .filter(|t| api.engine.template_list().is_ok_and(|l| l.iter().any(|x| &x.name == t)));
    match saved {
        Some(t) => request.from_template = Some(t),
        None if template == "base" => request.image = api.config.base_image.clone(),
        None => request.image = Some(template.clone()),
    }
    let created = api.engine.create_requested(&request).await?;
    let info = created.info;
    api.registry.insert(info.id.clone(), Made { template: Some(template), metadata: new.metadata.unwrap_or_default() });
    Ok((StatusCode::CREATED, Json(sandbox(&api, &info))).into_response())
}

/// What a create and a connect answer: E2B's `Sandbox`, with tinybox's
/// own account of the box's isolation beside it.
fn sandbox(api: &Api, info: &BoxInfo) -> Value {
    let made = api.registry.made(&info.id).unwrap_or_default();
    json!({
        "templateID": made.template.unwrap_or_else(|| "base".into()),
        "sandboxID": info.id,
        "clientID": "tinybox",
        "envdVersion": super::ENVD_VERSION,
        "envdAccessToken": api.token.as_str(),
        "domain": null,
        "tinybox": crate::boxes::summary(info),
    })
}

fn rfc3339(secs: Option<u64>) -> Value {
    secs.map(|s| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s)).to_string()
    })
    .map_or(Value::Null, Value::String)
}

/// E2B's `SandboxDetail`/`ListedSandbox`. Metadata carries the caller's
/// own keys and, under `tinybox.`, what confines the box.
fn detail_of(api: &Api, info: &BoxInfo, running: bool) -> Value {
    let made = api.registry.made(&info.id).unwrap_or_default();
    let mut metadata: BTreeMap<String, String> = made.metadata;
    let ws = info.workspace.as_ref();
    if let Some(ws) = ws {
        metadata.insert("tinybox.sandbox".into(), ws.placement.sandbox.to_string());
        metadata.insert("tinybox.isolation".into(), json!(ws.isolation).as_str().unwrap_or_default().to_owned());
        metadata.insert("tinybox.verified".into(), ws.verified.to_string());
        metadata.insert(
            "tinybox.suitable_for_untrusted_code".into(),
            (ws.isolation >= IsolationLevel::UNTRUSTED_FLOOR && ws.verified).to_string(),
        );
    }
    let limits = ws.map(|w| &w.limits);
    json!({
        "templateID": made.template.unwrap_or_else(|| "base".into()),
        "sandboxID": info.id,
        "clientID": "tinybox",
        "envdVersion": super::ENVD_VERSION,
        "envdAccessToken": api.token.as_str(),
        "startedAt": rfc3339(info.created_at),
        "endAt": rfc3339(info.expires_at()).as_str().map_or(json!("9999-12-31T23:59:59Z"), |s| json!(s)),
        "cpuCount": limits.and_then(|l| l.cpus).map_or(1, |c| c.ceil() as u64),
        "memoryMB": limits.and_then(|l| l.memory_bytes).map_or(0, |m| m >> 20),
        "diskSizeMB": limits.and_then(|l| l.disk_bytes).map_or(0, |d| d >> 20),
        "state": if running { "running" } else { "paused" },
        "metadata": metadata,
    })
}

fn mine(api: &Api, id: &str) -> Result<tinybox_core::model::BoxId> {
    api.registry.mine(id).map_err(|e| E2bError::new(404, format!("tinybox: {e}")))
}

/// The list's filters: `metadata` (`k=v&k2=v2`, each part URL-encoded),
/// `state` (`running,paused`), `template`; newest first unless `order=asc`;
/// `limit` a page, the next page's offset in `x-next-token`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ListQuery {
    metadata: Option<String>,
    state: Option<String>,
    template: Option<String>,
    /// `asc` or `desc` (the default) by start time.
    order: Option<String>,
    limit: Option<usize>,
    /// Where the previous page stopped (`x-next-token`).
    next_token: Option<String>,
}

fn wanted_metadata(q: &ListQuery) -> Vec<(String, String)> {
    let Some(m) = &q.metadata else { return Vec::new() };
    m.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (unescape(k), unescape(v))).collect()
}

/// `%XX` decoded (the SDKs quote each key and value).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn list(
    State(api): St,
    q: std::result::Result<axum::extract::Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = q.map(|axum::extract::Query(q)| q).unwrap_or_default();
    let metadata = wanted_metadata(&q);
    let states: Option<Vec<&str>> = q.state.as_deref().map(|s| s.split(',').collect());
    let mut boxes: Vec<BoxInfo> = api.registry.ids().iter().filter_map(|id| api.engine.get(id).ok()).collect();
    boxes.sort_by_key(|b| (b.created_at, tinybox_core::store::box_number(&b.id)));
    if q.order.as_deref() != Some("asc") {
        boxes.reverse();
    }
    let mut out = Vec::new();
    for info in boxes {
        {
            let running = !matches!(info.phase, tinybox_core::model::Phase::Stopped);
            let v = detail_of(&api, &info, running);
            let state_ok = states.as_ref().is_none_or(|s| s.contains(&v["state"].as_str().unwrap_or_default()));
            let md_ok = metadata.iter().all(|(k, want)| v["metadata"][k].as_str() == Some(want.as_str()));
            let template_ok = q.template.as_ref().is_none_or(|t| v["templateID"].as_str() == Some(t.as_str()));
            if state_ok && md_ok && template_ok {
                out.push(v);
            }
        }
    }
    let from = q.next_token.as_deref().and_then(|t| t.parse::<usize>().ok()).unwrap_or(0).min(out.len());
    let to = q.limit.filter(|l| *l > 0).map_or(out.len(), |l| (from + l).min(out.len()));
    let page: Vec<Value> = out[from..to].to_vec();
    let mut response = Json(Value::Array(page)).into_response();
    if to < out.len()
        && let Ok(v) = axum::http::HeaderValue::from_str(&to.to_string())
    {
        response.headers_mut().insert("x-next-token", v);
    }
    response
}

async fn detail(State(api): St, Path(id): Path<String>) -> Result<Json<Value>> {
    let id = mine(&api, &id)?;
    let view = api.engine.inspect(&id).await?;
    let running = view.state == tinybox_sdk::protocol::BoxState::Ready;
    Ok(Json(detail_of(&api, &view.info, running)))
}

async fn kill(State(api): St, Path(id): Path<String>) -> Result<StatusCode> {
    let id = mine(&api, &id)?;
    // Unreachable first, so a /health asked while it goes says it is gone.
    let made = api.registry.made(&id).unwrap_or_default();
    api.registry.remove(&id);
    api.processes.cut_box(&id);
    if let Err(e) = api.engine.remove(&id).await {
        api.registry.insert(id, made);
        return Err(e.into());
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct Timeout {
    timeout: u64,
}

async fn set_timeout(
    State(api): St,
    Path(id): Path<String>,
    body: std::result::Result<Json<Timeout>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode> {
    let Json(t) = body.map_err(crate::body::refusal)?;
    let id = mine(&api, &id)?;
    let ceiling = api.config.ceiling.ttl_secs;
    if t.timeout > ceiling {
        return Err(tinybox_core::Error::from(tinybox_core::ceiling::CeilingError::Over {
            what: "timeout",
            asked: t.timeout.to_string(),
            ceiling: ceiling.to_string(),
        })
        .into());
    }
    api.engine.expire_in(&id, t.timeout)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn pause(State(api): St, Path(id): Path<String>) -> Result<StatusCode> {
    let id = mine(&api, &id)?;
    api.engine.stop(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resume(State(api): St, Path(id): Path<String>) -> Result<Response> {
    let id = mine(&api, &id)?;
    let info = api.engine.resume(&id).await?;
    Ok((StatusCode::CREATED, Json(sandbox(&api, &info))).into_response())
}

/// Connects to a sandbox: a stopped one is resumed (core refuses what
/// cannot be), a running one is answered as it is.
async fn connect(State(api): St, Path(id): Path<String>) -> Result<Response> {
    let id = mine(&api, &id)?;
    let info = api.engine.get(&id)?;
    if matches!(info.phase, tinybox_core::model::Phase::Stopped) {
        let info = api.engine.resume(&id).await?;
        return Ok((StatusCode::CREATED, Json(sandbox(&api, &info))).into_response());
    }
    Ok((StatusCode::OK, Json(sandbox(&api, &info))).into_response())
}

async fn snapshot(State(api): St, Path(id): Path<String>) -> Result<Response> {
    let id = mine(&api, &id)?;
    let record = api.engine.snapshot(&id).await?;
    Ok((StatusCode::CREATED, Json(json!({ "snapshotID": record.id, "names": [record.id] }))).into_response())
}
