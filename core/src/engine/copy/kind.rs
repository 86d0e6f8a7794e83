//! What an entry is called, in the two vocabularies a copy speaks: a tar
//! header's type in a refusal's words, and a `st_mode` as a listing's
//! `kind`. A leaf: it knows nothing of the copy, so every side of it
//! (through the box, the workspace directory, the file calls) can name
//! entries without knowing the others.

/// How a refusal names a tar entry's type.
pub(super) fn word(t: tar::EntryType) -> &'static str {
    match t {
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => "file",
        tar::EntryType::Directory => "directory",
        tar::EntryType::Symlink => "symlink",
        tar::EntryType::Link => "hard link",
        tar::EntryType::Char => "character device",
        tar::EntryType::Block => "block device",
        tar::EntryType::Fifo => "fifo",
        _ => "special entry",
    }
}

/// A `DirEntry`'s kind for a `st_mode`.
pub(super) fn of_mode(mode: u32) -> &'static str {
    match rustix::fs::FileType::from_raw_mode(mode) {
        rustix::fs::FileType::RegularFile => "file",
        rustix::fs::FileType::Directory => "dir",
        rustix::fs::FileType::Symlink => "symlink",
        _ => "other",
    }
}
