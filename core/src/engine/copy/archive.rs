//! A copy through the sandbox's own archive path (`sandbox.archive`,
//! `Feature::Archive`; docker's `docker cp`, ADR 0024) instead of `tar` run
//! in the box. The sandbox moves the tar; this side
//! still writes the tar going in (local.rs: no privilege bit, no owner of
//! this machine's) and checks every entry of one coming out (extract.rs),
//! exactly as on the path through the box.
//!
//! Taken for a running box whose sandbox declares `archive`, with an
//! absolute path of no `.`/`..` component; into a box bound to a directory
//! never (its user is the directory's owner, and the archive path writes
//! as root). Whatever the sandbox declines (a daemon whose archive path
//! could resolve outside the box, say) goes through the box instead:
//! nothing of the copy has moved by then.

use std::io::{self, Read};
use std::os::fd::OwnedFd;

use tinybox_sdk::model::{BoxId, Feature};
use tinybox_sdk::protocol::{ArchiveDirection, ArchiveParams, ArchiveResult, BoxRef};
use tinybox_sdk::stdio::{StdioFds, StdioServer};

use super::local::{Landing, check_kind, consumer_of, root_name, send_tree};
use super::{CopyError, CopyOutcome, Direction, Local, PIPE_CAPACITY, bounded, local_error};
use crate::driver::SandboxLink;
use crate::engine::Tinybox;
use crate::error::{Error, Result};
use crate::model::Phase;

/// What an archive call came to: the sandbox's answer and its tool's words.
struct Answer {
    result: ArchiveResult,
    stderr: String,
}

impl Local {
    /// The same end again, for a copy the archive path handed back.
    fn try_clone(&self) -> io::Result<Local> {
        Ok(match self {
            Local::Path(p) => Local::Path(p.clone()),
            Local::Tar(fd) => Local::Tar(fd.try_clone()?),
        })
    }
}

/// Whether `path` may go to the archive path at all (else: through the box).
fn archivable(path: &str, direction: Direction) -> bool {
    // Out names the entry itself: a trailing `/` is the box's `tar` to read.
    tinybox_sdk::protocol::archive_path_ok(path).is_ok()
        && path != "/"
        && !(direction == Direction::Out && path.ends_with('/'))
}

/// `/a/b/c` as (`/a/b`, `c`); `/c` as (`/`, `c`).
pub(super) fn split(path: &str) -> Option<(&str, &str)> {
    let (parent, base) = path.rsplit_once('/')?;
    (!base.is_empty()).then_some((if parent.is_empty() { "/" } else { parent }, base))
}

impl Tinybox {
    /// A copy through the sandbox's archive path, or the copy handed back
    /// (`Ok(Err(local))`) to go through the box.
    pub(super) async fn copy_by_archive(
        &self,
        box_id: &BoxId,
        direction: Direction,
        box_path: &str,
        local: Local,
        landing: &Landing,
    ) -> Result<std::result::Result<CopyOutcome, Local>> {
        let info = self.get(box_id)?;
        if info.phase != Phase::Created || !archivable(box_path, direction) {
            return Ok(Err(local));
        }
        if direction == Direction::In && info.bound_dir().is_some() {
            return Ok(Err(local));
        }
        let ws = self.instance(&info)?;
        let link = self.drivers.sandbox(&ws.placement.sandbox, &ws.placement.host).await?;
        if !link.capabilities().has(&Feature::Archive) {
            return Ok(Err(local));
        }
        let target = BoxRef { box_id: info.id.clone(), handle: ws.handle.clone() };
        match direction {
            Direction::Out => self.archive_out(&link, target, box_path, local, landing).await,
            Direction::In => self.archive_in(&link, target, box_path, local).await,
        }
    }

