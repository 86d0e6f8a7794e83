//! The checked writing side of a copy: every entry that lands on this
//! machine — from a box's tar (checked entry by entry: the box's word), or
//! from the caller's own tree into a box's workspace directory here — goes
//! through `Extractor`, which resolves each path from one opened directory
//! without following a symlink, creates files exclusively, refuses device
//! nodes, fifos and hard links to anything this copy did not write, and
//! keeps permission bits only (no setuid, setgid or sticky bit, no extended
//! attribute; out of a box, no group or other write bit either). What it
//! writes belongs to the process writing it. Each file's bytes land through
//! land.rs (holes stay holes, a copy out is bounded), and a copy it cannot
//! finish removes what it made.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timestamps};

use super::land::{Budget, land};
use super::{CopyError, CopyOutcome, KEPT_MODE, PIPE_CAPACITY, TarRefusal, kind};

/// Writes the tar on `r` under `parent`, its root renamed `name`, checking
/// every entry first.
#[cfg(test)]
pub(super) fn extract(r: impl Read, parent: &Path, name: Option<&OsStr>, rules: Rules) -> io::Result<CopyOutcome> {
    let base: OwnedFd = std::fs::File::open(parent)?.into();
    extract_at(r, base, name, Roots::One, rules)
}

/// Writes the tar on `r` under the opened directory `base`; what a failed
/// copy made is removed.
pub(super) fn extract_at(
    r: impl Read,
    base: OwnedFd,
    name: Option<&OsStr>,
    roots: Roots,
    rules: Rules,
) -> io::Result<CopyOutcome> {
    let mut x = Extractor::new(base, name, roots, rules);
    // Headers are 512-byte reads: read a pipe's worth at a time.
    let mut archive = tar::Archive::new(io::BufReader::with_capacity(PIPE_CAPACITY, r));
    let written = (|| {
        for entry in archive.entries()? {
            x.entry(entry?)?;
        }
        x.set_dir_modes()
    })();
    if let Err(e) = written {
        x.undo();
        return Err(e);
    }
    // Anything after the archive's end (tar's padding) is read so the box's
    // tar ends cleanly.
    io::copy(&mut archive.into_inner(), &mut io::sink())?;
    Ok(x.outcome)
}

/// What a writer keeps of what it is given, by which way the copy goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules {
    /// The permission bits an entry keeps.
    pub kept_mode: u32,
    pub budget: Budget,
}

impl Rules {
    /// Out of a box, which is the box's word: no bit that lets anyone but
    /// the caller write (a directory the box made 2777 lands 0755), and
    /// bounded by `max_size` (land.rs).
    pub(super) fn out_of_box(max_size: u64) -> Rules {
        Rules { kept_mode: KEPT_MODE & !0o022, budget: Budget::of(max_size) }
    }

    /// The caller's own files into a box's workspace directory: their
    /// modes, as a copy through the box would write them, unbounded.
    pub(super) fn into_box() -> Rules {
        Rules { kept_mode: KEPT_MODE, budget: Budget::unbounded() }
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
    rules: Rules,
    /// What this copy made, in order: removed again if it fails.
    made: Vec<Vec<OsString>>,
    outcome: CopyOutcome,
}

impl Extractor {
    pub(super) fn new(base: OwnedFd, name: Option<&OsStr>, roots: Roots, rules: Rules) -> Extractor {
        Extractor {
            base,
            name: name.map(OsStr::to_owned),
            roots,
            archive_root: None,
            files: HashSet::new(),
            dirs: Vec::new(),
            last_parent: None,
            rules,
            made: Vec::new(),
            outcome: CopyOutcome::default(),
        }
    }

    /// Sets each directory's own mode and mtime, once its contents are
    /// written; what was written. What a failed copy made is removed.
    pub(super) fn finish(mut self) -> io::Result<CopyOutcome> {
        if let Err(e) = self.set_dir_modes() {
            self.undo();
            return Err(e);
        }
        Ok(self.outcome)
    }

    fn set_dir_modes(&mut self) -> io::Result<()> {
        // Deepest first, so a read-only directory is closed after its contents.
        for (rel, mode, mtime) in std::mem::take(&mut self.dirs).into_iter().rev() {
            let fd = self.open_dir(&rel)?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
            rustix::fs::futimens(&fd, &times(mtime))?;
        }
        Ok(())
    }

