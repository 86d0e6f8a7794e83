//! The checked writing side of a copy: every entry that lands on this
//! machine — from a box's tar (checked entry by entry: the box's word), or
//! from the caller's own tree into a box's workspace directory here — goes
//! through `Extractor`, which resolves each path from one opened directory
//! without following a symlink, creates files exclusively, refuses device
//! nodes, fifos and hard links to anything this copy did not write, and
//! keeps permission bits only (no setuid, setgid or sticky bit, no extended
//! attribute). What it writes belongs to the process writing it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timestamps};

use super::{CopyError, CopyOutcome, KEPT_MODE, PIPE_CAPACITY, SPLICE_FROM, TarRefusal, kind_word};

/// Writes the tar on `r` under `parent`, its root renamed `name`, checking
/// every entry first.
pub(super) fn extract(r: impl Read + AsFd, parent: &Path, name: Option<&OsStr>) -> io::Result<CopyOutcome> {
    let base: OwnedFd = std::fs::File::open(parent)?.into();
    extract_at(r, base, name, Roots::One)
}

/// Writes the tar on `r` under the opened directory `base`.
pub(super) fn extract_at(
    r: impl Read + AsFd,
    base: OwnedFd,
    name: Option<&OsStr>,
    roots: Roots,
) -> io::Result<CopyOutcome> {
    let mut x = Extractor::new(base, name, roots);
    // Headers are 512-byte reads: read a pipe's worth at a time.
    let stream = Stream { r: io::BufReader::with_capacity(PIPE_CAPACITY, r), sink: Sink::default() };
    x.sink = Some(stream.sink.clone());
    let mut archive = tar::Archive::new(stream);
    for entry in archive.entries()? {
        x.entry(entry?)?;
    }
    let outcome = x.finish()?;
    // Anything after the archive's end (tar's padding) is read so the box's
    // tar ends cleanly.
    io::copy(&mut archive.into_inner().r, &mut io::sink())?;
    Ok(outcome)
}

/// Where the contents of the entry being written go straight from the
/// stream, when they do: set by [`Extractor::entry`] for a big regular
/// file, empty otherwise.
type Sink = Rc<RefCell<Option<std::fs::File>>>;

/// The stream under the tar crate's reader. Headers, names and small
/// files are read through its buffer as from any reader. While a big
/// regular file's contents are read ([`Sink`] set), each read moves the
/// bytes into that file instead of into the caller's buffer: what was
/// buffered by a write, the rest by `splice(2)` from the pipe in the
/// kernel (one copy instead of two, no pass through this process's
/// memory). Such a read returns how many bytes it moved and leaves the
/// buffer as it was; only [`sink_contents`] reads while the sink is set,
/// and it uses the count only. The tar crate bounds every read of an
/// entry's contents to what is left of the entry, so a read never moves
/// bytes of the next header.
struct Stream<R> {
    r: io::BufReader<R>,
    sink: Sink,
}

impl<R: Read + AsFd> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let sink = self.sink.borrow();
        let Some(file) = sink.as_ref() else {
            return self.r.read(buf);
        };
        let buffered = self.r.buffer();
        if !buffered.is_empty() {
            let n = (&*file).write(&buffered[..buffered.len().min(buf.len())])?;
            self.r.consume(n);
            return Ok(n);
        }
        loop {
            match rustix::pipe::splice(self.r.get_ref(), None, file, None, buf.len(), rustix::pipe::SpliceFlags::MOVE) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                // Not a pipe (a caller's tar from a file): through the buffer.
                Err(rustix::io::Errno::INVAL) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let n = self.r.read(buf)?;
        (&*file).write_all(&buf[..n])?;
        Ok(n)
    }
}

/// Writes the rest of `entry`'s contents into `file` through `sink`: the
/// stream moves them (see [`Stream`]); the reads here only count them.
fn sink_contents(entry: &mut impl Read, file: &std::fs::File, sink: &Sink) -> io::Result<u64> {
    struct Unset<'a>(&'a Sink);
    impl Drop for Unset<'_> {
        fn drop(&mut self) {
            self.0.borrow_mut().take();
        }
    }
    *sink.borrow_mut() = Some(file.try_clone()?);
    let _unset = Unset(sink);
    // Never written to: it only bounds how much one read moves.
    let mut bound = vec![0u8; PIPE_CAPACITY];
    let mut total = 0;
    loop {
        match entry.read(&mut bound) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// How many roots a stream may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Roots {
    /// One, as asked for: a box's tar of one path.
    One,
    /// Any, and entries naming the destination itself (`.`) are skipped:
    /// the caller's own stream, unpacked into a directory as it is.
    Any,
}

