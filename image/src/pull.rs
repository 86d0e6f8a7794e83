//! Pulling an image from a registry into the store: the manifest (this
//! machine's entry of an index), the config, then the layers, several at a
//! time, each unpacked while it downloads and kept only once its digest and
//! its diff id check out; then the root filesystem, then the record.

use std::io::Read;

use bytes::{Buf, Bytes};
use futures_util::{StreamExt, TryStreamExt};
use oci_client::Reference;
use oci_client::manifest::{OciImageIndex, OciImageManifest};

use crate::config::ImageConfig;
use crate::digest::Digest;
use crate::error::{ImageError, Result};
use crate::platform::{self, Platform};
use crate::progress::Progress;
use crate::records::{ImageRecord, LayerRecord};
use crate::registry::{RegistryOptions, Remote};
use crate::store::ImageStore;

/// Layers fetched at once.
const CONCURRENT_LAYERS: usize = 4;

/// What a pull did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pulled {
    pub reference: String,
    #[serde(flatten)]
    pub image: ImageRecord,
    /// The image was stored already: nothing was fetched but its manifest.
    pub cached: bool,
    pub fetched_bytes: u64,
}

pub(crate) enum Parsed {
    Image(Box<OciImageManifest>),
    Index(OciImageIndex),
}

/// A manifest's bytes as an image manifest or an index.
pub(crate) fn parse_manifest(what: &str, body: &[u8]) -> Result<Parsed> {
    let bad = |detail: String| ImageError::Archive {
        path: what.to_owned(),
        detail: format!("its manifest cannot be read ({detail})"),
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if value.get("manifests").is_some() {
        Ok(Parsed::Index(serde_json::from_value(value).map_err(|e| bad(e.to_string()))?))
    } else {
        Ok(Parsed::Image(Box::new(serde_json::from_value(value).map_err(|e| bad(e.to_string()))?)))
    }
}

impl ImageStore {
    /// Pulls `reference` into the store and names it so.
    pub async fn pull(&self, reference: &str, options: &RegistryOptions, progress: &dyn Progress) -> Result<Pulled> {
        let parsed = crate::reference::parse(reference)?;
        let name = parsed.whole();
        let (remote, body, digest) = Remote::open(&parsed, options).await?;
        let (manifest, manifest_body, manifest_digest, index) = match parse_manifest(&name, &body)? {
            Parsed::Image(m) => (m, body, digest, None),
            Parsed::Index(index) => {
                let chosen = platform::choose(&name, &index.manifests, &Platform::this_machine())?;
                let (body2, digest2) = remote.manifest(&parsed.clone_with_digest(chosen)).await?;
                match parse_manifest(&name, &body2)? {
                    Parsed::Image(m) => (m, body2, digest2, Some((body, digest))),
                    Parsed::Index(_) => {
                        return Err(ImageError::Registry {
                            registry: remote.registry().into(),
                            detail: format!(
                                "the {} entry of {name}'s index is another index",
                                Platform::this_machine()
                            ),
                        });
                    }
                }
            }
        };
        let _lock = self.shared_lock()?;
        self.make_dirs()?;
        let added = Added::default();
        let pulled = self
            .pull_locked(&remote, &parsed, name, manifest, manifest_body, manifest_digest, index, progress, &added)
            .await;
        // A refused pull changes nothing; a broken connection keeps what it
        // verified, for the next pull to resume from.
        if let Err(e) = &pulled
            && !matches!(e, ImageError::Unreachable { .. })
        {
            for path in added.0.into_inner().unwrap_or_default() {
                let _ = crate::beneath::remove_tree(&path);
            }
        }
        pulled
    }

    #[allow(clippy::too_many_arguments)]
    async fn pull_locked(
        &self,
        remote: &Remote,
        parsed: &Reference,
        name: String,
        manifest: Box<OciImageManifest>,
        manifest_body: Vec<u8>,
        manifest_digest: Digest,
        index: Option<(Vec<u8>, Digest)>,
        progress: &dyn Progress,
        added: &Added,
    ) -> Result<Pulled> {
        let id = Digest::parse(&manifest.config.digest)?;
        if self.records()?.images.contains_key(&id) {
            let image = self.update(|records| {
                records.tag(&name, &id);
                Ok(records.images[&id].clone())
            })?;
            return Ok(Pulled { reference: name, image, cached: true, fetched_bytes: 0 });
        }
        let config_type = manifest.config.media_type.as_str();
        if config_type != oci_client::manifest::IMAGE_CONFIG_MEDIA_TYPE
            && config_type != oci_client::manifest::IMAGE_DOCKER_CONFIG_MEDIA_TYPE
        {
            return Err(ImageError::MediaType {
                what: format!("the config of {name}"),
                media_type: config_type.to_owned(),
                expected: "an image config (this is some other kind of artifact)",
            });
        }
        let config_bytes = match crate::blobs::read_verified(&self.blob_path(&id), &id) {
            Ok(bytes) => bytes,
            Err(_) => {
                // Absent, or torn by a crash: fetched again either way.
                let _ = std::fs::remove_file(self.blob_path(&id));
                let bytes = remote.small_blob(parsed, &id).await?;
                added.put(self, &bytes, &id)?;
                bytes
            }
        };
        let config = ImageConfig::parse(&config_bytes, &id)?;
        check_platform(&name, &config)?;
        let layers = layer_records(&id, &manifest, &config)?;
        let to_fetch: Vec<_> = layers.iter().filter(|l| !self.blob_path(&l.digest).exists()).collect();
        progress.start(to_fetch.iter().map(|l| l.size).sum(), to_fetch.len());
        // Owned records, not references, into the closure: a closure over a
        // borrowed item makes the whole pull's future Send for one lifetime
        // only, and a caller that spawns it (core, for a box's image) needs
        // it Send for all.
        let fetched: Vec<u64> = futures_util::stream::iter(layers.iter().cloned())
            .map(|layer| async move { self.fetch_layer(remote, parsed, &layer, progress, added).await })
            .buffer_unordered(CONCURRENT_LAYERS)
            .try_collect()
            .await?;
        progress.phase("stacking layers");
        let store = self.clone();
        let diff_ids = config.diff_ids.clone();
        let image_id = id.clone();
        tokio::task::spawn_blocking(move || crate::layers::ensure_rootfs(&store, &image_id, &diff_ids))
            .await
            .map_err(|e| ImageError::io("stacking layers stopped", std::io::Error::other(e)))??;
        added.put(self, &manifest_body, &manifest_digest)?;
        if let Some((body, digest)) = &index {
            added.put(self, body, digest)?;
        }
        let size = layers.iter().map(|l| l.size).sum::<u64>() + config_bytes.len() as u64;
        let record = ImageRecord {
            id: id.clone(),
            refs: Default::default(),
            manifest_digest: Some(manifest_digest),
            index_digest: index.map(|(_, d)| d),
            layers,
            size,
            platform: format!("{}/{}", config.os, config.architecture),
            created: crate::store::now(),
            source: "registry".into(),
            users: Default::default(),
        };
        let image = self.record(record, Some(&name))?;
        Ok(Pulled { reference: name, image, cached: false, fetched_bytes: fetched.iter().sum() })
    }

    /// Records `image` (keeping the users and names of one stored before
    /// under the same id) and points `name` at it.
    pub(crate) fn record(&self, image: ImageRecord, name: Option<&str>) -> Result<ImageRecord> {
        self.update(|records| {
            let id = image.id.clone();
            let entry = records.images.entry(id.clone()).or_insert_with(|| image.clone());
            entry.layers = image.layers.clone();
            if let Some(name) = name {
                records.tag(name, &id);
            }
            Ok(records.images[&id].clone())
        })
    }

    /// Keeps a small blob we hold in memory, checked against `digest`.
    pub(crate) fn put_small(&self, bytes: &[u8], digest: &Digest) -> Result<()> {
        if self.blob_path(digest).exists() {
            return Ok(());
        }
        let mut writer = self.blob_writer()?;
        writer.write(bytes)?;
        writer.commit(&format!("blob {digest}"), digest, None)?;
        Ok(())
    }

    /// Makes sure `layer`'s blob is stored and its tree unpacked; returns
    /// the bytes downloaded.
    async fn fetch_layer(
        &self,
        remote: &Remote,
        reference: &Reference,
        layer: &LayerRecord,
        progress: &dyn Progress,
        added: &Added,
    ) -> Result<u64> {
        let blob = self.blob_path(&layer.digest);
        let unpacked = self.layer_dir(&layer.diff_id).exists();
        if blob.exists() {
            if unpacked {
                return Ok(0);
            }
            // Stored by an earlier pull that stopped before unpacking it: read back, checked again.
            let (store, owned) = (self.clone(), layer.clone());
            let reused = tokio::task::spawn_blocking(move || {
                let file = std::fs::File::open(&blob)
                    .map_err(|e| ImageError::io(format!("cannot read {}", blob.display()), e))?;
                crate::layers::unpack_blob(&store, file, &owned.digest, &owned.diff_id)
            })
            .await
            .map_err(|e| ImageError::io("unpacking stopped", std::io::Error::other(e)))?;
            match reused {
                Ok(()) => {
                    added.push(self.layer_dir(&layer.diff_id));
                    return Ok(0);
                }
                // Torn by a crash: it goes, and is fetched again below.
                Err(ImageError::DigestMismatch { .. }) => {
                    let _ = std::fs::remove_file(self.blob_path(&layer.digest));
                }
                Err(e) => return Err(e),
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(32);
        let unpacking = (!unpacked).then(|| {
            let (store, layer) = (self.clone(), layer.clone());
            tokio::task::spawn_blocking(move || {
                let reader = ChannelReader { rx, current: Bytes::new() };
                crate::layers::stage(&store, reader, None, &layer.digest, &layer.diff_id)
            })
        });
        let mut writer = self.blob_writer()?;
        let mut stream = remote.blob_stream(reference, &layer.digest).await?;
        let mut complete = true;
        while let Some(chunk) = stream.next().await {
            // oci-client checks the digest too, at the end: ours below says which bytes were wrong.
            if let Err(e) = &chunk
                && e.get_ref().is_some_and(|inner| inner.is::<oci_client::errors::DigestError>())
            {
                break;
            }
            let chunk = chunk.map_err(|e| ImageError::Unreachable {
                registry: remote.registry().into(),
                detail: format!("the download of layer {} broke off: {e}", layer.digest),
            })?;
            writer.write(&chunk)?;
            progress.advance(chunk.len() as u64);
            if unpacking.is_some() && tx.send(chunk).await.is_err() {
                // The unpacker stopped: it refused the layer, which it says below.
                complete = false;
                break;
            }
        }
        drop(tx);
        let what = format!("layer {}", layer.digest);
        // All of it came: wrong bytes are a digest mismatch whatever the unpacker made of them.
        if complete {
            writer.verify(&what, &layer.digest, Some(layer.size))?;
        }
        let staged = match unpacking {
            Some(task) => Some(task.await.map_err(|e| ImageError::io("unpacking stopped", std::io::Error::other(e)))?),
            None => None,
        };
        // A refused layer keeps nothing, not even its (authentic) blob.
        let staged = staged.transpose()?.flatten();
        let size = writer.len();
        added.push(writer.commit(&what, &layer.digest, Some(layer.size))?);
        if let Some(staged) = staged {
            staged.install()?;
            added.push(self.layer_dir(&layer.diff_id));
        }
        Ok(size)
    }
}

/// A manifest's layers with the diff ids its config gives them.
pub(crate) fn layer_records(
    id: &Digest,
    manifest: &OciImageManifest,
    config: &ImageConfig,
) -> Result<Vec<LayerRecord>> {
    if manifest.layers.len() != config.diff_ids.len() {
        return Err(ImageError::BadConfig {
            id: id.clone(),
            detail: format!("it names {} layers, the manifest {}", config.diff_ids.len(), manifest.layers.len()),
        });
    }
    manifest
        .layers
        .iter()
        .zip(&config.diff_ids)
        .map(|(l, diff_id)| {
            let digest = Digest::parse(&l.digest)?;
            crate::layers::check_media_type(&format!("layer {digest}"), &l.media_type)?;
            Ok(LayerRecord {
                digest,
                diff_id: diff_id.clone(),
                size: l.size.max(0) as u64,
                media_type: l.media_type.clone(),
            })
        })
        .collect()
}

/// An image for another platform is refused, even when asked for by a
/// manifest that is not an index.
pub(crate) fn check_platform(name: &str, config: &ImageConfig) -> Result<()> {
    let want = Platform::this_machine();
    if config.os == want.os && config.architecture == want.architecture {
        return Ok(());
    }
    Err(ImageError::NoPlatform {
        reference: name.to_owned(),
        want: want.to_string(),
        have: vec![format!("{}/{}", config.os, config.architecture)],
    })
}

/// What one pull named in the store, to be taken back if it is refused.
#[derive(Default)]
pub(crate) struct Added(std::sync::Mutex<Vec<std::path::PathBuf>>);

impl Added {
    fn push(&self, path: std::path::PathBuf) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(path);
    }

    /// Keeps a small blob (if not there yet), noting it.
    fn put(&self, store: &ImageStore, bytes: &[u8], digest: &Digest) -> Result<()> {
        if !store.blob_path(digest).exists() {
            store.put_small(bytes, digest)?;
            self.push(store.blob_path(digest));
        }
        Ok(())
    }
}

/// The downloaded chunks as a reader for the unpacker's thread.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}
