//! `misbehaving-driver`: one test driver that breaks the protocol in every
//! way core must survive. Tests install it as a symlink named
//! `tinybox-driver-<mode>`; the mode is read from that name, so one binary
//! serves every case. Except in `wrong-name`, the name it reports in its
//! handshake is that suffix, as core requires.
//!
//! - [`raw`]: modes that fail before or instead of a proper handshake, so
//!   they speak (or refuse to speak) JSON-RPC by hand.
//! - [`scripted`]: modes built on the SDK's serve loop that handshake
//!   properly and then misbehave, or declare something core must refuse
//!   (or, `lowers-isolation`, cap).
//! - [`overclaims`] and [`unconfined_ns`]: sandboxes that declare more
//!   isolation than they give, which the conformance kit must fail.
//! - [`relay`] and [`via`]: honest drivers — a sandbox that reaches its host
//!   only through the reverse `host.run` call, and a host that runs
//!   everything on its inner host.

// The crate root's modules resolve beside it, so name their directory.
#[path = "misbehaving_driver/elsewhere.rs"]
mod elsewhere;
#[path = "misbehaving_driver/overclaims.rs"]
mod overclaims;
#[path = "misbehaving_driver/raw.rs"]
mod raw;
#[path = "misbehaving_driver/relay.rs"]
mod relay;
#[path = "misbehaving_driver/scripted.rs"]
mod scripted;
#[path = "misbehaving_driver/unconfined_ns.rs"]
mod unconfined_ns;
#[path = "misbehaving_driver/via.rs"]
mod via;

use std::path::{Path, PathBuf};

use tinybox_sdk::protocol::Health;
use tinybox_sdk::serve::DriverInfo;

/// The executable name's prefix every driver shares.
const PREFIX: &str = "tinybox-driver-";

/// How this process was invoked: its mode and where its symlink lives.
pub struct Invocation {
    /// The suffix after `tinybox-driver-`, also the name core expects.
    pub name: String,
    /// The directory holding the symlink core started (the test's temp dir).
    pub dir: PathBuf,
}

impl Invocation {
    fn from_args() -> Option<Invocation> {
        // argv[0], not current_exe(): the latter resolves the symlink.
        let arg0 = PathBuf::from(std::env::args_os().next()?);
        let name = arg0.file_name()?.to_str()?.strip_prefix(PREFIX)?.to_owned();
        let dir = arg0.parent().map(Path::to_path_buf).unwrap_or_default();
        Some(Invocation { name, dir })
    }

    /// A healthy driver's self-description under `name`.
    pub fn info(&self, name: &str, health: Health) -> DriverInfo {
        DriverInfo { name: name.to_owned(), version: env!("CARGO_PKG_VERSION").to_owned(), health }
    }
}

fn main() {
    let Some(me) = Invocation::from_args() else {
        eprintln!("misbehaving-driver: run me as a symlink named {PREFIX}<mode>");
        std::process::exit(2);
    };
    match me.name.as_str() {
        "exit-early" => raw::exit_early(),
        "wrong-version" => raw::wrong_version(&me),
        "garbage" => raw::garbage(),
        "hang" => raw::hang(),
        "talks-first" => raw::talks_first(),
        "dies-mid-call" => scripted::dies_mid_call(me),
        "dies-mid-exec" => scripted::dies_mid_exec(me),
        "hangs-mid-call" => scripted::hangs_mid_call(me),
        "hangs-mid-exec" => scripted::hangs_mid_exec(me),
        "declares-nothing" => scripted::declares_nothing(me),
        "liar" => scripted::liar(me),
        "lowers-isolation" => scripted::lowers_isolation(me),
        "wrong-role" => scripted::wrong_role(me),
        "wrong-name" => scripted::wrong_name(me),
        "unhealthy" => scripted::unhealthy(me),
        "relay" => relay::relay(me),
        "overclaims" => overclaims::overclaims(me),
        "unconfined-ns" => unconfined_ns::unconfined_ns(me),
        "via" => via::via(me),
        "elsewhere" => elsewhere::elsewhere(me),
        other => {
            eprintln!("misbehaving-driver: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
}
