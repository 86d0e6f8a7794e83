//! Filesystem snapshots of a microVM box (ADR 0036), in the driver's state
//! directory, one directory each, named by the snapshot's id:
//!
//!     snapshots/<id>/meta.json    the box it came from, and what it holds
//!     snapshots/<id>/disk.qcow2   an image box: a copy of its overlay
//!     snapshots/<id>/workspace/   a box with a workspace of its own: a copy
//!
//! A box bound to a directory of the caller's holds nothing else: the box
//! made from the snapshot binds the directory core's record names.
//!
//! An image box's overlay is copied with the guest's writes flushed
//! (`sync` through the agent) and the guest held still (QMP `stop`, which
//! also drains QEMU's own writes), then let go (`cont`): the copy is the
//! disk as it was at one instant. Everything is built under a temporary
//! name and renamed, so a snapshot directory is always whole; what an
//! interrupted one leaves (`.tmp-*`) is found by the box in its name and
//! swept (`sweep`).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use tinybox_sdk::model::{BoxId, SnapshotId};
use tinybox_sdk::protocol::DriverError;

use crate::image::{self, ImageBox};
use crate::memory::{self, Machine};
use crate::{qmp, session};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    box_id: BoxId,
    namespace: String,
    /// The image box's settings, when it was one (its disk is `disk.qcow2`).
    #[serde(default)]
    image: Option<ImageBox>,
    /// A copy of the box's own workspace is in `workspace/`.
    #[serde(default)]
    workspace: bool,
    /// The guest's memory is in `memory`, saved from this machine (ADR 0037).
    #[serde(default)]
    memory: Option<Machine>,
}

/// An image box's snapshot, its disk placed.
#[derive(Debug)]
pub struct RestoredImage {
    pub image: ImageBox,
    /// The snapshot's memory file and the machine that wrote it, when it has one.
    pub memory: Option<(PathBuf, Machine)>,
}

/// What a box made from a snapshot starts from, placed in its directory.
#[derive(Debug)]
pub enum Restored {
    /// Its overlay is `disk.qcow2` in the box's directory.
    Image(Box<RestoredImage>),
    /// Its workspace is `workspace/` in the box's directory.
    Workspace,
    /// It binds the directory core names (`CreateParams::workspace_dir`).
    Bound,
}

fn root(state: &Path) -> PathBuf {
    state.join("snapshots")
}

fn failed(what: &str, path: &Path, e: impl std::fmt::Display) -> DriverError {
    DriverError::failed(format!("{what} {}: {e}", path.display()))
}

/// What a snapshot is taken of: a running box, as its handle has it.
pub struct Of<'a> {
    pub dir: &'a Path,
    pub ports: usize,
    pub image: Option<&'a ImageBox>,
    /// The box's own workspace (one made for it), to copy; `None` for a
    /// bound directory (or an image box).
    pub own_workspace: Option<&'a Path>,
    /// An image box's machine, when its memory is to be saved too.
    pub machine: Option<Machine>,
}

