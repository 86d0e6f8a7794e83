//! The store's record of its images: which references name each image,
//! its manifest, config and layers, and which boxes use it. One JSON
//! document, `images.json`, replaced whole (temporary file, rename) under
//! the records lock, so a reader sees the old document or the new one.

use std::collections::{BTreeMap, BTreeSet};

use crate::digest::Digest;

/// One image: its id is its config's digest (docker's image id), so two
/// manifests of the same image (say, one gzip and one plain) are one image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageRecord {
    pub id: Digest,
    /// References that name it (`registry/repository:tag`), normalized.
    pub refs: BTreeSet<String>,
    /// The manifest it was pulled or imported by, when it had one.
    pub manifest_digest: Option<Digest>,
    /// The multi-platform index the manifest was chosen from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_digest: Option<Digest>,
    pub layers: Vec<LayerRecord>,
    /// The bytes of its blobs as stored (compressed layers and config).
    pub size: u64,
    pub platform: String,
    /// Seconds since the epoch when it was stored.
    pub created: u64,
    /// registry, docker-archive or oci-layout.
    pub source: String,
    /// Boxes made from it (their ids). Core adds and removes them.
    #[serde(default)]
    pub users: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerRecord {
    /// The blob as stored (compressed or not).
    pub digest: Digest,
    /// The digest of the uncompressed tar: the unpacked layer's key.
    pub diff_id: Digest,
    pub size: u64,
    pub media_type: String,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Records {
    #[serde(default)]
    pub images: BTreeMap<Digest, ImageRecord>,
}

impl Records {
    /// The image `reference` names now.
    pub fn by_ref(&self, reference: &str) -> Option<&ImageRecord> {
        self.images.values().find(|i| i.refs.contains(reference))
    }

    /// Moves `reference` to `id` (a tag names one image at a time).
    pub fn tag(&mut self, reference: &str, id: &Digest) {
        for image in self.images.values_mut() {
            if &image.id != id {
                image.refs.remove(reference);
            }
        }
        if let Some(image) = self.images.get_mut(id) {
            image.refs.insert(reference.to_owned());
        }
    }

    /// Every blob and layer some image needs.
    pub fn referenced(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let mut blobs = BTreeSet::new();
        let mut layers = BTreeSet::new();
        for image in self.images.values() {
            blobs.insert(image.id.hex().to_owned());
            if let Some(m) = &image.manifest_digest {
                blobs.insert(m.hex().to_owned());
            }
            if let Some(i) = &image.index_digest {
                blobs.insert(i.hex().to_owned());
            }
            for l in &image.layers {
                blobs.insert(l.digest.hex().to_owned());
                layers.insert(l.diff_id.hex().to_owned());
            }
        }
        (blobs, layers)
    }
}
