//! Syncing a local directory to a box's remote host: `tinybox sync`, and
//! the first sync of `create --workspace DIR` on a host that is not this
//! machine. The tree is fingerprinted here; the far side's marker is read
//! first (a missing or unreadable one means "send"); an unchanged tree
//! sends nothing; a changed one is sent whole as a tar stream, through the
//! host link like any other command.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use tinybox_sdk::model::{BoxId, ExitStatus, HostName, WorkspaceSource};
use tinybox_sdk::protocol::RunParams;
use tinybox_sdk::stdio::{StdioFds, StdioServer};

use super::Tinybox;
use crate::driver::HostLink;
use crate::error::{Error, Result};
use crate::model::BoxSpec;
use crate::sync::transfer::{self, Counters, NO_TAR};
use crate::sync::{SyncError, SyncReport, Tree, remote_workspace};

/// Where, under the store, sync keeps each workspace's leaf cache.
pub const SYNC_CACHE_DIR: &str = "cache/sync";

/// What a sync is about to do, for whoever shows progress.
#[derive(Debug, Clone)]
pub enum SyncEvent {
    /// The tree was read: this many files and bytes, this fingerprint.
    Scanned { files: u64, bytes: u64 },
    /// The far side already holds this tree; nothing will be sent.
    Unchanged,
    /// Sending starts; `counters` move as the stream is written.
    Sending { files: u64, bytes: u64, counters: Arc<Counters> },
}

/// Something that wants to see a sync's progress.
pub type Observer<'a> = &'a (dyn Fn(SyncEvent) + Send + Sync);

/// How a helper command on a host ended, and what it printed.
struct Captured {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Captured {
    fn stderr_line(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ")
    }
}

impl Tinybox {
    /// Sends `local_dir` to box `id`'s workspace on its remote host, unless
    /// the far side already holds the same tree.
    pub async fn sync(&self, id: &BoxId, local_dir: &Path) -> Result<SyncReport> {
        self.sync_observed(id, local_dir, &|_| {}).await
    }

    /// [`Tinybox::sync`], telling `observe` what happens as it happens.
    pub async fn sync_observed(&self, id: &BoxId, local_dir: &Path, observe: Observer<'_>) -> Result<SyncReport> {
        let info = self.get(id)?;
        let ws = self.instance(&info)?;
        let host = ws.placement.host.clone();
        if self.is_local_host(&host) {
            return Err(SyncError::Local(id.to_string()).into());
        }
        if !matches!(info.spec.source, Some(WorkspaceSource::LocalDir { .. })) {
            return Err(SyncError::NotFromDirectory(id.to_string()).into());
        }
        let remote = remote_workspace(&info.spec.namespace, id.as_str());
        self.sync_dir(&host, local_dir, &remote, false, observe).await
    }

    /// Whether `host` is this machine (a host served by the local driver).
    pub(super) fn is_local_host(&self, host: &HostName) -> bool {
        self.drivers.host_entry(host).is_some_and(|e| e.driver == crate::hosts::LOCAL)
    }

    /// For `create`: on a remote host, a local directory is synced (fresh)
    /// to the box's own directory there and the box is made over that copy.
    /// Returns the spec to create with, and the remote directory if one was made.
    pub(super) async fn workspace_spec(&self, id: &BoxId, spec: &BoxSpec) -> Result<(BoxSpec, Option<String>)> {
        let Some(WorkspaceSource::LocalDir { path }) = &spec.source else { return Ok((spec.clone(), None)) };
        if self.is_local_host(&spec.workspace.host) {
            return Ok((spec.clone(), None));
        }
        let remote = remote_workspace(&spec.namespace, id.as_str());
        let report = self.sync_dir(&spec.workspace.host, path, &remote, true, &|_| {}).await?;
        let mut synced = spec.clone();
        synced.source = Some(WorkspaceSource::LocalDir { path: report.remote_dir.clone().into() });
        Ok((synced, Some(remote)))
    }

    /// Best effort: removes a directory a failed create synced.
    pub(super) async fn discard_synced(&self, host: &HostName, remote: &str) {
        if let Ok(link) = self.drivers.host(host).await {
            let argv = ["rm", "-rf", "--", remote].map(String::from).to_vec();
            let _ = self.run_captured(&link, argv, None).await;
        }
    }

