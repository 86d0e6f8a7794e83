//! Method parameters. Each is a JSON object whose fields mirror the CLI's
//! flags; an unknown field is refused rather than ignored, because a
//! misspelt limit silently dropped is a limit the caller believes is in
//! force and is not. `create` and `host.add` take core's own requests
//! (`CreateRequest`, `SshHostRequest`) as they are: only the bus's own
//! parameters (exec's captured streams and handles) are defined here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tinybox_core::model::{BoxId, HostName, TemplateName, TtySize};
use tinybox_core::request::ExecOptions;
use tinybox_core::request::exec::check_tty;

use crate::errors::{CallError, CallResult, Code};

/// Fields every method accepts besides its own.
#[derive(Debug, Default)]
pub struct Common {
    /// The store directory; default as the CLI's (`TINYBOX_HOME`, ...).
    pub store: Option<PathBuf>,
}

/// Splits `params` (a JSON text) into the common fields and the method's own.
pub fn split(params: &str) -> CallResult<(Common, Value)> {
    let mut value: Value =
        serde_json::from_str(params).map_err(|e| CallError::invalid(format!("params are not valid JSON: {e}")))?;
    let Some(map) = value.as_object_mut() else {
        return Err(CallError::invalid("params must be a JSON object, such as {} for none"));
    };
    if let Some(abi) = map.remove("abi") {
        let speaks = abi.as_str() == Some(crate::ABI_VERSION) || abi.as_u64() == Some(1);
        if !speaks {
            return Err(CallError::new(
                Code::AbiMismatch,
                format!(
                    "the host asked for TinyBus ABI {abi}; this library speaks ABI \"{}\" only",
                    crate::ABI_VERSION
                ),
            ));
        }
    }
    let store = match map.remove("store") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(PathBuf::from(s)),
        Some(other) => return Err(CallError::invalid(format!("store must be a directory path, not {other}"))),
    };
    Ok((Common { store }, value))
}

