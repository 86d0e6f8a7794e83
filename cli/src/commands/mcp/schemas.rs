//! Each tool's `outputSchema`: what its `structuredContent` holds, so an
//! MCP client can check an answer (the official Python SDK does, on every
//! call) and a model knows the fields before it calls. Written out rather
//! than derived: the answers are core's types (isolation, network in
//! force, limits) put as the CLI's `--json` puts them, and the schema is
//! the contract tests/tests/mcp_schemas.rs holds every answer to.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Value, json};

fn object(v: Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// A box as `summary` puts it.
fn box_properties() -> Value {
    json!({
        "id": { "type": "string", "description": "The box's id, for every other tool." },
        "lifecycle": {
            "type": "object",
            "required": ["kind"],
            "properties": {
                "kind": { "enum": ["ephemeral", "persistent"] },
                "ttl_secs": { "type": "integer", "minimum": 0 },
                "autosnapshot_secs": { "type": "integer", "minimum": 0 }
            }
        },
        "sandbox": { "type": "string" },
        "host": { "type": "string" },
        "isolation": { "enum": ["none", "process", "kernel", "hardware"] },
        "suitable_for_untrusted_code": {
            "type": "boolean",
            "description": "At least kernel isolation, and verified on this machine."
        },
        "network": { "enum": ["denied", "egress", "allowlist", "not_confined"] },
        "limits": {
            "type": "object",
            "description": "The limits in force (a limit absent is not in force).",
            "properties": {
                "cpus": { "type": "number" },
                "memory_bytes": { "type": "integer", "minimum": 0 },
                "pids": { "type": "integer", "minimum": 0 },
                "disk_bytes": { "type": "integer", "minimum": 0 }
            }
        },
        "workdir": { "type": ["string", "null"] }
    })
}

fn a_box(extra: Value, required: &[&str]) -> Value {
    let mut properties = box_properties();
    if let (Some(p), Value::Object(more)) = (properties.as_object_mut(), extra) {
        p.extend(more);
    }
    let mut req = vec!["id", "lifecycle"];
    req.extend_from_slice(required);
    json!({ "type": "object", "required": req, "properties": properties, "additionalProperties": false })
}

pub(super) fn created() -> Arc<JsonObject> {
    object(a_box(json!({ "warnings": { "type": "array", "items": { "type": "string" } } }), &["warnings"]))
}

pub(super) fn inspected() -> Arc<JsonObject> {
    object(a_box(json!({ "state": { "type": "string" }, "state_detail": { "type": ["string", "null"] } }), &["state"]))
}

pub(super) fn listed_boxes() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "required": ["boxes"],
        "properties": { "boxes": { "type": "array", "items": a_box(json!({}), &[]) } },
        "additionalProperties": false
    }))
}

pub(super) fn removed() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "required": ["removed"],
        "properties": { "removed": { "type": "string" } },
        "additionalProperties": false
    }))
}

/// What `run` and `run_code` answer.
pub(super) fn ran() -> Arc<JsonObject> {
    let text = json!({ "type": "string" });
    let flag = json!({ "type": "boolean" });
    let count = json!({ "type": "integer", "minimum": 0 });
    object(json!({
        "type": "object",
        "required": ["exit_code", "signal", "timed_out", "stdout", "stdout_truncated", "stdout_dropped_bytes",
            "stderr", "stderr_truncated", "stderr_dropped_bytes"],
        "properties": {
            "exit_code": { "type": ["integer", "null"], "description": "null when a signal ended it" },
            "signal": { "type": ["integer", "null"] },
            "timed_out": flag,
            "stdout": text, "stdout_truncated": flag, "stdout_dropped_bytes": count,
            "stderr": text, "stderr_truncated": flag, "stderr_dropped_bytes": count,
            "stdout_base64": { "type": "string", "description": "the bytes, when they are not UTF-8" },
            "stderr_base64": { "type": "string", "description": "the bytes, when they are not UTF-8" }
        },
        "additionalProperties": false
    }))
}

pub(super) fn written() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "required": ["path", "bytes"],
        "properties": { "path": { "type": "string" }, "bytes": { "type": "integer", "minimum": 0 } },
        "additionalProperties": false
    }))
}

pub(super) fn read() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "required": ["path", "encoding", "content", "bytes"],
        "properties": {
            "path": { "type": "string" },
            "encoding": { "enum": ["text", "base64"] },
            "content": { "type": "string" },
            "bytes": { "type": "integer", "minimum": 0 }
        },
        "additionalProperties": false
    }))
}

pub(super) fn listed_files() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "required": ["path", "entries"],
        "properties": {
            "path": { "type": "string" },
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "kind", "size", "mode", "mtime"],
                    "properties": {
                        "name": { "type": "string" },
                        "kind": { "enum": ["file", "dir", "symlink", "other"] },
                        "size": { "type": "integer", "minimum": 0 },
                        "mode": { "type": "integer", "minimum": 0 },
                        "mtime": { "type": "integer", "minimum": 0 }
                    },
                    "additionalProperties": false
                }
            }
        },
        "additionalProperties": false
    }))
}
