//! Errors a driver returns, carried as JSON-RPC error objects with stable codes.

use jsonrpsee::types::ErrorObjectOwned;
use serde::{Deserialize, Serialize};

/// Stable error codes (JSON-RPC's server-error range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Anything else the driver could not do.
    Failed,
    /// The driver does not support what was asked (core should have refused it first).
    Unsupported,
    /// The box or snapshot does not exist.
    NotFound,
    /// The parameters are well-formed but not acceptable.
    InvalidRequest,
    /// A tool or facility the driver needs is missing or forbidden here.
    Unavailable,
    /// The run was cancelled.
    Cancelled,
    /// A request arrived before the handshake, or the handshake was refused.
    Handshake,
    /// What the driver relied on (its daemon, the host beneath it) went
    /// away while it acted: part of what was asked may have happened, and
    /// the driver cannot tell what. Core keeps its record of the box (or
    /// the snapshot under way), so a later `rm` finds what was made.
    Interrupted,
}

impl ErrorCode {
    pub fn code(self) -> i32 {
        match self {
            ErrorCode::Failed => -32000,
            ErrorCode::Unsupported => -32001,
            ErrorCode::NotFound => -32002,
            ErrorCode::InvalidRequest => -32003,
            ErrorCode::Unavailable => -32004,
            ErrorCode::Cancelled => -32005,
            ErrorCode::Handshake => -32006,
            ErrorCode::Interrupted => -32007,
        }
    }

    pub fn from_code(code: i32) -> Option<Self> {
        [
            ErrorCode::Failed,
            ErrorCode::Unsupported,
            ErrorCode::NotFound,
            ErrorCode::InvalidRequest,
            ErrorCode::Unavailable,
            ErrorCode::Cancelled,
            ErrorCode::Handshake,
            ErrorCode::Interrupted,
        ]
        .into_iter()
        .find(|c| c.code() == code)
    }
}

/// An error returned by a driver method.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DriverError {
    pub code: ErrorCode,
    pub message: String,
}

impl DriverError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        DriverError { code, message: message.into() }
    }
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Failed, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unsupported, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }
    pub fn interrupted(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Interrupted, message)
    }
}

impl From<DriverError> for ErrorObjectOwned {
    fn from(e: DriverError) -> Self {
        ErrorObjectOwned::owned(e.code.code(), e.message, None::<()>)
    }
}

impl From<std::io::Error> for DriverError {
    fn from(e: std::io::Error) -> Self {
        DriverError::failed(e.to_string())
    }
}
