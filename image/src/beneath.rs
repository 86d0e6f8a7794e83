//! Paths resolved beneath a directory without ever following a symlink.
//! Each component is opened relative to the directory opened before it,
//! with `O_NOFOLLOW | O_DIRECTORY`, so what a name means cannot change
//! between a check and its use: there is no string check to race.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Why a name from someone else's tar cannot be used as a path here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRule {
    /// It climbs with `..`.
    Climbs,
    /// It starts at `/`.
    Absolute,
}

/// The normal components of `path`, or the rule it breaks. `.` and empty
/// components are dropped; an empty result names the directory itself.
pub fn components(path: &Path) -> Result<Vec<OsString>, NameRule> {
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_owned()),
            Component::CurDir => {}
            Component::ParentDir => return Err(NameRule::Climbs),
            Component::RootDir | Component::Prefix(_) => return Err(NameRule::Absolute),
        }
    }
    Ok(parts)
}

/// What went wrong opening a directory beneath the root.
#[derive(Debug)]
pub enum WalkError {
    /// Component `at` (0-based) is a symlink.
    Symlink {
        at: usize,
    },
    /// Component `at` is there but is not a directory.
    NotDir {
        at: usize,
    },
    /// Component `at` is not there (and was not to be made).
    Missing {
        at: usize,
    },
    Io(io::Error),
}

pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens the directory `parts` names beneath `root`, making the missing
/// ones (mode 0755) when `create`.
pub fn open_dir(root: BorrowedFd<'_>, parts: &[OsString], create: bool) -> Result<OwnedFd, WalkError> {
    let mut dir = rustix::io::fcntl_dupfd_cloexec(root, 0).map_err(|e| WalkError::Io(e.into()))?;
    for (at, part) in parts.iter().enumerate() {
        dir = match open_child_dir(dir.as_fd(), part) {
            Ok(fd) => fd,
            Err(e) if e == rustix::io::Errno::NOENT && create => {
                match rustix::fs::mkdirat(dir.as_fd(), part.as_os_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(WalkError::Io(e.into())),
                }
                open_child_dir(dir.as_fd(), part).map_err(|e| classify(dir.as_fd(), part, at, e))?
            }
            Err(e) => return Err(classify(dir.as_fd(), part, at, e)),
        };
    }
    Ok(dir)
}

fn open_child_dir(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn classify(dir: BorrowedFd<'_>, name: &OsStr, at: usize, e: rustix::io::Errno) -> WalkError {
    match kind_at(dir, name) {
        Ok(Some(FileType::Symlink)) => WalkError::Symlink { at },
        Ok(Some(_)) => WalkError::NotDir { at },
        Ok(None) => WalkError::Missing { at },
        Err(_) => WalkError::Io(e.into()),
    }
}

/// The type of `name` in `dir` itself (a symlink is a symlink), or `None`.
pub fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<FileType>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removes `name` from `dir`, a whole tree if it is a directory, never
/// following a symlink. A directory without write or search permission for
/// its owner (an image may ship one) is opened up first: it is ours.
pub fn remove_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    match kind_at(dir, name)? {
        None => Ok(()),
        Some(FileType::Directory) => {
            let child = match open_child_dir(dir, name) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::ACCESS) => {
                    chmod_at(dir, name, 0o700)?;
                    open_child_dir(dir, name)?
                }
                Err(e) => return Err(e.into()),
            };
            rustix::fs::fchmod(&child, Mode::from_raw_mode(0o700))?;
            for name in names(child.as_fd())? {
                remove_at(child.as_fd(), &name)?;
            }
            Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
        }
        Some(_) => Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?),
    }
}

fn chmod_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::chmodat(dir, name, Mode::from_raw_mode(mode), AtFlags::empty())?)
}

/// The names in directory `dir` but `.` and `..`, sorted (so work done
/// over a tree is the same every time).
pub fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    let dup = rustix::io::fcntl_dupfd_cloexec(dir, 0)?;
    let mut reader = rustix::fs::Dir::read_from(&dup)?;
    reader.rewind();
    while let Some(entry) = reader.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push(<OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name).to_owned());
    }
    out.sort();
    Ok(out)
}

/// Removes the directory tree at `path` (its last component is never
/// followed if it is a symlink; the link itself goes).
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no parent"));
    };
    let parent = match open_root(parent) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    remove_at(parent.as_fd(), name)
}
