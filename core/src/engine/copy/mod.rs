//! Copying files and directories into and out of a box (`tinybox cp`, the
//! module's `fs.*`, the MCP server's file tools). The bytes travel as a tar
//! stream on the exec path's pipes, never in JSON: `tar` runs inside the
//! box, confined like any command there, so nothing it reads or writes can
//! leave the box's own filesystem; on this side the stream is built from,
//! or written to, the caller's path by this module. A sandbox declaring
//! `archive` moves the same tar its own way instead (archive.rs: docker's
//! `docker cp`), checked here the same way.
//!
//! A tar coming out of a box is the box's word and is checked entry by
//! entry before anything is written: one root named as asked, no absolute
//! or `..` path, nothing written through a symlink (every directory on the
//! way is opened with O_NOFOLLOW from the destination's parent), no device
//! node or fifo, a hard link only to a file this copy wrote (and then
//! copied, never linked). What is written belongs to the caller, carries no
//! setuid, setgid or sticky bit, no group or other write bit, and no
//! extended attribute. The destination is resolved before the box sends
//! anything, never through a symlink inside a box's workspace directory
//! (dest.rs); holes stay holes, a copy out is bounded, and one that fails
//! removes what it made (land.rs, ADR 0026). A copy in to a path its box
//! does not keep from one command to the next is refused (the driver's
//! `persistent_paths`).

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use tinybox_sdk::model::{BoxId, ExecRequest};
use tinybox_sdk::stdio::StdioFds;

mod archive;
mod dest;
mod error;
mod extract;
mod files;
mod host_dir;
mod kind;
mod land;
mod local;
mod outlives;

use super::{Target, Tinybox};
use crate::error::{Error, Result};
use crate::model::Phase;
use extract::refused;
use local::{Landing, blocking, check_kind, consumer_of, piped, root_name, send_tree};

pub use error::{CopyError, TarRefusal};
pub use land::DEFAULT_MAX_SIZE;

/// The bits a copied file keeps: permissions only; setuid, setgid and
/// sticky never survive a copy in either direction.
const KEPT_MODE: u32 = 0o777;

/// What the box says about its own stderr, at most: enough for a tar
/// error or a missing program, never a flood.
const STDERR_BOUND: usize = 8 * 1024;

/// How big a pipe a copy asks for: fewer wake-ups per byte.
const PIPE_CAPACITY: usize = 1024 * 1024;

/// From this size a file's contents are spliced into the copy's pipe
/// rather than copied through a buffer.
const SPLICE_FROM: u64 = 256 * 1024;

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From this machine into the box.
    In,
    /// From the box to this machine.
    Out,
}

/// The caller's end of a copy.
#[derive(Debug)]
pub enum Local {
    /// A file or directory on this machine.
    Path(PathBuf),
    /// A tar stream: read from it (into the box) or written to it (out).
    Tar(OwnedFd),
}

/// One copy, as a front end asks for it.
#[derive(Debug)]
pub struct CopyRequest {
    pub box_id: BoxId,
    pub direction: Direction,
    /// The path in the box: the destination (in) or the source (out).
    /// Relative paths are the box's working directory's.
    pub box_path: String,
    pub local: Local,
    /// Out: the most it may write here in all, and the largest size any
    /// one file of it may claim (holes included); past either the copy
    /// stops and removes what it wrote. `None`: [`DEFAULT_MAX_SIZE`].
    pub max_size: Option<u64>,
}

/// `SRC DST` as `tinybox cp` takes them: exactly one of the two is
/// `BOX:PATH`; the other is a path here, or `-` for a tar stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRoute {
    pub box_id: BoxId,
    pub direction: Direction,
    pub box_path: String,
    /// `None` is `-`: a tar stream on stdin (in) or stdout (out).
    pub local: Option<PathBuf>,
}

impl CopyRoute {
    /// Reads `tinybox cp SRC DST`.
    pub fn parse(src: &str, dst: &str) -> Result<CopyRoute, CopyError> {
        let local = |s: &str| if s == "-" { None } else { Some(PathBuf::from(s)) };
        match (box_side(src), box_side(dst)) {
            (Some(_), Some(_)) => Err(CopyError::TwoBoxes { src: src.into(), dst: dst.into() }),
            (None, None) => Err(CopyError::NoBox { src: src.into(), dst: dst.into() }),
            (None, Some((box_id, path))) => {
                Ok(CopyRoute { box_id, direction: Direction::In, box_path: path.into(), local: local(src) })
            }
            (Some((box_id, path)), None) => {
                Ok(CopyRoute { box_id, direction: Direction::Out, box_path: path.into(), local: local(dst) })
            }
        }
    }
}

