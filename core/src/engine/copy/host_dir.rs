//! A copy served from, or to, a box's workspace directory on this machine
//! rather than through `tar` in the box. Two cases use it: a copy of the
//! caller's files into `/workspace` of a running namespace or docker box
//! (the box's `/workspace` is that directory: writing it here is one step
//! instead of a stream through the box), and a stopped docker box bound to
//! a directory, whose `/workspace` is that directory and is in no snapshot.
//!
//! The rules are those of a copy through the box. Every path is resolved
//! from the opened directory one component at a time and never through a
//! symlink: a running box's copy that meets one goes through the box
//! instead (where the link resolves as the box sees it), a stopped box's is
//! refused. What is written goes through the checked `Extractor`; what is
//! read is read entry by entry without following a symlink, as a tar in the
//! box would, and is checked by the same `Extractor` on its way out. Only a
//! directory that belongs to the caller is used this way: what is written
//! is then the caller's, as what the box writes there is.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use tinybox_sdk::model::BoxId;

use super::extract::{Extractor, Item, Roots, Rules, extract_at, open_child_dir, refused};
use super::{CopyError, CopyOutcome, DirEntry, KEPT_MODE, PIPE_CAPACITY, TarRefusal, check_kind};
use crate::hosts::LOCAL;
use crate::model::BoxInfo;

/// Where these sandboxes show a box's bound directory.
pub(super) const MOUNT: &str = "/workspace";

/// The sandboxes whose boxes see their bound directory at [`MOUNT`] as the
/// same files, written as its owner: bwrap's `--bind` (namespace) and
/// docker's bind mount, whose box runs as the directory's owner (ADR 0014,
/// ADR 0015). A microVM's is a 9p share with its own ownership rules
/// (ADR 0013), so it keeps the copy through the box.
const BOUND_AT_MOUNT: [&str; 2] = ["namespace", "docker"];

/// Box `info`'s bound directory on this machine, when its sandbox shows it
/// at [`MOUNT`].
pub(super) fn bound_here(info: &BoxInfo) -> Option<&Path> {
    let placement = &info.spec.workspace;
    if placement.host.as_str() != LOCAL || !BOUND_AT_MOUNT.contains(&placement.sandbox.as_str()) {
        return None;
    }
    info.bound_dir()
}

/// Whether the directory belongs to the uid this process writes as.
pub(super) fn is_callers(dir: &Path) -> bool {
    rustix::fs::stat(dir).is_ok_and(|st| st.st_uid == rustix::process::geteuid().as_raw())
}

/// A box path under [`MOUNT`], as components beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnderMount {
    pub rel: Vec<OsString>,
    /// It ended in `/`: it names a directory.
    pub trailing_slash: bool,
}

/// `box_path` beneath [`MOUNT`] (a relative path is the box's working
/// directory's, which is [`MOUNT`] in these sandboxes); `None` when it is
/// elsewhere or climbs with `..`, which only the box resolves.
pub(super) fn under_mount(box_path: &str) -> Option<UnderMount> {
    let rest = if box_path.starts_with('/') {
        let rest = box_path.strip_prefix(MOUNT)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    } else {
        box_path
    };
    let mut rel = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => rel.push(OsString::from(c)),
        }
    }
    Some(UnderMount { rel, trailing_slash: box_path.ends_with('/') })
}

/// Why a path could not be served from the directory.
#[derive(Debug)]
pub(super) enum Stop {
    /// A symlink is on the way: only the box can follow it.
    Link,
    /// The copy's own refusal.
    Copy(CopyError),
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Io(e)
    }
}

impl From<CopyError> for Stop {
    fn from(e: CopyError) -> Stop {
        Stop::Copy(e)
    }
}

/// What a directory component turned out to be.
enum Seen {
    Dir(OwnedFd),
    Link,
    Missing,
    Other,
}

