//! OCI digests: `sha256:<64 lowercase hex>`, the only algorithm accepted.
//! A digest names a blob in the store, so it is parsed once, strictly,
//! before it ever becomes a path.

use std::fmt;
use std::io::{self, Write};

use sha2::{Digest as _, Sha256};

/// A sha256 content digest, validated.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a digest this store takes: it must be sha256: followed by 64 lowercase hex digits")]
pub struct BadDigest(pub String);

impl Digest {
    pub fn parse(s: &str) -> Result<Digest, BadDigest> {
        let hex = s.strip_prefix("sha256:").ok_or_else(|| BadDigest(s.to_owned()))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(BadDigest(s.to_owned()));
        }
        Ok(Digest(s.to_owned()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        let mut h = Hasher::default();
        h.update(bytes);
        h.finish()
    }

    /// The 64 hex digits, a file name.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The first 12 hex digits, as listings show an image id.
    pub fn short(&self) -> &str {
        &self.hex()[..12]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Digest {
    type Error = BadDigest;
    fn try_from(s: String) -> Result<Self, BadDigest> {
        Digest::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

impl std::str::FromStr for Digest {
    type Err = BadDigest;
    fn from_str(s: &str) -> Result<Self, BadDigest> {
        Digest::parse(s)
    }
}

/// A running sha256 with the byte count.
#[derive(Default, Clone)]
pub struct Hasher {
    sha: Sha256,
    len: u64,
}

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.sha.update(bytes);
        self.len += bytes.len() as u64;
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn finish(self) -> Digest {
        let bytes = self.sha.finalize();
        let mut hex = String::with_capacity(7 + 64);
        hex.push_str("sha256:");
        for b in bytes.iter() {
            hex.push_str(&format!("{b:02x}"));
        }
        Digest(hex)
    }
}

/// A writer that hashes what passes through it.
pub struct HashingWriter<W> {
    pub inner: W,
    pub hasher: Hasher,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes what is read through it.
pub struct HashingReader<R> {
    pub inner: R,
    pub hasher: Hasher,
}

impl<R: io::Read> io::Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_strict() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert_eq!(Digest::parse(&good).unwrap().hex(), "a".repeat(64));
        for bad in [
            format!("sha256:{}", "A".repeat(64)),
            format!("sha512:{}", "a".repeat(64)),
            format!("sha256:{}", "a".repeat(63)),
            format!("sha256:../{}", "a".repeat(61)),
            "a".repeat(64),
        ] {
            assert!(Digest::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_empty_string_hashes_to_the_known_digest() {
        assert_eq!(Digest::of(b"").as_str(), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
