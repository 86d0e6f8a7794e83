//! Filesystem snapshots of namespace image boxes (docs/adr/0029): a copy of
//! the box's writable layer, the increment over its image, so its cost
//! grows with what the box changed and not with the image. A snapshot is
//! `<state>/snapshots/<namespace>/<box>/<id>/`, holding `upper/` and
//! `image.json` (the box's [`ImageHandle`]); one under way is `.<id>.tmp`
//! beside it until it is whole, so an interrupted snapshot is found and
//! swept by the box alone. A box made from a snapshot starts from a copy
//! of its layer over the same image: the snapshot is never in use after.
//!
//! The copies are `cp -a` on the box's host (this machine), which keeps
//! what a layer is made of: whiteouts (0:0 character devices), the
//! overlay's extended attributes, links as links, modes and owners.

use std::path::{Path, PathBuf};

use tinybox_sdk::Host;
use tinybox_sdk::capture::capture;
use tinybox_sdk::model::names::validate_name;
use tinybox_sdk::model::{BoxId, SnapshotId};
use tinybox_sdk::protocol::{DriverError, SnapshotRmParams, SnapshotSweepParams, SnapshotSweepResult};

use crate::image_box::{Dirs, ImageHandle};

const IMAGE_FILE: &str = "image.json";

fn root(state: &Path, namespace: &str) -> Result<PathBuf, DriverError> {
    validate_name("namespace", namespace).map_err(|e| DriverError::invalid(e.to_string()))?;
    Ok(state.join("snapshots").join(namespace))
}

fn env() -> std::collections::BTreeMap<String, String> {
    [("PATH".to_owned(), crate::bwrap::BWRAP_PATH.to_owned())].into()
}

/// Copies the tree `from` to `to` (which must not exist), as `cp -a`.
async fn copy_tree(host: &dyn Host, from: &Path, to: &Path) -> Result<(), DriverError> {
    let argv = vec![
        "cp".into(),
        "-a".into(),
        "--reflink=auto".into(),
        "--".into(),
        from.display().to_string(),
        to.display().to_string(),
    ];
    let out = capture(host, argv, env(), b"").await?;
    if !out.success() {
        return Err(DriverError::failed(format!(
            "cannot copy {} to {}: {}",
            from.display(),
            to.display(),
            out.stderr_text().trim()
        )));
    }
    Ok(())
}

/// Removes `dir` whole, its unreadable directories made the owner's first.
async fn remove_tree(host: &dyn Host, dir: &Path) -> Result<(), DriverError> {
    let script = r#"[ -e "$1" ] || exit 0
chmod -R u+rwX -- "$1" 2>/dev/null
rm -rf -- "$1""#;
    let argv = vec!["sh".into(), "-c".into(), script.into(), "tinybox-rm".into(), dir.display().to_string()];
    let out = capture(host, argv, env(), b"").await?;
    if !out.success() {
        return Err(DriverError::failed(format!("cannot remove {}: {}", dir.display(), out.stderr_text().trim())));
    }
    Ok(())
}