fn look(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Seen> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => match open_child_dir(dir, name, false) {
                Ok(fd) => Ok(Seen::Dir(fd)),
                // Replaced by a symlink since: the box is writing it.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => Ok(Seen::Link),
                Err(e) => Err(e),
            },
            FileType::Symlink => Ok(Seen::Link),
            _ => Ok(Seen::Other),
        },
        Err(rustix::io::Errno::NOENT) => Ok(Seen::Missing),
        Err(e) => Err(e.into()),
    }
}

/// The directory at `rel` beneath `root`, or why not: `Ok(None)` when a
/// component is missing or not a directory.
fn open_beneath(root: &OwnedFd, rel: &[OsString]) -> Result<Option<OwnedFd>, Stop> {
    let mut dir = rustix::io::dup(root).map_err(io::Error::from)?;
    for c in rel {
        dir = match look(dir.as_fd(), c)? {
            Seen::Dir(fd) => fd,
            Seen::Link => return Err(Stop::Link),
            Seen::Missing | Seen::Other => return Ok(None),
        };
    }
    Ok(Some(dir))
}

fn open_root(ws: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(ws, flags, Mode::empty())?)
}

/// What a copy into the directory writes.
pub(super) enum Source {
    /// The caller's file or directory, arriving as `root`.
    Tree { path: PathBuf, root: OsString },
    /// The caller's tar stream, unpacked into the destination as it is.
    Tar(std::fs::File),
    /// One file given whole (the module's `fs.write`), arriving as `name`.
    Bytes { name: OsString, bytes: Vec<u8>, mode: u32, mtime: u64 },
}

/// Writes `source` at `dst` beneath the workspace directory `ws`, as
/// `tar -x` in the box would (an existing directory receives it under its
/// own name; otherwise it is named as the destination's last component).
pub(super) fn write_into(box_id: &BoxId, ws: &Path, dst: &UnderMount, source: Source) -> Result<CopyOutcome, Stop> {
    let shown = || format!("{MOUNT}/{}", PathBuf::from_iter(&dst.rel).display());
    let root = open_root(ws)?;
    let (target, name) = match dst.rel.split_last() {
        None => (root, None),
        Some((last, parents)) => {
            let Some(parent) = open_beneath(&root, parents)? else {
                return Err(CopyError::NoBoxPath { box_id: box_id.clone(), path: shown() }.into());
            };
            match look(parent.as_fd(), last)? {
                Seen::Dir(fd) => (fd, None),
                Seen::Link => return Err(Stop::Link),
                Seen::Missing | Seen::Other => {
                    if dst.trailing_slash || matches!(source, Source::Tar(_)) {
                        return Err(CopyError::NoBoxDir { box_id: box_id.clone(), path: shown() }.into());
                    }
                    (parent, Some(last.as_os_str()))
                }
            }
        }
    };
    match source {
        Source::Tar(stream) => Ok(extract_at(stream, target, None, Roots::Any, Rules::into_box())?),
        Source::Tree { path, root } => {
            let mut x = Extractor::new(target, name, Roots::One, Rules::into_box());
            if let Err(e) = put_tree(&mut x, &path, &root) {
                x.undo();
                return Err(e);
            }
            Ok(x.finish()?)
        }
        Source::Bytes { name: root, bytes, mode, mtime } => {
            let mut x = Extractor::new(target, name, Roots::One, Rules::into_box());
            let len = bytes.len() as u64;
            x.put(Path::new(&root), Item::File, mode, mtime, |to, _| to.write_all(&bytes).map(|()| len))?;
            Ok(x.finish()?)
        }
    }
}