/// `BOX:PATH`, or `None` for a local path: anything starting with `/` or
/// `.` is local whatever it contains, as with `docker cp`.
fn box_side(s: &str) -> Option<(BoxId, &str)> {
    if s.starts_with('/') || s.starts_with('.') {
        return None;
    }
    let (id, path) = s.split_once(':')?;
    BoxId::new(id).ok().map(|id| (id, path))
}

/// What a finished copy moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CopyOutcome {
    /// Files, directories and links written (out) or sent (in).
    pub entries: u64,
    /// Bytes of file contents.
    pub bytes: u64,
}

/// One entry of a directory in a box, as `list_dir` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DirEntry {
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: &'static str,
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Seconds since the epoch.
    pub mtime: u64,
}

/// Runs in the box, confined: checks for tar and the destination, then
/// extracts stdin there. $1 is the destination, $2 the name the stream's
/// root has (empty for a caller's stream, extracted into $1 as it is).
/// `umask 0` so the modes in the stream are the modes written; `-o` so a
/// root box does not take the stream's owners.
const IN_SCRIPT: &str = r#"command -v tar >/dev/null 2>&1 || { printf 'tinybox: no program tar in the box\n' >&2; exit 127; }
umask 0
dst=$1 name=$2
if [ -d "$dst" ]; then cd -- "$dst" || exit 122; exec tar -x -o -f -; fi
[ -n "$name" ] || exit 122
case $dst in */) exit 122 ;; esac
case $dst in */*) parent=${dst%/*} ;; *) parent=. ;; esac
[ -n "$parent" ] || parent=/
base=${dst##*/}
[ -d "$parent" ] && cd -- "$parent" || exit 121
[ "$base" = "$name" ] && exec tar -x -o -f -
tmp=$(mktemp -d ./.tinybox-cp.XXXXXX) || exit 123
tar -x -o -f - -C "$tmp" && mv -f -- "$tmp/$name" "./$base"
rc=$?
rm -rf -- "$tmp"
exit $rc
"#;

/// Runs in the box: writes a tar of $1 (the entry itself, not followed
/// when it is a symlink) to stdout, rooted at its name.
const OUT_SCRIPT: &str = r#"command -v tar >/dev/null 2>&1 || { printf 'tinybox: no program tar in the box\n' >&2; exit 127; }
src=$1
[ -e "$src" ] || [ -L "$src" ] || exit 121
case $src in */*) parent=${src%/*} ;; *) parent=. ;; esac
[ -n "$parent" ] || parent=/
cd -- "$parent" || exit 121
exec tar -c -f - -- "${src##*/}"
"#;

impl Tinybox {
    /// Copies as `request` says; see the module's documentation for what a
    /// tar from a box may not do here.
    pub async fn copy(&self, request: CopyRequest) -> Result<CopyOutcome> {
        let CopyRequest { box_id, direction, box_path, local, max_size } = request;
        if box_path.is_empty() {
            return Err(CopyError::EmptyBoxPath { box_id }.into());
        }
        let info = self.get(&box_id)?;
        super::not_pooled(&info)?;
        if direction == Direction::In {
            outlives::check(&info, &box_path)?;
        }
        let landing = self.landing(max_size)?;
        let local = match self.copy_by_directory(&box_id, direction, &box_path, local, &landing).await? {
            Ok(outcome) => return Ok(outcome),
            Err(local) => local,
        };
        let local = match self.copy_by_archive(&box_id, direction, &box_path, local, &landing).await? {
            Ok(outcome) => return Ok(outcome),
            Err(local) => local,
        };
        match (direction, local) {
            (Direction::In, Local::Path(src)) => {
                let root = root_name(&src)?;
                let meta = std::fs::symlink_metadata(&src).map_err(|_| CopyError::NoLocal { path: src.clone() })?;
                check_kind(&src, &meta)?;
                let name = root.to_string_lossy().into_owned();
                let producer = move |w: io::PipeWriter| send_tree(&src, &root, w);
                self.copy_in(&box_id, &box_path, &name, producer).await
            }
            (Direction::In, Local::Tar(fd)) => {
                let producer = move |mut w: io::PipeWriter| {
                    let n = io::copy(&mut std::fs::File::from(fd), &mut w)?;
                    Ok(CopyOutcome { entries: 0, bytes: n })
                };
                self.copy_in(&box_id, &box_path, "", producer).await
            }
            (Direction::Out, local) => {
                // A stopped bound box's snapshot holds all of it but its bind.
                let info = self.get(&box_id)?;
                let beside_bind = host_dir::bound_here(&info).is_some() && host_dir::under_mount(&box_path).is_none();
                self.copy_out(&box_id, &box_path, consumer_of(local, &landing)?, beside_bind).await
            }
        }
    }

