//! This machine's platform in OCI words, and the choice of one image from
//! a multi-platform index.

use oci_client::manifest::ImageIndexEntry;

use crate::error::{ImageError, Result};

/// `os/architecture[/variant]` as OCI spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
}

impl Platform {
    /// This machine, from the compiler's target (Go's names, which OCI uses).
    pub fn this_machine() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "arm" => "arm",
            "powerpc64" => "ppc64le",
            "s390x" => "s390x",
            "riscv64" => "riscv64",
            other => other,
        };
        Platform { os: std::env::consts::OS.to_owned(), architecture: architecture.to_owned() }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)
    }
}

/// The digest of the entry for `want` in an index's `entries`, or the one
/// line naming what the index has.
pub fn choose(reference: &str, entries: &[ImageIndexEntry], want: &Platform) -> Result<String> {
    let named = |e: &ImageIndexEntry| {
        e.platform.as_ref().map(|p| {
            let mut s = format!("{}/{}", p.os, p.architecture);
            if let Some(v) = &p.variant {
                s.push('/');
                s.push_str(v);
            }
            s
        })
    };
    if let Some(hit) = entries.iter().find(|e| {
        e.platform
            .as_ref()
            .is_some_and(|p| p.os.to_string() == want.os && p.architecture.to_string() == want.architecture)
    }) {
        return Ok(hit.digest.clone());
    }
    let mut have: Vec<String> = entries.iter().filter_map(named).filter(|p| p != "unknown/unknown").collect();
    have.dedup();
    if have.is_empty() {
        have.push("no platform at all".into());
    }
    Err(ImageError::NoPlatform { reference: reference.to_owned(), want: want.to_string(), have })
}
