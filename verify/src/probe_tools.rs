//! What the probes share: a shell script run in the box under test, and a
//! process of the caller's the box must not reach (a bystander). Beneath
//! every probe file.

use tinybox_core::Result;
use tinybox_sdk::model::BoxId;

use super::{Kit, Output, run};

pub(super) async fn sh(kit: &Kit<'_>, id: &BoxId, script: &str) -> Result<Output> {
    run(kit.tb, id, &["sh", "-c", script], &[], std::future::pending()).await
}

/// A process of the caller's that the box must not reach; killed on drop.
pub(super) struct Bystander(std::process::Child);

impl Bystander {
    pub(super) fn start() -> Result<Bystander> {
        Bystander::start_marked("")
    }

    /// A bystander whose environment carries `mark` (TINYBOX_KIT_MARK).
    pub(super) fn start_marked(mark: &str) -> Result<Bystander> {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .env("TINYBOX_KIT_MARK", mark)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| tinybox_core::Error::io("cannot start a bystander process (sleep) for the probe", e))?;
        Ok(Bystander(child))
    }

    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
