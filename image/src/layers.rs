//! Turning verified blobs into unpacked layers and layers into an image's
//! root filesystem, each built in tmp/ and renamed into place, so a name
//! under layers/ or rootfs/ always means something whole.

use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;

use crate::digest::{Digest, HashingReader};
use crate::error::{ImageError, Result};
use crate::store::ImageStore;

/// The layer media types this store unpacks: tar, plain or compressed.
pub fn check_media_type(what: &str, media_type: &str) -> Result<()> {
    if media_type.contains(".tar") || media_type.contains("rootfs.diff.tar") {
        return Ok(());
    }
    Err(ImageError::MediaType {
        what: what.to_owned(),
        media_type: media_type.to_owned(),
        expected: "a tar layer (plain, gzip or zstd)",
    })
}

/// A reader of the tar inside `r`, which may be gzip or zstd (told by its
/// first bytes: a media type can be wrong, the magic cannot).
pub fn decoder<'a>(mut r: impl BufRead + 'a) -> io::Result<Box<dyn Read + 'a>> {
    let head = r.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(r)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let z = ruzstd::decoding::StreamingDecoder::new(r)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not a zstd stream: {e}")))?;
        Ok(Box::new(z))
    } else {
        Ok(Box::new(r))
    }
}

/// A layer unpacked in tmp/ and checked, not yet in place.
pub struct Staged {
    tmp: tempfile::TempDir,
    target: PathBuf,
}

impl Staged {
    pub fn install(self) -> Result<()> {
        install(self.tmp, self.target)
    }
}

/// Unpacks the blob read from `blob_bytes` as layer `diff_id` and puts it
/// in place, unless it is there already; the bytes are checked against
/// `blob` (a blob read back from the store) and the diff id.
pub fn unpack_blob(store: &ImageStore, blob_bytes: impl Read, blob: &Digest, diff_id: &Digest) -> Result<()> {
    match stage(store, blob_bytes, Some(blob), blob, diff_id)? {
        Some(staged) => staged.install(),
        None => Ok(()),
    }
}

/// Unpacks into tmp/ and checks, leaving the install to the caller (a
/// download installs only once its digest has been checked too). `None`:
/// the layer is there already.
pub fn stage(
    store: &ImageStore,
    blob_bytes: impl Read,
    blob: Option<&Digest>,
    layer: &Digest,
    diff_id: &Digest,
) -> Result<Option<Staged>> {
    let target = store.layer_dir(diff_id);
    if target.exists() {
        return Ok(None);
    }
    let tmp = store.temp_dir("layer-")?;
    let mut hashing = HashingReader { inner: blob_bytes, hasher: Default::default() };
    let unpacked: Result<crate::unpack::LayerMeta> = (|| {
        let tar_error = |e| ImageError::Layer { layer: layer.clone(), source: crate::unpack::UnpackError::Tar(e) };
        let mut tar = decoder(BufReader::with_capacity(1 << 16, &mut hashing)).map_err(tar_error)?;
        let meta = crate::unpack::unpack(&mut tar, tmp.path())
            .map_err(|source| ImageError::Layer { layer: layer.clone(), source })?;
        io::copy(&mut tar, &mut io::sink()).map_err(tar_error)?;
        Ok(meta)
    })();
    // Bytes that are not the blob they claim to be are that, whatever the
    // unpacker made of them: the digest is checked before its verdict. (A
    // download is checked by its caller, who stops it when this refuses.)
    if unpacked.is_ok() || blob.is_some() {
        io::copy(&mut hashing, &mut io::sink()).map_err(|e| ImageError::io(format!("cannot read layer {layer}"), e))?;
    }
    if let Some(blob) = blob {
        let actual = hashing.hasher.finish();
        if &actual != blob {
            return Err(ImageError::DigestMismatch { what: format!("layer {layer}"), expected: blob.clone(), actual });
        }
    }
    let meta = unpacked?;
    let actual = meta.diff_id.clone().expect("unpack sets the diff id");
    if &actual != diff_id {
        return Err(ImageError::DiffIdMismatch { layer: layer.clone(), expected: diff_id.clone(), actual });
    }
    Ok(Some(Staged { tmp, target }))
}

/// Stacks `diff_ids` (all unpacked) into image `id`'s root filesystem unless it is there.
pub fn ensure_rootfs(store: &ImageStore, id: &Digest, diff_ids: &[Digest]) -> Result<PathBuf> {
    let target = store.rootfs_path(id);
    if target.exists() {
        return Ok(target);
    }
    let tmp = store.temp_dir("rootfs-")?;
    let layers: Vec<PathBuf> = diff_ids.iter().map(|d| store.layer_dir(d)).collect();
    crate::flatten::flatten(&layers, tmp.path())
        .map_err(|e| ImageError::io(format!("cannot make the root filesystem of image {id}"), e))?;
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| ImageError::io("cannot make a root filesystem", e))?;
    install(tmp, target.clone())?;
    Ok(target)
}

/// Renames a finished temporary directory into place; if another pull
/// finished the same one first, ours goes.
fn install(tmp: tempfile::TempDir, target: PathBuf) -> Result<()> {
    let path = tmp.keep();
    match std::fs::rename(&path, &target) {
        Ok(()) => Ok(()),
        Err(_) if target.exists() => {
            let _ = crate::beneath::remove_tree(&path);
            Ok(())
        }
        Err(e) => {
            let _ = crate::beneath::remove_tree(&path);
            Err(ImageError::io(format!("cannot put {} in place", target.display()), e))
        }
    }
}
