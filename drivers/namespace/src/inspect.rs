//! `sandbox.inspect`: what a box is now, from its handle — or, for a
//! create whose answer was lost (no handle), from the workspace its
//! namespace and identifier name, as `destroy` finds it.

use std::path::Path;

use tinybox_sdk::Host;
use tinybox_sdk::capture::capture;
use tinybox_sdk::protocol::{BoxRef, BoxState, DriverError, InspectResult};

use super::{Handle, Site, host_env};
use crate::image_box::{self, Dirs};

pub async fn inspect(host: &dyn Host, site: &Site, target: BoxRef) -> Result<InspectResult, DriverError> {
    if let Some(namespace) = target.interrupted_namespace() {
        return inspect_interrupted(host, site, namespace, target.box_id.as_str()).await;
    }
    let handle = Handle::parse(&target.handle)?;
    if let Some(image) = &handle.image {
        let dirs = Dirs::new(Path::new(&handle.workspace));
        return Ok(if image_box::answers(&dirs).await {
            InspectResult {
                state: BoxState::Ready,
                detail: Some(format!(
                    "image {} with its own writable layer in {}; one bwrap holds the box, its agent runs each command; network {}",
                    image.id,
                    handle.workspace,
                    if handle.egress { "egress via slirp4netns behind the fence" } else { "loopback only" }
                )),
            }
        } else {
            InspectResult {
                state: BoxState::Gone,
                detail: Some(format!("the box's processes are gone: {}", dirs.log_tail())),
            }
        });
    }
    let out = capture(host, vec!["test".into(), "-d".into(), handle.workspace.clone()], host_env(), b"").await?;
    Ok(if out.success() {
        let net = match (handle.egress, handle.allowlist) {
            (true, _) => "egress via slirp4netns behind the fence (iptables in the box's network namespace)",
            (_, true) => "allowlist: loopback only, with the egress proxy relayed in",
            _ => "loopback only",
        };
        let owner = match handle.runas {
            Some((u, g)) => format!("bwrap runs as the workspace's owner {u}:{g}"),
            None => "bwrap runs as the caller".to_owned(),
        };
        let filter = if handle.arch.is_some() {
            "setuid and setgid bits refused"
        } else {
            "made before setuid bits were refused: recreate it"
        };
        let limits = if handle.cgroups.is_empty() {
            "no limits".to_owned()
        } else {
            format!("limits in cgroup {}", handle.cgroups.join(", "))
        };
        InspectResult {
            state: BoxState::Ready,
            detail: Some(format!(
                "workspace {} at /workspace; network {net}; {owner}; {filter}; {limits}; a fresh bwrap per command",
                handle.workspace
            )),
        }
    } else {
        InspectResult {
            state: BoxState::Gone,
            detail: Some(format!("workspace {} no longer exists", handle.workspace)),
        }
    })
}

/// What an interrupted create made: its own workspace (an image box's
/// directory, whose agent answers if its bwrap runs) or nothing.
async fn inspect_interrupted(
    host: &dyn Host,
    site: &Site,
    namespace: &str,
    box_id: &str,
) -> Result<InspectResult, DriverError> {
    let Some(own) = site.own_workspace(namespace, box_id) else {
        return Err(DriverError::not_found(
            "this driver has no state directory, so a box with no handle cannot be looked up",
        ));
    };
    let out = capture(host, vec!["test".into(), "-d".into(), own.clone()], host_env(), b"").await?;
    if !out.success() {
        return Ok(InspectResult { state: BoxState::Gone, detail: Some(format!("no workspace {own} was made")) });
    }
    let dirs = Dirs::new(Path::new(&own));
    let holder = site.local.is_some() && dirs.ctl().is_dir();
    Ok(if !holder {
        InspectResult { state: BoxState::Ready, detail: Some(format!("its workspace {own} was made")) }
    } else if image_box::answers(&dirs).await {
        InspectResult {
            state: BoxState::Ready,
            detail: Some(format!("its image box in {own} runs: its agent answers")),
        }
    } else {
        InspectResult {
            state: BoxState::Gone,
            detail: Some(format!("its image box in {own} does not run: {}", dirs.log_tail())),
        }
    })
}
