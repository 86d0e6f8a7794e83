//! What a refusal looks like on the wire: an HTTP status and
//! `{"error": {"kind", "message"}}`, the kind being the CLI's `--json`
//! word (core's [`ErrorKind`]) or one of the API's own for what only HTTP
//! can get wrong (a body, a token, a route).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tinybox_core::{Error, ErrorKind};

/// A refusal the API answers with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Core refused or failed: its one line, its kind.
    #[error("{0}")]
    Core(#[from] Error),
    /// The body broke a rule (malformed JSON, an unknown field, a wrong type).
    #[error("{0}")]
    Body(String),
    /// The body is over the route's limit.
    #[error("the request body is over this route's limit of {limit} bytes: send less")]
    TooLarge { limit: usize },
    #[error("{0}")]
    Unauthorized(&'static str),
    /// A socket caller whose uid is not the server's.
    #[error("{0}")]
    Forbidden(String),
    /// A query parameter is missing or bad.
    #[error("{0}")]
    Query(String),
    /// No box by that id that this server made.
    #[error("no box {0} made by this server: GET /v1/boxes lists the boxes you can use, POST /v1/boxes makes one")]
    NotMine(String),
    #[error("no route {method} {path}: see docs/specs/http-api.yml for the routes this server serves")]
    NoRoute { method: String, path: String },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Core(e) => status_of(e.root().kind()),
            ApiError::Body(_) | ApiError::Query(_) => StatusCode::BAD_REQUEST,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NoRoute { .. } | ApiError::NotMine(_) => StatusCode::NOT_FOUND,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Core(e) => e.kind().as_str(),
            ApiError::Body(_) => "bad_body",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Query(_) => "bad_query",
            ApiError::NoRoute { .. } => "no_route",
            ApiError::NotMine(_) => "box_not_found",
        }
    }
}

/// The status each class of core's errors is answered with.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Unsupported => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::BoxNotFound => StatusCode::NOT_FOUND,
        ErrorKind::NotReady => StatusCode::CONFLICT,
        ErrorKind::UnknownHost => StatusCode::BAD_REQUEST,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Driver(_) | ErrorKind::DriverFailure => StatusCode::BAD_GATEWAY,
        ErrorKind::StoreIo | ErrorKind::Store | ErrorKind::Io => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "kind": self.kind(), "message": format!("tinybox: {self}") } });
        (self.status(), Json(body)).into_response()
    }
}

pub async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NoRoute { method: method.to_string(), path: uri.path().to_owned() }
}
