//! The driver's one way to its machine: commands run on the box's host
//! through core (the reverse `host.run`), never a local spawn or a socket.
//! Behind a trait so the driver's logic is tested against a recording fake.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tinybox_sdk::HostHandle;
use tinybox_sdk::capture::Captured;
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::{DriverError, RunParams};

#[async_trait]
pub trait Host: Send + Sync {
    /// Runs a helper command and returns what it printed.
    async fn capture(&self, argv: Vec<String>) -> Result<Captured, DriverError>;
    /// Runs a box's command with the streams its exec was given.
    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError>;
}

#[async_trait]
impl Host for HostHandle {
    async fn capture(&self, argv: Vec<String>) -> Result<Captured, DriverError> {
        tinybox_sdk::capture::capture(self, argv, BTreeMap::new(), b"").await
    }

    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError> {
        HostHandle::run(self, params).await
    }
}