/// One entry to write, whatever it came from.
pub(super) enum Item {
    Dir,
    File,
    Symlink(PathBuf),
    /// A hard link to an earlier entry's path (as the stream names it).
    HardLink(PathBuf),
}

pub(super) fn refused(what: TarRefusal) -> io::Error {
    io::Error::other(CopyError::Tar(what))
}

fn times(mtime: u64) -> Timestamps {
    let t = rustix::fs::Timespec { tv_sec: mtime.min(i64::MAX as u64) as i64, tv_nsec: 0 };
    Timestamps { last_access: t, last_modification: t }
}

pub(super) struct Extractor {
    /// The destination's parent, opened once: every path is resolved from it.
    base: OwnedFd,
    /// What the root is called here; `None`: its name in the archive.
    name: Option<OsString>,
    roots: Roots,
    /// The first entry's first component: every entry must be under it.
    archive_root: Option<OsString>,
    /// Regular files this copy wrote, the only targets a hard link may name.
    files: HashSet<Vec<OsString>>,
    dirs: Vec<(Vec<OsString>, u32, u64)>,
    /// The directory `parent_of` opened last, by its path: a tree comes
    /// directory by directory, so most entries are written in it. Nothing
    /// this writer does replaces a directory, so it stays the one named.
    last_parent: Option<(Vec<OsString>, Rc<OwnedFd>)>,
    /// The stream's sink, when entries come from a tar stream.
    sink: Option<Sink>,
    outcome: CopyOutcome,
}

impl Extractor {
    pub(super) fn new(base: OwnedFd, name: Option<&OsStr>, roots: Roots) -> Extractor {
        Extractor {
            base,
            name: name.map(OsStr::to_owned),
            roots,
            archive_root: None,
            files: HashSet::new(),
            dirs: Vec::new(),
            last_parent: None,
            sink: None,
            outcome: CopyOutcome::default(),
        }
    }

    /// Sets each directory's own mode and mtime, once its contents are
    /// written; what was written.
    pub(super) fn finish(mut self) -> io::Result<CopyOutcome> {
        // Deepest first, so a read-only directory is closed after its contents.
        for (rel, mode, mtime) in std::mem::take(&mut self.dirs).into_iter().rev() {
            let fd = self.open_dir(&rel)?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
            rustix::fs::futimens(&fd, &times(mtime))?;
        }
        Ok(self.outcome)
    }

