//! The store's files and their locks, beneath every document of the store:
//! the small documents beside the box records (templates, snapshots, hosts,
//! settings, pools) each kept whole by [`JsonDoc`], and the shared and
//! exclusive locks the box files take too. [`super::file_store`] puts the
//! box files and the snapshot list together as `FileStore`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use fs4::FileExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;

/// The document format this build writes and the newest it reads.
pub(crate) const DOC_VERSION: u32 = 1;

pub(crate) fn legacy_version() -> u32 {
    // Documents written before the field existed are the first format.
    1
}

/// A document kept by [`JsonDoc`]: serializable, empty by default, and able
/// to say what is wrong with it beyond what serde checks.
pub(crate) trait Document: Serialize + DeserializeOwned + Default + Clone + PartialEq {
    /// Rules serde cannot express (a supported version, unique keys).
    fn check(&self) -> Result<(), String>;
    /// Puts the document in the order it is written in.
    fn normalize(&mut self) {}
}

/// Checks a document's format version: a newer one may hold what this build
/// would drop on rewrite, so it is refused rather than downgraded.
pub(crate) fn check_version(version: u32) -> Result<(), String> {
    if version > DOC_VERSION {
        return Err(format!(
            "version {version} is newer than this tinybox reads (up to {DOC_VERSION}); upgrade tinybox"
        ));
    }
    Ok(())
}

/// The shared lock on the lock file at `path`, held until the returned file
/// is dropped; `None` when no writer ever made it (reading then is reading
/// before the first change, and reading never creates it, so a read-only
/// store reads).
pub(crate) fn lock_shared(path: &Path) -> Result<Option<File>, StoreError> {
    let io = |source| StoreError::Io { path: path.to_owned(), source };
    match OpenOptions::new().read(true).open(path) {
        Ok(file) => {
            // Fully qualified: std's File has inherent methods of the same
            // names that method syntax would pick over fs4's.
            FileExt::lock_shared(&file).map_err(io)?;
            Ok(Some(file))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(e)),
    }
}

/// The exclusive lock on the lock file at `path` (made 0600 if missing),
/// held until the returned file is dropped; the kernel releases it too if
/// the process dies.
pub(crate) fn lock_exclusive(path: &Path) -> Result<File, StoreError> {
    let io = |source| StoreError::Io { path: path.to_owned(), source };
    // A fresh descriptor per operation: flock locks belong to the open file
    // description, so two threads sharing one would not exclude each other.
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path).map_err(io)?;
    FileExt::lock(&file).map_err(io)?;
    Ok(file)
}

/// A JSON document in a directory, read under a shared lock and changed
/// under an exclusive one, and replaced atomically.
///
/// The lock is taken on a separate, never-replaced file: the document
/// itself is swapped by rename, so a lock on it would guard an inode the
/// next writer no longer uses.
#[derive(Debug)]
pub(crate) struct JsonDoc<T> {
    dir: PathBuf,
    path: PathBuf,
    lock: PathBuf,
    temp_prefix: String,
    _doc: PhantomData<fn() -> T>,
}

impl<T: Document> JsonDoc<T> {
    /// `<dir>/<name>.json`, locked through `<dir>/<name>.lock`. Touches
    /// nothing: the directory (mode 0700: boxes and templates are the
    /// user's own) and the lock file are made by the first change, so
    /// reading a store, or a request refused before it changes anything,
    /// leaves no file behind.
    pub(crate) fn open(dir: impl Into<PathBuf>, name: &str) -> Result<Self, StoreError> {
        let dir = dir.into();
        Ok(JsonDoc {
            path: dir.join(format!("{name}.json")),
            lock: dir.join(format!("{name}.lock")),
            temp_prefix: format!(".{name}.json."),
            dir,
            _doc: PhantomData,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The document as it is on disk; empty if it was never written.
    ///
    /// Under the shared lock when the lock file exists, which needs only
    /// read access to it, so a read-only store (a read-only mount, a
    /// directory the caller cannot write) is read under the lock like any
    /// other. When the lock file does not exist, the document is read
    /// without it rather than creating it: the lock file is never removed
    /// and every writer creates it before it locks, so its absence means no
    /// writer has taken the lock yet, and reading now is reading before that
    /// writer's change. Either way the reader sees a whole document, since a
    /// writer only ever replaces it by rename.
    pub(crate) fn read(&self) -> Result<T, StoreError> {
        let _lock = lock_shared(&self.lock)?;
        self.load()
    }

    /// Runs `f` on the document under the exclusive lock and writes the
    /// result back if `f` succeeded and changed it. A document that fails to
    /// load is never written over.
    pub(crate) fn modify<R>(&self, f: impl FnOnce(&mut T) -> Result<R, StoreError>) -> Result<R, StoreError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|source| StoreError::Io { path: self.dir.clone(), source })?;
        let _lock = self.lock_exclusive()?;
        let before = self.load()?;
        let mut doc = before.clone();
        let out = f(&mut doc)?;
        doc.normalize();
        if doc != before {
            self.write(&doc)?;
        }
        Ok(out)
    }

    fn io(&self, path: &Path) -> impl FnOnce(io::Error) -> StoreError {
        let path = path.to_owned();
        move |source| StoreError::Io { path, source }
    }

    /// The exclusive lock, held until the returned file is dropped: closing
    /// the descriptor releases it, and the kernel does so too if the
    /// process dies.
    fn lock_exclusive(&self) -> Result<File, StoreError> {
        lock_exclusive(&self.lock)
    }

    fn load(&self) -> Result<T, StoreError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(T::default()),
            Err(e) => return Err(self.io(&self.path)(e)),
        };
        let corrupt = |detail: String| StoreError::Corrupt { path: self.path.clone(), detail };
        let doc: T = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        doc.check().map_err(corrupt)?;
        Ok(doc)
    }

    /// Temporary file, fsync, rename, fsync the directory: a reader sees the
    /// old document or the new one, and after a crash the rename is durable.
    fn write(&self, doc: &T) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec_pretty(doc)
            .map_err(|e| self.io(&self.path)(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        bytes.push(b'\n');
        self.remove_stale_temps();
        let mut temp = tempfile::Builder::new()
            .prefix(&self.temp_prefix)
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(self.io(&self.dir))?;
        temp.write_all(&bytes).map_err(self.io(temp.path()))?;
        temp.as_file().sync_all().map_err(self.io(temp.path()))?;
        temp.persist(&self.path).map_err(|e| self.io(&self.path)(e.error))?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(self.io(&self.dir))
    }

    /// Clears temporary files left by writers that were killed mid-write.
    /// Only called under the exclusive lock, when no other writer of this
    /// document can be using one.
    fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&self.temp_prefix) && name.ends_with(".tmp") {
                // Best effort: a leftover only costs disk space.
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