    async fn sync_dir(
        &self,
        host: &HostName,
        local: &Path,
        remote: &str,
        fresh: bool,
        observe: Observer<'_>,
    ) -> Result<SyncReport> {
        let root = local.to_owned();
        // Each file's hash from the last sync of this directory, kept in the
        // store, where a box cannot write.
        let cache_dir = self.store_dir().map(|d| d.join(SYNC_CACHE_DIR));
        let scan = tokio::task::spawn_blocking(move || {
            let tree = Tree::scan(&root)?;
            let fp = match &cache_dir {
                Some(dir) => tree.fingerprint_cached(dir)?,
                None => tree.fingerprint()?,
            };
            Ok::<_, SyncError>((tree, fp))
        });
        // The far side's marker is read while the tree is: neither needs the
        // other, and an unchanged sync is then the longer of the two, not both.
        let far_side = async {
            let link = self.drivers.host(host).await?;
            let marker =
                if fresh { None } else { Some(self.run_captured(&link, transfer::marker_argv(remote), None).await?) };
            Ok::<_, Error>((link, marker))
        };
        let (scanned, far_side) = tokio::join!(scan, far_side);
        let (tree, fingerprint) =
            scanned.map_err(|e| SyncError::Task(format!("reading the workspace failed: {e}")))??;
        let (files, bytes) = tree.totals();
        observe(SyncEvent::Scanned { files, bytes });
        let (link, marker) = far_side?;
        if let Some(marker) = marker
            && marker.status.success()
            && transfer::parse_marker(&marker.stdout).as_deref() == Some(fingerprint.as_str())
        {
            observe(SyncEvent::Unchanged);
            return Ok(SyncReport {
                sent: false,
                files,
                bytes,
                stream_bytes: 0,
                fingerprint,
                remote_dir: remote.to_owned(),
            });
        }
        let counters = Arc::new(Counters::default());
        observe(SyncEvent::Sending { files, bytes, counters: counters.clone() });
        let (stream_r, stream_w) = std::io::pipe().map_err(|e| Error::io("cannot make a pipe", e))?;
        let tree = Arc::new(tree);
        let writer = {
            let (tree, counters) = (tree.clone(), counters.clone());
            tokio::task::spawn_blocking(move || transfer::write_tar(&tree, stream_w, &counters))
        };
        let ran =
            self.run_captured(&link, transfer::receive_argv(remote, &fingerprint, fresh), Some(stream_r.into())).await;
        // run_captured has dropped its copy of the read end, so a writer the
        // far side stopped reading sees a broken pipe and ends.
        let written = writer.await.map_err(|e| SyncError::Task(format!("the tar writer failed: {e}")))?;
        let ran = ran?;
        if ran.status.code == Some(NO_TAR) {
            return Err(SyncError::NoTar { host: host.to_string(), detail: ran.stderr_line() }.into());
        }
        if !ran.status.success() {
            let local = written.err().map(|e| format!("; sending: {e}")).unwrap_or_default();
            return Err(SyncError::Failed {
                host: host.to_string(),
                status: ran.status.to_string(),
                detail: format!("{}{local}", ran.stderr_line()),
            }
            .into());
        }
        written.map_err(|e| Error::io("sending the workspace", e))?;
        let remote_dir = String::from_utf8_lossy(&ran.stdout).trim().to_owned();
        Ok(SyncReport {
            sent: true,
            files,
            bytes,
            stream_bytes: counters.bytes.load(std::sync::atomic::Ordering::Relaxed),
            fingerprint,
            remote_dir: if remote_dir.is_empty() { remote.to_owned() } else { remote_dir },
        })
    }

    /// Runs `argv` on the host with `stdin` (default: /dev/null) and pipes
    /// for its output, which it returns.
    async fn run_captured(&self, link: &HostLink, argv: Vec<String>, stdin: Option<OwnedFd>) -> Result<Captured> {
        let exec_id = self.next_exec_id();
        let socket = self.runtime_dir()?.join(format!("{exec_id}.sock"));
        let _ = std::fs::remove_file(&socket);
        let stdin = match stdin {
            Some(fd) => fd,
            None => std::fs::File::open("/dev/null").map_err(|e| Error::io("cannot open /dev/null", e))?.into(),
        };
        let pipe = || std::io::pipe().map_err(|e| Error::io("cannot make a pipe", e));
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let read_all = |mut r: std::io::PipeReader| {
            tokio::task::spawn_blocking(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        };
        let (out, err) = (read_all(out_r), read_all(err_r));
        let server = StdioServer::start(socket, StdioFds { stdin, stdout: out_w.into(), stderr: err_w.into() })
            .map_err(|e| Error::io("cannot open a stdio socket", e))?;
        let params = RunParams {
            exec_id,
            argv,
            env: Default::default(),
            clear_env: false,
            cwd: None,
            stdio: server.stdio_ref(),
            tty: None,
            tty_session_inside: false,
        };
        let status = link.run(params).await;
        drop(server);
        let stdout = out.await.unwrap_or_default();
        let stderr = err.await.unwrap_or_default();
        Ok(Captured { status: status?, stdout, stderr })
    }
}
