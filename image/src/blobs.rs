//! Content-addressed blobs: each lands as a temporary file in the store's
//! `tmp/`, hashed as it is written, and is renamed to `blobs/sha256/<hex>`
//! only when its digest is the one it was asked for. A mismatch, an error
//! or a drop removes the temporary file: nothing half-written is ever named
//! by a digest.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::digest::{Digest, Hasher};
use crate::error::{ImageError, Result};

/// A blob being written.
pub struct BlobWriter {
    file: tempfile::NamedTempFile,
    hasher: Hasher,
    blobs: PathBuf,
}

impl BlobWriter {
    pub(crate) fn new(tmp: &Path, blobs: &Path) -> Result<BlobWriter> {
        let file = tempfile::Builder::new()
            .prefix("blob-")
            .tempfile_in(tmp)
            .map_err(|e| ImageError::io(format!("cannot make a temporary file in {}", tmp.display()), e))?;
        Ok(BlobWriter { file, hasher: Hasher::default(), blobs: blobs.to_owned() })
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        self.file.write_all(bytes).map_err(|e| ImageError::io("cannot write a blob to the image store", e))
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.hasher.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hasher.is_empty()
    }

    /// Whether what was written so far is `expected` (and `size` bytes, when known).
    pub fn verify(&self, what: &str, expected: &Digest, size: Option<u64>) -> Result<()> {
        let written = self.hasher.len();
        let actual = self.hasher.clone().finish();
        if &actual != expected {
            return Err(ImageError::DigestMismatch { what: what.to_owned(), expected: expected.clone(), actual });
        }
        if let Some(size) = size.filter(|s| *s != written) {
            return Err(ImageError::SizeMismatch { what: what.to_owned(), size: written, expected: size });
        }
        Ok(())
    }

    /// Names the blob by its digest if that is `expected` (and its size
    /// `size`, when known); otherwise removes it and refuses.
    pub fn commit(mut self, what: &str, expected: &Digest, size: Option<u64>) -> Result<PathBuf> {
        self.file.flush().map_err(|e| ImageError::io("cannot write a blob to the image store", e))?;
        self.verify(what, expected, size)?;
        let path = self.blobs.join(expected.hex());
        self.file.persist(&path).map_err(|e| ImageError::io(format!("cannot keep blob {expected}"), e.error))?;
        Ok(path)
    }
}

/// Copies `reader` into a new blob, then commits it as `expected`; or,
/// with no digest to expect, names it by what it hashed to.
pub fn copy_in(
    writer: BlobWriter,
    mut reader: impl Read,
    what: &str,
    expected: Option<&Digest>,
) -> Result<(Digest, u64)> {
    let mut writer = writer;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf).map_err(|e| ImageError::io(format!("cannot read {what}"), e))?;
        if n == 0 {
            break;
        }
        writer.write(&buf[..n])?;
    }
    let size = writer.len();
    let digest = match expected {
        Some(d) => d.clone(),
        None => writer.hasher.clone().finish(),
    };
    writer.commit(what, &digest, None)?;
    Ok((digest, size))
}

/// Reads a whole small blob (a manifest or config) and checks it again.
pub fn read_verified(path: &Path, expected: &Digest) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| ImageError::io(format!("cannot read {}", path.display()), e))?;
    let actual = Digest::of(&bytes);
    if &actual != expected {
        return Err(ImageError::DigestMismatch {
            what: format!("stored blob {}", path.display()),
            expected: expected.clone(),
            actual,
        });
    }
    Ok(bytes)
}

pub(crate) fn io_err(context: &str) -> impl Fn(io::Error) -> ImageError + '_ {
    move |e| ImageError::io(context, e)
}
