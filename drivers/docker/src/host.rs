//! The driver's one way to its machine: commands run on the box's host
//! through core (the reverse `host.run`), never a local spawn or a socket.
//! The logic takes the sdk's `&dyn Host`, so its unit tests run it against
//! the sdk's recording fake (`tinybox_sdk::testing::FakeHost`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use tinybox_sdk::capture::Captured;
use tinybox_sdk::protocol::DriverError;

pub use tinybox_sdk::Host;

/// docker's helper commands (`inspect`, `rm`, `commit`...): no environment
/// of their own and no input but a seccomp profile, only what they print.
#[async_trait]
pub trait Capture {
    /// Runs a helper command and returns what it printed.
    async fn capture(&self, argv: Vec<String>) -> Result<Captured, DriverError>;

    /// The same, with `stdin` as the command's input.
    async fn capture_with_input(&self, argv: Vec<String>, stdin: &[u8]) -> Result<Captured, DriverError>;
}

#[async_trait]
impl<H: Host + ?Sized> Capture for H {
    async fn capture(&self, argv: Vec<String>) -> Result<Captured, DriverError> {
        tinybox_sdk::capture::capture(self, argv, BTreeMap::new(), b"").await
    }

    async fn capture_with_input(&self, argv: Vec<String>, stdin: &[u8]) -> Result<Captured, DriverError> {
        tinybox_sdk::capture::capture(self, argv, BTreeMap::new(), stdin).await
    }
}
