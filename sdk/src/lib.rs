//! The tinybox driver SDK: everything a driver author needs and nothing core
//! keeps to itself.
//!
//! - [`model`]: the shared vocabulary (names, capabilities, resources, sources).
//! - [`protocol`]: the wire messages of the driver protocol, serde only.
//! - [`peer`]: one end of a JSON-RPC connection, used by core and drivers alike.
//! - [`serve`]: the [`HostDriver`](serve::HostDriver) and
//!   [`SandboxDriver`](serve::SandboxDriver) traits and the loop that serves them.
//! - [`stdio`]: the descriptor-passing data path for a command's streams.
//! - [`process`]: spawning and cancelling local processes for a driver.
//! - [`capture`]: helper commands on the host whose output a driver reads.
//! - [`carried_env`]: a box's environment carried past the host's helpers,
//!   never on a command line.
//! - `testing` (feature `testing`): a recording fake [`Host`] for a driver's
//!   unit tests.
//!
//! It deliberately holds no policy: whether an operation is allowed is core's
//! decision alone, made from the capabilities a driver declares here.

pub mod capture;
pub mod carried_env;
pub mod fence;
pub mod model;
pub mod peer;
pub mod process;
pub mod protocol;
pub mod pty;
pub mod serve;
pub mod stdio;
#[cfg(feature = "testing")]
pub mod testing;

pub use serve::{DriverInfo, Host, HostDriver, HostHandle, SandboxDriver, run_host_main, run_sandbox_main};
