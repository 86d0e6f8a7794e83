//! Unpacking one layer: someone else's tar, so a security boundary. Every
//! entry lands beneath the layer's own directory or the layer is refused:
//! names are split into normal components (no `..`, nothing absolute),
//! each parent is opened without following a symlink (`beneath`), hard
//! links must name a file already unpacked in this layer, device nodes and
//! fifos are skipped, and no file keeps a setuid, setgid or sticky bit.
//! Owners and extended attributes (file capabilities among them) are not
//! applied: every file belongs to the store's owner (ADR 0028).
//!
//! Whiteouts stay as they came, an empty `.wh.NAME` file or the opaque
//! marker `.wh..wh..opq`; `flatten` applies them when it stacks layers.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use tar::EntryType;

use crate::beneath::{self, NameRule, WalkError};
use crate::digest::{Digest, HashingReader};

/// The opaque-directory marker of the OCI layer format.
pub const OPAQUE: &str = ".wh..wh..opq";
/// The prefix of a whiteout.
pub const WHITEOUT: &str = ".wh.";
/// Where a layer's tree lives inside its directory, beside `meta.json`.
pub const TREE: &str = "root";
pub const META: &str = "meta.json";

/// Why a layer was refused. Every variant names the entry.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("entry {entry:?} climbs out of the layer with ..")]
    Climbs { entry: PathBuf },
    #[error("entry {entry:?} is an absolute name; a layer's names are relative to its root")]
    Absolute { entry: PathBuf },
    #[error(
        "entry {entry:?} goes through {link:?}, a symlink in this layer; a layer's entries never pass through its links"
    )]
    ThroughSymlink { entry: PathBuf, link: PathBuf },
    #[error("entry {entry:?} goes through {file:?}, which is not a directory")]
    ThroughFile { entry: PathBuf, file: PathBuf },
    #[error("entry {entry:?} is a hard link to {target:?}, which climbs out of the layer or is absolute")]
    HardLinkOut { entry: PathBuf, target: PathBuf },
    #[error("entry {entry:?} is a hard link to {target:?}, which is not a file earlier in this layer")]
    HardLinkMissing { entry: PathBuf, target: PathBuf },
    #[error("entry {entry:?} would replace a directory of the same layer with a non-directory")]
    ReplacesDirectory { entry: PathBuf },
    #[error("entry {entry:?} is a whiteout with no name after .wh.")]
    BadWhiteout { entry: PathBuf },
    #[error("entry {entry:?} has tar type {kind}, which a layer does not carry")]
    UnknownType { entry: PathBuf, kind: u8 },
    #[error("the layer is not a readable tar: {0}")]
    Tar(io::Error),
    #[error("cannot write entry {entry:?}: {source}")]
    Io { entry: PathBuf, source: io::Error },
}

/// What unpacking made: the diff id (sha256 of the uncompressed tar) and
/// what was left out.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LayerMeta {
    pub diff_id: Option<Digest>,
    /// Directories whose mode denies their owner something: their tree
    /// copy is opened up (0700 added) so the store can fill and remove it,
    /// and `flatten` gives the root filesystem the real mode.
    #[serde(default)]
    pub closed_dirs: BTreeMap<PathBuf, u32>,
    /// Device nodes and fifos, skipped.
    #[serde(default)]
    pub skipped: Vec<PathBuf>,
}

