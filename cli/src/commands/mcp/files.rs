//! The MCP server's file tools: write_file (text or base64 bytes, its
//! missing directories made), read_file (text when the file is UTF-8,
//! base64 otherwise or when asked: bytes never come back mangled), and
//! list_files. Each is core's call on a box this server made.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{schemars, tool, tool_router};
use serde::Deserialize;
use tinybox_core::Error;

use super::{Server, answer, refusal};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteArgs {
    #[serde(rename = "box")]
    id: String,
    /// Where in the box; missing directories above it are made, and an existing directory receives the file under its own name.
    path: String,
    /// The file's text (or give content_base64 for bytes).
    content: Option<String>,
    /// The file's bytes, base64-encoded (instead of content).
    content_base64: Option<String>,
    /// Permission bits, like 420 (0o644, the default) or 493 (0o755).
    mode: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum Encoding {
    Text,
    Base64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    #[serde(rename = "box")]
    id: String,
    /// A path in the box.
    path: String,
    /// "base64" for the bytes as base64; default: text when the file is UTF-8, base64 when it is not.
    encoding: Option<Encoding>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ListArgs {
    #[serde(rename = "box")]
    id: String,
    /// A directory in the box.
    path: String,
}

/// What `read_file` answers for `bytes`: text only when it is UTF-8 and text was not refused.
fn read_answer(path: &str, bytes: Vec<u8>, encoding: Option<Encoding>) -> serde_json::Value {
    let size = bytes.len();
    match (encoding, String::from_utf8(bytes)) {
        (None | Some(Encoding::Text), Ok(text)) => {
            serde_json::json!({ "path": path, "encoding": "text", "content": text, "bytes": size })
        }
        (_, Ok(text)) => {
            serde_json::json!({ "path": path, "encoding": "base64", "content": BASE64.encode(text), "bytes": size })
        }
        (_, Err(e)) => {
            serde_json::json!({ "path": path, "encoding": "base64", "content": BASE64.encode(e.into_bytes()), "bytes": size })
        }
    }
}

#[tool_router(router = files_router, vis = "pub(super)")]
impl Server {
    #[tool(
        output_schema = super::schemas::written(),
        description = "Write a file into a box (created or replaced): content as text, or content_base64 for bytes. Missing directories above it are made.",
        annotations(
            title = "Write a file in a box",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn write_file(&self, Parameters(args): Parameters<WriteArgs>) -> CallToolResult {
        let bytes = match (args.content, args.content_base64) {
            (Some(text), None) => text.into_bytes(),
            (None, Some(b64)) => match BASE64.decode(b64.trim()) {
                Ok(bytes) => bytes,
                Err(e) => return refusal(&format!("content_base64 is not base64: {e}")),
            },
            _ => return refusal("give exactly one of content (text) and content_base64 (bytes)"),
        };
        answer(self.write(&args.id, &args.path, bytes, args.mode.unwrap_or(0o644)).await)
    }

    async fn write(&self, id: &str, path: &str, bytes: Vec<u8>, mode: u32) -> Result<serde_json::Value, Error> {
        let id = self.mine(id)?;
        self.engine.make_parents(&id, path).await?;
        let written = self.engine.write_file(&id, path, bytes, mode).await?;
        Ok(serde_json::json!({ "path": path, "bytes": written.bytes }))
    }

    #[tool(
        output_schema = super::schemas::read(),
        description = "Read a file from a box: text when it is UTF-8, else (or with encoding \"base64\") its bytes as base64; the answer says which. A file over the server's bound is refused.",
        annotations(title = "Read a file in a box", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn read_file(&self, Parameters(args): Parameters<ReadArgs>) -> CallToolResult {
        answer(self.read(args).await)
    }

    async fn read(&self, args: ReadArgs) -> Result<serde_json::Value, Error> {
        let id = self.mine(&args.id)?;
        let bytes = self.engine.read_file(&id, &args.path, self.max_output).await?;
        Ok(read_answer(&args.path, bytes, args.encoding))
    }

    #[tool(
        output_schema = super::schemas::listed_files(),
        description = "List a directory in a box: each entry's name, kind (file, dir, symlink, other), size, mode and mtime.",
        annotations(title = "List files in a box", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_files(&self, Parameters(args): Parameters<ListArgs>) -> CallToolResult {
        answer(self.list(args).await)
    }

    async fn list(&self, args: ListArgs) -> Result<serde_json::Value, Error> {
        let id = self.mine(&args.id)?;
        let entries = self.engine.list_dir(&id, &args.path).await?;
        Ok(serde_json::json!({ "path": args.path, "entries": super::json(&entries) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_back_as_text_only_when_they_are_utf8_and_text_is_not_refused() {
        let text = read_answer("/a", b"hi\n".to_vec(), None);
        assert_eq!((text["encoding"].as_str(), text["content"].as_str()), (Some("text"), Some("hi\n")));
        let binary = read_answer("/b", vec![0, 0xff, b'x'], None);
        assert_eq!((binary["encoding"].as_str(), binary["content"].as_str()), (Some("base64"), Some("AP94")));
        assert_eq!(binary["bytes"], 3);
        let asked = read_answer("/c", b"hi".to_vec(), Some(Encoding::Base64));
        assert_eq!((asked["encoding"].as_str(), asked["content"].as_str()), (Some("base64"), Some("aGk=")));
        let forced = read_answer("/d", vec![0xff], Some(Encoding::Text));
        assert_eq!(forced["encoding"], "base64", "bytes that are not UTF-8 are never mangled into text");
    }
}
