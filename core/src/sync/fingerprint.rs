//! What a workspace tree is, for sync: the files that are sent (after the
//! root's .gitignore, then .boxignore) and the blake3 merkle fingerprint
//! over them. Two runs over the same contents, executable bits, paths and
//! rules give the same fingerprint on any machine; modification times do
//! not count.

use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::SystemTime;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::SyncError;
use super::leaf_cache::{LeafCache, StatKey};

/// The far side's record of what it holds, inside the synced directory.
pub const MARKER: &str = ".tinybox-fingerprint";

/// The ignore files read, in order: later rules win.
pub const IGNORE_FILES: [&str; 2] = [".gitignore", ".boxignore"];

/// The exclusion rules of one workspace root, and their identity.
pub struct Rules {
    matcher: Gitignore,
    /// blake3 over the rules' own text (absent files included as absent).
    identity: [u8; 32],
}

impl Rules {
    /// Reads `.gitignore` then `.boxignore` at `root` (only there: nested
    /// ignore files are not read). A rule that does not parse is an error:
    /// silently dropping one could send, or skip, what nobody expected.
    pub fn load(root: &Path) -> Result<Rules, SyncError> {
        let mut builder = GitignoreBuilder::new(root);
        let mut identity = blake3::Hasher::new_derive_key("tinybox sync rules v1");
        for name in IGNORE_FILES {
            let path = root.join(name);
            let meta = std::fs::symlink_metadata(&path);
            // A symlinked ignore file is not followed, like any other link.
            let text = match meta {
                Ok(m) if m.is_file() => Some(
                    std::fs::read(&path).map_err(|e| SyncError::io(format!("cannot read {}", path.display()), e))?,
                ),
                _ => None,
            };
            identity.update(name.as_bytes());
            match &text {
                None => {
                    identity.update(&[0]);
                }
                Some(t) => {
                    identity.update(&[1]);
                    identity.update(&(t.len() as u64).to_le_bytes());
                    identity.update(t);
                    for (n, line) in String::from_utf8_lossy(t).lines().enumerate() {
                        builder
                            .add_line(Some(path.clone()), line)
                            .map_err(|e| SyncError::Rules(format!("{} line {}: {e}", path.display(), n + 1)))?;
                    }
                }
            }
        }
        let matcher = builder.build().map_err(|e| SyncError::Rules(e.to_string()))?;
        Ok(Rules { matcher, identity: *identity.finalize().as_bytes() })
    }

    /// Whether `rel` (relative to the root) is left out. The marker is
    /// always left out: the far side's own record is never overwritten.
    pub fn excludes(&self, rel: &Path, is_dir: bool) -> bool {
        rel.as_os_str().as_bytes() == MARKER.as_bytes() || self.matcher.matched(rel, is_dir).is_ignore()
    }
}

/// One thing that is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative path, `/`-separated, as bytes (file names need not be UTF-8).
    pub rel: Vec<u8>,
    pub path: PathBuf,
    pub kind: Kind,
    /// Seconds since the epoch; carried in the transfer, never hashed.
    pub mtime: u64,
    /// What the kernel said about it when scanned (the leaf cache's key).
    pub stat: StatKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File { executable: bool, size: u64 },
}

/// A workspace as it will be sent: its entries in sorted path order.
pub struct Tree {
    pub root: PathBuf,
    pub entries: Vec<Entry>,
    pub rules: Arc<Rules>,
    /// When the scan began: files changed after it are not cached.
    pub scanned_at: SystemTime,
}

