//! tinybox's TinyBus module: a thin C ABI (TinyBus ABI v1) over the engine.
//!
//! TinyBus loads modules into its own process, and an in-process module is
//! trusted code with the host's full privileges. This library is therefore
//! only a front end: it creates and drives boxes, and the untrusted code
//! always runs out of process, in a box, started by a driver executable.
//! It links core and the sdk only; no backend's dependencies.
//!
//! The ABI is four symbols ([`ffi`]) and one call convention: a method name
//! and a JSON object in, `{"ok": ...}` or `{"error": {"code", "message"}}`
//! out. The contract is docs/specs/tinybus-module-release.md; the result
//! shapes are docs/specs/json-shapes.md, shared with the CLI's `--json`.
//!
//! Rust callers (tests, or a Rust host linking the rlib) use [`call`],
//! [`call_bytes`] and [`manifest_json`]: the very functions the C symbols wrap.

mod base64;
mod dispatch;
mod errors;
mod exec;
pub mod ffi;
mod fs;
mod manifest;
mod params;
mod state;

use std::panic::{AssertUnwindSafe, catch_unwind};

pub use errors::Code;
pub use manifest::METHODS;

/// The ABI this library speaks, as the manifest states it.
pub const ABI_VERSION: &str = "1";
/// The same, as `tinybox_abi_version` returns it.
pub const ABI_VERSION_NUMBER: u32 = 1;

/// The manifest, as JSON text.
pub fn manifest_json() -> String {
    guarded(|| Ok(manifest::manifest()), false)
}

/// One call: `method` with `params` (JSON text), result as JSON text.
pub fn call(method: &str, params: &str) -> String {
    call_bytes(Some(method.as_bytes()), Some(params.as_bytes()))
}

/// One call from raw bytes, as they arrive over the C ABI: `None` for a
/// NULL pointer. Never panics; every failure is an error result.
pub fn call_bytes(method: Option<&[u8]>, params: Option<&[u8]>) -> String {
    guarded(
        || {
            let method = text("method", method)?;
            let params = text("params_json", params)?;
            dispatch::call(method, params)
        },
        true,
    )
}

fn text<'a>(what: &str, bytes: Option<&'a [u8]>) -> errors::CallResult<&'a str> {
    let bytes = bytes.ok_or_else(|| {
        errors::CallError::invalid(format!(
            "{what} is NULL; pass a NUL-terminated UTF-8 string{}",
            if what == "params_json" { " (\"{}\" for no parameters)" } else { "" }
        ))
    })?;
    std::str::from_utf8(bytes).map_err(|e| errors::CallError::invalid(format!("{what} is not valid UTF-8 ({e})")))
}

/// Runs `f`, catching any panic, and encodes its outcome: wrapped in
/// `{"ok": ...}` when `wrap`, bare otherwise (the manifest).
fn guarded(f: impl FnOnce() -> errors::CallResult<serde_json::Value>, wrap: bool) -> String {
    let outcome = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(errors::CallError::internal(format!("tinybox module bug: a panic was caught at the boundary: {what}")))
        }
    };
    let value = match outcome {
        Ok(v) if wrap => serde_json::json!({ "ok": v }),
        Ok(v) => v,
        Err(e) => e.to_json(),
    };
    serde_json::to_string(&value).unwrap_or_else(|e| {
        format!(
            r#"{{"error":{{"code":"internal","message":"cannot encode the result: {}"}}}}"#,
            e.to_string().replace('"', "'")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn bad_input_is_an_error_result_with_a_stable_code() {
        for (method, params, code) in [
            (None, Some(&b"{}"[..]), "invalid_argument"),
            (Some(&b"ls"[..]), None, "invalid_argument"),
            (Some(&b"l\xffs"[..]), Some(&b"{}"[..]), "invalid_argument"),
            (Some(&b"ls"[..]), Some(&b"{\"a\":\"\xff\"}"[..]), "invalid_argument"),
            (Some(&b"ls"[..]), Some(&b"{nope"[..]), "invalid_argument"),
            (Some(&b"launch"[..]), Some(&b"{}"[..]), "unknown_method"),
            (Some(&b"inspect"[..]), Some(&b"{\"id\": \"../etc\"}"[..]), "invalid_argument"),
            (Some(&b"ls"[..]), Some(&b"{\"abi\": \"2\"}"[..]), "abi_mismatch"),
        ] {
            let out = parse(&call_bytes(method, params));
            assert_eq!(out["error"]["code"], code, "{method:?} {params:?}: {out}");
            assert!(out["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }

    #[test]
    fn a_panic_becomes_an_internal_error() {
        let out = parse(&guarded(|| panic!("boom"), true));
        assert_eq!(out["error"]["code"], "internal");
        assert!(out["error"]["message"].as_str().unwrap().contains("boom"));
    }

    #[test]
    fn the_manifest_states_the_abi_and_what_it_does() {
        let m = parse(&manifest_json());
        assert_eq!(m["name"], "tinybox");
        assert_eq!(m["abi_version"], "1");
        assert_eq!(m["untrusted_code"], "out_of_process");
        assert_eq!(m["methods"].as_array().unwrap().len(), METHODS.len());
        let manifest_via_call = parse(&call("manifest", "{}"));
        assert_eq!(manifest_via_call["ok"], m);
    }
}
