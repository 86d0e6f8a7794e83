//! The Connect protocol, as the E2B SDKs speak it to envd: JSON messages
//! (their codec is `json`, never binary protobuf). A unary call is a POST
//! of `application/json` answered with JSON, or with an HTTP error status
//! and `{"code", "message"}`. A server-streaming call is a POST of
//! `application/connect+json` whose body is one enveloped message (a flags
//! byte, a 4-byte big-endian length, the JSON); it is answered 200 with a
//! stream of such envelopes ending in one flagged end-of-stream (`0x02`)
//! that is `{}` or `{"error": {"code", "message"}}`.

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::ApiError;

/// The flag of the end-of-stream envelope.
const END_STREAM: u8 = 0x02;

/// A Connect error: its code word and tinybox's line.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: &'static str,
    pub message: String,
}

impl RpcError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    pub fn unauthenticated(message: &str) -> RpcError {
        RpcError::new("unauthenticated", format!("tinybox: {message}"))
    }

    pub fn invalid(message: impl std::fmt::Display) -> RpcError {
        RpcError::new("invalid_argument", format!("tinybox: {message}"))
    }

    fn status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn body(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }

    /// The end-of-stream envelope carrying this error.
    pub fn end_envelope(&self) -> Bytes {
        envelope(END_STREAM, &json!({ "error": self.body() }))
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> RpcError {
        let code = match e.status().as_u16() {
            400 | 413 | 422 => "invalid_argument",
            401 => "unauthenticated",
            404 => "not_found",
            409 => "failed_precondition",
            503 => "unavailable",
            _ => "internal",
        };
        RpcError::new(code, format!("tinybox: {e}"))
    }
}

impl From<tinybox_core::Error> for RpcError {
    fn from(e: tinybox_core::Error) -> RpcError {
        ApiError::Core(e).into()
    }
}

impl IntoResponse for RpcError {
    fn into_response(self) -> Response {
        (self.status(), Json(self.body())).into_response()
    }
}

/// One envelope.
pub fn envelope(flags: u8, message: &Value) -> Bytes {
    let json = serde_json::to_vec(message).unwrap_or_default();
    let mut out = Vec::with_capacity(json.len() + 5);
    out.push(flags);
    out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&json);
    out.into()
}

/// A message envelope (no flags).
pub fn message(m: &Value) -> Bytes {
    envelope(0, m)
}

/// The end of a stream that ended well.
pub fn end_ok() -> Bytes {
    envelope(END_STREAM, &json!({}))
}

/// A unary call's request message.
pub fn unary<T: DeserializeOwned>(body: &Bytes) -> Result<T, RpcError> {
    let text = if body.is_empty() { &b"{}"[..] } else { &body[..] };
    serde_json::from_slice(text).map_err(|e| RpcError::invalid(format!("the request message does not fit: {e}")))
}

/// A server-streaming call's one request message, from its envelope.
pub fn streamed<T: DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, RpcError> {
    let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !kind.starts_with("application/connect+json") {
        return Err(RpcError::invalid(format!(
            "content type {kind:?} is not served: this server speaks Connect with JSON (application/connect+json)"
        )));
    }
    if body.len() < 5 {
        return Err(RpcError::invalid("the request has no envelope"));
    }
    let flags = body[0];
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if flags & 0x01 != 0 {
        return Err(RpcError::invalid("compressed messages are not served: send them uncompressed"));
    }
    let Some(json) = body.get(5..5 + len) else {
        return Err(RpcError::invalid("the envelope is shorter than its length says"));
    };
    serde_json::from_slice(json).map_err(|e| RpcError::invalid(format!("the request message does not fit: {e}")))
}

/// The `connect-timeout-ms` a call carries.
pub fn timeout(headers: &HeaderMap) -> Option<std::time::Duration> {
    let ms: u64 = headers.get("connect-timeout-ms")?.to_str().ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// The headers a streamed answer starts with.
pub fn stream_headers() -> [(header::HeaderName, &'static str); 1] {
    [(header::CONTENT_TYPE, "application/connect+json")]
}

#[cfg(test)]
#[path = "connect_tests.rs"]
mod tests;
