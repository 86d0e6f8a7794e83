//! `elsewhere`: a host driver that stands for another machine. It runs
//! commands on its inner host (this machine, so nothing needs a second
//! one), except that it answers for another machine's boot id — which is
//! how a sandbox that can only run on the machine tinybox runs on (the
//! microVM's ports are local sockets) tells a remote host from this one.

use async_trait::async_trait;
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::{DriverError, Health, RunParams};
use tinybox_sdk::{HostDriver, HostHandle, serve::DriverInfo};

use crate::Invocation;

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

struct Elsewhere {
    me: Invocation,
}

#[async_trait]
impl HostDriver for Elsewhere {
    fn info(&self) -> DriverInfo {
        self.me.info(&self.me.name, Health::ok())
    }

    async fn run(&self, inner: &HostHandle, mut p: RunParams) -> Result<ExitStatus, DriverError> {
        if p.argv.iter().any(|a| a == BOOT_ID) {
            p.argv = vec!["echo".into(), "00000000-0000-4000-8000-e15e3e4e7e4e".into()];
        }
        inner.run(p).await
    }

    async fn cancel(&self, _exec_id: &str) -> Result<(), DriverError> {
        Ok(())
    }
}

pub fn elsewhere(me: Invocation) -> ! {
    tinybox_sdk::run_host_main(Elsewhere { me })
}
