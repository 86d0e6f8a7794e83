//! Why the store could not do what was asked: a leaf beneath every store
//! file, gathered by `crate::Error`.

use std::path::PathBuf;

use tinybox_sdk::model::BoxId;

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("box {0} already exists")]
    Exists(BoxId),
    #[error("no box named {0}; `tinybox ls` lists the boxes")]
    NotFound(BoxId),
    #[error("store {path} is corrupt ({detail}); it was left untouched: repair or move it aside")]
    Corrupt { path: PathBuf, detail: String },
    #[error("store {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The store's path leads somewhere tinybox must not keep records.
    #[error("store {path} {problem}; choose a directory of your own with --store or TINYBOX_HOME")]
    Refused { path: PathBuf, problem: String },
    #[error("could not allocate a box identifier after {0} attempts")]
    Exhausted(usize),
}