/// Takes a snapshot of the running box `of`; its id.
pub async fn take(state: &Path, of: &Of<'_>, box_id: &BoxId, namespace: &str) -> Result<SnapshotId, DriverError> {
    let id = SnapshotId::new(format!("vm-{}", hex(&session::nonce()))).expect("a valid name");
    let dir = root(state);
    std::fs::create_dir_all(&dir).map_err(|e| failed("cannot make", &dir, e))?;
    let tmp = dir.join(format!(".tmp-{}-{id}", box_id.as_str()));
    std::fs::create_dir(&tmp).map_err(|e| failed("cannot make", &tmp, e))?;
    let made = fill(&tmp, of, box_id, namespace).await;
    let named =
        made.and_then(|()| std::fs::rename(&tmp, dir.join(id.as_str())).map_err(|e| failed("cannot name", &tmp, e)));
    if let Err(e) = named {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    Ok(id)
}

async fn fill(tmp: &Path, of: &Of<'_>, box_id: &BoxId, namespace: &str) -> Result<(), DriverError> {
    let meta = Meta {
        box_id: box_id.clone(),
        namespace: namespace.to_owned(),
        image: of.image.cloned(),
        workspace: of.image.is_none() && of.own_workspace.is_some(),
        memory: of.machine.clone().filter(|_| of.image.is_some()),
    };
    std::fs::write(tmp.join("meta.json"), serde_json::to_vec(&meta).expect("meta serializes"))
        .map_err(|e| failed("cannot write", tmp, e))?;
    let busybox = if of.image.is_some() { image::BUSYBOX } else { "/bin/busybox" };
    let sync = vec![busybox.into(), "sync".into()];
    image::run_in_guest(of.dir, of.ports, sync, "the guest's sync before the snapshot").await?;
    if of.image.is_some() {
        // Held still while the overlay is copied; let go whatever the copy did.
        qmp::command(of.dir, "stop", None).await?;
        let (from, to) = (image::overlay(of.dir), tmp.join(image::OVERLAY));
        let copied = tokio::task::spawn_blocking(move || std::fs::copy(&from, &to).map(|_| ()))
            .await
            .map_err(|e| DriverError::failed(format!("copying the box's disk stopped: {e}")))?;
        // The memory at the same instant as the disk, while still held.
        let saved = match (&copied, &meta.memory) {
            (Ok(()), Some(_)) => memory::save(of.dir, &tmp.join(memory::FILE)).await,
            _ => Ok(()),
        };
        let resumed = qmp::command(of.dir, "cont", None).await;
        copied.map_err(|e| failed("cannot copy the disk of", of.dir, e))?;
        saved?;
        resumed?;
    } else if let Some(ws) = of.own_workspace {
        copy_tree(ws, &tmp.join("workspace")).await?;
    }
    Ok(())
}

/// `cp -a`: keeps the modes, owners and `user.virtfs.*` attributes the
/// guest's files carry on the host (ADR 0013), and reflinks where it can.
async fn copy_tree(from: &Path, to: &Path) -> Result<(), DriverError> {
    let out = tokio::process::Command::new("cp")
        .arg("-a")
        .arg("--reflink=auto")
        .arg("--")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| DriverError::failed(format!("cannot run cp: {e}")))?;
    if !out.status.success() {
        return Err(DriverError::failed(format!(
            "cannot copy {} to {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn read_meta(path: &Path) -> Option<Meta> {
    serde_json::from_slice(&std::fs::read(path.join("meta.json")).ok()?).ok()
}

/// Places what snapshot `id` holds into the new box's directory `dir`.
pub async fn restore(state: &Path, id: &SnapshotId, dir: &Path) -> Result<Restored, DriverError> {
    let snap = root(state).join(id.as_str());
    let meta = read_meta(&snap).ok_or_else(|| {
        DriverError::not_found(format!("the microvm sandbox has no snapshot {id} in {}", state.display()))
    })?;
    if let Some(image) = meta.image {
        let (from, to) = (snap.join(image::OVERLAY), image::overlay(dir));
        tokio::task::spawn_blocking(move || std::fs::copy(&from, &to))
            .await
            .map_err(|e| DriverError::failed(format!("copying the snapshot's disk stopped: {e}")))?
            .map_err(|e| failed("cannot copy the disk of snapshot", &snap, e))?;
        let memory = meta.memory.map(|m| (snap.join(memory::FILE), m));
        return Ok(Restored::Image(Box::new(RestoredImage { image, memory })));
    }
    if meta.workspace {
        copy_tree(&snap.join("workspace"), &dir.join("workspace")).await?;
        return Ok(Restored::Workspace);
    }
    Ok(Restored::Bound)
}

/// Removes snapshot `id` (no error if it is gone).
pub fn remove(state: &Path, id: &SnapshotId) -> Result<(), DriverError> {
    let path = root(state).join(id.as_str());
    match std::fs::remove_dir_all(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(failed("cannot remove", &path, e)),
    }
}

/// Removes every snapshot of box `box_id` in `namespace` that `keep` does
/// not name, and what an interrupted snapshot of it left; their names.
pub fn sweep(state: &Path, namespace: &str, box_id: &BoxId, keep: &[SnapshotId]) -> Result<Vec<String>, DriverError> {
    let mut removed = Vec::new();
    let partial = format!(".tmp-{}-", box_id.as_str());
    for entry in std::fs::read_dir(root(state)).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = match name.strip_prefix(&partial) {
            Some(_) => true,
            None => read_meta(&entry.path()).is_some_and(|m| &m.box_id == box_id && m.namespace == namespace),
        };
        if ours && !keep.iter().any(|k| k.as_str() == name) {
            std::fs::remove_dir_all(entry.path()).map_err(|e| failed("cannot remove", &entry.path(), e))?;
            removed.push(name);
        }
    }
    Ok(removed)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(dir: &Path, box_id: &str, namespace: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let m = Meta {
            box_id: BoxId::new(box_id).unwrap(),
            namespace: namespace.into(),
            image: None,
            workspace: false,
            memory: None,
        };
        std::fs::write(dir.join("meta.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    }

    #[test]
    fn a_sweep_takes_only_this_box_s_unnamed_snapshots_and_leftovers() {
        let state = tempfile::tempdir().unwrap();
        let snaps = root(state.path());
        meta(&snaps.join("vm-kept"), "box-1", "ns");
        meta(&snaps.join("vm-lost"), "box-1", "ns");
        meta(&snaps.join("vm-other-box"), "box-10", "ns");
        meta(&snaps.join("vm-other-ns"), "box-1", "ns2");
        std::fs::create_dir_all(snaps.join(".tmp-box-1-vm-half")).unwrap();
        let keep = [SnapshotId::new("vm-kept").unwrap()];
        let mut gone = sweep(state.path(), "ns", &BoxId::new("box-1").unwrap(), &keep).unwrap();
        gone.sort();
        assert_eq!(gone, [".tmp-box-1-vm-half", "vm-lost"]);
        let mut left: Vec<_> =
            std::fs::read_dir(&snaps).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["vm-kept", "vm-other-box", "vm-other-ns"]);
    }

    #[tokio::test]
    async fn a_snapshot_that_is_not_there_is_named_and_a_bound_one_restores_nothing() {
        let state = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = restore(state.path(), &SnapshotId::new("vm-none").unwrap(), dir.path()).await.unwrap_err();
        assert!(err.message.contains("no snapshot vm-none"), "{}", err.message);
        meta(&root(state.path()).join("vm-bound"), "box-1", "ns");
        let got = restore(state.path(), &SnapshotId::new("vm-bound").unwrap(), dir.path()).await.unwrap();
        assert!(matches!(got, Restored::Bound));
        assert!(remove(state.path(), &SnapshotId::new("vm-bound").unwrap()).is_ok());
        assert!(remove(state.path(), &SnapshotId::new("vm-bound").unwrap()).is_ok(), "removing twice is fine");
    }
}