    /// An archive path as components under the destination, or a refusal.
    fn map(&mut self, raw: &Path) -> io::Result<Vec<OsString>> {
        let mut parts = Vec::new();
        for c in raw.components() {
            match c {
                Component::Normal(n) => parts.push(n.to_owned()),
                Component::CurDir => {}
                Component::ParentDir => return Err(refused(TarRefusal::ClimbsOut { path: raw.display().to_string() })),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(refused(TarRefusal::Absolute { path: raw.display().to_string() }));
                }
            }
        }
        let Some(first) = parts.first().cloned() else {
            return Err(refused(TarRefusal::NamesNothing { path: raw.display().to_string() }));
        };
        if self.roots == Roots::Any {
            return Ok(parts);
        }
        match &self.archive_root {
            None => self.archive_root = Some(first),
            Some(root) if *root == first => {}
            Some(root) => {
                return Err(refused(TarRefusal::OutsideRoot {
                    path: raw.display().to_string(),
                    root: root.to_string_lossy().into_owned(),
                }));
            }
        }
        if let Some(name) = &self.name {
            parts[0] = name.clone();
        }
        Ok(parts)
    }

    /// Opens the directory at `rel` under the base, never through a symlink.
    fn open_dir(&self, rel: &[OsString]) -> io::Result<OwnedFd> {
        let mut dir = rustix::io::dup(&self.base)?;
        for c in rel {
            dir = open_child_dir(dir.as_fd(), c, false)?;
        }
        Ok(dir)
    }

    /// The directory holding `rel`'s last component, made as needed.
    fn parent_of(&mut self, rel: &[OsString]) -> io::Result<Rc<OwnedFd>> {
        let parents = &rel[..rel.len() - 1];
        if let Some((path, fd)) = &self.last_parent
            && path.as_slice() == parents
        {
            return Ok(fd.clone());
        }
        let mut dir = rustix::io::dup(&self.base)?;
        for c in parents {
            dir = open_child_dir(dir.as_fd(), c, true).map_err(|e| {
                let through = [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR].map(|n| Some(n.raw_os_error()));
                if through.contains(&e.raw_os_error()) {
                    refused(TarRefusal::ThroughLink { path: show(rel) })
                } else {
                    e
                }
            })?;
        }
        let dir = Rc::new(dir);
        self.last_parent = Some((parents.to_vec(), dir.clone()));
        Ok(dir)
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> io::Result<()> {
        let kind = entry.header().entry_type();
        if matches!(kind, tar::EntryType::XGlobalHeader | tar::EntryType::XHeader) {
            return Ok(());
        }
        let raw = entry.path()?.into_owned();
        if self.roots == Roots::Any && raw.components().all(|c| c == Component::CurDir) {
            return Ok(());
        }
        // The path is checked first: a hostile header is refused by its name.
        self.map(&raw)?;
        let mode = entry.header().mode()? & KEPT_MODE;
        let mtime = entry.header().mtime()?;
        let link = || entry.link_name().map(|l| l.map(|l| l.into_owned()));
        let item = match kind {
            tar::EntryType::Directory => Item::Dir,
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => Item::File,
            tar::EntryType::Symlink => Item::Symlink(
                link()?.ok_or_else(|| refused(TarRefusal::LinksToNothing { path: raw.display().to_string() }))?,
            ),
            tar::EntryType::Link => Item::HardLink(
                link()?.ok_or_else(|| refused(TarRefusal::LinksToNothing { path: raw.display().to_string() }))?,
            ),
            other => {
                let rel = self.map(&raw)?;
                return Err(refused(TarRefusal::Kind { path: show(&rel), kind: kind_word(other) }));
            }
        };
        // A big regular file's contents go from the stream into the file
        // without a pass through a buffer here; a sparse file's holes are
        // the tar crate's own zeros, so it is read as any other.
        let sink = match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous if entry.size() >= SPLICE_FROM => self.sink.clone(),
            _ => None,
        };
        self.put(&raw, item, mode, mtime, |file| match sink {
            Some(sink) => sink_contents(&mut entry, file, &sink),
            None => copy_in_chunks(&mut entry, file),
        })
    }

    /// Writes one entry at `raw` (a path as a stream names it); a file's
    /// contents are what `contents` writes into the new, empty file.
    pub(super) fn put(
        &mut self,
        raw: &Path,
        item: Item,
        mode: u32,
        mtime: u64,
        contents: impl FnOnce(&mut std::fs::File) -> io::Result<u64>,
    ) -> io::Result<()> {
        let mode = mode & KEPT_MODE;
        let rel = self.map(raw)?;
        let dir = self.parent_of(&rel)?;
        let last = rel.last().expect("mapped paths are not empty");
        match item {
            Item::Dir => {
                match rustix::fs::statat(&dir, last, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
                    // Never a file of the caller's replaced by a directory.
                    Ok(_) => return Err(io::Error::other(CopyError::NotADir { path: PathBuf::from_iter(&rel) })),
                    Err(rustix::io::Errno::NOENT) => rustix::fs::mkdirat(&dir, last, Mode::from_raw_mode(0o700))?,
                    Err(e) => return Err(e.into()),
                }
                self.files.remove(&rel);
                self.dirs.push((rel, mode, mtime));
            }
            Item::File => {
                let file = self.fresh_file(&dir, last, &rel)?;
                let mut file = std::fs::File::from(file);
                self.outcome.bytes += contents(&mut file)?;
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
                rustix::fs::futimens(&file, &times(mtime))?;
                self.files.insert(rel);
            }
            Item::Symlink(target) => {
                self.clear(&dir, last, &rel)?;
                // A symlink is written as it is, pointing anywhere: nothing
                // this copy writes later is ever written through one.
                rustix::fs::symlinkat(target.as_path(), &dir, last)?;
                self.files.remove(&rel);
                let _ = rustix::fs::utimensat(&dir, last, &times(mtime), AtFlags::SYMLINK_NOFOLLOW);
            }
            Item::HardLink(target) => {
                let target = self.map(&target)?;
                if !self.files.contains(&target) {
                    return Err(refused(TarRefusal::HardLinkElsewhere { path: show(&rel), target: show(&target) }));
                }
                let from_dir = self.parent_of(&target)?;
                let from = rustix::fs::openat(
                    &from_dir,
                    target.last().expect("mapped paths are not empty"),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                let mut from = std::fs::File::from(from);
                let meta = from.metadata()?;
                let mut file = std::fs::File::from(self.fresh_file(&dir, last, &rel)?);
                self.outcome.bytes += io::copy(&mut from, &mut file)?;
                file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & KEPT_MODE))?;
                rustix::fs::futimens(&file, &times(meta.mtime().max(0) as u64))?;
                self.files.insert(rel);
            }
        }
        self.outcome.entries += 1;
        Ok(())
    }

    /// Removes what is at `last` unless it is a directory (which is refused).
    fn clear(&self, dir: &OwnedFd, last: &OsStr, rel: &[OsString]) -> io::Result<()> {
        match rustix::fs::statat(dir, last, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                let path = PathBuf::from_iter(rel);
                Err(io::Error::other(CopyError::DirInTheWay { path }))
            }
            Ok(_) => Ok(rustix::fs::unlinkat(dir, last, AtFlags::empty())?),
            Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A new, empty file at `last`, created exclusively (never opening
    /// what was there: a symlink there is removed, not followed).
    fn fresh_file(&self, dir: &OwnedFd, last: &OsStr, rel: &[OsString]) -> io::Result<OwnedFd> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let create = || rustix::fs::openat(dir, last, flags, Mode::from_raw_mode(0o600));
        match create() {
            // Something is there: removed (a directory refused), then made anew.
            Err(rustix::io::Errno::EXIST) => {
                self.clear(dir, last, rel)?;
                Ok(create()?)
            }
            other => Ok(other?),
        }
    }
}

