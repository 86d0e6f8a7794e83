//! Images for front ends: the `tinybox-image` store opened in this store's
//! `images/` directory, with pull, import, ls, inspect, rm and prune, and
//! the users API core keeps as boxes are made from images and removed.
//! Its error is its own (`ImagesError`), gathered into `Error` at the root.

use std::path::{Path, PathBuf};

pub use tinybox_image::{
    Digest, ImageConfig, ImageDetails, ImageError, ImageRecord, ImportSource, Imported, Progress, Pruned, Pulled,
    Quiet, RegistryOptions, Removed,
};

/// Minimal images made here (a static busybox), for the kit and tests.
pub use tinybox_image::minimal;

/// Removes a tree of the image store, never following a symlink.
pub use tinybox_image::beneath::remove_tree;

/// The directory of a store that holds its images.
pub const IMAGES_DIR: &str = "images";

/// An image operation that failed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ImagesError(#[from] pub ImageError);

impl ImagesError {
    /// Whether the fault is the input's (a reference, an archive, a layer, a digest).
    pub fn is_refusal(&self) -> bool {
        self.0.is_refusal()
    }
}

type Result<T> = std::result::Result<T, ImagesError>;

/// The image store of one tinybox store.
#[derive(Debug, Clone)]
pub struct Images {
    store: tinybox_image::ImageStore,
}

impl Images {
    pub fn open(store_dir: &Path) -> Images {
        Images { store: tinybox_image::ImageStore::open(&store_dir.join(IMAGES_DIR)) }
    }

    pub async fn pull(&self, reference: &str, options: &RegistryOptions, progress: &dyn Progress) -> Result<Pulled> {
        Ok(self.store.pull(reference, options, progress).await?)
    }

    /// Imports from `source`; `shown` names it in messages (a path, or `-`).
    pub async fn import(&self, source: ImportSource, shown: &str) -> Result<Vec<Imported>> {
        let (store, shown) = (self.store.clone(), shown.to_owned());
        tokio::task::spawn_blocking(move || store.import(source, &shown))
            .await
            .map_err(|e| ImageError::io("the import stopped", std::io::Error::other(e)))?
            .map_err(Into::into)
    }

    pub fn list(&self) -> Result<Vec<ImageRecord>> {
        Ok(self.store.list()?)
    }

    pub fn inspect(&self, name: &str) -> Result<ImageDetails> {
        Ok(self.store.inspect(name)?)
    }

    pub fn remove(&self, name: &str) -> Result<Removed> {
        Ok(self.store.remove(name)?)
    }

    pub fn prune(&self, dry_run: bool) -> Result<Pruned> {
        Ok(self.store.prune(dry_run)?)
    }

    /// The read-only root filesystem of `name` and its config: what a
    /// sandbox is given to start a box from the image.
    pub fn rootfs(&self, name: &str) -> Result<(PathBuf, ImageConfig)> {
        Ok(self.store.rootfs(name)?)
    }

    /// The image `user` (a box id, or `snapshot:ID`) uses, if any.
    pub fn image_of_user(&self, user: &str) -> Result<Option<Digest>> {
        Ok(self.store.image_of_user(user)?)
    }

    /// Forgets `user` of every image it uses.
    pub fn forget_user(&self, user: &str) -> Result<()> {
        Ok(self.store.forget_user(user)?)
    }

    /// Records that box `box_id` uses `name`; returns the image id to keep.
    pub fn add_user(&self, name: &str, box_id: &str) -> Result<Digest> {
        Ok(self.store.add_user(name, box_id)?)
    }

    pub fn remove_user(&self, name: &str, box_id: &str) -> Result<()> {
        Ok(self.store.remove_user(name, box_id)?)
    }

    /// The base disk of `name` (ext4, read-only), built once per image.
    pub async fn base_disk(&self, name: &str) -> Result<PathBuf> {
        let (store, name) = (self.store.clone(), name.to_owned());
        tokio::task::spawn_blocking(move || store.base_disk(&name))
            .await
            .map_err(|e| ImageError::io("building the base disk stopped", std::io::Error::other(e)))?
            .map_err(Into::into)
    }
}