/// Unpacks the tar read from `tar` into `dir` (made, empty, by the caller;
/// the tree goes to `dir/root`, the meta to `dir/meta.json`). Returns the
/// meta with the diff id of everything read.
pub fn unpack(tar: impl Read, dir: &Path) -> Result<LayerMeta, UnpackError> {
    let io_at = |entry: &Path| {
        let entry = entry.to_owned();
        move |source| UnpackError::Io { entry: entry.clone(), source }
    };
    std::fs::create_dir(dir.join(TREE)).map_err(io_at(Path::new(TREE)))?;
    let root = beneath::open_root(&dir.join(TREE)).map_err(io_at(Path::new(TREE)))?;
    let mut reader = HashingReader { inner: tar, hasher: Default::default() };
    let mut meta = LayerMeta::default();
    {
        let mut archive = tar::Archive::new(&mut reader);
        for entry in archive.entries().map_err(UnpackError::Tar)? {
            let mut entry = entry.map_err(UnpackError::Tar)?;
            put(root.as_fd(), &mut entry, &mut meta)?;
        }
    }
    // The diff id covers the whole stream, padding after the end blocks too.
    io::copy(&mut reader, &mut io::sink()).map_err(UnpackError::Tar)?;
    meta.diff_id = Some(reader.hasher.finish());
    let json = serde_json::to_vec(&meta).expect("meta serializes");
    std::fs::write(dir.join(META), json).map_err(io_at(Path::new(META)))?;
    Ok(meta)
}

fn put<R: Read>(root: BorrowedFd<'_>, entry: &mut tar::Entry<'_, R>, meta: &mut LayerMeta) -> Result<(), UnpackError> {
    let name = entry.path().map_err(UnpackError::Tar)?.into_owned();
    let kind = entry.header().entry_type();
    match kind {
        EntryType::XGlobalHeader | EntryType::XHeader | EntryType::GNULongName | EntryType::GNULongLink => {
            return Ok(());
        }
        _ => {}
    }
    let parts = beneath::components(&name).map_err(|rule| refused(&name, rule))?;
    let Some((last, parents)) = parts.split_last() else {
        // The layer's root directory itself: its mode is the image's, set by flatten.
        return Ok(());
    };
    let parent = beneath::open_dir(root, parents, true).map_err(|e| walk_error(&name, parents, e))?;
    let parent = parent.as_fd();
    let io_err = |source: io::Error| UnpackError::Io { entry: name.clone(), source };
    let last_bytes = last.as_bytes();
    if last_bytes.starts_with(WHITEOUT.as_bytes()) {
        if last_bytes == WHITEOUT.as_bytes() {
            return Err(UnpackError::BadWhiteout { entry: name });
        }
        // aufs' own bookkeeping (.wh..wh.plnk and the like) means nothing here.
        if last_bytes.starts_with(b".wh..wh.") && last != OPAQUE {
            return Ok(());
        }
        clear_for(parent, last, &name, false)?;
        create_file(parent, last, 0o600).map_err(io_err)?;
        return Ok(());
    }
    let mode = entry.header().mode().unwrap_or(0o644);
    let mtime = entry.header().mtime().unwrap_or(0);
    match kind {
        EntryType::Directory => {
            match beneath::kind_at(parent, last).map_err(io_err)? {
                Some(FileType::Directory) => {}
                Some(_) => {
                    rustix::fs::unlinkat(parent, last.as_os_str(), AtFlags::empty()).map_err(|e| io_err(e.into()))?;
                    mkdir(parent, last).map_err(io_err)?;
                }
                None => mkdir(parent, last).map_err(io_err)?,
            }
            let dir_mode = mode & 0o1777;
            let rel: PathBuf = parts.iter().collect();
            let open = dir_mode | 0o700;
            let fd = beneath::open_dir(parent, std::slice::from_ref(last), false)
                .map_err(|e| walk_error(&name, &parts, e))?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(open)).map_err(|e| io_err(e.into()))?;
            if dir_mode & 0o700 != 0o700 {
                meta.closed_dirs.insert(rel, dir_mode);
            } else {
                meta.closed_dirs.remove(&rel);
            }
        }
        EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
            clear_for(parent, last, &name, true)?;
            let fd = create_file(parent, last, 0o600).map_err(io_err)?;
            let mut file = File::from(fd);
            io::copy(entry, &mut file).map_err(io_err)?;
            // No setuid, setgid or sticky bit on a file: a file of the image
            // must give nobody a privilege on this machine.
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777)).map_err(|e| io_err(e.into()))?;
            file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime)).map_err(io_err)?;
        }
        EntryType::Symlink => {
            let target = entry.link_name().map_err(UnpackError::Tar)?.unwrap_or_default().into_owned();
            clear_for(parent, last, &name, true)?;
            // The target is text kept as it came: nothing here ever follows it.
            rustix::fs::symlinkat(target.as_os_str(), parent, last.as_os_str()).map_err(|e| io_err(e.into()))?;
        }
        EntryType::Link => {
            let target = entry.link_name().map_err(UnpackError::Tar)?.unwrap_or_default().into_owned();
            let missing = || UnpackError::HardLinkMissing { entry: name.clone(), target: target.clone() };
            let tparts = beneath::components(&target)
                .map_err(|_| UnpackError::HardLinkOut { entry: name.clone(), target: target.clone() })?;
            let Some((tlast, tparents)) = tparts.split_last() else { return Err(missing()) };
            let tdir = match beneath::open_dir(root, tparents, false) {
                Ok(fd) => fd,
                Err(WalkError::Missing { .. }) => return Err(missing()),
                Err(e) => return Err(walk_error(&target, tparents, e)),
            };
            match beneath::kind_at(tdir.as_fd(), tlast).map_err(io_err)? {
                None | Some(FileType::Directory) => return Err(missing()),
                Some(_) => {}
            }
            if tparts == parts {
                return Ok(());
            }
            clear_for(parent, last, &name, true)?;
            rustix::fs::linkat(tdir.as_fd(), tlast.as_os_str(), parent, last.as_os_str(), AtFlags::empty())
                .map_err(|e| io_err(e.into()))?;
        }
        EntryType::Char | EntryType::Block | EntryType::Fifo => {
            // A box gets its own /dev; a node from an image would be a way to the host's devices.
            meta.skipped.push(name);
        }
        other => return Err(UnpackError::UnknownType { entry: name, kind: other.as_byte() }),
    }
    Ok(())
}