impl Tree {
    /// Walks `root` with its rules. Symbolic links (and sockets, fifos,
    /// devices) are skipped, never followed.
    pub fn scan(root: &Path) -> Result<Tree, SyncError> {
        let scanned_at = SystemTime::now();
        let meta = std::fs::metadata(root).map_err(|e| SyncError::io(format!("cannot use {}", root.display()), e))?;
        if !meta.is_dir() {
            return Err(SyncError::NotADirectory(root.to_owned()));
        }
        let rules = Arc::new(Rules::load(root)?);
        let mut walk = ignore::WalkBuilder::new(root);
        walk.standard_filters(false).follow_links(false).parents(false);
        let base = root.to_owned();
        // The walk prunes excluded directories, as git does: a `!` rule cannot
        // bring back a file whose directory is excluded.
        let filter_rules = rules.clone();
        walk.filter_entry(move |e| {
            let Ok(rel) = e.path().strip_prefix(&base) else { return true };
            if rel.as_os_str().is_empty() {
                return true;
            }
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            !filter_rules.excludes(rel, is_dir)
        });
        // On several threads: the walk is one stat per entry, and a large
        // tree is mostly that.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        walk.threads(threads);
        let collected = Collected { root, found: Default::default(), failed: Default::default() };
        walk.build_parallel().visit(&mut &collected);
        let Collected { found, failed, .. } = collected;
        if let Some(e) = failed.into_inner().expect("scan error slot") {
            return Err(e);
        }
        let mut entries = found.into_inner().expect("scan results");
        // Directory iteration order is not stable; sorted order is.
        entries.sort_by(|a, b| a.rel.cmp(&b.rel));
        Ok(Tree { root: root.to_owned(), entries, rules, scanned_at })
    }

    /// How many files, and how many bytes of contents, the tree holds.
    pub fn totals(&self) -> (u64, u64) {
        self.entries.iter().fold((0, 0), |(f, b), e| match e.kind {
            Kind::File { size, .. } => (f + 1, b + size),
            Kind::Dir => (f, b),
        })
    }

    /// The blake3 merkle fingerprint: every file's contents hashed on its
    /// own (in parallel), then folded in sorted path order together with
    /// each path, kind and executable bit, under the rules' identity.
    pub fn fingerprint(&self) -> Result<String, SyncError> {
        Ok(self.merkle_root(&self.leaf_hashes(None)?.0))
    }

    /// [`Tree::fingerprint`], reading only the files whose metadata changed
    /// since the cache kept in `cache_dir` for this tree was saved, then
    /// saving it (see [`super::leaf_cache`]).
    /// A cache that already holds exactly this tree's leaves (every file
    /// found in it, nothing else in it) is not written again.
    pub fn fingerprint_cached(&self, cache_dir: &Path) -> Result<String, SyncError> {
        let cache = LeafCache::load(cache_dir, &self.root);
        let (leaves, read) = self.leaf_hashes(Some(&cache))?;
        let (files, _) = self.totals();
        if read > 0 || cache.len() as u64 != files {
            let found = self.entries.iter().zip(&leaves).filter_map(|(e, leaf)| leaf.map(|h| (&e.rel[..], e.stat, h)));
            cache.save(found, self.scanned_at);
        }
        Ok(self.merkle_root(&leaves))
    }

    fn merkle_root(&self, leaves: &[Option<blake3::Hash>]) -> String {
        let mut root = blake3::Hasher::new_derive_key("tinybox sync tree v1");
        root.update(&self.rules.identity);
        for (entry, leaf) in self.entries.iter().zip(leaves.iter()) {
            root.update(&(entry.rel.len() as u64).to_le_bytes());
            root.update(&entry.rel);
            match entry.kind {
                Kind::Dir => {
                    root.update(b"d");
                }
                Kind::File { executable, .. } => {
                    root.update(if executable { b"x" } else { b"f" });
                    root.update(leaf.as_ref().expect("files have a leaf").as_bytes());
                }
            }
        }
        root.finalize().to_hex().to_string()
    }

