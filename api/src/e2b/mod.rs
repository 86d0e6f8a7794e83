//! The E2B protocol, served by tinybox itself (docs/adr/0034): the control
//! plane's `/sandboxes` routes ([`control`]) and, for every box, envd's
//! data plane — the Connect-RPC process ([`process`]) and filesystem
//! ([`filesystem`]) services and `/files` ([`files`]) — on the same
//! listener, the box named by the `E2b-Sandbox-Id` header the SDKs send
//! when `E2B_SANDBOX_URL` is set. The box runs no envd of its own.

use std::sync::Arc;

use axum::http::HeaderMap;

use crate::Api;

pub mod connect;
pub mod control;
pub mod files;
pub mod filesystem;
pub mod process;

/// The envd version the sandboxes report: the SDKs gate features on it
/// (0.5.7: octet-stream uploads; later ones add what is not served here).
pub const ENVD_VERSION: &str = "0.5.7";

/// A path of E2B's control plane (its error shape is `{"code", "message"}`).
pub fn is_control_path(path: &str) -> bool {
    ["/sandboxes", "/v2/sandboxes", "/snapshots", "/templates"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// A path of envd's Connect-RPC services (errors are Connect's).
pub fn is_rpc_path(path: &str) -> bool {
    path.starts_with("/process.Process/") || path.starts_with("/filesystem.Filesystem/")
}

pub fn envd_routes() -> axum::Router<Arc<Api>> {
    process::routes().merge(filesystem::routes()).merge(files::routes())
}

/// The sandbox a data-plane request is for: the `E2b-Sandbox-Id` header,
/// or the host name the SDKs build without `E2B_SANDBOX_URL`
/// (`PORT-ID.DOMAIN`).
pub fn sandbox_id(headers: &HeaderMap) -> Option<String> {
    if let Some(id) = headers.get("e2b-sandbox-id").and_then(|v| v.to_str().ok()) {
        return Some(id.to_owned());
    }
    let host = headers.get("host").and_then(|v| v.to_str().ok())?;
    let first = host.split('.').next()?;
    let (port, id) = first.split_once('-')?;
    port.parse::<u16>().ok().map(|_| id.to_owned())
}