/// Makes way for a new non-directory `name`: a non-directory already there
/// (an earlier entry of the same name) goes; a directory is refused.
fn clear_for(parent: BorrowedFd<'_>, name: &OsStr, entry: &Path, refuse_dir: bool) -> Result<(), UnpackError> {
    let io_err = |source: io::Error| UnpackError::Io { entry: entry.to_owned(), source };
    match beneath::kind_at(parent, name).map_err(io_err)? {
        None => Ok(()),
        Some(FileType::Directory) if refuse_dir => Err(UnpackError::ReplacesDirectory { entry: entry.to_owned() }),
        Some(FileType::Directory) => beneath::remove_at(parent, name).map_err(io_err),
        Some(_) => rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(|e| io_err(e.into())),
    }
}

fn create_file(parent: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?)
}

fn mkdir(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755))?)
}

fn refused(entry: &Path, rule: NameRule) -> UnpackError {
    match rule {
        NameRule::Climbs => UnpackError::Climbs { entry: entry.to_owned() },
        NameRule::Absolute => UnpackError::Absolute { entry: entry.to_owned() },
    }
}

fn walk_error(entry: &Path, parts: &[OsString], e: WalkError) -> UnpackError {
    let upto = |at: usize| parts[..=at].iter().collect::<PathBuf>();
    match e {
        WalkError::Symlink { at } => UnpackError::ThroughSymlink { entry: entry.to_owned(), link: upto(at) },
        WalkError::NotDir { at } => UnpackError::ThroughFile { entry: entry.to_owned(), file: upto(at) },
        WalkError::Missing { at } => UnpackError::Io {
            entry: entry.to_owned(),
            source: io::Error::new(io::ErrorKind::NotFound, format!("{} is missing", upto(at).display())),
        },
        WalkError::Io(source) => UnpackError::Io { entry: entry.to_owned(), source },
    }
}

/// Reads a layer's meta back.
pub fn read_meta(dir: &Path) -> io::Result<LayerMeta> {
    let bytes = std::fs::read(dir.join(META))?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
#[path = "unpack_tests.rs"]
mod tests;