/// A fresh snapshot id: the box and 12 hex digits no other snapshot has.
fn fresh_id(box_id: &BoxId) -> Result<SnapshotId, DriverError> {
    let mut h = blake3::Hasher::new();
    h.update(box_id.as_str().as_bytes());
    h.update(&std::process::id().to_le_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.update(&now.as_nanos().to_le_bytes());
    let hex = h.finalize().to_hex();
    SnapshotId::new(format!("{}.{}", box_id.as_str(), &hex[..12])).map_err(|e| DriverError::failed(e.to_string()))
}

/// Takes a snapshot of image box `box_id` in `namespace`, whose directory is `dirs`.
pub async fn take(
    host: &dyn Host,
    state: &Path,
    namespace: &str,
    box_id: &BoxId,
    dirs: &Dirs,
    image: &ImageHandle,
) -> Result<SnapshotId, DriverError> {
    let id = fresh_id(box_id)?;
    let parent = root(state, namespace)?.join(box_id.as_str());
    std::fs::create_dir_all(&parent)
        .map_err(|e| DriverError::failed(format!("cannot make {}: {e}", parent.display())))?;
    let tmp = parent.join(format!(".{id}.tmp"));
    let made = async {
        std::fs::create_dir(&tmp).map_err(|e| DriverError::failed(format!("cannot make {}: {e}", tmp.display())))?;
        let meta = serde_json::to_vec(image).map_err(|e| DriverError::failed(e.to_string()))?;
        std::fs::write(tmp.join(IMAGE_FILE), meta)
            .map_err(|e| DriverError::failed(format!("cannot write the snapshot's image record: {e}")))?;
        copy_tree(host, &dirs.upper(), &tmp.join("upper")).await?;
        std::fs::rename(&tmp, parent.join(id.as_str()))
            .map_err(|e| DriverError::failed(format!("cannot keep snapshot {id}: {e}")))
    }
    .await;
    if let Err(e) = made {
        let _ = remove_tree(host, &tmp).await;
        return Err(e);
    }
    Ok(id)
}

/// Where snapshot `id` of `namespace` is, and the image it was taken over.
pub fn find(state: &Path, namespace: &str, id: &SnapshotId) -> Result<(PathBuf, ImageHandle), DriverError> {
    let not_found = || DriverError::not_found(format!("no snapshot {id} in this store's namespace boxes"));
    let base = root(state, namespace)?;
    let dir = std::fs::read_dir(&base)
        .map_err(|_| not_found())?
        .flatten()
        .map(|e| e.path().join(id.as_str()))
        .find(|p| p.join(IMAGE_FILE).is_file())
        .ok_or_else(not_found)?;
    let text = std::fs::read(dir.join(IMAGE_FILE))
        .map_err(|e| DriverError::failed(format!("cannot read snapshot {id}'s image record: {e}")))?;
    let image: ImageHandle = serde_json::from_slice(&text)
        .map_err(|e| DriverError::failed(format!("snapshot {id}'s image record does not parse: {e}")))?;
    if !image.rootfs.is_dir() {
        return Err(DriverError::invalid(format!(
            "snapshot {id} was taken over image {}, which is no longer in the image store; pull or import it again",
            image.id
        )));
    }
    Ok((dir, image))
}

/// Seeds a new box's layer (`dirs.upper()`, not made yet) from snapshot `dir`.
pub async fn seed(host: &dyn Host, dir: &Path, dirs: &Dirs) -> Result<(), DriverError> {
    copy_tree(host, &dir.join("upper"), &dirs.upper()).await
}

pub async fn remove(host: &dyn Host, state: &Path, p: &SnapshotRmParams) -> Result<(), DriverError> {
    let (dir, _) = match find(state, &p.namespace, &p.id) {
        Ok(found) => found,
        // Its image went first: the snapshot's directory is still there to remove.
        Err(e) if e.code == tinybox_sdk::protocol::ErrorCode::InvalidRequest => {
            let base = root(state, &p.namespace)?;
            let dir = std::fs::read_dir(&base)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join(p.id.as_str()))
                .find(|d| d.is_dir());
            (dir.ok_or(e)?, ImageHandle::default())
        }
        Err(e) => return Err(e),
    };
    remove_tree(host, &dir).await
}

/// Removes the snapshots of one box that `keep` does not name, and any
/// left half-made.
pub async fn sweep(host: &dyn Host, state: &Path, p: &SnapshotSweepParams) -> Result<SnapshotSweepResult, DriverError> {
    let parent = root(state, &p.namespace)?.join(p.box_id.as_str());
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if p.keep.iter().any(|k| k.as_str() == name) {
            continue;
        }
        remove_tree(host, &entry.path()).await?;
        removed.push(name);
    }
    Ok(SnapshotSweepResult { removed })
}