/// Opens directory `name` in `dir` without following a symlink, making it
/// (owner-only until its own mode is set) when `make` and it is missing.
pub(super) fn open_child_dir(dir: BorrowedFd<'_>, name: &OsStr, make: bool) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Err(rustix::io::Errno::NOENT) if make => {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
            Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
        }
        other => Ok(other?),
    }
}

/// `io::copy` with chunks of a pipe's size rather than 8 KiB: a fraction
/// of the system calls for a big file.
fn copy_in_chunks(from: &mut impl Read, to: &mut impl Write) -> io::Result<u64> {
    let mut buf = vec![0u8; PIPE_CAPACITY];
    let mut total = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}

fn show(rel: &[OsString]) -> String {
    PathBuf::from_iter(rel).display().to_string()
}
#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    /// Extracts `bytes` through a real pipe, as a box's tar arrives.
    fn extract_bytes(bytes: Vec<u8>, parent: &Path, name: Option<&str>) -> io::Result<CopyOutcome> {
        let (r, mut w) = io::pipe().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
        });
        let got = extract(r, parent, name.map(OsStr::new));
        writer.join().unwrap();
        got
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, body: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(body.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_000_000);
        b.append_data(&mut h, path, body).unwrap();
    }

    /// A directory entry at `path`, mode 0755.
    fn directory(b: &mut tar::Builder<Vec<u8>>, path: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        b.append_data(&mut h, path, io::empty()).unwrap();
    }

    /// A file big enough to be spliced, between two small ones.
    fn big_between_small() -> (Vec<u8>, Vec<u8>) {
        let big: Vec<u8> = (0..SPLICE_FROM as usize * 3 + 513).map(|i| (i % 253) as u8).collect();
        let bytes = tar_of(|b| {
            directory(b, "t");
            file(b, "t/a", 0o644, b"first");
            file(b, "t/big", 0o4640, &big);
            file(b, "t/z", 0o600, b"last");
        });
        (bytes, big)
    }

    fn assert_big_between_small(dir: &Path, big: &[u8]) {
        assert_eq!(std::fs::read(dir.join("u/a")).unwrap(), b"first");
        assert_eq!(std::fs::read(dir.join("u/big")).unwrap(), big);
        assert_eq!(std::fs::read(dir.join("u/z")).unwrap(), b"last");
        let meta = std::fs::metadata(dir.join("u/big")).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.mtime()), (0o640, 1_000_000));
    }

    #[test]
    fn a_big_file_spliced_from_a_pipe_arrives_whole_and_the_next_entry_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, big) = big_between_small();
        let got = extract_bytes(bytes, dir.path(), Some("u")).unwrap();
        assert_eq!((got.entries, got.bytes), (4, big.len() as u64 + 9));
        assert_big_between_small(dir.path(), &big);
    }

    #[test]
    fn a_big_file_from_a_tar_that_is_no_pipe_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, big) = big_between_small();
        let mut stream = tempfile::tempfile().unwrap();
        stream.write_all(&bytes).unwrap();
        io::Seek::rewind(&mut stream).unwrap();
        let got = extract(stream, dir.path(), Some(OsStr::new("u"))).unwrap();
        assert_eq!((got.entries, got.bytes), (4, big.len() as u64 + 9));
        assert_big_between_small(dir.path(), &big);
    }

    #[test]
    fn a_big_file_cut_short_fails_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bytes, _) = big_between_small();
        bytes.truncate(2048 + SPLICE_FROM as usize);
        assert!(extract_bytes(bytes, dir.path(), Some("u")).is_err());
    }

    #[test]
    fn a_setuid_file_arrives_without_the_bit_and_keeps_its_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = tar_of(|b| file(b, "x", 0o4755, b"hi"));
        extract_bytes(bytes, dir.path(), Some("y")).unwrap();
        let meta = std::fs::metadata(dir.path().join("y")).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o755);
        assert_eq!(meta.mtime(), 1_000_000);
    }

    #[test]
    fn paths_outside_the_root_are_refused() {
        for bad in ["../evil", "/etc/evil"] {
            let dir = tempfile::tempdir().unwrap();
            let mut h = tar::Header::new_gnu();
            h.set_size(1);
            h.set_entry_type(tar::EntryType::Regular);
            // set_path refuses these, so the raw name field is written, as
            // a hostile tar would.
            h.as_old_mut().name[..bad.len()].copy_from_slice(bad.as_bytes());
            h.set_cksum();
            let mut bytes = h.as_bytes().to_vec();
            bytes.extend_from_slice(&[b'x'; 512]);
            bytes.extend_from_slice(&[0; 1024]);
            let err = extract_bytes(bytes, dir.path(), None).unwrap_err();
            assert!(
                matches!(
                    refusal(&err),
                    Some(TarRefusal::ClimbsOut { path }) | Some(TarRefusal::Absolute { path }) if path == bad
                ),
                "{bad}: {err}"
            );
            assert!(err.to_string().starts_with("refused the box's tar: "), "{err}");
        }
    }

    /// The refusal an extraction failed with, if it was one.
    fn refusal(err: &io::Error) -> Option<&TarRefusal> {
        match err.get_ref()?.downcast_ref::<CopyError>()? {
            CopyError::Tar(r) => Some(r),
            _ => None,
        }
    }

    #[test]
    fn nothing_is_written_through_a_symlink_the_tar_planted() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let bytes = tar_of(|b| {
            directory(b, "t");
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            h.set_mode(0o777);
            b.append_link(&mut h, "t/l", outside.path()).unwrap();
            file(b, "t/l/pwned", 0o644, b"x");
        });
        let err = extract_bytes(bytes, dir.path(), None).unwrap_err();
        assert!(matches!(refusal(&err), Some(TarRefusal::ThroughLink { path }) if path == "t/l/pwned"), "{err}");
        assert!(!outside.path().join("pwned").exists());
    }

    #[test]
    fn a_file_of_the_caller_is_never_replaced_by_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "mine").unwrap();
        let bytes = tar_of(|b| {
            directory(b, "x");
        });
        let err = extract_bytes(bytes, dir.path(), Some("keep")).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
        assert_eq!(std::fs::read_to_string(dir.path().join("keep")).unwrap(), "mine");
    }
}
