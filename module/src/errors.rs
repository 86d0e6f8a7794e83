//! The error half of the call convention: `{"error": {"code", "message"}}`,
//! with a stable code a host can branch on. Engine errors also carry the
//! `kind` the CLI prints with `--json`, so one table serves both front ends
//! (docs/specs/json-shapes.md).

use serde_json::{Value, json};
use tinybox_core::{Error, ErrorKind};
use tinybox_sdk::protocol::ErrorCode;

/// The stable error codes of ABI v1. A code is never renamed or reused;
/// new ones may be added, so a host treats an unknown code as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// NULL, invalid UTF-8, invalid JSON, a parameter that breaks a rule
    /// (a bad name, a zero limit, an unknown field, a conflicting pair).
    InvalidArgument,
    /// No method by that name in this ABI version.
    UnknownMethod,
    /// The host asked for an ABI version this library does not speak.
    AbiMismatch,
    /// The sandbox did not declare what the request needs; refused before any driver heard of it.
    Unsupported,
    /// A named box, host, exec handle or snapshot does not exist.
    NotFound,
    /// The box exists but cannot take the request now (stopped, or still being created).
    NotReady,
    /// No driver can serve the request here: not installed, unhealthy, or no sandbox strong enough.
    Unavailable,
    /// The driver answered, and refused or failed the operation.
    DriverError,
    /// The driver broke: it died, timed out, or broke the protocol.
    DriverFailure,
    /// The store could not be read or written, or is corrupt.
    Store,
    /// A file, socket or pipe operation failed.
    Io,
    /// A bug: a panic caught at the boundary, or a result that could not be encoded.
    Internal,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::UnknownMethod => "unknown_method",
            Code::AbiMismatch => "abi_mismatch",
            Code::Unsupported => "unsupported",
            Code::NotFound => "not_found",
            Code::NotReady => "not_ready",
            Code::Unavailable => "unavailable",
            Code::DriverError => "driver_error",
            Code::DriverFailure => "driver_failure",
            Code::Store => "store",
            Code::Io => "io",
            Code::Internal => "internal",
        }
    }

    /// Every code, for the manifest and the documentation test.
    pub const ALL: [Code; 12] = [
        Code::InvalidArgument,
        Code::UnknownMethod,
        Code::AbiMismatch,
        Code::Unsupported,
        Code::NotFound,
        Code::NotReady,
        Code::Unavailable,
        Code::DriverError,
        Code::DriverFailure,
        Code::Store,
        Code::Io,
        Code::Internal,
    ];
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub code: Code,
    pub message: String,
    /// The CLI's `--json` error kind, for errors that come from the engine.
    pub kind: Option<&'static str>,
}

pub type CallResult<T> = Result<T, CallError>;

impl CallError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        CallError { code, message: message.into(), kind: None }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        CallError::new(Code::InvalidArgument, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        CallError::new(Code::Internal, message)
    }

    pub fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code.as_str(), "message": self.message });
        if let Some(kind) = self.kind {
            error["kind"] = json!(kind);
        }
        json!({ "error": error })
    }
}

impl From<Error> for CallError {
    fn from(e: Error) -> Self {
        let (code, kind) = classify(&e);
        CallError { code, message: e.to_string(), kind: Some(kind) }
    }
}

/// The bus code and the CLI kind of an engine error: core classifies
/// ([`Error::kind`]), the bus only spells each class as a code.
fn classify(e: &Error) -> (Code, &'static str) {
    let kind = e.kind();
    let code = match kind {
        ErrorKind::Unsupported => Code::Unsupported,
        ErrorKind::Invalid => Code::InvalidArgument,
        ErrorKind::BoxNotFound | ErrorKind::UnknownHost => Code::NotFound,
        ErrorKind::StoreIo | ErrorKind::Io => Code::Io,
        ErrorKind::Store => Code::Store,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Driver(code) => match code {
            ErrorCode::NotFound => Code::NotFound,
            ErrorCode::Unsupported => Code::Unsupported,
            ErrorCode::InvalidRequest => Code::InvalidArgument,
            ErrorCode::Unavailable => Code::Unavailable,
            _ => Code::DriverError,
        },
        ErrorKind::DriverFailure => Code::DriverFailure,
        ErrorKind::NotReady => Code::NotReady,
    };
    (code, kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinybox_core::error::Capability;
    use tinybox_core::model::{BoxId, SandboxName};
    use tinybox_core::store::StoreError;

    #[test]
    fn engine_errors_keep_their_message_and_get_a_code_and_the_cli_kind() {
        let e: CallError = Error::unsupported(&SandboxName::passthrough(), Capability::Snapshot).into();
        assert_eq!(e.code, Code::Unsupported);
        assert_eq!(e.to_json()["error"]["kind"], "unsupported");
        assert_eq!(e.to_json()["error"]["message"], "sandbox passthrough does not support snapshot");
        let e: CallError = Error::Store(StoreError::NotFound(BoxId::new("box-9").unwrap())).into();
        assert_eq!(e.code, Code::NotFound);
        assert_eq!(e.to_json()["error"]["code"], "not_found");
    }

    #[test]
    fn codes_are_distinct_snake_case_words() {
        let names: std::collections::BTreeSet<_> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), Code::ALL.len());
        assert!(names.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }
}