    /// Removes what this copy made, newest first, never through a symlink;
    /// a directory something else has since written in is left.
    pub(super) fn undo(&mut self) {
        self.last_parent = None;
        for rel in std::mem::take(&mut self.made).into_iter().rev() {
            let (last, parents) = rel.split_last().expect("made paths are not empty");
            let Ok(dir) = self.open_dir(parents) else { continue };
            // What the copy made can be read-only: its owner may still remove it.
            let is_dir = rustix::fs::statat(&dir, last, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
            let _ = rustix::fs::unlinkat(&dir, last, if is_dir { AtFlags::REMOVEDIR } else { AtFlags::empty() });
        }
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
        for (i, c) in parents.iter().enumerate() {
            let (next, made) = open_or_make_dir(dir.as_fd(), c).map_err(|e| {
                let through = [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR].map(|n| Some(n.raw_os_error()));
                if through.contains(&e.raw_os_error()) {
                    refused(TarRefusal::ThroughLink { path: show(rel) })
                } else {
                    e
                }
            })?;
            if made {
                self.made.push(parents[..=i].to_vec());
            }
            dir = next;
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
        let rel = self.map(&raw)?;
        let mode = entry.header().mode()?;
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
                return Err(refused(TarRefusal::Kind { path: show(&rel), kind: kind::word(other) }));
            }
        };
        if matches!(item, Item::File) {
            // Its size is what it claims, holes included (a GNU sparse
            // entry's real size): refused before anything of it is made.
            self.rules.budget.admit(&show(&rel), entry.size())?;
        }
        // A sparse entry's holes are the tar crate's zeros: landed as holes.
        self.put(&raw, item, mode, mtime, |file, budget| land(&mut entry, file, budget))
    }

    /// Writes one entry at `raw` (a path as a stream names it); a file's
    /// contents are what `contents` writes into the new, empty file.
    pub(super) fn put(
        &mut self,
        raw: &Path,
        item: Item,
        mode: u32,
        mtime: u64,
        contents: impl FnOnce(&mut std::fs::File, &mut Budget) -> io::Result<u64>,
    ) -> io::Result<()> {
        let mode = mode & self.rules.kept_mode;
        let rel = self.map(raw)?;
        let dir = self.parent_of(&rel)?;
        let last = rel.last().expect("mapped paths are not empty");
        match item {
            Item::Dir => {
                match rustix::fs::statat(&dir, last, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
                    // Never a file of the caller's replaced by a directory.
                    Ok(_) => return Err(io::Error::other(CopyError::NotADir { path: PathBuf::from_iter(&rel) })),
                    Err(rustix::io::Errno::NOENT) => {
                        rustix::fs::mkdirat(&dir, last, Mode::from_raw_mode(0o700))?;
                        self.made.push(rel.clone());
                    }
                    Err(e) => return Err(e.into()),
                }
                self.files.remove(&rel);
                self.dirs.push((rel, mode, mtime));
            }
            Item::File => {
                let file = self.fresh_file(&dir, last, &rel)?;
                self.made.push(rel.clone());
                let mut file = std::fs::File::from(file);
                self.outcome.bytes += contents(&mut file, &mut self.rules.budget)?;
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
                rustix::fs::futimens(&file, &times(mtime))?;
                self.files.insert(rel);
            }
            Item::Symlink(target) => {
                self.clear(&dir, last, &rel)?;
                // A symlink is written as it is, pointing anywhere: nothing
                // this copy writes later is ever written through one.
                rustix::fs::symlinkat(target.as_path(), &dir, last)?;
                self.made.push(rel.clone());
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
                let file = std::fs::File::from(self.fresh_file(&dir, last, &rel)?);
                self.made.push(rel.clone());
                // Copied, as the file it names was: its holes stay holes, its bytes count.
                self.outcome.bytes += land(&mut from, &file, &mut self.rules.budget)?;
                file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & self.rules.kept_mode))?;
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
    if make {
        return open_or_make_dir(dir, name).map(|(fd, _)| fd);
    }
    Ok(rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())?)
}

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Directory `name` in `dir`, made when missing; whether it was made.
fn open_or_make_dir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<(OwnedFd, bool)> {
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Err(rustix::io::Errno::NOENT) => {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
            Ok((rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())?, true))
        }
        other => Ok((other?, false)),
    }
}

