//! QEMU's machine protocol (QMP) on the box's `qmp.sock`: one connection
//! per command, the greeting and `qmp_capabilities` first, events skipped.
//! Used to hold a guest still while its disk is copied (`snapshot`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tinybox_sdk::protocol::DriverError;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

pub const SOCKET: &str = "qmp.sock";

pub fn socket(dir: &Path) -> PathBuf {
    dir.join(SOCKET)
}

/// Runs `execute` (with `arguments`) on box `dir`'s QEMU; its `return`.
pub async fn command(
    dir: &Path,
    execute: &str,
    arguments: Option<serde_json::Value>,
) -> Result<serde_json::Value, DriverError> {
    let fail = |e: String| DriverError::failed(format!("QEMU's monitor of {} failed {execute}: {e}", dir.display()));
    let work = async {
        let stream = UnixStream::connect(socket(dir)).await.map_err(|e| e.to_string())?;
        let (rd, mut wr) = stream.into_split();
        let mut lines = BufReader::new(rd).lines();
        let mut answer = async || -> Result<serde_json::Value, String> {
            loop {
                let line = lines.next_line().await.map_err(|e| e.to_string())?.ok_or("the monitor closed")?;
                let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
                if let Some(r) = v.get("return") {
                    return Ok(r.clone());
                }
                if let Some(e) = v.get("error") {
                    return Err(e["desc"].as_str().unwrap_or("an error").to_owned());
                }
                // The greeting and events: not an answer.
            }
        };
        let mut send = async |v: serde_json::Value| -> Result<(), String> {
            let mut bytes = serde_json::to_vec(&v).expect("json");
            bytes.push(b'\n');
            wr.write_all(&bytes).await.map_err(|e| e.to_string())
        };
        send(serde_json::json!({"execute": "qmp_capabilities"})).await?;
        answer().await?;
        let mut msg = serde_json::json!({ "execute": execute });
        if let Some(a) = arguments {
            msg["arguments"] = a;
        }
        send(msg).await?;
        answer().await
    };
    match tokio::time::timeout(Duration::from_secs(30), work).await {
        Ok(r) => r.map_err(fail),
        Err(_) => Err(fail("no answer within 30 s".into())),
    }
}