/// The method's own parameters, with a message that names the bad field.
pub fn parse<T: DeserializeOwned>(method: &str, value: Value) -> CallResult<T> {
    serde_json::from_value(value).map_err(|e| CallError::invalid(format!("{method}: {e}")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxParams {
    pub id: BoxId,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmParams {
    #[serde(default)]
    pub id: Option<BoxId>,
    #[serde(default)]
    pub ids: Vec<BoxId>,
}

impl RmParams {
    pub fn all(self) -> CallResult<Vec<BoxId>> {
        let mut ids = self.ids;
        ids.extend(self.id);
        if ids.is_empty() {
            return Err(CallError::invalid("rm: name the boxes to remove with \"id\" or \"ids\""));
        }
        Ok(ids)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSaveParams {
    pub name: TemplateName,
    pub id: BoxId,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateNameParams {
    pub name: TemplateName,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostNameParams {
    pub name: HostName,
}

/// `exec` and `exec.start`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    pub id: BoxId,
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Input as text.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Input as bytes, base64.
    #[serde(default)]
    pub stdin_base64: Option<String>,
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// Run on the box's runner placement instead of its workspace.
    #[serde(default)]
    pub runner: bool,
    /// How much of each stream `exec` keeps (default 16 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// `exec.start` only: unread bytes buffered per stream before the command waits (default 1 MiB).
    #[serde(default)]
    pub buffer_bytes: Option<u64>,
    /// Run on a terminal of this size made for the command in the box; its
    /// output (both streams) arrives as stdout. `exec.resize` changes it.
    #[serde(default)]
    pub tty: Option<TtySize>,
}

impl ExecParams {
    /// The command these parameters ask for, field by field; every rule is core's.
    pub fn options(&self) -> ExecOptions {
        ExecOptions {
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            stdin: self.stdin.clone(),
            stdin_base64: self.stdin_base64.clone(),
            timeout_secs: self.timeout_secs,
            tty: self.tty,
            runner: self.runner,
        }
    }

    pub fn max_output(&self) -> CallResult<usize> {
        positive("max_output_bytes", self.max_output_bytes, crate::exec::DEFAULT_MAX_OUTPUT)
    }

    pub fn buffer(&self) -> CallResult<usize> {
        positive("buffer_bytes", self.buffer_bytes, crate::exec::DEFAULT_STREAM_BUFFER)
    }
}

/// A positive byte count, or `default`; zero is refused, as every limit is.
fn positive(name: &str, value: Option<u64>, default: usize) -> CallResult<usize> {
    match value {
        None => Ok(default),
        Some(0) => Err(CallError::invalid(format!("{name} 0 is not positive"))),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

/// `exec.read`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    pub exec: String,
    /// How long to wait for output; absent: until some arrives or the streams end.
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// At most this much of each stream (default 1 MiB).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

impl ReadParams {
    pub fn max(&self) -> CallResult<usize> {
        positive("max_bytes", self.max_bytes, crate::exec::DEFAULT_STREAM_BUFFER)
    }
}

/// `exec.resize`: the terminal of a streaming exec has a new size.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeParams {
    pub exec: String,
    pub rows: u16,
    pub cols: u16,
}

impl ResizeParams {
    pub fn size(&self) -> CallResult<TtySize> {
        let size = check_tty(TtySize { rows: self.rows, cols: self.cols }).map_err(tinybox_core::Error::from)?;
        Ok(size)
    }
}

/// `exec.wait` and `exec.cancel`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleParams {
    pub exec: String,
    /// `exec.wait` only: how much of each stream's unread output to return (default 16 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
}

impl HandleParams {
    pub fn max_output(&self) -> CallResult<usize> {
        positive("max_output_bytes", self.max_output_bytes, crate::exec::DEFAULT_MAX_OUTPUT)
    }
}

#[cfg(test)]
mod tests {
    use tinybox_core::request::RequestError;

    use super::*;

    #[test]
    fn create_takes_core_s_request_and_refuses_an_unknown_field() {
        let r: tinybox_core::CreateRequest =
            parse("create", serde_json::json!({"memory": "512M", "accel": "tcg", "host": "ssh:b"})).unwrap();
        assert_eq!(r.accel.as_deref(), Some("tcg"));
        let err = parse::<tinybox_core::CreateRequest>("create", serde_json::json!({"memroy": "1G"})).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.starts_with("create: unknown field `memroy`"), "{}", err.message);
    }

    #[test]
    fn common_fields_are_split_off_and_the_abi_is_checked() {
        let (common, rest) = split(r#"{"store": "/tmp/x", "abi": "1", "id": "box-0"}"#).unwrap();
        assert_eq!(common.store, Some(PathBuf::from("/tmp/x")));
        assert_eq!(rest, serde_json::json!({"id": "box-0"}));
        assert_eq!(split(r#"{"abi": "2"}"#).unwrap_err().code, Code::AbiMismatch);
        assert_eq!(split("[]").unwrap_err().code, Code::InvalidArgument);
        assert_eq!(split("{").unwrap_err().code, Code::InvalidArgument);
        assert_eq!(split(r#"{"store": 3}"#).unwrap_err().code, Code::InvalidArgument);
    }

    #[test]
    fn exec_fields_map_onto_core_s_options_and_its_rules() {
        let p: ExecParams =
            parse("exec", serde_json::json!({"id": "box-0", "argv": ["a"], "timeout_secs": 0})).unwrap();
        let err = p.options().plan().unwrap_err();
        assert!(matches!(err, tinybox_core::Error::Request(RequestError::TimeoutTooShort { .. })), "{err}");
        let p: ExecParams = parse(
            "exec",
            serde_json::json!({"id": "box-0", "argv": ["a"], "timeout_secs": 0.5, "stdin_base64": "AP8=", "runner": true}),
        )
        .unwrap();
        let plan = p.options().plan().unwrap();
        assert_eq!(plan.timeout, Some(std::time::Duration::from_millis(500)));
        assert_eq!(plan.stdin, Some(tinybox_core::request::StdinGiven::Base64("AP8=".into())));
        assert_eq!(plan.target, tinybox_core::Target::Runner);
        let p: ExecParams =
            parse("exec", serde_json::json!({"id": "box-0", "argv": ["a"], "max_output_bytes": 0})).unwrap();
        assert!(p.max_output().is_err());
        let p: ResizeParams =
            parse("exec.resize", serde_json::json!({"exec": "exec-0", "rows": 0, "cols": 80})).unwrap();
        assert_eq!(p.size().unwrap_err().code, Code::InvalidArgument);
    }
}
