//! Where a copy out lands on this machine, resolved once, before the box
//! sends anything, into an opened directory that every entry is then
//! written beneath (extract.rs). The caller's path is walked one component
//! at a time from `/`, never letting the kernel follow a symlink: one met
//! in the caller's own directories is followed here as the kernel would,
//! one inside a box's workspace directory — which the box writes, and can
//! point anywhere, at any moment — is refused (ADR 0026). The directory
//! opened last is the one written in, whatever the box does to its path
//! afterwards.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use tinybox_sdk::model::BoxId;

use super::CopyError;

/// The most symlinks one destination may pass through, as the kernel's own.
const MAX_LINKS: u32 = 40;

/// The directories here that boxes write: every local box's workspace
/// directory, as its real path.
#[derive(Debug, Clone, Default)]
pub(super) struct BoxDirs(Vec<(BoxId, PathBuf)>);

impl BoxDirs {
    /// `dirs` as their real paths; one that does not resolve is left out
    /// (nothing can be reached through it).
    pub(super) fn new(dirs: impl IntoIterator<Item = (BoxId, PathBuf)>) -> BoxDirs {
        BoxDirs(dirs.into_iter().filter_map(|(id, d)| Some((id, std::fs::canonicalize(d).ok()?))).collect())
    }

    /// The box whose directory holds (or is) the real path `dir`.
    fn holding(&self, dir: &Path) -> Option<&(BoxId, PathBuf)> {
        self.0.iter().find(|(_, ws)| dir.starts_with(ws))
    }
}

/// One step of a walk.
enum Step {
    Up,
    Down(OsString),
}

fn steps(path: &Path) -> VecDeque<Step> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Step::Down(n.to_owned())),
            Component::ParentDir => Some(Step::Up),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Why a walk stopped.
enum Stop {
    /// The step's name is missing, or is no directory (`at` names it).
    NotADir(PathBuf),
    Copy(CopyError),
    Io(io::Error),
}

impl From<rustix::io::Errno> for Stop {
    fn from(e: rustix::io::Errno) -> Stop {
        Stop::Io(e.into())
    }
}

/// A directory reached, and its real path.
struct At {
    fd: OwnedFd,
    path: PathBuf,
}

const DIR: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

struct Walk<'a> {
    dirs: &'a BoxDirs,
    /// The caller's destination, as they named it.
    dst: &'a Path,
    links: u32,
}

impl Walk<'_> {
    fn root() -> Result<At, Stop> {
        Ok(At { fd: rustix::fs::open("/", DIR, Mode::empty())?, path: PathBuf::from("/") })
    }

    /// Walks `todo` from `at`, following symlinks only where no box can
    /// shape them.
    fn walk(&mut self, mut at: At, mut todo: VecDeque<Step>) -> Result<At, Stop> {
        while let Some(step) = todo.pop_front() {
            let name = match step {
                Step::Up => {
                    // `..` is never a link; at `/` it is `/`.
                    at.fd = rustix::fs::openat(&at.fd, "..", DIR, Mode::empty())?;
                    at.path.pop();
                    continue;
                }
                Step::Down(name) => name,
            };
            match rustix::fs::openat(&at.fd, name.as_os_str(), DIR, Mode::empty()) {
                Ok(fd) => {
                    at.fd = fd;
                    at.path.push(&name);
                }
                Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                    let Some(target) = self.link(&at, &name)? else {
                        return Err(Stop::NotADir(at.path.join(&name)));
                    };
                    let mut next = steps(&target);
                    next.extend(todo);
                    todo = next;
                    if target.is_absolute() {
                        at = Walk::root()?;
                    }
                }
                Err(rustix::io::Errno::NOENT) => return Err(Stop::NotADir(at.path.join(&name))),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(at)
    }

    /// What the symlink `name` in `at` points to (`None`: it is no
    /// symlink), refused when a box can write it.
    fn link(&mut self, at: &At, name: &OsStr) -> Result<Option<PathBuf>, Stop> {
        let target = match rustix::fs::readlinkat(&at.fd, name, Vec::new()) {
            Ok(t) => PathBuf::from(OsStr::from_bytes(t.as_bytes())),
            Err(rustix::io::Errno::INVAL) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if let Some((box_id, ws)) = self.dirs.holding(&at.path) {
            return Err(Stop::Copy(CopyError::ThroughBoxLink {
                dst: self.dst.to_owned(),
                link: at.path.join(name),
                box_id: box_id.clone(),
                ws: ws.clone(),
            }));
        }
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(Stop::Io(io::Error::from(rustix::io::Errno::LOOP)));
        }
        Ok(Some(target))
    }
}

