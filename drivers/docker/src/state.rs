//! A container's state, read from `docker container inspect` and mapped
//! onto a box's: running is Ready (a box is Running only while a command
//! executes, and the keepalive loop is not a command); every other state
//! that still exists is Stopped; no container is Gone.

use serde::Deserialize;
use tinybox_sdk::protocol::{BoxState, InspectResult};

/// The fields of docker's `.State` this driver reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerState {
    pub status: String,
    #[serde(default, rename = "OOMKilled")]
    pub oom_killed: bool,
    #[serde(default)]
    pub exit_code: i64,
}

/// Maps docker's state onto a box's, saying which container and why.
pub fn to_box_state(box_id: &str, container: &str, s: &ContainerState) -> InspectResult {
    match s.status.as_str() {
        "running" => InspectResult { state: BoxState::Ready, detail: Some(format!("container {container} running")) },
        status => {
            let mut detail = format!("container {container} is {status}");
            if status == "exited" {
                detail.push_str(&format!(" with status {}", s.exit_code));
            }
            if s.oom_killed {
                detail.push_str(", killed for exceeding its memory limit");
            }
            // Its files are in the container still: resume takes them back.
            detail.push_str(&format!(
                " (stopped outside tinybox); `tinybox resume {box_id}` brings it back with its files, \
                 `tinybox rm {box_id}` removes it"
            ));
            InspectResult { state: BoxState::Stopped, detail: Some(detail) }
        }
    }
}

/// The box a container that no longer exists leaves behind.
pub fn gone(container: &str) -> InspectResult {
    InspectResult {
        state: BoxState::Gone,
        detail: Some(format!(
            "container {container} no longer exists (removed outside tinybox); `tinybox rm` forgets the box"
        )),
    }
}