/// The entries of the directory at `dir` beneath the workspace directory
/// `ws`, as the box's `stat` would list them: nothing is followed, a
/// symlink is listed as one.
pub(super) fn list_beneath(box_id: &BoxId, ws: &Path, dir: &UnderMount) -> Result<Vec<DirEntry>, Stop> {
    let shown = || format!("{MOUNT}/{}", show(&dir.rel));
    let root = open_root(ws)?;
    let Some(fd) = open_beneath(&root, &dir.rel)? else {
        return Err(CopyError::NoBoxDir { box_id: box_id.clone(), path: shown() }.into());
    };
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd).map_err(io::Error::from)? {
        let entry = entry.map_err(io::Error::from)?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since it was read: as `stat` in the box would, skip it.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(io::Error::from(e).into()),
        };
        entries.push(DirEntry {
            name: name.to_string_lossy().into_owned(),
            kind: super::kind::of_mode(st.st_mode),
            size: st.st_size.max(0) as u64,
            mode: st.st_mode & 0o7777,
            mtime: st.st_mtime.max(0) as u64,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// The caller's tree at `src` through the checked writer, rooted at
/// `root`: a file's contents go file to file (`copy_file_range`), never
/// through a buffer of ours.
fn put_tree(x: &mut Extractor, src: &Path, root: &OsStr) -> Result<(), Stop> {
    let mut pending = vec![(src.to_owned(), PathBuf::from(root))];
    while let Some((path, name)) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        check_kind(&path, &meta)?;
        let (mode, mtime) = (meta.mode() & KEPT_MODE, meta.mtime().max(0) as u64);
        let t = meta.file_type();
        if t.is_symlink() {
            x.put(&name, Item::Symlink(std::fs::read_link(&path)?), mode, mtime, |_, _| Ok(0))?;
        } else if t.is_dir() {
            x.put(&name, Item::Dir, mode, mtime, |_, _| Ok(0))?;
            for child in std::fs::read_dir(&path)? {
                let child = child?;
                pending.push((child.path(), name.join(child.file_name())));
            }
        } else {
            let from = std::fs::File::open(&path)?;
            x.put(&name, Item::File, mode, mtime, |to, _| copy_sized(&from, to, meta.len()))?;
        }
    }
    Ok(())
}

/// A file's `len` bytes (its size when it was listed) into `to`, file to
/// file in the kernel. Per file that is one `copy_file_range` where
/// `io::copy` makes three calls more (a `statx` of each end and a last copy
/// to find the end), three of a small file's eleven. A
/// file that shrank since ends where it ends; one that grew is copied to
/// the size it was listed with, as tar does. A file whose size says
/// nothing (0, as `/proc`'s do) or that the kernel cannot copy this way is
/// read to its end instead.
fn copy_sized(from: &std::fs::File, to: &mut std::fs::File, len: u64) -> io::Result<u64> {
    let mut done = 0u64;
    while done < len {
        let want = usize::try_from(len - done).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::copy_file_range(from, None, &*to, None, want) {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) if done == 0 => break,
            Err(e) => return Err(e.into()),
        }
    }
    if done == 0 {
        return io::copy(&mut &*from, to);
    }
    Ok(done)
}

/// The entry at `src` beneath the workspace directory `ws`, checked to
/// exist: the directory holding it and its name (`None`: the workspace
/// itself).
pub(super) fn find_source(box_id: &BoxId, ws: &Path, src: &UnderMount) -> Result<(OwnedFd, Option<OsString>), Stop> {
    let root = open_root(ws)?;
    let Some((last, parents)) = src.rel.split_last() else { return Ok((root, None)) };
    let missing = || CopyError::NoBoxPath { box_id: box_id.clone(), path: format!("{MOUNT}/{}", show(&src.rel)) };
    let Some(parent) = open_beneath(&root, parents)? else { return Err(missing().into()) };
    match look(parent.as_fd(), last)? {
        Seen::Missing => Err(missing().into()),
        // A source that is itself a symlink is sent as one, never followed.
        Seen::Link if !src.trailing_slash => Ok((parent, Some(last.clone()))),
        Seen::Link => Err(Stop::Link),
        Seen::Other if src.trailing_slash => Err(missing().into()),
        _ => Ok((parent, Some(last.clone()))),
    }
}

