//! A box made from an image in a sandbox that declares
//! `Feature::ImageRoot`: core resolves the reference in its own image store
//! (pulling it when it is not there yet), records the box as the image's
//! user so `image rm` and `image prune` keep it, and hands the driver the
//! read-only root (docs/adr/0029-namespace-image-boxes.md) and, for one
//! that boots image disks (`Feature::ImageDisk`, the microVM, ADR 0036),
//! the image's base disk, built once per image. The driver never reads
//! the store itself.

use tinybox_sdk::model::{BoxId, SnapshotId};
use tinybox_sdk::protocol::ImageRoot;

use super::Tinybox;
use crate::error::{Error, Result};
use crate::images::{ImageError, Images, Quiet, RegistryOptions};
use crate::model::BoxSpec;

impl Tinybox {
    fn image_store(&self) -> Result<Images> {
        self.images().ok_or_else(|| {
            Error::Image(
                ImageError::io("this engine has no store directory to keep images in", std::io::Error::other("none"))
                    .into(),
            )
        })
    }

    /// Makes sure image `reference` is in the store, pulling it when it is
    /// not: before a box is reserved, so an image that cannot be had
    /// leaves the store as it was.
    pub(super) async fn ensure_image(&self, reference: &str) -> Result<()> {
        let images = self.image_store()?;
        let missing = matches!(images.inspect(reference), Err(ref e) if matches!(e.0, ImageError::NotFound(_)));
        if missing {
            // A task of its own: the pull's future is the registry client's,
            // and this keeps it out of every caller's (which must be Send).
            let reference = reference.to_owned();
            tokio::spawn(async move { images.pull(&reference, &RegistryOptions::default(), &Quiet).await })
                .await
                .map_err(|e| ImageError::io("the pull stopped", std::io::Error::other(e)))
                .map_err(crate::images::ImagesError::from)??;
        }
        Ok(())
    }

    /// The root of the image `reference` for box `id` (with its base disk
    /// when `disk`), which from here on is recorded as one of its users
    /// (undone by [`Tinybox::release_image`]).
    pub(super) async fn image_root(&self, id: &BoxId, reference: &str, disk: bool) -> Result<ImageRoot> {
        let images = self.image_store()?;
        let user = images.add_user(reference, id.as_str())?;
        let (rootfs, config) = match images.rootfs(&user.to_string()) {
            Ok(found) => found,
            Err(e) => {
                let _ = images.remove_user(reference, id.as_str());
                return Err(e.into());
            }
        };
        let disk = match disk {
            true => match images.base_disk(&user.to_string()).await {
                Ok(d) => Some(d),
                Err(e) => {
                    let _ = images.remove_user(reference, id.as_str());
                    return Err(e.into());
                }
            },
            false => None,
        };
        Ok(ImageRoot {
            disk,
            id: user.to_string(),
            rootfs,
            env: config.env,
            working_dir: config.working_dir,
            user: config.user,
            entrypoint: config.entrypoint,
            cmd: config.cmd,
        })
    }

    /// Forgets that box `id` uses an image (whichever: a box from a
    /// snapshot uses its snapshot's). A store with no images is nothing to undo.
    pub(super) fn release_image(&self, id: &BoxId, _spec: &BoxSpec) {
        let Some(images) = self.images() else { return };
        if let Err(e) = images.forget_user(id.as_str()) {
            tracing::warn!("box {id}: cannot forget it as an image's user: {e}");
        }
    }

    /// Records that snapshot `snapshot` of box `id` holds the image the
    /// box uses, so `image rm` and `image prune` keep it while the snapshot lasts.
    pub(super) fn snapshot_holds_image(&self, id: &BoxId, snapshot: &SnapshotId) {
        let Some(images) = self.images() else { return };
        if let Ok(Some(image)) = images.image_of_user(id.as_str())
            && let Err(e) = images.add_user(&image.to_string(), &snapshot_user(snapshot))
        {
            tracing::warn!("snapshot {snapshot}: cannot record it as a user of image {image}: {e}");
        }
    }

    /// A box made from snapshot `snapshot` uses the image the snapshot holds.
    pub(super) fn box_from_snapshot_holds_image(&self, id: &BoxId, snapshot: &SnapshotId) -> Result<()> {
        let Some(images) = self.images() else { return Ok(()) };
        if let Some(image) = images.image_of_user(&snapshot_user(snapshot))? {
            images.add_user(&image.to_string(), id.as_str())?;
        }
        Ok(())
    }

    /// A removed snapshot holds no image any more.
    pub(super) fn snapshot_releases_image(&self, snapshot: &SnapshotId) {
        let Some(images) = self.images() else { return };
        if let Err(e) = images.forget_user(&snapshot_user(snapshot)) {
            tracing::warn!("snapshot {snapshot}: cannot forget it as an image's user: {e}");
        }
    }
}

/// How the image store names a snapshot among an image's users.
fn snapshot_user(snapshot: &SnapshotId) -> String {
    format!("snapshot:{snapshot}")
}
