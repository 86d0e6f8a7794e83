//! tinybox's HTTP API (`tinybox serve`): its own routes under `/v1`, and
//! the E2B protocol — the control plane's `/sandboxes` routes and envd's
//! data plane (Connect-RPC process and filesystem services, `/files`) —
//! so the official E2B SDKs work unchanged. A front end like `tinybox mcp`:
//! it translates HTTP into core's requests and core's answers and refusals
//! into HTTP, and decides nothing. The operator's ceiling
//! (`tinybox_core::ceiling`) bounds every create; a caller reaches only
//! the boxes this server made, which it removes when it stops.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tinybox_core::Tinybox;
use tinybox_core::ceiling::Ceiling;

mod auth;
mod body;
mod boxes;
pub mod e2b;
mod error;
pub mod listen;
mod registry;
pub mod stream;

pub use auth::{Token, TokenError};
pub use error::ApiError;
pub use registry::Registry;

/// The largest JSON body a route takes; a larger one is refused with 413.
pub const MAX_JSON_BODY: usize = 1 << 20;

/// The largest file a write takes.
pub const MAX_FILE_BODY: usize = 64 << 20;

/// What the server was started with.
#[derive(Debug, Clone)]
pub struct Config {
    pub ceiling: Ceiling,
    /// What an exec keeps of each of stdout and stderr (buffered exec), and
    /// the largest file a read returns or a write takes.
    pub max_output: u64,
    /// The longest a command runs (and its default).
    pub timeout: Duration,
    /// The image an E2B `base` template means; `None`: the sandbox's default.
    pub base_image: Option<String>,
}

/// One server's state: the engine, the ceiling, the token, its boxes.
pub struct Api {
    pub engine: Arc<Tinybox>,
    pub config: Config,
    pub token: Token,
    pub registry: Registry,
    pub processes: e2b::process::Table,
}

impl Api {
    pub fn new(engine: Arc<Tinybox>, config: Config, token: Token) -> Arc<Api> {
        Arc::new(Api { engine, config, token, registry: Registry::default(), processes: Default::default() })
    }

    /// Every route this server serves.
    pub fn router(self: &Arc<Api>) -> Router {
        Router::new()
            .merge(boxes::routes())
            .merge(e2b::control::routes())
            .merge(e2b::envd_routes())
            .fallback(error::no_route)
            .layer(axum::middleware::from_fn_with_state(self.clone(), auth::check))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_JSON_BODY))
            .with_state(self.clone())
    }

    /// Removes every box this server made (the server is stopping): first,
    /// so the commands in flight in them end and their streams with them,
    /// and the connections can close.
    pub async fn remove_all(&self) {
        for id in self.registry.ids() {
            self.registry.remove(&id);
            self.processes.cut_box(&id);
            if let Err(e) = self.engine.remove(&id).await {
                eprintln!("tinybox: {e}");
            }
        }
    }
}

/// The routes `GET /v1/openapi.json`'s document must describe: method and
/// path template, as the router matches them.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/boxes"),
    ("post", "/v1/boxes"),
    ("get", "/v1/boxes/{id}"),
    ("delete", "/v1/boxes/{id}"),
    ("post", "/v1/boxes/{id}/exec"),
    ("post", "/v1/boxes/{id}/exec/stream"),
    ("get", "/v1/boxes/{id}/files"),
    ("put", "/v1/boxes/{id}/files"),
    ("get", "/v1/boxes/{id}/dir"),
    ("post", "/v1/boxes/{id}/snapshots"),
];

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod openapi_tests;
