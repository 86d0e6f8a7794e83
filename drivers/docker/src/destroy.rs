//! `sandbox.destroy`: a box's container goes, and with it the holder of
//! an egress box's fenced network namespace, a fence container an
//! interruption left (fence.rs), and the `-cp` container an interrupted
//! copy out of the stopped box left (from_snapshot.rs). A box whose create never answered is
//! found by its names alone, each claimed so that no container the daemon
//! is still making under it can outlive the removal.

use tinybox_sdk::protocol::{BoxRef, DriverError};

use crate::argv;
use crate::failure::{self, Cause};
use crate::fence;
use crate::host::{Capture, Host};
use crate::sandbox::{CLAIM_POLL, CLAIM_WAIT, Docker, Handle, SETTLE_WAIT};

impl Docker {
    pub async fn destroy(&self, host: &dyn Host, target: BoxRef) -> Result<(), DriverError> {
        // A box whose create never answered is found by its name alone.
        if let Some(namespace) = target.interrupted_namespace() {
            return self.destroy_interrupted(host, namespace, target.box_id.as_str()).await;
        }
        let handle = Handle::of(&target)?;
        let removed = remove_settled(host, &handle.container).await;
        // The holder goes after the box that joined its namespace, also
        // when the box's container had already gone.
        if handle.netns.is_some() {
            fence::remove_helpers(host, &handle.container).await?;
        }
        // An interrupted copy out of the stopped box may have left its
        // container: named after the box's own, so found from the record.
        match remove_settled(host, &crate::from_snapshot::helper_of(&handle.container)).await {
            Err(e) if e.code != tinybox_sdk::protocol::ErrorCode::NotFound => return Err(e),
            _ => {}
        }
        removed
    }

    /// Removes the containers of a create that never answered: the box's,
    /// then its network holder's (each claimed, see [`Self::claim_and_remove`]),
    /// and a fence container's.
    async fn destroy_interrupted(&self, host: &dyn Host, namespace: &str, box_id: &str) -> Result<(), DriverError> {
        let container = argv::container_name(namespace, box_id);
        let removed = self.claim_and_remove(host, &container, namespace, box_id).await?;
        let holder = self.claim_and_remove(host, &fence::holder_name(&container), namespace, box_id).await?;
        fence::remove_if_there(host, &fence::helper_name(&container)).await?;
        if removed || holder {
            Ok(())
        } else {
            Err(DriverError::not_found(format!("no container {container}: box {box_id}'s create made none")))
        }
    }

    /// Removes container `name` of a create that never answered, including
    /// one the daemon is still making: a killed `docker run` client leaves
    /// its create request running in the daemon, which reserves the name
    /// at once but registers the container (and answers `docker rm`) only
    /// once its layer is made, possibly after a first `rm` found nothing.
    /// So the name is claimed with a container of this driver's own that
    /// is never started: a claim refused because the name is in use means
    /// a container is (being) made under it, which is removed (waiting,
    /// bounded, for the daemon to finish it) before claiming again; a claim
    /// that succeeds proves no create holds the name, and no late one can
    /// finish under it, so removing the claim leaves nothing. Without the
    /// base image on the host the name cannot be claimed: one `rm` is all.
    /// Whether a container of the create's was there.
    async fn claim_and_remove(
        &self,
        host: &dyn Host,
        name: &str,
        namespace: &str,
        box_id: &str,
    ) -> Result<bool, DriverError> {
        let remove = async || -> Result<bool, DriverError> {
            let done = host.capture(argv::remove(name)).await?;
            // A removal already under way (a one-step run's `--rm` as its
            // command ends) is one: the claim below waits until it is done.
            if done.success() || failure::cause(&done) == Cause::RemovalInProgress {
                Ok(true)
            } else if failure::cause(&done) == Cause::NoSuchContainer {
                Ok(false)
            } else {
                Err(failure::error(&format!("docker rm {name}"), &done))
            }
        };
        let mut removed = remove().await?;
        let image = &self.config.base_image;
        if image.is_empty() || image.starts_with('-') {
            return Ok(removed);
        }
        let claim = argv::claim(name, box_id, namespace, image);
        let start = std::time::Instant::now();
        loop {
            let claimed = host.capture(claim.clone()).await?;
            if claimed.success() {
                remove().await?;
                break;
            }
            match failure::cause(&claimed) {
                Cause::NameInUse if start.elapsed() < CLAIM_WAIT => {
                    // The daemon is still making it: poll until it is
                    // registered and removable.
                    removed |= remove().await?;
                    tokio::time::sleep(CLAIM_POLL).await;
                }
                Cause::NameInUse => {
                    return Err(DriverError::failed(format!(
                        "container {name} was still being made by the docker daemon {}s after its create \
                         was interrupted; run `tinybox rm` again",
                        CLAIM_WAIT.as_secs()
                    )));
                }
                Cause::NoSuchImage => break,
                _ => return Err(failure::error(&format!("docker create {name}"), &claimed)),
            }
        }
        Ok(removed)
    }
}

/// `docker rm --force`, waiting out (bounded) a removal an earlier,
/// interrupted `rm` started, which goes on in the daemon: its end is this one's.
async fn remove_settled(host: &dyn Host, container: &str) -> Result<(), DriverError> {
    let start = std::time::Instant::now();
    let mut waited = false;
    loop {
        let done = host.capture(argv::remove(container)).await?;
        if done.success() {
            return Ok(());
        }
        match failure::cause(&done) {
            Cause::RemovalInProgress if start.elapsed() < SETTLE_WAIT => {
                waited = true;
                tokio::time::sleep(CLAIM_POLL).await;
            }
            // The removal waited out has ended: the container is gone.
            Cause::NoSuchContainer if waited => return Ok(()),
            _ => return Err(failure::error(&format!("docker rm {container}"), &done)),
        }
    }
}