    /// Each file's content hash (`None` for directories): from `cache` when
    /// its metadata is unchanged, otherwise read, on several threads; and
    /// how many files were read.
    fn leaf_hashes(&self, cache: Option<&LeafCache>) -> Result<(Vec<Option<blake3::Hash>>, usize), SyncError> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        let next = AtomicUsize::new(0);
        let read = AtomicUsize::new(0);
        let mut leaves: Vec<Option<blake3::Hash>> = vec![None; self.entries.len()];
        let results: Vec<Result<Vec<(usize, blake3::Hash)>, SyncError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| {
                        let mut done = Vec::new();
                        let mut buf = vec![0u8; 256 * 1024];
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(entry) = self.entries.get(i) else { break };
                            if let Kind::File { .. } = entry.kind {
                                let known = cache.and_then(|c| c.get(&entry.rel, &entry.stat));
                                let hash = match known {
                                    Some(h) => h,
                                    None => {
                                        read.fetch_add(1, Ordering::Relaxed);
                                        hash_file(&entry.path, &mut buf)?
                                    }
                                };
                                done.push((i, hash));
                            }
                        }
                        Ok(done)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("hashing thread")).collect()
        });
        for r in results {
            for (i, h) in r? {
                leaves[i] = Some(h);
            }
        }
        Ok((leaves, read.into_inner()))
    }
}

/// What the scan's walking threads found, each handing over its entries
/// in batches (and the rest when it ends), so the lock is not taken per entry.
struct Collected<'a> {
    root: &'a Path,
    found: std::sync::Mutex<Vec<Entry>>,
    failed: std::sync::Mutex<Option<SyncError>>,
}

struct Collector<'a> {
    shared: &'a Collected<'a>,
    mine: Vec<Entry>,
}

impl<'s> ignore::ParallelVisitorBuilder<'s> for &'s Collected<'s> {
    fn build(&mut self) -> Box<dyn ignore::ParallelVisitor + 's> {
        Box::new(Collector { shared: self, mine: Vec::new() })
    }
}

impl ignore::ParallelVisitor for Collector<'_> {
    fn visit(&mut self, item: Result<ignore::DirEntry, ignore::Error>) -> ignore::WalkState {
        let entry = item.map_err(|e| SyncError::Walk(e.to_string())).and_then(|i| entry_of(self.shared.root, &i));
        match entry {
            Ok(Some(entry)) => self.mine.push(entry),
            Ok(None) => {}
            Err(e) => {
                self.shared.failed.lock().expect("scan error slot").get_or_insert(e);
                return ignore::WalkState::Quit;
            }
        }
        if self.mine.len() >= 1024 {
            self.shared.found.lock().expect("scan results").append(&mut self.mine);
        }
        ignore::WalkState::Continue
    }
}

impl Drop for Collector<'_> {
    fn drop(&mut self) {
        if let Ok(mut found) = self.shared.found.lock() {
            found.append(&mut self.mine);
        }
    }
}

/// The entry a walked item becomes: `None` for the root itself and for
/// what is never sent (symbolic links, sockets, fifos, devices).
fn entry_of(root: &Path, item: &ignore::DirEntry) -> Result<Option<Entry>, SyncError> {
    let Ok(rel) = item.path().strip_prefix(root) else { return Ok(None) };
    if rel.as_os_str().is_empty() {
        return Ok(None);
    }
    let Some(ft) = item.file_type() else { return Ok(None) };
    if !(ft.is_dir() || ft.is_file()) {
        return Ok(None);
    }
    let meta = std::fs::symlink_metadata(item.path())
        .map_err(|e| SyncError::io(format!("cannot read {}", item.path().display()), e))?;
    let mtime =
        meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    let kind = if ft.is_dir() {
        Kind::Dir
    } else {
        Kind::File { executable: meta.permissions().mode() & 0o111 != 0, size: meta.len() }
    };
    Ok(Some(Entry {
        rel: rel.as_os_str().as_bytes().to_vec(),
        path: item.path().to_owned(),
        kind,
        mtime,
        stat: StatKey::of(&meta),
    }))
}

fn hash_file(path: &Path, buf: &mut [u8]) -> Result<blake3::Hash, SyncError> {
    let ctx = |e| SyncError::io(format!("cannot read {}", path.display()), e);
    let mut f = File::open(path).map_err(ctx)?;
    let mut h = blake3::Hasher::new();
    loop {
        let n = f.read(buf).map_err(ctx)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize())
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
