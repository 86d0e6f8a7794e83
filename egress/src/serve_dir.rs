//! One box's proxy, as core starts it: everything it needs is in one
//! directory (see [`crate::layout`]), so it can be started again, after a
//! reboot say, from that directory alone.

use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;

use crate::inject::Injector;
use crate::layout;
use crate::log::DecisionLog;
use crate::policy::Policy;
use crate::proxy::{Config, Timeouts, serve};
use crate::resolve::ResolverChoice;
use crate::secrets::{InjectRules, Values};

/// How often the proxy checks that its box still exists (its policy file
/// is there): a box removed behind tinybox's back, or a store deleted
/// whole, does not leave a proxy running for ever.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// Serves the policy in `dir` on `dir`'s socket until the policy file goes
/// away or accepting fails. `ready` is called once the socket listens and
/// the pid file is written.
pub async fn serve_dir(dir: &Path, resolver: &ResolverChoice, ready: impl FnOnce()) -> io::Result<()> {
    // Every path below is relative to the directory: a socket address holds
    // about a hundred bytes, the directory's path may not.
    std::env::set_current_dir(dir)?;
    let text = std::fs::read_to_string(layout::POLICY)?;
    let policy: Policy = serde_json::from_str(&text).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", dir.join(layout::POLICY).display()))
    })?;
    match std::fs::DirBuilder::new().mode(0o755).create(layout::BOX_DIR) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    // Only a dead proxy's socket can be here: its starter holds the lock and found none alive.
    match std::fs::remove_file(layout::SOCKET) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(layout::SOCKET)?;
    let timeouts = Timeouts::default();
    let resolver = resolver.build(timeouts.resolve)?;
    let log = DecisionLog::append_to(Path::new(layout::DECISIONS))?;
    let mut config = Config::new(policy, crate::host_addresses()?, resolver, log);
    config.timeouts = timeouts;
    config.check_sni = std::env::var_os(layout::UNCHECKED_SNI_VAR).is_none_or(|v| v != "1");
    config.injector = injector()?.map(Arc::new);
    write_pid()?;
    ready();
    tokio::select! {
        served = serve(listener, Arc::new(config)) => served,
        () = policy_removed() => Ok(()),
    }
}

/// For a box with secrets (its rules in the directory): the injector, the
/// values read whole from standard input (core's pipe), and its CA's
/// bundle written for the box to trust. The CA's key stays in memory.
fn injector() -> io::Result<Option<Injector>> {
    let text = match std::fs::read(layout::SECRETS) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |what: &str, e: serde_json::Error| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"));
    let rules: InjectRules = serde_json::from_slice(&text).map_err(|e| bad(layout::SECRETS, e))?;
    let mut values = Vec::new();
    std::io::stdin().read_to_end(&mut values)?;
    let values: Values =
        serde_json::from_slice(&values).map_err(|e| bad("the secrets' values on standard input", e))?;
    let extra = std::env::var_os(layout::UPSTREAM_CA_VAR).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let injector = Injector::new(rules, values, extra.as_deref())?;
    let tmp = format!("{}.tmp", layout::CA_BUNDLE);
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&tmp)?;
    f.write_all(injector.bundle().as_bytes())?;
    f.sync_all()?;
    std::fs::rename(tmp, layout::CA_BUNDLE)?;
    Ok(Some(injector))
}

fn write_pid() -> io::Result<()> {
    let tmp = format!("{}.tmp", layout::PID);
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{}", std::process::id())?;
    f.sync_all()?;
    std::fs::rename(tmp, layout::PID)
}

async fn policy_removed() {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    loop {
        tick.tick().await;
        if !Path::new(layout::POLICY).exists() {
            return;
        }
    }
}