fn show(rel: &[OsString]) -> String {
    PathBuf::from_iter(rel).display().to_string()
}
#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Bigger than a pipe's read: a file that comes in many reads.
    const BIG: usize = PIPE_CAPACITY + 300 * 1024;

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
        let got = extract(r, parent, name.map(OsStr::new), Rules::out_of_box(super::super::land::DEFAULT_MAX_SIZE));
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

    /// A file of many reads, between two small ones.
    fn big_between_small() -> (Vec<u8>, Vec<u8>) {
        let big: Vec<u8> = (0..BIG * 3 + 513).map(|i| (i % 253) as u8).collect();
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
    fn a_big_file_from_a_pipe_arrives_whole_and_the_next_entry_after_it() {
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
        let got = extract(stream, dir.path(), Some(OsStr::new("u")), Rules::out_of_box(1 << 30)).unwrap();
        assert_eq!((got.entries, got.bytes), (4, big.len() as u64 + 9));
        assert_big_between_small(dir.path(), &big);
    }

    #[test]
    fn a_big_file_cut_short_fails_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (mut bytes, _) = big_between_small();
        bytes.truncate(2048 + BIG);
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

    #[test]
    fn out_of_a_box_no_group_or_other_write_bit_lands() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = tar_of(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            h.set_mode(0o2777);
            b.append_data(&mut h, "d", io::empty()).unwrap();
            file(b, "d/f", 0o666, b"x");
        });
        extract_bytes(bytes, dir.path(), None).unwrap();
        assert_eq!(std::fs::metadata(dir.path().join("d")).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::metadata(dir.path().join("d/f")).unwrap().mode() & 0o7777, 0o644);
    }

    #[test]
    fn a_copy_over_its_bound_leaves_nothing_it_made_and_keeps_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("t")).unwrap();
        std::fs::write(dir.path().join("t/old"), "mine").unwrap();
        let bytes = tar_of(|b| {
            directory(b, "t");
            directory(b, "t/sub");
            file(b, "t/sub/a", 0o644, &[1; 3000]);
            file(b, "t/new", 0o644, &[2; 3000]);
            file(b, "t/z", 0o644, &[3; 3000]);
        });
        let base: OwnedFd = std::fs::File::open(dir.path()).unwrap().into();
        let (r, mut w) = io::pipe().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
        });
        // Two files' worth: the third is over.
        let got = extract_at(r, base, None, Roots::One, Rules::out_of_box(8 * 1024));
        writer.join().unwrap();
        let err = got.unwrap_err();
        assert!(err.to_string().contains("stopped at its bound of 8 KiB"), "{err}");
        let mut left: Vec<_> =
            std::fs::read_dir(dir.path().join("t")).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, ["old"], "what the copy made was left");
        assert_eq!(std::fs::read_to_string(dir.path().join("t/old")).unwrap(), "mine");
    }

    #[test]
    fn a_file_claiming_more_than_the_bound_is_refused_before_it_is_made() {
        let dir = tempfile::tempdir().unwrap();
        // A GNU sparse entry of 1 TiB holding no data, as `tar --sparse` sends one.
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_size(0);
        h.set_mode(0o644);
        let gnu = h.as_gnu_mut().unwrap();
        gnu.set_real_size(1 << 40);
        // The map's last entry marks the end, as GNU tar writes it.
        gnu.sparse[0].set_offset(1 << 40);
        gnu.sparse[0].set_length(0);
        h.set_path("sparse").unwrap();
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&[0; 1024]);
        let err = extract_bytes(bytes, dir.path(), Some("out")).unwrap_err();
        assert!(err.to_string().contains("is 1099511627776 bytes (1 TiB), over the copy's bound of 10 GiB"), "{err}");
        assert!(!dir.path().join("out").exists());
    }

    #[test]
    fn a_sparse_entry_under_the_bound_lands_with_its_holes() {
        let dir = tempfile::tempdir().unwrap();
        // 64 MiB of zeros but one block, sent densely (as a tar without --sparse does).
        let mut body = vec![0u8; 64 << 20];
        body[40 << 20] = 1;
        let bytes = tar_of(|b| file(b, "s", 0o644, &body));
        extract_bytes(bytes, dir.path(), None).unwrap();
        let meta = std::fs::metadata(dir.path().join("s")).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        assert!(meta.blocks() * 512 <= 1 << 20, "{} bytes of blocks", meta.blocks() * 512);
        assert_eq!(std::fs::read(dir.path().join("s")).unwrap(), body);
    }
}
