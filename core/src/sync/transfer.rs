//! Sending a tree: an uncompressed tar built in-process and streamed as the
//! stdin of `mkdir -p` + `tar -x` on the far side, so only a POSIX sh, tar
//! and the usual file utilities need to exist there. The stream holds
//! relative paths only (the tar crate refuses absolute paths and `..`).

use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::fingerprint::{Kind, MARKER, Tree};

/// Exit status the receiving script uses when the host has no tar.
pub const NO_TAR: i32 = 97;

/// Run by `sh -c` on the far side with `$1` the directory, `$2` the
/// fingerprint and `$3` `fresh` to start from an empty directory. The old
/// marker goes first and the new one is written (atomically) only after tar
/// succeeded, so an interrupted transfer always reads as "send again".
/// Prints the directory's absolute path.
pub const RECEIVE: &str = r#"dir=$1
command -v tar >/dev/null 2>&1 || { echo "tinybox: this host has no tar; sync needs tar and mkdir on the far side" >&2; exit 97; }
if [ "$3" = fresh ]; then rm -rf -- "$dir" || exit 1; fi
mkdir -p -- "$dir" && rm -f -- "$dir/.tinybox-fingerprint" && tar -x -f - -C "$dir" &&
printf '%s\n' "$2" > "$dir/.tinybox-fingerprint.new" && mv -f -- "$dir/.tinybox-fingerprint.new" "$dir/.tinybox-fingerprint" &&
cd -- "$dir" && pwd -P
"#;

/// The argument vector that receives a tree into `dir`.
pub fn receive_argv(dir: &str, fingerprint: &str, fresh: bool) -> Vec<String> {
    ["sh", "-c", RECEIVE, "tinybox-sync", dir, fingerprint, if fresh { "fresh" } else { "update" }]
        .map(String::from)
        .to_vec()
}

/// The argument vector that prints the far side's marker (plain words when
/// `dir` is, so no remote shell needs probing to read it).
pub fn marker_argv(dir: &str) -> Vec<String> {
    vec!["cat".into(), format!("{}/{MARKER}", dir.trim_end_matches('/'))]
}

/// Reads a marker's contents: a fingerprint, or nothing usable.
pub fn parse_marker(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| text.to_owned())
}

/// Bytes and files written so far, shared with whoever shows progress.
#[derive(Default, Debug)]
pub struct Counters {
    pub bytes: AtomicU64,
    pub files: AtomicU64,
}

/// How much of the stream is gathered before it is written to the pipe.
/// The tar crate writes each entry as three small writes (header, contents,
/// padding); written straight to the pipe, each became its own ssh packet
/// and its own wake-up of every process on the way to the far side's tar:
/// a 100,000-file tree of small files took 6x as long as `tar -c | ssh tar -x`.
pub const STREAM_BUFFER: usize = 256 * 1024;

/// Writes `tree` as a tar stream to `out`, counting into `counters`.
pub fn write_tar<W: Write>(tree: &Tree, out: W, counters: &Arc<Counters>) -> io::Result<()> {
    let counting = Counting { inner: out, counters: counters.clone() };
    let mut builder = tar::Builder::new(io::BufWriter::with_capacity(STREAM_BUFFER, counting));
    for entry in &tree.entries {
        let path = Path::new(std::ffi::OsStr::from_bytes(&entry.rel));
        let mut header = tar::Header::new_gnu();
        header.set_mtime(entry.mtime);
        header.set_uid(0);
        header.set_gid(0);
        match entry.kind {
            Kind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder.append_data(&mut header, path, io::empty())?;
            }
            Kind::File { executable, .. } => {
                let file = std::fs::File::open(&entry.path)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", entry.path.display())))?;
                // Sized now, from the open file: what is sent is what was read.
                let size = file.metadata()?.len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if executable { 0o755 } else { 0o644 });
                header.set_size(size);
                let exact = Exact { inner: file.take(size), left: size, path: &entry.path };
                builder.append_data(&mut header, path, exact)?;
                counters.files.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    builder.into_inner()?.into_inner().map_err(io::IntoInnerError::into_error)?.flush()
}

/// Exactly `left` bytes, or an error: a file that shrank while it was sent
/// must fail the transfer rather than corrupt the stream.
struct Exact<'a, R> {
    inner: R,
    left: u64,
    path: &'a Path,
}

impl<R: Read> Read for Exact<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if n == 0 {
            return Err(io::Error::other(format!("{} changed while it was being sent", self.path.display())));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

struct Counting<W> {
    inner: W,
    counters: Arc<Counters>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
