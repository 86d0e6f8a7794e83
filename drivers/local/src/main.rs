//! `tinybox-driver-local`: the host driver for this machine. It runs each
//! command as a child process with the descriptors core handed over, in a
//! process group of its own so a cancellation reaches everything it started.
//!
//! It confines nothing — that is a sandbox's job — and it keeps no state
//! beyond the runs in flight.

use async_trait::async_trait;
use tinybox_sdk::model::{ExitStatus, TtySize};
use tinybox_sdk::process::Processes;
use tinybox_sdk::protocol::{DriverError, Health, RunParams};
use tinybox_sdk::{DriverInfo, HostDriver, HostHandle};

struct LocalHost {
    processes: Processes,
}

#[async_trait]
impl HostDriver for LocalHost {
    fn info(&self) -> DriverInfo {
        DriverInfo { name: "local".into(), version: env!("CARGO_PKG_VERSION").into(), health: Health::ok() }
    }

    async fn run(&self, _inner: &HostHandle, params: RunParams) -> Result<ExitStatus, DriverError> {
        self.processes.run(&params).await
    }

    async fn cancel(&self, exec_id: &str) -> Result<(), DriverError> {
        self.processes.cancel(exec_id);
        Ok(())
    }

    async fn resize(&self, exec_id: &str, size: TtySize) -> Result<(), DriverError> {
        self.processes.resize(exec_id, size)
    }

    async fn shutdown(&self) {
        self.processes.kill_all();
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("tinybox-driver-local {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    tinybox_sdk::run_host_main(LocalHost { processes: Processes::new() })
}