/// Writes a tar of `name` in `dir` (the directory itself when `None`, as
/// `workspace`) to `w`, reading nothing through a symlink.
pub(super) fn send_beneath(dir: OwnedFd, name: Option<&OsStr>, w: io::PipeWriter) -> io::Result<CopyOutcome> {
    let mut b = tar::Builder::new(io::BufWriter::with_capacity(PIPE_CAPACITY, w));
    let mut outcome = CopyOutcome::default();
    match name {
        Some(n) => send_entry(&mut b, dir.as_fd(), n, PathBuf::from(n), &mut outcome)?,
        None => {
            let st = rustix::fs::fstat(&dir)?;
            send_dir(&mut b, dir, &st, PathBuf::from(&MOUNT[1..]), &mut outcome)?;
        }
    }
    b.into_inner()?.flush()?;
    Ok(outcome)
}

fn header(st: &rustix::fs::Stat, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(st.st_mode & KEPT_MODE);
    h.set_mtime(st.st_mtime.max(0) as u64);
    h.set_size(0);
    h
}

fn send_entry<W: Write>(
    b: &mut tar::Builder<W>,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: PathBuf,
    outcome: &mut CopyOutcome,
) -> io::Result<()> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            let fd = open_child_dir(dir, name, false)?;
            send_dir(b, fd, &st, path, outcome)?;
        }
        FileType::RegularFile => {
            // Never a fifo or device opened: O_NONBLOCK, and checked again.
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
            let file = std::fs::File::from(rustix::fs::openat(dir, name, flags, Mode::empty())?);
            let meta = file.metadata()?;
            if !meta.is_file() {
                return Err(refused(TarRefusal::Kind { path: path.display().to_string(), kind: "special file" }));
            }
            let mut h = header(&st, tar::EntryType::Regular);
            // The size is the file's now: one that grows while it is sent
            // is cut there, one that shrinks fails the copy.
            h.set_size(meta.len());
            outcome.bytes += meta.len();
            b.append_data(&mut h, &path, io::Read::take(file, meta.len()))?;
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
            let mut h = header(&st, tar::EntryType::Symlink);
            b.append_link(&mut h, &path, OsStr::from_bytes(target.as_bytes()))?;
        }
        FileType::Fifo => return Err(refused(TarRefusal::Kind { path: path.display().to_string(), kind: "fifo" })),
        _ => {
            return Err(refused(TarRefusal::Kind { path: path.display().to_string(), kind: "special file" }));
        }
    }
    outcome.entries += 1;
    Ok(())
}

fn send_dir<W: Write>(
    b: &mut tar::Builder<W>,
    fd: OwnedFd,
    st: &rustix::fs::Stat,
    path: PathBuf,
    outcome: &mut CopyOutcome,
) -> io::Result<()> {
    let mut h = header(st, tar::EntryType::Directory);
    b.append_data(&mut h, &path, io::empty())?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd)? {
        let entry = entry?;
        let n = OsStr::from_bytes(entry.file_name().to_bytes());
        if n != "." && n != ".." {
            names.push(n.to_owned());
        }
    }
    for n in names {
        send_entry(b, fd.as_fd(), &n, path.join(&n), outcome)?;
    }
    Ok(())
}

