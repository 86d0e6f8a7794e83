//! The image store on disk, under the directory core gives it:
//!
//! ```text
//! blobs/sha256/<hex>        every blob, named by its digest
//! layers/sha256/<diff id>/  each layer unpacked once: root/ and meta.json
//! rootfs/sha256/<image id>/ each image's layers stacked: a read-only root
//! disks/sha256/<image id>   its base disk, for a microVM, when one asked (disk.rs)
//! images.json               the records (records.rs)
//! tmp/                      what is being written; renamed into place
//! lock, records.lock        pulls share `lock`; rm and prune hold it alone
//! ```
//!
//! Everything under blobs/, layers/ and rootfs/ is complete and verified
//! the moment it has its name, because it gets that name by a rename from
//! tmp/ after the check. The records are written last, so an image is
//! listed only once everything it names is there.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::beneath;
use crate::blobs::{BlobWriter, io_err};
use crate::config::ImageConfig;
use crate::digest::Digest;
use crate::error::{ImageError, Result};
use crate::records::{ImageRecord, Records};

#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
}

/// What `remove` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Removed {
    pub id: Digest,
    /// The references that named it and are gone.
    pub refs: Vec<String>,
    /// Whether the image itself went (not only one of its names).
    pub deleted: bool,
    pub reclaimed_bytes: u64,
}

/// What `prune` removed (or, dry, would remove).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Pruned {
    pub images: Vec<PrunedImage>,
    pub blobs: usize,
    pub layers: usize,
    pub reclaimed_bytes: u64,
    pub dry_run: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PrunedImage {
    pub id: Digest,
    pub refs: Vec<String>,
}

/// An image with its config and where its root filesystem is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageDetails {
    #[serde(flatten)]
    pub record: ImageRecord,
    pub config: ImageConfig,
    pub rootfs: PathBuf,
}

impl ImageStore {
    /// The store in `root`. Opening makes nothing; the first pull or
    /// import makes the directories.
    pub fn open(root: &Path) -> ImageStore {
        ImageStore { root: root.to_owned() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs/sha256")
    }
    pub(crate) fn layers_dir(&self) -> PathBuf {
        self.root.join("layers/sha256")
    }
    pub(crate) fn rootfs_dir(&self) -> PathBuf {
        self.root.join("rootfs/sha256")
    }
    pub(crate) fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.blobs_dir().join(digest.hex())
    }

    pub fn layer_dir(&self, diff_id: &Digest) -> PathBuf {
        self.layers_dir().join(diff_id.hex())
    }

    /// The root filesystem of image `id` (made when it was stored).
    pub fn rootfs_path(&self, id: &Digest) -> PathBuf {
        self.rootfs_dir().join(id.hex())
    }

    pub(crate) fn make_dirs(&self) -> Result<()> {
        for dir in [self.blobs_dir(), self.layers_dir(), self.rootfs_dir(), self.tmp_dir()] {
            std::fs::create_dir_all(&dir).map_err(|e| ImageError::io(format!("cannot make {}", dir.display()), e))?;
        }
        Ok(())
    }

