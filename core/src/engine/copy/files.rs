//! The file calls of the module (`fs.write`, `fs.read`, `fs.list`) and the
//! MCP server: one file written or read whole, one directory listed. Like
//! a copy they go through the box while it runs. A stopped box bound to a
//! directory here is served from that directory for paths under
//! `/workspace`, by the same rules as `tinybox cp` (host_dir.rs: nothing
//! through a symlink, only the caller's own directory), and from its
//! newest snapshot elsewhere, where its sandbox can run a command in one.

use std::io::{self, Read};
use std::path::PathBuf;

use tinybox_sdk::model::{BoxId, ExecRequest};
use tinybox_sdk::stdio::StdioFds;

use super::host_dir::{self, UnderMount};
use super::kind;
use super::local::{blocking, piped};
use super::{
    CopyError, CopyOutcome, DirEntry, KEPT_MODE, TarRefusal, bounded, box_error, local_error, not_callers, refused,
    served,
};
use crate::engine::{Target, Tinybox};
use crate::error::{Error, Result};
use crate::model::{BoxInfo, Phase};

/// The most a listing keeps of what the box's `stat` printed.
const LIST_BOUND: usize = 4 * 1024 * 1024;

/// Runs in the box: one line per entry of directory $1, `hexmode size
/// mtime name`.
const LIST_SCRIPT: &str = r#"command -v stat >/dev/null 2>&1 || { printf 'tinybox: no program stat in the box\n' >&2; exit 127; }
[ -d "$1" ] || exit 122
cd -- "$1" || exit 122
for f in * .*; do
  case $f in .|..) continue ;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  stat -c '%f %s %Y %n' -- "$f"
done
"#;

/// Where a file call on box `info` is served from its directory here: a
/// stopped box bound here, and a path beneath the mount.
fn in_stopped_bind(info: &BoxInfo, box_path: &str) -> Result<Option<(PathBuf, UnderMount)>> {
    if info.phase != Phase::Stopped {
        return Ok(None);
    }
    let (Some(ws), Some(at)) = (host_dir::bound_here(info), host_dir::under_mount(box_path)) else {
        return Ok(None);
    };
    if !host_dir::is_callers(ws) {
        return Err(not_callers(&info.id, ws));
    }
    Ok(Some((ws.to_owned(), at)))
}

/// `box_path` of a bound box is outside its bind: a stopped box's
/// snapshot holds it.
fn beside_bind(info: &BoxInfo, box_path: &str) -> bool {
    host_dir::bound_here(info).is_some() && host_dir::under_mount(box_path).is_none()
}

impl Tinybox {
    /// Writes `bytes` as the file `path` in the box, with `mode` (permission
    /// bits only) and the current time.
    pub async fn write_file(&self, box_id: &BoxId, path: &str, bytes: Vec<u8>, mode: u32) -> Result<CopyOutcome> {
        let name = match path.trim_end_matches('/').rsplit('/').next() {
            Some(n) if !n.is_empty() && n != "." && n != ".." => n.to_owned(),
            _ => return Err(CopyError::NoName { path: path.into() }.into()),
        };
        let mtime = self.now();
        let info = self.get(box_id)?;
        crate::engine::not_pooled(&info)?;
        super::outlives::check(&info, path)?;
        if let Some((ws, at)) = in_stopped_bind(&info, path)? {
            let (id, w) = (box_id.clone(), ws.clone());
            let source = host_dir::Source::Bytes { name: name.into(), bytes, mode, mtime };
            let done = blocking(move || host_dir::write_into(&id, &w, &at, source)).await?;
            return served(done, box_id, path, &ws);
        }
        let entry = name.clone();
        let producer = move |w: io::PipeWriter| {
            let mut b = tar::Builder::new(w);
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(bytes.len() as u64);
            h.set_mode(mode & KEPT_MODE);
            h.set_mtime(mtime);
            b.append_data(&mut h, &entry, bytes.as_slice())?;
            io::Write::flush(&mut b.into_inner()?)?;
            Ok(CopyOutcome { entries: 1, bytes: bytes.len() as u64 })
        };
        self.copy_in(box_id, path, &name, producer).await
    }

    /// Reads the regular file `path` in the box, refusing one over `limit`
    /// bytes (before its contents are read).
    pub async fn read_file(&self, box_id: &BoxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        let id = box_id.clone();
        let p = path.to_owned();
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        let consumer = move |r: io::PipeReader| -> io::Result<CopyOutcome> {
            let mut archive = tar::Archive::new(r);
            let mut entries = archive.entries()?;
            let Some(entry) = entries.next() else {
                return Err(refused(TarRefusal::Empty));
            };
            let mut entry = entry?;
            let what = entry.header().entry_type();
            if !what.is_file() {
                let what = kind::word(what).to_owned();
                return Err(io::Error::other(CopyError::NotAFile { box_id: id, path: p, what }));
            }
            let size = entry.size();
            if size > limit {
                return Err(io::Error::other(CopyError::TooBig { box_id: id, path: p, size, limit }));
            }
            let mut bytes = Vec::with_capacity(size as usize);
            entry.read_to_end(&mut bytes)?;
            // The rest of the stream is tar's padding: read it so the box's
            // tar ends without a broken pipe.
            io::copy(&mut archive.into_inner(), &mut io::sink())?;
            *sink.lock().expect("read_file sink") = bytes;
            Ok(CopyOutcome { entries: 1, bytes: size })
        };
        let info = self.get(box_id)?;
        crate::engine::not_pooled(&info)?;
        if let Some((ws, at)) = in_stopped_bind(&info, path)? {
            let (id, w) = (box_id.clone(), ws.clone());
            let found = blocking(move || host_dir::find_source(&id, &w, &at)).await?;
            let (dir, name) = served(found, box_id, path, &ws)?;
            let producer = move |w: io::PipeWriter| host_dir::send_beneath(dir, name.as_deref(), w);
            piped(producer, Box::new(consumer)).await?.map_err(|e| local_error("cannot read the file", e))?;
        } else {
            self.copy_out(box_id, path, consumer, beside_bind(&info, path)).await?;
        }
        let bytes = std::mem::take(&mut *out.lock().expect("read_file sink"));
        Ok(bytes)
    }

