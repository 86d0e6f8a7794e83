//! This machine's side of a copy: the caller's tree sent as a tar (its
//! big files spliced into the pipe), where a copy out lands, and the small
//! plumbing that joins a tar's producer and consumer through a pipe.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::dest::{BoxDirs, resolve};
use super::extract::{Roots, Rules, extract_at};
use super::{CopyError, CopyOutcome, KEPT_MODE, Local, PIPE_CAPACITY, SPLICE_FROM};
use crate::error::{Error, Result};

/// What a copy out does with the tar it receives: checks and writes it
/// at a path here, or passes it on as it is.
pub(super) type Consumer = Box<dyn FnOnce(io::PipeReader) -> io::Result<CopyOutcome> + Send>;

/// What a copy out may do here: where a box writes, and how much it may land.
#[derive(Debug, Clone)]
pub(super) struct Landing {
    pub dirs: BoxDirs,
    pub max_size: u64,
}

/// The consumer of a copy out to `local`; a path's destination is resolved
/// now, before the box sends anything (dest.rs).
pub(super) fn consumer_of(local: Local, landing: &Landing) -> Result<Consumer, CopyError> {
    let max_size = landing.max_size;
    Ok(match local {
        Local::Path(dst) => {
            let (parent, name) = resolve(&dst, &landing.dirs)?;
            Box::new(move |r: io::PipeReader| {
                extract_at(r, parent, name.as_deref(), Roots::One, Rules::out_of_box(max_size))
            })
        }
        Local::Tar(fd) => Box::new(move |r: io::PipeReader| pass_on(r, std::fs::File::from(fd), max_size)),
    })
}

/// The box's tar passed on as it is, up to `max_size` bytes: one byte more
/// stops it (the stream it was written to is then cut short, which its
/// reader sees as a truncated archive).
fn pass_on(mut r: io::PipeReader, mut to: std::fs::File, max_size: u64) -> io::Result<CopyOutcome> {
    let n = io::copy(&mut (&mut r).take(max_size), &mut to)?;
    let mut more = [0u8; 1];
    if n == max_size && r.read(&mut more)? > 0 {
        return Err(io::Error::other(CopyError::StreamOverBound { limit: max_size }));
    }
    Ok(CopyOutcome { entries: 0, bytes: n })
}

/// Runs `f` on a thread of the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::io("the copy stopped", io::Error::other(e)))
}

/// A tar made here by `producer` and taken by `consumer` through a pipe.
/// The producer's failure is the answer unless it only saw the consumer go.
pub(super) async fn piped<P>(producer: P, consumer: Consumer) -> Result<std::result::Result<CopyOutcome, io::Error>>
where
    P: FnOnce(io::PipeWriter) -> io::Result<CopyOutcome> + Send + 'static,
{
    let (r, w) = io::pipe().map_err(|e| Error::io("cannot make the copy's pipes", e))?;
    let _ = rustix::pipe::fcntl_setpipe_size(&r, PIPE_CAPACITY);
    let sending = tokio::task::spawn_blocking(move || producer(w));
    let received = blocking(move || consumer(r)).await?;
    let sent = sending.await.map_err(|e| Error::io("the copy's sender stopped", io::Error::other(e)))?;
    Ok(match (sent, received) {
        (Err(e), _) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
        (_, received) => received,
    })
}

/// The last component of a local source: what its copy is called.
pub(super) fn root_name(src: &Path) -> Result<OsString, CopyError> {
    match src.components().next_back() {
        Some(Component::Normal(n)) => Ok(n.to_owned()),
        _ => Err(CopyError::NoName { path: src.display().to_string() }),
    }
}

pub(super) fn check_kind(path: &Path, meta: &std::fs::Metadata) -> Result<(), CopyError> {
    let t = meta.file_type();
    if t.is_file() || t.is_dir() || t.is_symlink() {
        return Ok(());
    }
    use std::os::unix::fs::FileTypeExt;
    let what = if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else {
        "device node"
    };
    Err(CopyError::LocalKind { path: path.to_owned(), what })
}

/// Writes a tar of `src` (not following symlinks), rooted at `root`.
pub(super) fn send_tree(src: &Path, root: &OsStr, w: io::PipeWriter) -> io::Result<CopyOutcome> {
    // Headers and padding are small writes: gathered, a pipe's worth at a time.
    let mut b = tar::Builder::new(io::BufWriter::with_capacity(PIPE_CAPACITY, w));
    let mut outcome = CopyOutcome::default();
    let mut pending = vec![(src.to_owned(), PathBuf::from(root))];
    while let Some((path, name)) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        check_kind(&path, &meta).map_err(io::Error::other)?;
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
        h.set_mode(meta.mode() & KEPT_MODE);
        outcome.entries += 1;
        let t = meta.file_type();
        if t.is_symlink() {
            h.set_size(0);
            b.append_link(&mut h, &name, std::fs::read_link(&path)?)?;
        } else if t.is_dir() {
            h.set_size(0);
            b.append_data(&mut h, &name, io::empty())?;
            for child in std::fs::read_dir(&path)? {
                let child = child?;
                pending.push((child.path(), name.join(child.file_name())));
            }
        } else {
            let file = std::fs::File::open(&path)?;
            // The size is the file's now: one that grows while it is sent
            // is cut there, one that shrinks fails the copy.
            let size = file.metadata()?.len();
            h.set_size(size);
            outcome.bytes += size;
            if size < SPLICE_FROM {
                b.append_data(&mut h, &name, file)?;
                continue;
            }
            // The header through the buffer; the contents from the file to
            // the pipe in the kernel (io::copy splices), never through a
            // buffer of ours (the tar crate's copy would, through its own).
            b.append_data(&mut h, &name, io::empty())?;
            let out = b.get_mut();
            out.flush()?;
            let sent = io::copy(&mut file.take(size), out.get_mut())?;
            if sent != size {
                return Err(io::Error::other(format!("{} shrank while it was sent", path.display())));
            }
            out.write_all(&[0; 512][..((512 - size % 512) % 512) as usize])?;
        }
    }
    b.into_inner()?.flush()?;
    Ok(outcome)
}
