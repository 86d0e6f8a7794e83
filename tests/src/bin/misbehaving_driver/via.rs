//! `via`: an honest host driver that runs nothing itself. Every run goes to
//! its inner host, with its configured label appended to the command's VIA
//! variable — so tests can see host chains (a jump box), the handshake's
//! configuration, and cancellation travelling down the chain.

use async_trait::async_trait;
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::{DriverError, Health, RunParams};
use tinybox_sdk::{HostDriver, HostHandle, serve::DriverInfo};

use crate::Invocation;

struct Via {
    me: Invocation,
}

#[async_trait]
impl HostDriver for Via {
    fn info(&self) -> DriverInfo {
        self.me.info(&self.me.name, Health::ok())
    }

    async fn run(&self, inner: &HostHandle, mut p: RunParams) -> Result<ExitStatus, DriverError> {
        let label = inner
            .config()
            .get("label")
            .and_then(|l| l.as_str())
            .ok_or_else(|| DriverError::invalid("via needs {\"label\": ...} in its configuration"))?
            .to_owned();
        let via = match p.env.get("VIA") {
            Some(before) => format!("{before},{label}"),
            None => label,
        };
        p.env.insert("VIA".into(), via);
        inner.run(p).await
    }

    async fn cancel(&self, _exec_id: &str) -> Result<(), DriverError> {
        // Nothing runs here: core cancels what this host forwarded.
        Ok(())
    }
}

pub fn via(me: Invocation) -> ! {
    tinybox_sdk::run_host_main(Via { me })
}
