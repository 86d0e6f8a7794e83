//! What each file's contents hashed to last time, keyed by what the kernel
//! says about the file, so an unchanged tree is fingerprinted from its
//! metadata instead of its bytes (git's index does the same).
//!
//! A file is taken as unchanged when its device, inode, size, modification
//! time and change time (to the nanosecond) are all what they were. The
//! change time cannot be set by a program, so writing a file and putting
//! its modification time back still re-reads it. A file changed in the
//! same clock tick as it was hashed could keep all five: such "racily
//! clean" entries (changed less than [`RACY_WINDOW`] before the scan began)
//! are not kept, so they are read again next time.
//!
//! The cache is only ever a shortcut: one that is missing, unreadable, of
//! another format or from another tree is ignored and rewritten.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// Entries changed this close to the start of a scan are not cached.
pub const RACY_WINDOW: Duration = Duration::from_secs(2);

const FORMAT: u32 = 1;

/// What the kernel says about a file, as far as its contents go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Nanoseconds since the epoch.
    pub ctime_ns: i128,
}

impl StatKey {
    pub fn of(meta: &std::fs::Metadata) -> StatKey {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        StatKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The file was last changed at least [`RACY_WINDOW`] before `t`: a
    /// digest taken at `t` is not racily clean.
    pub fn settled_before(&self, t: SystemTime) -> bool {
        let from = t
            .checked_sub(RACY_WINDOW)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        self.ctime_ns < from && self.mtime_ns < from
    }
}

#[derive(Serialize, Deserialize)]
struct Saved {
    format: u32,
    root: Vec<u8>,
    entries: Vec<(Vec<u8>, StatKey, [u8; 32])>,
}

/// The leaves of one tree, as loaded from and saved to one file.
pub struct LeafCache {
    path: PathBuf,
    root: Vec<u8>,
    known: HashMap<Vec<u8>, (StatKey, [u8; 32])>,
}

impl LeafCache {
    /// The cache for the tree at `root` (as given; callers pass the path
    /// they scan), kept in `dir`. Never fails: a cache that cannot be read
    /// is an empty one.
    pub fn load(dir: &Path, root: &Path) -> LeafCache {
        use std::os::unix::ffi::OsStrExt;
        let root = root.as_os_str().as_bytes().to_vec();
        let name = blake3::hash(&root).to_hex();
        let path = dir.join(&name[..32]);
        let known = std::fs::read(&path)
            .ok()
            .and_then(|bytes| postcard::from_bytes::<Saved>(&bytes).ok())
            .filter(|saved| saved.format == FORMAT && saved.root == root)
            .map(|saved| saved.entries.into_iter().map(|(rel, key, hash)| (rel, (key, hash))).collect())
            .unwrap_or_default();
        LeafCache { path, root, known }
    }

    /// How many files the cache holds.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether the cache holds no file.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The hash recorded for `rel` if the file is still what it was.
    pub fn get(&self, rel: &[u8], key: &StatKey) -> Option<blake3::Hash> {
        self.known.get(rel).filter(|(k, _)| k == key).map(|(_, h)| blake3::Hash::from_bytes(*h))
    }

    /// Replaces the cache with `leaves`, leaving out the racily clean ones
    /// (changed within [`RACY_WINDOW`] of `scan_started`). Best effort: a
    /// cache that cannot be written costs the next scan its reads, nothing else.
    pub fn save<'a>(
        &self,
        leaves: impl IntoIterator<Item = (&'a [u8], StatKey, blake3::Hash)>,
        scan_started: SystemTime,
    ) {
        let entries = leaves
            .into_iter()
            .filter(|(_, key, _)| key.settled_before(scan_started))
            .map(|(rel, key, hash)| (rel.to_vec(), key, *hash.as_bytes()))
            .collect();
        let saved = Saved { format: FORMAT, root: self.root.clone(), entries };
        let Ok(bytes) = postcard::to_stdvec(&saved) else { return };
        let Some(dir) = self.path.parent() else { return };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let Ok(mut temp) = tempfile::NamedTempFile::new_in(dir) else { return };
        if temp.write_all(&bytes).is_ok() {
            let _ = temp.persist(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: i128) -> StatKey {
        StatKey { dev: 1, ino: 2, size: 3, mtime_ns: n, ctime_ns: n }
    }

    #[test]
    fn a_saved_leaf_comes_back_only_for_the_same_tree_and_the_same_stat() {
        let dir = tempfile::tempdir().unwrap();
        let h = blake3::hash(b"contents");
        let old = key(1_000_000_000);
        LeafCache::load(dir.path(), Path::new("/ws")).save([(&b"a"[..], old, h)], SystemTime::now());
        let cache = LeafCache::load(dir.path(), Path::new("/ws"));
        assert_eq!(cache.get(b"a", &old), Some(h));
        assert_eq!(cache.get(b"b", &old), None);
        for changed in [
            StatKey { ctime_ns: old.ctime_ns + 1, ..old },
            StatKey { mtime_ns: old.mtime_ns + 1, ..old },
            StatKey { size: 4, ..old },
            StatKey { ino: 9, ..old },
            StatKey { dev: 9, ..old },
        ] {
            assert_eq!(cache.get(b"a", &changed), None, "{changed:?}");
        }
        assert_eq!(LeafCache::load(dir.path(), Path::new("/other")).get(b"a", &old), None);
    }

    #[test]
    fn racily_clean_entries_and_unreadable_caches_are_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let now_ns = now.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as i128;
        let fresh = key(now_ns - 1_000_000);
        let old = key(now_ns - 10_000_000_000);
        let h = blake3::hash(b"x");
        LeafCache::load(dir.path(), Path::new("/ws")).save([(&b"fresh"[..], fresh, h), (&b"old"[..], old, h)], now);
        let cache = LeafCache::load(dir.path(), Path::new("/ws"));
        assert_eq!(cache.get(b"fresh", &fresh), None, "a file changed just before the scan was trusted");
        assert_eq!(cache.get(b"old", &old), Some(h));

        let file = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
        std::fs::write(&file, b"\xff\xff garbage").unwrap();
        assert_eq!(LeafCache::load(dir.path(), Path::new("/ws")).get(b"old", &old), None);
    }
}
