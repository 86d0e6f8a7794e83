//! envd's HTTP routes over a box: `GET /files?path=` downloads a file,
//! `POST /files` uploads one (`application/octet-stream` with `?path=`, or
//! `multipart/form-data` whose parts are named by their file names), and
//! `GET /health` answers that the box's data plane is up. Reads and writes
//! are core's, bounded by the server's limits.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use super::control::E2bError;
use crate::Api;

type St = State<Arc<Api>>;

pub fn routes() -> axum::Router<Arc<Api>> {
    axum::Router::new()
        .route("/files", get(download).post(upload).layer(DefaultBodyLimit::max(crate::MAX_FILE_BODY)))
        .route("/health", get(health))
}

#[derive(Debug, Deserialize)]
struct FileQuery {
    #[serde(default)]
    path: Option<String>,
    /// The user envd would act as; tinybox runs as the box's one user.
    #[serde(default)]
    #[allow(dead_code)]
    username: Option<String>,
}

fn target(api: &Api, headers: &HeaderMap) -> Result<tinybox_core::model::BoxId, E2bError> {
    let id = super::sandbox_id(headers).ok_or_else(|| {
        E2bError::new(
            400,
            "tinybox: no sandbox named: send the E2b-Sandbox-Id header (the SDKs do when E2B_SANDBOX_URL is set)",
        )
    })?;
    api.registry.mine(&id).map_err(|e| E2bError::new(404, format!("tinybox: {e}")))
}

/// 204 for a box this server runs; 502 otherwise, as E2B's proxy answers
/// for a sandbox that is gone (the SDKs read it as "killed").
async fn health(State(api): St, headers: HeaderMap) -> Result<StatusCode, E2bError> {
    match target(&api, &headers) {
        Ok(_) => Ok(StatusCode::NO_CONTENT),
        Err(e) if e.code == 404 => Err(E2bError::new(502, e.message)),
        Err(e) => Err(e),
    }
}

async fn download(State(api): St, headers: HeaderMap, Query(q): Query<FileQuery>) -> Result<Response, E2bError> {
    let id = target(&api, &headers)?;
    let path = q.path.ok_or_else(|| E2bError::new(400, "tinybox: no path: GET /files?path=PATH"))?;
    let bytes = api.engine.read_file(&id, &path, api.config.max_output).await.map_err(|e| {
        let e = E2bError::from(e);
        // envd answers a missing file 404; the SDKs raise FileNotFound on it.
        if e.message.contains("No such file") || e.message.contains("has no") {
            E2bError::new(404, e.message)
        } else {
            e
        }
    })?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

fn written(path: &str) -> Value {
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or(path);
    json!({ "name": name, "type": "file", "path": path })
}

async fn upload(
    State(api): St,
    headers: HeaderMap,
    Query(q): Query<FileQuery>,
    req: Request,
) -> Result<Json<Value>, E2bError> {
    let id = target(&api, &headers)?;
    let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let too_big = |_| {
        E2bError::new(413, format!("tinybox: the upload is over this server's limit of {} bytes", crate::MAX_FILE_BODY))
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if kind.starts_with("multipart/form-data") {
        let mut parts =
            Multipart::from_request(req, &()).await.map_err(|e| E2bError::new(400, format!("tinybox: {e}")))?;
        while let Some(part) = parts.next_field().await.map_err(|e| E2bError::new(400, format!("tinybox: {e}")))? {
            let name = part.file_name().map(str::to_owned).or_else(|| q.path.clone());
            let bytes = part.bytes().await.map_err(|e| E2bError::new(400, format!("tinybox: {e}")))?;
            let path = match (&q.path, name) {
                (Some(p), _) if files.is_empty() => p.clone(),
                (_, Some(n)) => n,
                (_, None) => return Err(E2bError::new(400, "tinybox: a part has no file name and no path was given")),
            };
            files.push((path, bytes.to_vec()));
        }
    } else {
        let path = q.path.clone().ok_or_else(|| E2bError::new(400, "tinybox: no path: POST /files?path=PATH"))?;
        let bytes = Bytes::from_request(req, &()).await.map_err(too_big)?;
        files.push((path, bytes.to_vec()));
    }
    if headers.get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip")) {
        for (path, bytes) in &mut files {
            let mut plain = Vec::new();
            // Bounded while it unpacks: a small bomb never fills memory.
            let limit = crate::MAX_FILE_BODY as u64 + 1;
            std::io::Read::read_to_end(
                &mut std::io::Read::take(flate2::read::GzDecoder::new(bytes.as_slice()), limit),
                &mut plain,
            )
            .map_err(|e| {
                E2bError::new(400, format!("tinybox: the upload of {path} is not gzip ({e}): send it plain or gzipped"))
            })?;
            if plain.len() > crate::MAX_FILE_BODY {
                return Err(E2bError::new(
                    413,
                    format!("tinybox: {path} unpacks to over {} bytes", crate::MAX_FILE_BODY),
                ));
            }
            *bytes = plain;
        }
    }
    let mut out = Vec::new();
    for (path, bytes) in files {
        // envd makes a file's missing directories; so does an upload here.
        api.engine.make_parents(&id, &path).await?;
        api.engine.write_file(&id, &path, bytes, 0o644).await?;
        out.push(written(&path));
    }
    Ok(Json(Value::Array(out)))
}
