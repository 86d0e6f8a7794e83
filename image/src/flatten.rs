//! Stacking unpacked layers into one root filesystem, the way overlayfs
//! reads them: a later layer's entry replaces an earlier one's, directories
//! merge, `.wh.NAME` removes NAME from below, and a directory holding
//! `.wh..wh..opq` hides everything below it. Files are hard links to the
//! layers' own (no data is copied; a copy only where a link cannot be
//! made), directories are made fresh. Nothing is followed: both trees are
//! walked by descriptor (`beneath`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::beneath;
use crate::unpack::{self, LayerMeta, OPAQUE, WHITEOUT};

/// Makes the root filesystem of `layers` (their directories, bottom first,
/// each with its `root` tree and meta) in `out`, an empty directory.
pub fn flatten(layers: &[PathBuf], out: &Path) -> io::Result<()> {
    let target = beneath::open_root(out)?;
    let mut modes = BTreeMap::new();
    for layer in layers {
        let meta = unpack::read_meta(layer)?;
        let tree = beneath::open_root(&layer.join(unpack::TREE))?;
        merge(tree.as_fd(), target.as_fd(), Path::new(""), &meta, &mut modes)?;
    }
    // Deepest first: a parent closed to its owner first would hide its children.
    let mut closed: Vec<_> = modes.into_iter().collect();
    closed.sort_by_key(|(path, _)| std::cmp::Reverse(path.components().count()));
    for (path, mode) in closed {
        let parts = beneath::components(&path).map_err(|_| io::Error::other("bad closed directory"))?;
        // Gone or replaced by a later layer: nothing to close.
        if let Ok(fd) = beneath::open_dir(target.as_fd(), &parts, false) {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        }
    }
    Ok(())
}

fn merge(
    layer: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    rel: &Path,
    meta: &LayerMeta,
    modes: &mut BTreeMap<PathBuf, u32>,
) -> io::Result<()> {
    let names = beneath::names(layer)?;
    if names.iter().any(|n| n == OPAQUE) {
        for below in beneath::names(target)? {
            beneath::remove_at(target, &below)?;
        }
    }
    for name in names {
        if name == OPAQUE {
            continue;
        }
        if let Some(hidden) = name.as_bytes().strip_prefix(WHITEOUT.as_bytes()) {
            beneath::remove_at(target, OsStr::from_bytes(hidden))?;
            continue;
        }
        let stat = rustix::fs::statat(layer, &name, AtFlags::SYMLINK_NOFOLLOW)?;
        let path = rel.join(&name);
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            match beneath::kind_at(target, &name)? {
                Some(FileType::Directory) => {}
                Some(_) => {
                    rustix::fs::unlinkat(target, &name, AtFlags::empty())?;
                    rustix::fs::mkdirat(target, &name, Mode::from_raw_mode(0o700))?;
                }
                None => rustix::fs::mkdirat(target, &name, Mode::from_raw_mode(0o700))?,
            }
            let from = beneath::open_dir(layer, std::slice::from_ref(&name), false).map_err(walk)?;
            let to = beneath::open_dir(target, std::slice::from_ref(&name), false).map_err(walk)?;
            rustix::fs::fchmod(&to, Mode::from_raw_mode(stat.st_mode & 0o7777))?;
            match meta.closed_dirs.get(&path) {
                Some(mode) => modes.insert(path.clone(), *mode),
                None => modes.remove(&path),
            };
            merge(from.as_fd(), to.as_fd(), &path, meta, modes)?;
        } else {
            beneath::remove_at(target, &name)?;
            match rustix::fs::linkat(layer, &name, target, &name, AtFlags::empty()) {
                Ok(()) => {}
                Err(rustix::io::Errno::XDEV | rustix::io::Errno::MLINK | rustix::io::Errno::PERM) => {
                    copy(layer, target, &name, stat.st_mode)?
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// A copy of one non-directory, where a hard link cannot be made.
fn copy(layer: BorrowedFd<'_>, target: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    match FileType::from_raw_mode(mode) {
        FileType::Symlink => {
            let link = rustix::fs::readlinkat(layer, name, Vec::new())?;
            rustix::fs::symlinkat(link.as_c_str(), target, name)?;
        }
        FileType::RegularFile => {
            let from =
                rustix::fs::openat(layer, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
            let to = rustix::fs::openat(
                target,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let (mut from, mut to) = (File::from(from), File::from(to));
            io::copy(&mut from, &mut to)?;
            rustix::fs::fchmod(&to, Mode::from_raw_mode(mode & 0o777))?;
            to.set_modified(from.metadata()?.modified()?)?;
        }
        _ => {}
    }
    Ok(())
}

fn walk(e: beneath::WalkError) -> io::Error {
    match e {
        beneath::WalkError::Io(e) => e,
        other => io::Error::other(format!("layer tree changed while it was read: {other:?}")),
    }
}