    /// The entries of directory `path` in the box.
    pub async fn list_dir(&self, box_id: &BoxId, path: &str) -> Result<Vec<DirEntry>> {
        let info = self.get(box_id)?;
        crate::engine::not_pooled(&info)?;
        if let Some((ws, at)) = in_stopped_bind(&info, path)? {
            let (id, w) = (box_id.clone(), ws.clone());
            let listed = blocking(move || host_dir::list_beneath(&id, &w, &at)).await?;
            return served(listed, box_id, path, &ws);
        }
        let request = ExecRequest::new(["sh", "-c", LIST_SCRIPT, "sh", path]);
        let (code, stdout, stderr) = if info.phase == Phase::Stopped {
            self.listed_from_snapshot(box_id, request, beside_bind(&info, path)).await?
        } else {
            let mut capture = crate::capture::Capture::new(LIST_BOUND);
            capture.timeout = Some(std::time::Duration::from_secs(60));
            let got =
                crate::capture::run(self, box_id, request, Target::Workspace, &capture, std::future::pending()).await?;
            (got.status.shell_code(), got.stdout.bytes, String::from_utf8_lossy(&got.stderr.bytes).into_owned())
        };
        if code != 0 {
            return Err(box_error(box_id, path, code, &stderr, "list a directory").into());
        }
        Ok(String::from_utf8_lossy(&stdout).lines().filter_map(parse_stat_line).collect())
    }

    /// Makes the missing directories above `path` in a running box (`mkdir
    /// -p` through its exec, no shell), as envd and the MCP's write_file do
    /// before a write; nothing when they are there.
    pub async fn make_parents(&self, box_id: &BoxId, path: &str) -> Result<()> {
        let Some((dir, _)) = path.trim_end_matches('/').rsplit_once('/') else { return Ok(()) };
        if dir.is_empty() || self.list_dir(box_id, dir).await.is_ok() {
            return Ok(());
        }
        let request = ExecRequest::new(["mkdir", "-p", "--", dir]);
        let mut capture = crate::capture::Capture::new(16 << 10);
        capture.timeout = Some(std::time::Duration::from_secs(60));
        let got =
            crate::capture::run(self, box_id, request, Target::Workspace, &capture, std::future::pending()).await?;
        let code = got.status.shell_code();
        if code != 0 {
            let detail = String::from_utf8_lossy(&got.stderr.bytes).trim().to_owned();
            return Err(CopyError::BoxFailed {
                box_id: box_id.clone(),
                what: "make the file's directories",
                code,
                detail,
            }
            .into());
        }
        Ok(())
    }

    /// Runs the listing in a stopped box's newest snapshot, where its
    /// sandbox can: its status, what it printed (bounded) and its stderr.
    async fn listed_from_snapshot(
        &self,
        box_id: &BoxId,
        request: ExecRequest,
        beside_bind: bool,
    ) -> Result<(i32, Vec<u8>, String)> {
        let io_err = |e| Error::io("cannot make the listing's pipes", e);
        let (out_r, out_w) = io::pipe().map_err(io_err)?;
        let (err_r, err_w) = io::pipe().map_err(io_err)?;
        let stdin = std::fs::File::open("/dev/null").map_err(io_err)?;
        let stdio = StdioFds { stdin: stdin.into(), stdout: out_w.into(), stderr: err_w.into() };
        let stdout = tokio::task::spawn_blocking(move || {
            let mut kept = Vec::new();
            let mut r = out_r;
            let _ = (&mut r).take(LIST_BOUND as u64).read_to_end(&mut kept);
            let _ = io::copy(&mut r, &mut io::sink());
            kept
        });
        let stderr = tokio::task::spawn_blocking(move || bounded(err_r));
        let ran = self.exec_to_read(box_id, request, stdio, beside_bind, std::future::pending()).await;
        let (stdout, stderr) = (stdout.await.unwrap_or_default(), stderr.await.unwrap_or_default());
        Ok((ran?.status.shell_code(), stdout, stderr))
    }
}

fn parse_stat_line(line: &str) -> Option<DirEntry> {
    let mut parts = line.splitn(4, ' ');
    let raw = u32::from_str_radix(parts.next()?, 16).ok()?;
    let size = parts.next()?.parse().ok()?;
    let mtime = parts.next()?.parse().ok()?;
    let name = parts.next()?.to_owned();
    Some(DirEntry { name, kind: kind::of_mode(raw), size, mode: raw & 0o7777, mtime })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read() {
        let e = parse_stat_line("81a4 12 1700000000 a b").unwrap();
        assert_eq!((e.name.as_str(), e.kind, e.size, e.mode, e.mtime), ("a b", "file", 12, 0o644, 1_700_000_000));
        assert_eq!(parse_stat_line("41ed 0 1 d").unwrap().kind, "dir");
    }
}
