//! `fs.read`, `fs.write`, `fs.list`: files in a box for a host that has no
//! path of its own to copy through. Small files travel inline (text, or
//! base64 when not UTF-8) through core's copy use case, whose tar stream
//! is checked on this side; a file too big to return inline is streamed
//! by handle (`"stream": true`), pulled with `exec.read` and ended with
//! `exec.wait` like any streaming exec, so its bytes never sit whole in
//! one call's result.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tinybox_core::Tinybox;
use tinybox_core::model::{BoxId, ExecRequest};

use crate::errors::{CallError, CallResult};
use crate::exec::Launch;
use crate::state::State;

/// Default bound on a file `fs.read` returns inline.
pub const DEFAULT_INLINE: u64 = 1024 * 1024;
/// The most `fs.write` takes inline; past it, `tinybox cp` moves the file.
pub const MAX_WRITE: usize = 64 * 1024 * 1024;

/// Streams file $1 from the box (a regular file, followed there if a link).
const CAT_SCRIPT: &str = r#"[ -f "$1" ] || { printf 'tinybox: %s is not a regular file in the box\n' "$1" >&2; exit 121; }
exec cat -- "$1"
"#;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    pub id: BoxId,
    pub path: String,
    /// Refuse inline above this many bytes (default 1 MiB).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Stream by handle instead (`exec.read`, `exec.wait`).
    #[serde(default)]
    pub stream: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    pub id: BoxId,
    pub path: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub content_base64: Option<String>,
    /// Permission bits (default 0o644); setuid, setgid and sticky are dropped.
    #[serde(default)]
    pub mode: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub id: BoxId,
    pub path: String,
}

/// `fs.read` inline: `{"id", "path", "size", "content" | "content_base64"}`.
pub fn read(state: &State, engine: Arc<Tinybox>, p: ReadParams) -> CallResult<Value> {
    let limit = match p.max_bytes {
        Some(0) => return Err(CallError::invalid("max_bytes 0 is not positive")),
        Some(n) => n,
        None => DEFAULT_INLINE,
    };
    let bytes = state.block_on(engine.read_file(&p.id, &p.path, limit))?;
    let mut out = Map::new();
    out.insert("id".into(), json!(p.id));
    out.insert("path".into(), json!(p.path));
    out.insert("size".into(), json!(bytes.len()));
    crate::exec::put_bytes(&mut out, "content", bytes);
    Ok(Value::Object(out))
}

/// `fs.read` with `"stream": true`: what `exec.start` would run to send the file.
pub fn stream_launch(p: &ReadParams) -> Launch {
    Launch {
        box_id: p.id.clone(),
        request: ExecRequest::new(["sh", "-c", CAT_SCRIPT, "sh", &p.path]),
        target: tinybox_core::Target::Workspace,
        stdin: None,
        timeout: None,
    }
}

/// `fs.write`: `{"id", "path", "bytes"}`.
pub fn write(state: &State, engine: Arc<Tinybox>, p: WriteParams) -> CallResult<Value> {
    let bytes = match (p.content, p.content_base64) {
        (Some(_), Some(_)) => return Err(CallError::invalid("fs.write: give content or content_base64, not both")),
        (Some(text), None) => text.into_bytes(),
        (None, Some(b64)) => {
            crate::base64::decode(&b64).map_err(|e| CallError::invalid(format!("content_base64 is {e}")))?
        }
        (None, None) => return Err(CallError::invalid("fs.write: give the file as content or content_base64")),
    };
    if bytes.len() > MAX_WRITE {
        return Err(CallError::invalid(format!(
            "fs.write: {} bytes is over the {MAX_WRITE}-byte bound for one call; copy a file that big with `tinybox cp`",
            bytes.len()
        )));
    }
    let written = state.block_on(engine.write_file(&p.id, &p.path, bytes, p.mode.unwrap_or(0o644)))?;
    Ok(json!({ "id": p.id, "path": p.path, "bytes": written.bytes }))
}

/// `fs.list`: `{"id", "path", "entries": [{"name", "kind", "size", "mode", "mtime"}]}`.
pub fn list(state: &State, engine: Arc<Tinybox>, p: ListParams) -> CallResult<Value> {
    let entries = state.block_on(engine.list_dir(&p.id, &p.path))?;
    Ok(json!({ "id": p.id, "path": p.path, "entries": entries }))
}