    /// What a copy out may do here: the workspace directories of this
    /// store's boxes on this machine are the box's to shape.
    fn landing(&self, max_size: Option<u64>) -> Result<Landing> {
        let local = crate::model::HostName::local();
        let dirs = self.list()?.into_iter().filter(|info| info.spec.workspace.host == local).filter_map(|info| {
            let dir = info.bound_dir()?.to_owned();
            Some((info.id, dir))
        });
        Ok(Landing { dirs: dest::BoxDirs::new(dirs), max_size: max_size.unwrap_or(DEFAULT_MAX_SIZE) })
    }

    /// A copy served from or to the box's workspace directory here
    /// (host_dir.rs): `Ok(Err(local))` hands the copy back to go through
    /// the box. Into a running namespace or docker box's `/workspace` from
    /// a path here, when the directory is the caller's and no symlink is on
    /// the way; into and out of `/workspace` of a stopped box bound to a
    /// directory, which is refused when a symlink is on the way or the
    /// directory is another user's. Into anywhere else in a stopped bound
    /// box is refused: only a running box holds it.
    async fn copy_by_directory(
        &self,
        box_id: &BoxId,
        direction: Direction,
        box_path: &str,
        local: Local,
        landing: &Landing,
    ) -> Result<std::result::Result<CopyOutcome, Local>> {
        let info = self.get(box_id)?;
        let stopped = info.phase == Phase::Stopped;
        let (Some(ws), true) = (host_dir::bound_here(&info), stopped || info.phase == Phase::Created) else {
            return Ok(Err(local));
        };
        let ws = ws.to_owned();
        let Some(at) = host_dir::under_mount(box_path) else {
            if stopped && direction == Direction::In {
                return Err(needs_resume(
                    box_id,
                    format!(
                        "stopped, and only {} (the directory {}) holds its files while it is stopped",
                        host_dir::MOUNT,
                        ws.display()
                    ),
                ));
            }
            // Out of a stopped box: the rest of it is in its snapshot.
            return Ok(Err(local));
        };
        let running_tree_in = !stopped && direction == Direction::In && matches!(local, Local::Path(_));
        if !(stopped || running_tree_in) {
            return Ok(Err(local));
        }
        if !host_dir::is_callers(&ws) {
            if !stopped {
                return Ok(Err(local));
            }
            return Err(not_callers(box_id, &ws));
        }
        let id = box_id.clone();
        let done = match (direction, local) {
            (Direction::In, Local::Path(src)) => {
                let root = root_name(&src)?;
                let meta = std::fs::symlink_metadata(&src).map_err(|_| CopyError::NoLocal { path: src.clone() })?;
                check_kind(&src, &meta)?;
                let (w, keep) = (ws.clone(), src.clone());
                let source = host_dir::Source::Tree { path: src, root };
                let wrote = blocking(move || host_dir::write_into(&id, &w, &at, source)).await?;
                match wrote {
                    Err(host_dir::Stop::Link) if !stopped => return Ok(Err(Local::Path(keep))),
                    other => other,
                }
            }
            (Direction::In, Local::Tar(fd)) => {
                let w = ws.clone();
                let source = host_dir::Source::Tar(std::fs::File::from(fd));
                blocking(move || host_dir::write_into(&id, &w, &at, source)).await?
            }
            (Direction::Out, local) => {
                let w = ws.clone();
                let found = blocking(move || host_dir::find_source(&id, &w, &at)).await?;
                match found {
                    Ok((dir, name)) => {
                        let producer = move |w: io::PipeWriter| host_dir::send_beneath(dir, name.as_deref(), w);
                        piped(producer, consumer_of(local, landing)?).await?.map_err(host_dir::Stop::Io)
                    }
                    Err(e) => Err(e),
                }
            }
        };
        served(done, box_id, box_path, &ws).map(Ok)
    }

