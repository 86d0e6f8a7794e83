//! The process-wide state behind the C ABI: one tokio runtime, one engine
//! per store directory, and the streaming execs in flight. Created on the
//! first call and kept for the life of the process.
//!
//! Every host thread may call at once. A call runs its future on the
//! calling thread with the shared runtime's handle (`Handle::block_on`), so
//! N host threads make N calls in parallel; the runtime's worker threads
//! carry what the engine spawns (driver connections, exec tasks).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tinybox_core::Tinybox;
use tinybox_core::driver::DriverConfig;

use crate::errors::{CallError, CallResult};
use crate::exec::Running;

pub struct State {
    runtime: tokio::runtime::Runtime,
    engines: Mutex<HashMap<PathBuf, Arc<Tinybox>>>,
    pub execs: Mutex<HashMap<String, Arc<Running>>>,
    /// Keeps SIGPIPE from killing the host: see `install_sigpipe_handler`.
    _sigpipe: Option<tokio::signal::unix::Signal>,
}

static STATE: OnceLock<Result<State, String>> = OnceLock::new();

/// The state, made on first use. A runtime that cannot start is reported
/// on every call rather than retried.
pub fn state() -> CallResult<&'static State> {
    STATE
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .thread_name("tinybox-module")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the module's runtime: {e}"))?;
            let sigpipe = install_sigpipe_handler(&runtime);
            Ok(State {
                runtime,
                engines: Mutex::new(HashMap::new()),
                execs: Mutex::new(HashMap::new()),
                _sigpipe: sigpipe,
            })
        })
        .as_ref()
        .map_err(|e| CallError::internal(e.clone()))
}

/// A host process may keep SIGPIPE's default action, which kills it: C
/// programs do. Core writes to its drivers' stdin and to sockets, and a
/// driver that dies mid-call would then take the host down with it. A
/// handler (not `SIG_IGN`, so children still start with the default) turns
/// that into an `EPIPE` error the engine reports. It is process-wide, which
/// the release contract states.
fn install_sigpipe_handler(runtime: &tokio::runtime::Runtime) -> Option<tokio::signal::unix::Signal> {
    let _guard = runtime.enter();
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::pipe()).ok()
}

impl State {
    /// Runs `fut` to completion for the calling host thread.
    pub fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let handle = self.runtime.handle();
        if tokio::runtime::Handle::try_current().is_err() {
            return handle.block_on(fut);
        }
        // The host called from inside a tokio runtime of its own, where
        // blocking this thread on ours would panic: use a thread of our own.
        std::thread::scope(|s| s.spawn(|| handle.block_on(fut)).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// The engine over the store in `dir`, opened on first use.
    pub fn engine(&self, dir: &Path) -> CallResult<Arc<Tinybox>> {
        let key = std::path::absolute(dir)
            .map_err(|e| CallError::invalid(format!("store directory {} cannot be used: {e}", dir.display())))?;
        let mut engines = self.engines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = engines.get(&key) {
            return Ok(e.clone());
        }
        // Opening touches only files; the engine starts no driver until asked.
        let engine = Arc::new(self.block_on(async { open(&key) })?);
        engines.insert(key, engine.clone());
        Ok(engine)
    }

    /// Stops every driver started so far and forgets the engines; the next
    /// call opens them again.
    pub fn close(&self) -> usize {
        let engines: Vec<Arc<Tinybox>> = {
            let mut map = self.engines.lock().unwrap_or_else(|p| p.into_inner());
            map.drain().map(|(_, e)| e).collect()
        };
        let n = engines.len();
        self.block_on(async {
            for e in &engines {
                e.close().await;
            }
        });
        n
    }
}

/// `Tinybox::open`, with this library's own directory searched for drivers
/// first (`module_dir`).
fn open(store_dir: &Path) -> CallResult<Tinybox> {
    let mut drivers = DriverConfig::from_env();
    if let Some(dir) = module_dir() {
        drivers.search_dirs.retain(|d| *d != dir);
        drivers.search_dirs.insert(0, dir);
    }
    Ok(Tinybox::open_with(store_dir, drivers)?)
}

/// The directory of the file this code was loaded from — the shared
/// library when a host dlopened it, the executable when linked in. Found
/// by looking up the address of one of its own functions in
/// `/proc/self/maps`: no `dladdr`, so no `unsafe`.
pub fn module_dir() -> Option<PathBuf> {
    let marker: fn() -> Option<PathBuf> = module_dir;
    let addr = marker as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| mapping_path(line, addr)).and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The file a `/proc/self/maps` line maps, when its range holds `addr`.
fn mapping_path(line: &str, addr: usize) -> Option<PathBuf> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
    if !(start <= addr && addr < end) {
        return None;
    }
    let path = fields.nth(4)?.trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.starts_with('/').then(|| PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_names_its_file_only_for_addresses_in_its_range() {
        let line = "7f0000001000-7f0000002000 r-xp 00001000 08:01 1234       /opt/tiny box/libtinybox_module.so";
        assert_eq!(mapping_path(line, 0x7f0000001800), Some(PathBuf::from("/opt/tiny box/libtinybox_module.so")));
        assert_eq!(mapping_path(line, 0x7f0000002000), None);
        assert_eq!(mapping_path("7f00-7f10 rw-p 00000000 00:00 0 ", 0x7f05), None, "anonymous mapping");
        assert_eq!(mapping_path("7f00-7f10 r-xp 00000000 00:00 0  [vdso]", 0x7f05), None);
    }

    #[test]
    fn the_code_is_found_in_the_file_that_holds_it() {
        // Linked into this test executable, the module's directory is the executable's.
        let exe_dir = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
        assert_eq!(module_dir(), Some(std::fs::canonicalize(exe_dir).unwrap()));
    }
}
