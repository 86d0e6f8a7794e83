//! How a copy's bytes land on this machine (ADR 0026): a file's runs of
//! zeros stay holes whatever the box's tar sent (a sparse file written
//! densely by a tar that cannot say "hole" is made sparse again here), and
//! a copy out of a box is bounded — on the bytes it writes here in all, and
//! on the size any one file it makes may claim, holes included — so a box
//! cannot fill this machine's disk, nor hand it a terabyte file made of
//! nothing. Every file the checked writer (extract.rs) makes goes through
//! [`land`].

use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use super::PIPE_CAPACITY;
use super::error::CopyError;

/// What a copy out may write here unless the caller says otherwise:
/// bytes written in all, and the size of any one file.
pub const DEFAULT_MAX_SIZE: u64 = 10 << 30;

/// The unit holes are found in: a run of this many zero bytes, aligned in
/// the file, is left unwritten. A filesystem block on every common one.
const BLOCK: usize = 4096;

static ZEROS: [u8; BLOCK] = [0; BLOCK];

/// What one copy may still write here.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    /// `None`: unbounded (the caller's own files going into a box).
    limit: Option<u64>,
    written: u64,
}

impl Budget {
    pub(super) fn unbounded() -> Budget {
        Budget { limit: None, written: 0 }
    }

    pub(super) fn of(limit: u64) -> Budget {
        Budget { limit: Some(limit), written: 0 }
    }

    /// Refuses a file whose size (its apparent size: holes count) is over
    /// the bound, before anything of it is made.
    pub(super) fn admit(&self, path: &str, size: u64) -> io::Result<()> {
        match self.limit {
            Some(limit) if size > limit => {
                Err(io::Error::other(CopyError::FileOverBound { path: path.to_owned(), size, limit }))
            }
            _ => Ok(()),
        }
    }

    /// Counts `n` more bytes about to be written, or refuses them.
    fn take(&mut self, n: u64) -> io::Result<()> {
        let after = self.written.saturating_add(n);
        match self.limit {
            Some(limit) if after > limit => Err(io::Error::other(CopyError::WrittenOverBound { limit })),
            _ => {
                self.written = after;
                Ok(())
            }
        }
    }
}

/// Writes what `from` reads into the new, empty `file`, leaving every
/// aligned block of zeros a hole, and counting what is written against
/// `budget`; the file's length is what was read. Returns that length.
pub(super) fn land(from: &mut impl Read, file: &std::fs::File, budget: &mut Budget) -> io::Result<u64> {
    let mut buf = vec![0u8; PIPE_CAPACITY];
    let mut at = 0u64;
    loop {
        // A full buffer each time (but the last) keeps blocks aligned in the file.
        let n = fill(from, &mut buf)?;
        if n == 0 {
            break;
        }
        let data = &buf[..n];
        let mut i = 0;
        while i < n {
            let end = (i + BLOCK).min(n);
            if data[i..end] == ZEROS[..end - i] {
                i = end;
                continue;
            }
            let start = i;
            i = end;
            while i < n {
                let end = (i + BLOCK).min(n);
                if data[i..end] == ZEROS[..end - i] {
                    break;
                }
                i = end;
            }
            budget.take((i - start) as u64)?;
            file.write_all_at(&data[start..i], at + start as u64)?;
        }
        at += n as u64;
    }
    // Zeros at the end are a hole too: the length says where the file ends.
    file.set_len(at)?;
    Ok(at)
}

/// Reads into `buf` until it is full or the reader ends; how much it holds.
fn fill(from: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match from.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::super::error::human;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// `bytes` landed in a new file: its length, blocks in use and contents.
    fn landed(bytes: &[u8], budget: &mut Budget) -> io::Result<(u64, u64, Vec<u8>)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::File::create_new(&path).unwrap();
        let n = land(&mut &bytes[..], &file, budget)?;
        drop(file);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), n);
        Ok((n, meta.blocks() * 512, std::fs::read(&path).unwrap()))
    }

    #[test]
    fn zeros_land_as_holes_and_the_rest_as_it_was() {
        // 8 MiB: zeros, a byte in the middle, zeros to the end.
        let mut bytes = vec![0u8; 8 << 20];
        bytes[3 << 20] = 7;
        bytes[(3 << 20) + 5000] = 9;
        let mut budget = Budget::of(1 << 20);
        let (n, used, back) = landed(&bytes, &mut budget).unwrap();
        assert_eq!((n, back == bytes), (8 << 20, true));
        // Two 4 KiB blocks of data; a filesystem may allocate a little more.
        assert!(used <= 64 * 1024, "{used} bytes of blocks for 8 KiB of data");
        assert_eq!(budget.written, 2 * BLOCK as u64);
        // Odd lengths and data at the very end.
        let tail: Vec<u8> = (0..BLOCK * 3 + 17).map(|i| if i > BLOCK * 2 { 1 } else { 0 }).collect();
        assert_eq!(landed(&tail, &mut Budget::unbounded()).unwrap().2, tail);
        assert_eq!(landed(&[], &mut Budget::unbounded()).unwrap().0, 0);
    }

    #[test]
    fn dense_bytes_over_the_budget_are_refused() {
        let bytes = vec![1u8; 3 << 20];
        let err = landed(&bytes, &mut Budget::of(2 << 20)).unwrap_err();
        let got = err.get_ref().and_then(|e| e.downcast_ref::<CopyError>());
        assert!(matches!(got, Some(CopyError::WrittenOverBound { limit }) if *limit == 2 << 20), "{err}");
        // The budget is the copy's, across files.
        let mut budget = Budget::of(5 << 20);
        landed(&bytes, &mut budget).unwrap();
        assert!(landed(&bytes, &mut budget).is_err());
    }

    #[test]
    fn a_file_claiming_more_than_the_bound_is_refused_by_its_size() {
        let budget = Budget::of(10 << 30);
        assert!(budget.admit("f", 10 << 30).is_ok());
        let err = budget.admit("o/sparse", 1 << 40).unwrap_err();
        assert_eq!(
            err.to_string(),
            "o/sparse is 1099511627776 bytes (1 TiB), over the copy's bound of 10 GiB; nothing of the copy was left here (tinybox cp --max-size SIZE raises the bound)"
        );
        assert!(Budget::unbounded().admit("f", u64::MAX).is_ok());
    }

    #[test]
    fn sizes_read_as_a_person_says_them() {
        assert_eq!(human(512), "512 bytes");
        assert_eq!(human(10 << 30), "10 GiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(1 << 40), "1 TiB");
    }
}