    /// Runs the extracting side in the box with `producer` writing the tar.
    async fn copy_in<P>(&self, box_id: &BoxId, dst: &str, name: &str, producer: P) -> Result<CopyOutcome>
    where
        P: FnOnce(io::PipeWriter) -> io::Result<CopyOutcome> + Send + 'static,
    {
        let io_err = |e| Error::io("cannot make the copy's pipes", e);
        let (stdin_r, stdin_w) = io::pipe().map_err(io_err)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&stdin_w, PIPE_CAPACITY);
        let (err_r, err_w) = io::pipe().map_err(io_err)?;
        let null = std::fs::File::options().write(true).open("/dev/null").map_err(io_err)?;
        let stdio = StdioFds { stdin: stdin_r.into(), stdout: null.into(), stderr: err_w.into() };
        let request = ExecRequest::new(["sh", "-c", IN_SCRIPT, "sh", dst, name]);
        let sending = tokio::task::spawn_blocking(move || producer(stdin_w));
        let stderr = tokio::task::spawn_blocking(move || bounded(err_r));
        let ran = self.exec(box_id, request, stdio, Target::Workspace, std::future::pending()).await;
        let sent = sending.await.map_err(|e| Error::io("the copy's sender stopped", io::Error::other(e)))?;
        let stderr = stderr.await.unwrap_or_default();
        let code = ran?.status.shell_code();
        // What could not be sent from here (a fifo in the tree, an
        // unreadable file) is the cause of the box's tar failing on a cut
        // stream, so it is the answer.
        if let Err(e) = &sent
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            return Err(local_error("cannot send the copy", sent.expect_err("checked")));
        }
        if code == 121 {
            // IN_SCRIPT's 121: the parent DST names is not a directory.
            let parent = archive::split(dst).map_or(dst, |(p, _)| p);
            return Err(CopyError::NoBoxDir { box_id: box_id.clone(), path: parent.into() }.into());
        }
        if code != 0 {
            return Err(box_error(box_id, dst, code, &stderr, "write the copy").into());
        }
        match sent {
            // tar stops reading at the archive's end marker and may leave
            // the padding after it unread: it said it succeeded.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(CopyOutcome::default()),
            other => other.map_err(|e| local_error("cannot send the copy", e)),
        }
    }

    /// Runs tar in the box with `consumer` reading what it writes;
    /// `beside_bind`: `src` is outside a bound box's bind, so a stopped
    /// box's snapshot holds it.
    async fn copy_out<C>(&self, box_id: &BoxId, src: &str, consumer: C, beside_bind: bool) -> Result<CopyOutcome>
    where
        C: FnOnce(io::PipeReader) -> io::Result<CopyOutcome> + Send + 'static,
    {
        let io_err = |e| Error::io("cannot make the copy's pipes", e);
        let (out_r, out_w) = io::pipe().map_err(io_err)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&out_r, PIPE_CAPACITY);
        let (err_r, err_w) = io::pipe().map_err(io_err)?;
        let stdin = std::fs::File::open("/dev/null").map_err(io_err)?;
        let stdio = StdioFds { stdin: stdin.into(), stdout: out_w.into(), stderr: err_w.into() };
        let request = ExecRequest::new(["sh", "-c", OUT_SCRIPT, "sh", src]);
        // A copy refused here stops the box's tar: its stream may not end
        // by itself (a terabyte of zeros) when nothing passes the closed
        // pipe back to it (a microVM's channel).
        let (refused_tx, refused_rx) = tokio::sync::oneshot::channel::<()>();
        let receiving = tokio::task::spawn_blocking(move || {
            let got = consumer(out_r);
            if got.is_err() {
                let _ = refused_tx.send(());
            }
            got
        });
        let cancel = async move {
            if refused_rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let stderr = tokio::task::spawn_blocking(move || bounded(err_r));
        // A stopped box is read from its snapshot where its sandbox can (stopped.rs).
        let ran = self.exec_to_read(box_id, request, stdio, beside_bind, cancel).await;
        let received = receiving.await.map_err(|e| Error::io("the copy's receiver stopped", io::Error::other(e)))?;
        let stderr = stderr.await.unwrap_or_default();
        // The script's own refusals come before tar runs, so nothing was
        // sent; past that, a refusal here is the answer even when the box's
        // tar then died of the closed pipe, or was stopped for it.
        if let Ok(ran) = &ran
            && matches!(ran.status.shell_code(), 121 | 122 | 127)
        {
            return Err(box_error(box_id, src, ran.status.shell_code(), &stderr, "read the copy").into());
        }
        let outcome = received.map_err(|e| local_error("cannot write the copy", e));
        if let Err(Error::Copy(_)) = &outcome {
            return outcome;
        }
        let code = ran?.status.shell_code();
        if code != 0 {
            return Err(box_error(box_id, src, code, &stderr, "read the copy").into());
        }
        outcome
    }
}

/// A stopped box's refusal of what its directory cannot serve: resuming it
/// lets the copy go through the box.
fn needs_resume(box_id: &BoxId, state: String) -> Error {
    Error::BoxNotReady {
        id: box_id.clone(),
        state,
        hint: format!("`tinybox resume {box_id}` brings it back, and the copy then goes through the box"),
    }
}

