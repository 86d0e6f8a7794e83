//! envd's filesystem service (`filesystem.Filesystem`), served over a box:
//! Stat and ListDir read core's directory listing; MakeDir, Move and
//! Remove run `mkdir -p`, `mv` and `rm -rf` in the box through core's exec
//! (argv as given, no shell), confined as every command there is. The
//! watchers are not served (they need events from inside the box).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use tinybox_core::capture::{self, Capture};
use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::{Target, Tinybox};

use super::connect::{self, RpcError};
use crate::Api;

type St = State<Arc<Api>>;
type Answer = Result<Json<Value>, RpcError>;

pub fn routes() -> axum::Router<Arc<Api>> {
    axum::Router::new()
        .route("/filesystem.Filesystem/Stat", post(stat))
        .route("/filesystem.Filesystem/ListDir", post(list_dir))
        .route("/filesystem.Filesystem/MakeDir", post(make_dir))
        .route("/filesystem.Filesystem/Move", post(move_entry))
        .route("/filesystem.Filesystem/Remove", post(remove))
        .route("/filesystem.Filesystem/WatchDir", post(not_served))
        .route("/filesystem.Filesystem/CreateWatcher", post(not_served))
        .route("/filesystem.Filesystem/GetWatcherEvents", post(not_served))
        .route("/filesystem.Filesystem/RemoveWatcher", post(not_served))
}

#[derive(Debug, Deserialize)]
struct PathRequest {
    path: String,
    #[serde(default)]
    depth: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct MoveRequest {
    source: String,
    destination: String,
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') { format!("{dir}{name}") } else { format!("{dir}/{name}") }
}

/// `path` split into its directory and its last name.
fn split(path: &str) -> (String, String) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/".into(), name.into()),
        Some((dir, name)) => (dir.into(), name.into()),
        None => (".".into(), trimmed.into()),
    }
}

fn permissions(kind: &str, mode: u32) -> String {
    let mut s = String::from(match kind {
        "dir" => 'd',
        "symlink" => 'l',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn entry_info(path: &str, e: &tinybox_core::engine::DirEntry) -> Value {
    let kind = match e.kind {
        "file" => "FILE_TYPE_FILE",
        "dir" => "FILE_TYPE_DIRECTORY",
        "symlink" => "FILE_TYPE_SYMLINK",
        _ => "FILE_TYPE_UNSPECIFIED",
    };
    let mtime = humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(e.mtime));
    json!({
        "name": e.name,
        "type": kind,
        "path": path,
        "size": e.size.to_string(),
        "mode": e.mode & 0o7777,
        "permissions": permissions(e.kind, e.mode),
        "owner": "",
        "group": "",
        "modifiedTime": mtime.to_string(),
    })
}

/// What is at `path` in the box, from its directory's listing.
async fn stat_of(engine: &Tinybox, id: &BoxId, path: &str) -> Result<Value, RpcError> {
    if path.trim_end_matches('/').is_empty() {
        return Ok(json!({ "name": "/", "type": "FILE_TYPE_DIRECTORY", "path": "/", "size": "0", "mode": 0o755,
            "permissions": "drwxr-xr-x", "owner": "", "group": "" }));
    }
    let (dir, name) = split(path);
    let missing = || RpcError::new("not_found", format!("tinybox: box {id} has no {path}"));
    let entries = engine.list_dir(id, &dir).await.map_err(|_| missing())?;
    let found = entries.iter().find(|e| e.name == name).ok_or_else(missing)?;
    Ok(entry_info(path, found))
}

async fn stat(State(api): St, headers: HeaderMap, body: Bytes) -> Answer {
    let req: PathRequest = connect::unary(&body)?;
    let id = super::process::target(&api, &headers)?;
    Ok(Json(json!({ "entry": stat_of(&api.engine, &id, &req.path).await? })))
}

async fn list_dir(State(api): St, headers: HeaderMap, body: Bytes) -> Answer {
    let req: PathRequest = connect::unary(&body)?;
    let id = super::process::target(&api, &headers)?;
    let depth = req.depth.unwrap_or(1).max(1);
    let mut out = Vec::new();
    let mut todo = vec![(req.path.clone(), 1u32)];
    while let Some((dir, level)) = todo.pop() {
        let entries = api.engine.list_dir(&id, &dir).await.map_err(|e| {
            if dir == req.path { RpcError::new("not_found", format!("tinybox: {e}")) } else { RpcError::from(e) }
        })?;
        for e in &entries {
            let path = join(&dir, &e.name);
            if e.kind == "dir" && level < depth {
                todo.push((path.clone(), level + 1));
            }
            out.push(entry_info(&path, e));
        }
    }
    Ok(Json(json!({ "entries": out })))
}

/// Runs `argv` in the box; a failure is its stderr.
async fn run(engine: &Tinybox, id: &BoxId, argv: &[&str]) -> Result<(), RpcError> {
    let request = ExecRequest::new(argv.iter().copied());
    let got =
        capture::run(engine, id, request, Target::Workspace, &Capture::new(16 << 10), std::future::pending()).await?;
    if got.status.code == Some(0) {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&got.stderr.bytes).trim().to_owned();
    Err(RpcError::new("internal", format!("tinybox: {} in box {id} failed: {err}", argv[0])))
}

async fn make_dir(State(api): St, headers: HeaderMap, body: Bytes) -> Answer {
    let req: PathRequest = connect::unary(&body)?;
    let id = super::process::target(&api, &headers)?;
    if stat_of(&api.engine, &id, &req.path).await.is_ok() {
        return Err(RpcError::new("already_exists", format!("tinybox: box {id} already has {}", req.path)));
    }
    run(&api.engine, &id, &["mkdir", "-p", "--", &req.path]).await?;
    Ok(Json(json!({ "entry": stat_of(&api.engine, &id, &req.path).await? })))
}

async fn move_entry(State(api): St, headers: HeaderMap, body: Bytes) -> Answer {
    let req: MoveRequest = connect::unary(&body)?;
    let id = super::process::target(&api, &headers)?;
    stat_of(&api.engine, &id, &req.source).await?;
    run(&api.engine, &id, &["mv", "--", &req.source, &req.destination]).await?;
    Ok(Json(json!({ "entry": stat_of(&api.engine, &id, &req.destination).await? })))
}

async fn remove(State(api): St, headers: HeaderMap, body: Bytes) -> Answer {
    let req: PathRequest = connect::unary(&body)?;
    let id = super::process::target(&api, &headers)?;
    // envd removes what is there and says nothing of what is not.
    run(&api.engine, &id, &["rm", "-rf", "--", &req.path]).await?;
    Ok(Json(json!({})))
}

async fn not_served() -> RpcError {
    RpcError::new("unimplemented", "tinybox: directory watchers are not served over the E2B protocol yet")
}