    async fn archive_out(
        &self,
        link: &SandboxLink,
        target: BoxRef,
        src: &str,
        local: Local,
        landing: &Landing,
    ) -> Result<std::result::Result<CopyOutcome, Local>> {
        let box_id = target.box_id.clone();
        let keep = local.try_clone().map_err(|e| Error::io("cannot keep the copy's destination", e))?;
        let consumer = consumer_of(local, landing)?;
        let io_err = |e| Error::io("cannot make the copy's pipes", e);
        let (out_r, out_w) = io::pipe().map_err(io_err)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&out_r, PIPE_CAPACITY);
        let stdin = std::fs::File::open("/dev/null").map_err(io_err)?;
        let receiving = tokio::task::spawn_blocking(move || consumer(out_r));
        let answer = self.archive_call(link, target, ArchiveDirection::Out, src, stdin.into(), out_w.into()).await;
        let received = receiving.await.map_err(|e| Error::io("the copy's receiver stopped", io::Error::other(e)))?;
        // A refusal here (a hostile entry, the copy's bound) is the answer,
        // also when the sandbox's tool then failed on the closed stream.
        let received = match received {
            Err(e) if e.get_ref().is_some_and(|inner| inner.is::<CopyError>()) => {
                return Err(local_error("cannot write the copy", e));
            }
            other => other,
        };
        match answer?.result {
            ArchiveResult::Done => received.map(Ok).map_err(|e| local_error("cannot write the copy", e)),
            ArchiveResult::NoSuchPath | ArchiveResult::NotADirectory => {
                Err(CopyError::NoBoxPath { box_id, path: src.into() }.into())
            }
            // Nothing was sent: the receiver saw an empty stream and wrote nothing.
            ArchiveResult::Declined { reason } => {
                tracing::debug!(%box_id, %reason, "the archive path declined the copy out; through the box");
                Ok(Err(keep))
            }
        }
    }

    async fn archive_in(
        &self,
        link: &SandboxLink,
        target: BoxRef,
        dst: &str,
        local: Local,
    ) -> Result<std::result::Result<CopyOutcome, Local>> {
        let box_id = target.box_id.clone();
        let src = match local {
            Local::Tar(fd) => {
                let keep = fd.try_clone().map_err(|e| Error::io("cannot keep the copy's source", e))?;
                let producer = move |mut w: io::PipeWriter| {
                    let n = io::copy(&mut std::fs::File::from(fd), &mut w)?;
                    Ok(CopyOutcome { entries: 0, bytes: n })
                };
                return match self.archive_in_once(link, target, dst, producer).await? {
                    (ArchiveResult::Declined { reason }, _) => {
                        tracing::debug!(%box_id, %reason, "the archive path declined the copy in; through the box");
                        Ok(Err(Local::Tar(keep)))
                    }
                    (ArchiveResult::Done, sent) => sent.map(Ok),
                    _ => Err(CopyError::NoBoxDir { box_id, path: dst.into() }.into()),
                };
            }
            Local::Path(src) => src,
        };
        let root = root_name(&src)?;
        let meta = std::fs::symlink_metadata(&src).map_err(|_| CopyError::NoLocal { path: src.clone() })?;
        check_kind(&src, &meta)?;
        // Into DST when it is a directory; else DST names the copy, in its parent.
        let mut tries = vec![(dst.to_owned(), root.clone())];
        if let Some((parent, base)) = split(dst) {
            tries.push((parent.to_owned(), base.into()));
        }
        for (n, (into, name)) in tries.into_iter().enumerate() {
            let from = src.clone();
            let producer = move |w: io::PipeWriter| send_tree(&from, &name, w);
            match self.archive_in_once(link, target.clone(), &into, producer).await? {
                (ArchiveResult::Done, sent) => return sent.map(Ok),
                (ArchiveResult::Declined { reason }, _) => {
                    tracing::debug!(%box_id, %reason, "the archive path declined the copy in; through the box");
                    return Ok(Err(Local::Path(src)));
                }
                _ if n == 0 => continue,
                // Neither DST nor its parent is a directory: name the parent, which must be made.
                _ => {
                    let parent = split(dst).map_or(dst, |(p, _)| p);
                    return Err(CopyError::NoBoxDir { box_id, path: parent.into() }.into());
                }
            }
        }
        Err(CopyError::NoBoxDir { box_id, path: dst.into() }.into())
    }

    /// One archive in: `producer` writes the tar once the sandbox says it
    /// will read it (`go` on the archive's stdout), never before, so a
    /// declined copy has read nothing of a caller's stream.
    async fn archive_in_once<P>(
        &self,
        link: &SandboxLink,
        target: BoxRef,
        into: &str,
        producer: P,
    ) -> Result<(ArchiveResult, Result<CopyOutcome>)>
    where
        P: FnOnce(io::PipeWriter) -> io::Result<CopyOutcome> + Send + 'static,
    {
        let io_err = |e| Error::io("cannot make the copy's pipes", e);
        let (stdin_r, stdin_w) = io::pipe().map_err(io_err)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&stdin_w, PIPE_CAPACITY);
        let (go_r, go_w) = io::pipe().map_err(io_err)?;
        let sending = tokio::task::spawn_blocking(move || {
            let mut said = Vec::new();
            let _ = go_r.take(3).read_to_end(&mut said);
            (said == b"go\n").then(|| producer(stdin_w))
        });
        let answer = self.archive_call(link, target, ArchiveDirection::In, into, stdin_r.into(), go_w.into()).await;
        let sent = sending.await.map_err(|e| Error::io("the copy's sender stopped", io::Error::other(e)))?;
        let answer = answer?;
        let sent = match sent {
            Some(Ok(outcome)) => Ok(outcome),
            // docker cp stops reading at the archive's end and may leave
            // the padding after it unread: it said it succeeded.
            Some(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(CopyOutcome::default()),
            Some(Err(e)) => Err(local_error("cannot send the copy", e)),
            None => Ok(CopyOutcome::default()),
        };
        if !answer.stderr.trim().is_empty() && answer.result != ArchiveResult::Done {
            tracing::debug!(stderr = %answer.stderr.trim(), "the archive path said");
        }
        Ok((answer.result, sent))
    }

    /// Calls `sandbox.archive` with `stdin` and `stdout` as the streams and
    /// a bounded stderr, whose words join a failure's message.
    async fn archive_call(
        &self,
        link: &SandboxLink,
        target: BoxRef,
        direction: ArchiveDirection,
        path: &str,
        stdin: OwnedFd,
        stdout: OwnedFd,
    ) -> Result<Answer> {
        let io_err = |e| Error::io("cannot make the copy's pipes", e);
        let (err_r, err_w) = io::pipe().map_err(io_err)?;
        let stderr = tokio::task::spawn_blocking(move || bounded(err_r));
        let exec_id = self.next_exec_id();
        let socket = self.runtime_dir()?.join(format!("{exec_id}.sock"));
        // A file by this name can only be left by a dead process whose pid
        // we now have: nothing live owns it.
        let _ = std::fs::remove_file(&socket);
        let fds = StdioFds { stdin, stdout, stderr: err_w.into() };
        let server = StdioServer::start(socket, fds).map_err(|e| Error::io("cannot open the stdio socket", e))?;
        let params = ArchiveParams { exec_id, target, direction, path: path.to_owned(), stdio: server.stdio_ref() };
        let result = link.archive(params).await;
        // Our ends of the streams go, so the other side sees their end.
        drop(server);
        let stderr = stderr.await.unwrap_or_default();
        match result {
            Ok(result) => Ok(Answer { result, stderr }),
            Err(Error::Driver { driver, code, message }) if !stderr.trim().is_empty() => {
                let said = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
                Err(Error::Driver { driver, code, message: format!("{message}: {said}") })
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_absolute_paths_take_the_archive_path() {
        assert!(archivable("/tmp/x", Direction::Out));
        assert!(archivable("/tmp/", Direction::In));
        assert!(!archivable("/tmp/", Direction::Out), "out names the entry itself");
        assert!(!archivable("tmp/x", Direction::In), "relative: the box's working directory");
        assert!(!archivable("/tmp/../etc", Direction::Out));
        assert!(!archivable("/tmp/./x", Direction::In));
        assert!(!archivable("/", Direction::Out));
        assert!(!archivable("/a\nb", Direction::In));
    }

    /// A copy out the archive path declined hands its destination back
    /// untouched: the receiver saw an empty stream and made nothing.
    #[test]
    fn an_empty_stream_out_writes_nothing_at_the_destination() {
        let dst = tempfile::tempdir().unwrap();
        let landing = Landing { dirs: Default::default(), max_size: 1 << 20 };
        let consumer = consumer_of(Local::Path(dst.path().join("new")), &landing).unwrap();
        let (r, w) = io::pipe().unwrap();
        drop(w);
        let got = consumer(r);
        assert!(got.as_ref().map_or(true, |o| o.entries == 0), "{got:?}");
        assert_eq!(std::fs::read_dir(dst.path()).unwrap().count(), 0, "nothing made at the destination");
    }

    #[test]
    fn a_destination_splits_into_its_parent_and_its_name() {
        assert_eq!(split("/a/b/c"), Some(("/a/b", "c")));
        assert_eq!(split("/c"), Some(("/", "c")));
        assert_eq!(split("/a/"), None);
    }
}