/// A stopped box over another user's directory: written here, its files
/// would not be that user's.
fn not_callers(box_id: &BoxId, ws: &Path) -> Error {
    needs_resume(
        box_id,
        format!(
            "stopped, and its workspace {} belongs to another user, whose files a copy here would not write as theirs",
            ws.display()
        ),
    )
}

/// What a copy served from the workspace directory `ws` came to.
fn served<T>(done: std::result::Result<T, host_dir::Stop>, box_id: &BoxId, box_path: &str, ws: &Path) -> Result<T> {
    match done {
        Ok(v) => Ok(v),
        Err(host_dir::Stop::Link) => Err(needs_resume(
            box_id,
            format!(
                "stopped, and {box_path} is reached through a symlink in its workspace {}, which only the box follows",
                ws.display()
            ),
        )),
        Err(host_dir::Stop::Copy(e)) => Err(e.into()),
        Err(host_dir::Stop::Io(e)) => Err(local_error("cannot copy", e)),
    }
}

/// A copy's own error carried through io, or an io error with `context`.
fn local_error(context: &str, e: io::Error) -> Error {
    match e.downcast::<CopyError>() {
        Ok(c) => Error::Copy(c),
        Err(e) => Error::io(context, e),
    }
}

/// What a script's exit status means.
fn box_error(box_id: &BoxId, path: &str, code: i32, stderr: &str, what: &'static str) -> CopyError {
    let missing = stderr.lines().find_map(|l| l.strip_prefix("tinybox: no program ")?.strip_suffix(" in the box"));
    match (code, missing) {
        (127, Some(program)) => CopyError::NoProgram { box_id: box_id.clone(), program: program.into() },
        (127, None) => CopyError::NoProgram { box_id: box_id.clone(), program: "sh".into() },
        (121, _) => CopyError::NoBoxPath { box_id: box_id.clone(), path: path.into() },
        (122, _) => CopyError::NoBoxDir { box_id: box_id.clone(), path: path.into() },
        _ => {
            let detail = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
            let detail = if detail.is_empty() { "it said nothing".to_owned() } else { detail };
            CopyError::BoxFailed { box_id: box_id.clone(), what, code, detail }
        }
    }
}

/// Reads a stream to its end, keeping the first [`STDERR_BOUND`] bytes.
fn bounded(mut r: io::PipeReader) -> String {
    let mut kept = Vec::new();
    let _ = (&mut r).take(STDERR_BOUND as u64).read_to_end(&mut kept);
    let _ = io::copy(&mut r, &mut io::sink());
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::extract::extract;
    use super::*;

    #[test]
    fn routes_name_exactly_one_box() {
        let r = CopyRoute::parse("./a:b", "box-1:/tmp/").unwrap();
        assert_eq!((r.direction, r.box_path.as_str(), r.local), (Direction::In, "/tmp/", Some("./a:b".into())));
        let r = CopyRoute::parse("box-1:/etc/x", "-").unwrap();
        assert_eq!((r.direction, r.local), (Direction::Out, None));
        assert!(matches!(CopyRoute::parse("a", "b"), Err(CopyError::NoBox { .. })));
        assert!(matches!(CopyRoute::parse("box-1:/a", "box-2:/b"), Err(CopyError::TwoBoxes { .. })));
    }

    #[test]
    fn a_tree_with_a_spliced_file_arrives_whole() {
        let src = tempfile::tempdir().unwrap();
        let t = src.path().join("t");
        std::fs::create_dir(&t).unwrap();
        let big: Vec<u8> = (0..SPLICE_FROM as usize * 2 + 7).map(|i| (i % 251) as u8).collect();
        std::fs::write(t.join("big"), &big).unwrap();
        std::fs::write(t.join("small"), "s").unwrap();
        let (r, w) = io::pipe().unwrap();
        let sender = std::thread::spawn({
            let t = t.clone();
            move || send_tree(&t, OsStr::new("t"), w)
        });
        let dst = tempfile::tempdir().unwrap();
        let got = extract(r, dst.path(), Some(OsStr::new("u")), extract::Rules::out_of_box(DEFAULT_MAX_SIZE)).unwrap();
        let sent = sender.join().unwrap().unwrap();
        assert_eq!((sent.entries, sent.bytes), (3, big.len() as u64 + 1));
        assert_eq!((got.entries, got.bytes), (3, big.len() as u64 + 1));
        assert_eq!(std::fs::read(dst.path().join("u/big")).unwrap(), big);
        assert_eq!(std::fs::read(dst.path().join("u/small")).unwrap(), b"s");
    }
}