/// Where a copy out to `dst` lands: the opened directory to write in, and
/// the name the copy's root takes there (`None`: the name the box's tar
/// gives it, in `dst` itself, an existing directory).
pub(super) fn resolve(dst: &Path, dirs: &BoxDirs) -> Result<(OwnedFd, Option<OsString>), CopyError> {
    let io_err = |e: io::Error| CopyError::Local { path: dst.to_owned(), detail: e.to_string() };
    let absolute = if dst.is_absolute() { dst.to_owned() } else { std::env::current_dir().map_err(io_err)?.join(dst) };
    let mut walk = Walk { dirs, dst, links: 0 };
    let done = |r: Result<At, Stop>, missing: &dyn Fn(PathBuf) -> CopyError| match r {
        Ok(at) => Ok(at),
        Err(Stop::NotADir(p)) => Err(missing(p)),
        Err(Stop::Copy(e)) => Err(e),
        Err(Stop::Io(e)) => Err(io_err(e)),
    };
    let root = done(Walk::root(), &|path| CopyError::NoLocalDir { path })?;
    let trailing = dst.as_os_str().as_bytes().ends_with(b"/");
    let mut todo = steps(&absolute);
    let last = match todo.back() {
        Some(Step::Down(n)) if !trailing => n.clone(),
        // `dir/`, `.`, `..`, `/`: an existing directory, written in.
        _ => {
            let at = done(walk.walk(root, todo), &|_| CopyError::NoLocalDir { path: dst.to_owned() })?;
            return Ok((at.fd, None));
        }
    };
    todo.pop_back();
    let parent = done(walk.walk(root, todo), &|_| CopyError::NoLocalDir { path: parent_of(dst) })?;
    let mut one = VecDeque::new();
    one.push_back(Step::Down(last.clone()));
    let parent_fd = rustix::io::dup(&parent.fd).map_err(|e| io_err(e.into()))?;
    match walk.walk(parent, one) {
        // An existing directory (through a link of the caller's, maybe): into it.
        Ok(at) => Ok((at.fd, None)),
        // Missing, a file, or a link to no directory: named by `last`, in
        // its parent (a link there is replaced, never followed).
        Err(Stop::NotADir(_)) => Ok((parent_fd, Some(last))),
        Err(Stop::Copy(e)) => Err(e),
        Err(Stop::Io(e)) => Err(io_err(e)),
    }
}

/// What a person calls `dst`'s parent.
fn parent_of(dst: &Path) -> PathBuf {
    match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// The real path of the directory `fd` is.
    fn path_of(fd: &OwnedFd) -> PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(fd))).unwrap()
    }

    #[test]
    fn a_destination_through_a_link_in_a_box_directory_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let (ws, victim) = (top.path().join("ws"), top.path().join("victim"));
        std::fs::create_dir_all(ws.join("real")).unwrap();
        std::fs::create_dir(&victim).unwrap();
        symlink(&victim, ws.join("race2")).unwrap();
        symlink("../victim", ws.join("rel")).unwrap();
        let id = BoxId::new("box-3").unwrap();
        let dirs = BoxDirs::new([(id.clone(), ws.clone())]);
        for dst in ["race2/x", "race2", "race2/", "rel/x", "real/../race2/x", "race2/./x"] {
            let got = resolve(&ws.join(dst), &dirs);
            match got {
                Err(CopyError::ThroughBoxLink { link, box_id, .. }) => {
                    assert_eq!(box_id, id);
                    assert!(link.ends_with("race2") || link.ends_with("rel"), "{dst}: {}", link.display());
                }
                other => panic!("{dst}: {other:?}"),
            }
        }
        // The same links outside any box's directory are the caller's own: followed.
        let none = BoxDirs::default();
        let (fd, name) = resolve(&ws.join("race2/x"), &none).unwrap();
        assert_eq!((path_of(&fd), name), (std::fs::canonicalize(&victim).unwrap(), Some("x".into())));
        let (fd, name) = resolve(&ws.join("race2"), &none).unwrap();
        assert_eq!((path_of(&fd), name), (std::fs::canonicalize(&victim).unwrap(), None));
        // A path in the box's directory without a link is fine.
        let (fd, name) = resolve(&ws.join("real/new"), &dirs).unwrap();
        assert_eq!((path_of(&fd), name), (std::fs::canonicalize(ws.join("real")).unwrap(), Some("new".into())));
    }

    #[test]
    fn a_link_of_the_callers_leading_to_a_box_directory_is_followed_and_the_box_link_refused() {
        let top = tempfile::tempdir().unwrap();
        let ws = top.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        symlink("/", ws.join("up")).unwrap();
        symlink(&ws, top.path().join("mine")).unwrap();
        let dirs = BoxDirs::new([(BoxId::new("box-1").unwrap(), ws.clone())]);
        let got = resolve(&top.path().join("mine/up/tmp/x"), &dirs);
        assert!(matches!(got, Err(CopyError::ThroughBoxLink { .. })), "{got:?}");
        let (fd, _) = resolve(&top.path().join("mine/x"), &dirs).unwrap();
        assert_eq!(path_of(&fd), std::fs::canonicalize(&ws).unwrap());
    }

    #[test]
    fn what_is_missing_or_no_directory_is_named() {
        let top = tempfile::tempdir().unwrap();
        std::fs::write(top.path().join("file"), "x").unwrap();
        let dirs = BoxDirs::default();
        let got = resolve(&top.path().join("no/such"), &dirs);
        assert!(matches!(&got, Err(CopyError::NoLocalDir { path }) if path.ends_with("no")), "{got:?}");
        let got = resolve(&top.path().join("file/x"), &dirs);
        assert!(matches!(&got, Err(CopyError::NoLocalDir { .. })), "{got:?}");
        let got = resolve(&top.path().join("new/"), &dirs);
        assert!(matches!(&got, Err(CopyError::NoLocalDir { .. })), "{got:?}");
        // An existing file is named as itself, to be replaced.
        let (fd, name) = resolve(&top.path().join("file"), &dirs).unwrap();
        assert_eq!((path_of(&fd), name), (std::fs::canonicalize(top.path()).unwrap(), Some("file".into())));
        // A loop of links ends.
        symlink("b", top.path().join("a")).unwrap();
        symlink("a", top.path().join("b")).unwrap();
        assert!(matches!(resolve(&top.path().join("a/x"), &dirs), Err(CopyError::Local { .. })));
    }
}
