//! What a pull reports as it goes, for a front end's progress bar.

/// Told the bytes to fetch, then each chunk as it lands.
pub trait Progress: Send + Sync {
    /// `bytes` to fetch over `blobs` blobs (already-stored ones excluded).
    fn start(&self, _bytes: u64, _blobs: usize) {}
    fn advance(&self, _bytes: u64) {}
    /// A phase with no byte count (unpacking, stacking the layers).
    fn phase(&self, _what: &str) {}
}

/// Reports nothing.
pub struct Quiet;
impl Progress for Quiet {}