fn show(rel: &[OsString]) -> String {
    PathBuf::from_iter(rel).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_paths_map_beneath_the_mount_or_not_at_all() {
        let rel = |p: &str| under_mount(p).map(|u| (u.rel, u.trailing_slash));
        let v = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(rel("/workspace"), Some((v(&[]), false)));
        assert_eq!(rel("/workspace/a/./b/"), Some((v(&["a", "b"]), true)));
        assert_eq!(rel("a//b"), Some((v(&["a", "b"]), false)));
        assert_eq!(rel("/workspacex/a"), None);
        assert_eq!(rel("/tmp/a"), None);
        assert_eq!(rel("/workspace/a/../../etc"), None);
    }

    /// A copy of `from` made by `copy_sized` with size `len`, read back.
    fn sized_copy(from: &Path, len: u64) -> (u64, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let to_path = dir.path().join("to");
        let mut to = std::fs::File::create(&to_path).unwrap();
        let n = copy_sized(&std::fs::File::open(from).unwrap(), &mut to, len).unwrap();
        drop(to);
        (n, std::fs::read(&to_path).unwrap())
    }

    #[test]
    fn a_file_is_copied_to_its_listed_size_and_one_whose_size_says_nothing_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        let bytes: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&big, &bytes).unwrap();
        assert_eq!(sized_copy(&big, bytes.len() as u64), (bytes.len() as u64, bytes.clone()));
        // Grown since it was listed: copied to the listed size, as tar does.
        assert_eq!(sized_copy(&big, 10), (10, bytes[..10].to_vec()));
        // Shrunk since: it ends where it ends.
        let small = dir.path().join("small");
        std::fs::write(&small, b"abc").unwrap();
        assert_eq!(sized_copy(&small, 100), (3, b"abc".to_vec()));
        // /proc's files are listed with size 0 and still have contents.
        let (n, got) = sized_copy(Path::new("/proc/self/status"), 0);
        assert!(n > 0 && String::from_utf8_lossy(&got).contains("Pid:"), "{n} bytes: {got:?}");
        std::fs::write(&small, b"").unwrap();
        assert_eq!(sized_copy(&small, 0), (0, Vec::new()));
    }

    #[test]
    fn nothing_is_written_or_read_through_a_symlink_in_the_directory() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("l")).unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let id = BoxId::new("box-1").unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("f"), "x").unwrap();
        let tree = || Source::Tree { path: src.path().join("f"), root: "f".into() };
        for dst in ["/workspace/l", "/workspace/l/", "/workspace/l/f"] {
            let got = write_into(&id, ws.path(), &under_mount(dst).unwrap(), tree());
            assert!(matches!(got, Err(Stop::Link)), "{dst}: {got:?}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1, "written through the link");
        assert!(matches!(find_source(&id, ws.path(), &under_mount("/workspace/l/secret").unwrap()), Err(Stop::Link)));
        // The link itself is sent as a link.
        let (dir, name) = find_source(&id, ws.path(), &under_mount("/workspace/l").unwrap()).unwrap();
        let (r, w) = io::pipe().unwrap();
        let sent = std::thread::spawn(move || send_beneath(dir, name.as_deref(), w));
        let mut archive = tar::Archive::new(r);
        let kinds: Vec<_> = archive.entries().unwrap().map(|e| e.unwrap().header().entry_type()).collect();
        assert_eq!(kinds, [tar::EntryType::Symlink]);
        sent.join().unwrap().unwrap();
    }

    #[test]
    fn a_tree_is_written_with_its_modes_and_without_privilege_bits() {
        let ws = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        let t = src.path().join("t");
        std::fs::create_dir_all(t.join("d")).unwrap();
        std::fs::write(t.join("d/f"), "body").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(t.join("d/f"), std::fs::Permissions::from_mode(0o4750)).unwrap();
        let id = BoxId::new("box-1").unwrap();
        let source = Source::Tree { path: t.clone(), root: "t".into() };
        let done = write_into(&id, ws.path(), &under_mount("/workspace/new").unwrap(), source).unwrap();
        assert_eq!((done.entries, done.bytes), (3, 4));
        let f = ws.path().join("new/d/f");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "body");
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o750);
        let missing = write_into(
            &id,
            ws.path(),
            &under_mount("/workspace/no/such").unwrap(),
            Source::Tree { path: t, root: "t".into() },
        );
        assert!(matches!(missing, Err(Stop::Copy(CopyError::NoBoxPath { .. }))), "{missing:?}");
    }
}