    fn lock_file(&self, name: &str) -> Result<File> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| ImageError::io(format!("cannot make {}", self.root.display()), e))?;
        let path = self.root.join(name);
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| ImageError::io(format!("cannot open {}", path.display()), e))
    }

    /// Held by every pull and import for its whole run.
    pub(crate) fn shared_lock(&self) -> Result<File> {
        let f = self.lock_file("lock")?;
        f.lock_shared().map_err(io_err("cannot lock the image store"))?;
        Ok(f)
    }

    /// Held by rm and prune: no pull is between fetching a blob and recording it.
    pub(crate) fn exclusive_lock(&self) -> Result<File> {
        let f = self.lock_file("lock")?;
        f.lock().map_err(io_err("cannot lock the image store"))?;
        Ok(f)
    }

    pub(crate) fn blob_writer(&self) -> Result<BlobWriter> {
        BlobWriter::new(&self.tmp_dir(), &self.blobs_dir())
    }

    pub(crate) fn temp_dir(&self, prefix: &str) -> Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(self.tmp_dir())
            .map_err(io_err("cannot make a temporary directory in the image store"))
    }

    fn records_path(&self) -> PathBuf {
        self.root.join("images.json")
    }

    pub fn records(&self) -> Result<Records> {
        let path = self.records_path();
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| ImageError::Corrupt { path, detail: e.to_string() })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Records::default()),
            Err(e) => Err(ImageError::io(format!("cannot read {}", path.display()), e)),
        }
    }

    /// Changes the records under their lock; nothing is written if `change` fails.
    pub(crate) fn update<T>(&self, change: impl FnOnce(&mut Records) -> Result<T>) -> Result<T> {
        let lock = self.lock_file("records.lock")?;
        lock.lock().map_err(io_err("cannot lock the image records"))?;
        let mut records = self.records()?;
        let out = change(&mut records)?;
        let json = serde_json::to_vec_pretty(&records).expect("records serialize");
        let mut tmp = tempfile::Builder::new()
            .prefix(".images.json")
            .tempfile_in(&self.root)
            .map_err(io_err("cannot write the image records"))?;
        std::io::Write::write_all(&mut tmp, &json).map_err(io_err("cannot write the image records"))?;
        tmp.as_file().sync_all().map_err(io_err("cannot write the image records"))?;
        tmp.persist(self.records_path()).map_err(|e| ImageError::io("cannot write the image records", e.error))?;
        Ok(out)
    }

    pub fn list(&self) -> Result<Vec<ImageRecord>> {
        let mut images: Vec<_> = self.records()?.images.into_values().collect();
        images.sort_by(|a, b| b.created.cmp(&a.created).then(a.id.cmp(&b.id)));
        Ok(images)
    }

    /// The image `name` means: a reference (`busybox`, `host:5000/x:1`),
    /// an image id (`sha256:...`), or a unique prefix of one's hex.
    pub fn resolve(&self, name: &str) -> Result<ImageRecord> {
        find(&self.records()?, name).cloned()
    }

    pub fn inspect(&self, name: &str) -> Result<ImageDetails> {
        let record = self.resolve(name)?;
        let config = self.config(&record.id)?;
        let rootfs = self.rootfs_path(&record.id);
        Ok(ImageDetails { record, config, rootfs })
    }

    /// The image's config, from its stored (and re-checked) config blob.
    pub fn config(&self, id: &Digest) -> Result<ImageConfig> {
        let bytes = crate::blobs::read_verified(&self.blob_path(id), id)?;
        ImageConfig::parse(&bytes, id)
    }

    /// Where the image's read-only root filesystem is, and its config: what
    /// a sandbox needs to start a box from it.
    pub fn rootfs(&self, name: &str) -> Result<(PathBuf, ImageConfig)> {
        let record = self.resolve(name)?;
        Ok((self.rootfs_path(&record.id), self.config(&record.id)?))
    }

    /// Records that box `user` uses image `name`; returns the image's id
    /// (what the box should keep: a tag may move).
    pub fn add_user(&self, name: &str, user: &str) -> Result<Digest> {
        self.update(|records| {
            let id = find(records, name)?.id.clone();
            records.images.get_mut(&id).expect("found").users.insert(user.to_owned());
            Ok(id)
        })
    }

    /// Forgets that `user` uses image `name` (no error if it did not).
    pub fn remove_user(&self, name: &str, user: &str) -> Result<()> {
        self.update(|records| {
            let id = match find(records, name) {
                Ok(image) => image.id.clone(),
                Err(ImageError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
            };
            records.images.get_mut(&id).expect("found").users.remove(user);
            Ok(())
        })
    }

    /// The image `user` uses, if any.
    pub fn image_of_user(&self, user: &str) -> Result<Option<Digest>> {
        Ok(self.records()?.images.values().find(|i| i.users.contains(user)).map(|i| i.id.clone()))
    }

    /// Forgets `user` on every image (no error if it used none): what a
    /// removed box or snapshot does, whichever tag it was made by and
    /// wherever it moved.
    pub fn forget_user(&self, user: &str) -> Result<()> {
        if !self.records_path().is_file() {
            return Ok(());
        }
        self.update(|records| {
            for image in records.images.values_mut() {
                image.users.remove(user);
            }
            Ok(())
        })
    }

    /// Removes `name`: one reference, when the image has others; else the
    /// image, with whatever of it no other image shares. Refused while a
    /// box uses it.
    pub fn remove(&self, name: &str) -> Result<Removed> {
        let _lock = self.exclusive_lock()?;
        let reference = crate::reference::normalize(name).ok();
        let (removed, _) = self.update(|records| {
            let image = find(records, name)?.clone();
            if !image.users.is_empty() {
                return Err(ImageError::InUse { image: name.to_owned(), boxes: image.users.iter().cloned().collect() });
            }
            if let Some(r) = reference.as_ref().filter(|r| image.refs.contains(*r) && image.refs.len() > 1) {
                records.images.get_mut(&image.id).expect("found").refs.remove(r);
                return Ok((Removed { id: image.id, refs: vec![r.clone()], deleted: false, reclaimed_bytes: 0 }, ()));
            }
            records.images.remove(&image.id);
            Ok((
                Removed { id: image.id, refs: image.refs.into_iter().collect(), deleted: true, reclaimed_bytes: 0 },
                (),
            ))
        })?;
        if !removed.deleted {
            return Ok(removed);
        }
        let (_, _, bytes) = self.sweep(&self.records()?, false)?;
        Ok(Removed { reclaimed_bytes: bytes, ..removed })
    }

    /// Removes every image no box uses, then every blob, layer and root
    /// filesystem no image needs, and whatever an interrupted pull left in
    /// tmp/. `dry_run` only says what would go.
    pub fn prune(&self, dry_run: bool) -> Result<Pruned> {
        let _lock = self.exclusive_lock()?;
        let mut records = self.records()?;
        let unused: Vec<_> = records.images.values().filter(|i| i.users.is_empty()).cloned().collect();
        if !dry_run && !unused.is_empty() {
            records = self.update(|records| {
                records.images.retain(|_, i| !i.users.is_empty());
                Ok(records.clone())
            })?;
        } else {
            records.images.retain(|_, i| !i.users.is_empty());
        }
        let (blobs, layers, reclaimed_bytes) = self.sweep(&records, dry_run)?;
        let images = unused.into_iter().map(|i| PrunedImage { id: i.id, refs: i.refs.into_iter().collect() }).collect();
        Ok(Pruned { images, blobs, layers, reclaimed_bytes, dry_run })
    }

    /// Removes what `records` do not need; returns how many blobs and
    /// layers went and roughly how many bytes.
    fn sweep(&self, records: &Records, dry_run: bool) -> Result<(usize, usize, u64)> {
        let (blobs, layers) = records.referenced();
        let images: BTreeSet<String> = records.images.keys().map(|d| d.hex().to_owned()).collect();
        let mut bytes = 0;
        let blobs_gone = self.sweep_dir(&self.blobs_dir(), &blobs, dry_run, &mut bytes)?;
        let layers_gone = self.sweep_dir(&self.layers_dir(), &layers, dry_run, &mut bytes)?;
        self.sweep_dir(&self.rootfs_dir(), &images, dry_run, &mut 0)?;
        // A base disk is the image's own (not shared with another): its bytes count.
        self.sweep_dir(&self.disks_dir(), &images, dry_run, &mut bytes)?;
        self.sweep_dir(&self.tmp_dir(), &BTreeSet::new(), dry_run, &mut bytes)?;
        Ok((blobs_gone, layers_gone, bytes))
    }

    fn sweep_dir(&self, dir: &Path, keep: &BTreeSet<String>, dry_run: bool, bytes: &mut u64) -> Result<usize> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(ImageError::io(format!("cannot read {}", dir.display()), e)),
        };
        let mut gone = 0;
        for entry in entries {
            let entry = entry.map_err(io_err("cannot read the image store"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep.contains(&name) {
                continue;
            }
            let path = entry.path();
            *bytes += disk_usage(&path);
            gone += 1;
            if !dry_run {
                beneath::remove_tree(&path)
                    .map_err(|e| ImageError::io(format!("cannot remove {}", path.display()), e))?;
            }
        }
        Ok(gone)
    }
}

/// The image `name` means in `records`.
pub(crate) fn find<'a>(records: &'a Records, name: &str) -> Result<&'a ImageRecord> {
    if let Ok(id) = Digest::parse(name) {
        return records.images.get(&id).ok_or_else(|| ImageError::NotFound(name.to_owned()));
    }
    let hex = name.strip_prefix("sha256:").unwrap_or(name);
    if hex.len() >= 4 && hex.len() < 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        let hits: Vec<_> = records.images.values().filter(|i| i.id.hex().starts_with(hex)).collect();
        match hits.as_slice() {
            [one] => return Ok(one),
            [] => {}
            _ => return Err(ImageError::Ambiguous(name.to_owned())),
        }
    }
    let reference = crate::reference::normalize(name)?;
    records.by_ref(&reference).ok_or(ImageError::NotFound(name.to_owned()))
}

/// Bytes under `path` (blocks really used), not following symlinks.
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = path.symlink_metadata() else { return 0 };
    let mut total = meta.blocks() * 512;
    if meta.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for entry in entries.flatten() {
            total += disk_usage(&entry.path());
        }
    }
    total
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
#[path = "store_tests.rs"]
pub(crate) mod tests;
