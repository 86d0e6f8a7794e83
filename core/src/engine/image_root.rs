//! A box from an image in this store, for a sandbox that boots image disks
//! (`Feature::ImageDisk`, the microVM): core resolves the reference in its
//! own image store, has the base disk built once per image, and sends the
//! driver the prepared root (`CreateParams::image`); the driver never reads
//! the store. The box is recorded as a user of the image, so `image rm`
//! and `image prune` keep it (and its disk) while the box exists.

use tinybox_sdk::model::{BoxId, Feature, WorkspaceSource};
use tinybox_sdk::protocol::{ImageRoot, ImageRootConfig};

use super::Tinybox;
use crate::driver::SandboxLink;
use crate::error::Result;
use crate::images::{ImageError, Images, ImagesError};
use crate::model::BoxSpec;

impl Tinybox {
    /// The image `spec` starts from, when its sandbox boots image disks;
    /// `None` for any other source or sandbox. Refuses, before anything is
    /// made, an image this store does not hold.
    pub(super) fn image_reference<'a>(&self, link: &SandboxLink, spec: &'a BoxSpec) -> Result<Option<&'a str>> {
        let Some(WorkspaceSource::OciImage { reference }) = &spec.source else { return Ok(None) };
        if !link.capabilities().has(&Feature::ImageDisk) {
            return Ok(None);
        }
        self.image_store()?.rootfs(reference)?;
        Ok(Some(reference))
    }

    /// The prepared root of `reference` for box `id`, its base disk built
    /// if it is not yet, and the box recorded as the image's user.
    pub(super) async fn image_root(&self, reference: &str, id: &BoxId) -> Result<ImageRoot> {
        let images = self.image_store()?;
        let (rootfs, config) = images.rootfs(reference)?;
        let disk = images.base_disk(reference).await?;
        images.add_user(reference, id.as_str())?;
        Ok(ImageRoot {
            rootfs,
            config: ImageRootConfig {
                env: config.env,
                workdir: config.working_dir,
                user: config.user,
                entrypoint: config.entrypoint,
                cmd: config.cmd,
            },
            disk: Some(disk),
        })
    }

    /// Forgets box `id` on every image it used (none: nothing to do).
    pub(super) fn drop_image_user(&self, id: &BoxId) -> Result<()> {
        match self.images() {
            Some(images) => Ok(images.drop_user(id.as_str())?),
            None => Ok(()),
        }
    }

    fn image_store(&self) -> Result<Images> {
        self.images().ok_or_else(|| ImagesError(ImageError::NoStore).into())
    }
}
