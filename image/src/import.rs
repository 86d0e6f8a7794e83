//! Importing images without a registry: a `docker save` archive or an OCI
//! image layout (a directory, or a tar of one), from a file or a stream.
//! A tar is read once, front to back, each file spooled into tmp/ and
//! hashed on the way (a `docker save` names its manifest last); then the
//! same checks as a pull: every blob against its digest, every layer
//! against its diff id, unpacked by the same code. On any failure the
//! blobs this import added go again.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::beneath;
use crate::blobs;
use crate::config::ImageConfig;
use crate::digest::{Digest, HashingReader};
use crate::error::{ImageError, Result};
use crate::platform::{self, Platform};
use crate::pull::{Parsed, check_platform, layer_records, parse_manifest};
use crate::records::{ImageRecord, LayerRecord};
use crate::store::ImageStore;

/// Where an import reads from.
pub enum ImportSource {
    Path(PathBuf),
    Reader(Box<dyn Read + Send>),
}

/// One image an import stored.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imported {
    pub reference: Option<String>,
    #[serde(flatten)]
    pub image: ImageRecord,
}

/// The files of an archive or layout, by their path inside it.
trait Files {
    /// A file's bytes, and its digest when already known.
    fn open(&self, path: &str) -> Result<Option<(File, Option<Digest>)>>;
    fn what(&self) -> &str;
}

impl ImageStore {
    /// Imports every image in `source` (blocking: run it off the async runtime).
    pub fn import(&self, source: ImportSource, shown: &str) -> Result<Vec<Imported>> {
        let _lock = self.shared_lock()?;
        self.make_dirs()?;
        let spool;
        let files: Box<dyn Files> = match source {
            ImportSource::Path(p) if p.is_dir() => Box::new(Dir { root: p, shown: shown.to_owned() }),
            ImportSource::Path(p) => {
                let file =
                    File::open(&p).map_err(|e| ImageError::Archive { path: shown.into(), detail: e.to_string() })?;
                spool = Spool::read(self, Box::new(file), shown)?;
                Box::new(spool)
            }
            ImportSource::Reader(r) => {
                spool = Spool::read(self, r, shown)?;
                Box::new(spool)
            }
        };
        let mut added = Vec::new();
        let result = self.import_files(files.as_ref(), &mut added);
        if result.is_err() {
            for digest in added {
                let _ = std::fs::remove_file(self.blob_path(&digest));
            }
        }
        result
    }

    fn import_files(&self, files: &dyn Files, added: &mut Vec<Digest>) -> Result<Vec<Imported>> {
        let refuse = |detail: String| ImageError::Archive { path: files.what().to_owned(), detail };
        if let Some(index) = read_small(files, "index.json")? {
            let Parsed::Index(index) = parse_manifest(files.what(), &index)? else {
                return Err(refuse("its index.json is not an image index".into()));
            };
            let mut out = Vec::new();
            for entry in &index.manifests {
                let annotations = entry.annotations.clone().unwrap_or_default();
                let name = annotations
                    .get("io.containerd.image.name")
                    .or_else(|| {
                        annotations
                            .get("org.opencontainers.image.ref.name")
                            .filter(|n| n.contains('/') || n.contains(':'))
                    })
                    .map(|n| crate::reference::normalize(n))
                    .transpose()?;
                let digest = Digest::parse(&entry.digest)?;
                out.push(self.import_oci(files, &digest, name, added)?);
            }
            if out.is_empty() {
                return Err(refuse("its index.json lists no image".into()));
            }
            return Ok(out);
        }
        if let Some(manifest) = read_small(files, "manifest.json")? {
            let entries: Vec<DockerEntry> = serde_json::from_slice(&manifest)
                .map_err(|e| refuse(format!("its manifest.json cannot be read ({e})")))?;
            let mut out = Vec::new();
            for entry in entries {
                out.extend(self.import_docker(files, entry, added)?);
            }
            return Ok(out);
        }
        Err(refuse("it has neither manifest.json (a docker save archive) nor index.json (an OCI image layout)".into()))
    }

    /// One manifest of an OCI layout (an index's entry chosen for this machine).
    fn import_oci(
        &self,
        files: &dyn Files,
        digest: &Digest,
        name: Option<String>,
        added: &mut Vec<Digest>,
    ) -> Result<Imported> {
        let what = files.what().to_owned();
        let body = self.keep_small(files, digest, added)?;
        let (manifest, manifest_digest, index_digest) = match parse_manifest(&what, &body)? {
            Parsed::Image(m) => (m, digest.clone(), None),
            Parsed::Index(index) => {
                let chosen = Digest::parse(&platform::choose(&what, &index.manifests, &Platform::this_machine())?)?;
                let body = self.keep_small(files, &chosen, added)?;
                match parse_manifest(&what, &body)? {
                    Parsed::Image(m) => (m, chosen, Some(digest.clone())),
                    Parsed::Index(_) => {
                        return Err(ImageError::Archive {
                            path: what,
                            detail: "an index in it names another index".into(),
                        });
                    }
                }
            }
        };
        let id = Digest::parse(&manifest.config.digest)?;
        let config_bytes = self.keep_small(files, &id, added)?;
        let config = ImageConfig::parse(&config_bytes, &id)?;
        check_platform(&what, &config)?;
        let layers = layer_records(&id, &manifest, &config)?;
        for layer in &layers {
            self.keep_layer(files, &format!("blobs/sha256/{}", layer.digest.hex()), Some(&layer.digest), layer, added)?;
        }
        self.finish(
            id,
            &config,
            layers,
            config_bytes.len() as u64,
            Some(manifest_digest),
            index_digest,
            "oci-layout",
            name,
        )
    }

    /// One image of a `docker save` archive: it has no registry manifest,
    /// so the id (the config's digest) and the diff ids are what is checked.
    fn import_docker(&self, files: &dyn Files, entry: DockerEntry, added: &mut Vec<Digest>) -> Result<Vec<Imported>> {
        let what = files.what().to_owned();
        let (file, known) = files.open(&entry.config)?.ok_or_else(|| ImageError::Archive {
            path: what.clone(),
            detail: format!("its manifest names {}, which is not in it", entry.config),
        })?;
        let config_bytes = read_all(file, &entry.config)?;
        let id = Digest::of(&config_bytes);
        if let Some(known) = known.filter(|k| k != &id) {
            return Err(ImageError::DigestMismatch { what: entry.config.clone(), expected: known, actual: id });
        }
        // A legacy archive names the config by its digest: check it says the truth.
        let stem = Path::new(&entry.config).file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if stem.len() == 64 && stem != id.hex() {
            let expected = Digest::parse(&format!("sha256:{stem}"))?;
            return Err(ImageError::DigestMismatch { what: entry.config.clone(), expected, actual: id });
        }
        let config = ImageConfig::parse(&config_bytes, &id)?;
        check_platform(&what, &config)?;
        if config.diff_ids.len() != entry.layers.len() {
            return Err(ImageError::BadConfig {
                id: id.clone(),
                detail: format!("it names {} layers, the archive {}", config.diff_ids.len(), entry.layers.len()),
            });
        }
        self.put_small(&config_bytes, &id).inspect(|_| added.push(id.clone()))?;
        let mut layers = Vec::new();
        for (path, diff_id) in entry.layers.iter().zip(&config.diff_ids) {
            let mut layer = LayerRecord {
                digest: diff_id.clone(),
                diff_id: diff_id.clone(),
                size: 0,
                media_type: "application/vnd.docker.image.rootfs.diff.tar".into(),
            };
            let (digest, size) = self.keep_layer(files, path, None, &layer, added)?;
            layer.digest = digest;
            layer.size = size;
            layers.push(layer);
        }
        let names: Vec<Option<String>> = if entry.repo_tags.is_empty() {
            vec![None]
        } else {
            entry.repo_tags.iter().map(|t| crate::reference::normalize(t).map(Some)).collect::<Result<_>>()?
        };
        let mut out = Vec::new();
        for name in names {
            out.push(self.finish(
                id.clone(),
                &config,
                layers.clone(),
                config_bytes.len() as u64,
                None,
                None,
                "docker-archive",
                name,
            )?);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        id: Digest,
        config: &ImageConfig,
        layers: Vec<LayerRecord>,
        config_size: u64,
        manifest_digest: Option<Digest>,
        index_digest: Option<Digest>,
        source: &str,
        name: Option<String>,
    ) -> Result<Imported> {
        crate::layers::ensure_rootfs(self, &id, &config.diff_ids)?;
        let size = layers.iter().map(|l| l.size).sum::<u64>() + config_size;
        let record = ImageRecord {
            id,
            refs: Default::default(),
            manifest_digest,
            index_digest,
            layers,
            size,
            platform: format!("{}/{}", config.os, config.architecture),
            created: crate::store::now(),
            source: source.into(),
            users: Default::default(),
        };
        let image = self.record(record, name.as_deref())?;
        Ok(Imported { reference: name, image })
    }

    /// A small blob of an OCI layout, checked and kept; its bytes.
    fn keep_small(&self, files: &dyn Files, digest: &Digest, added: &mut Vec<Digest>) -> Result<Vec<u8>> {
        let path = format!("blobs/sha256/{}", digest.hex());
        let (file, _) = files
            .open(&path)?
            .ok_or_else(|| ImageError::Archive { path: files.what().into(), detail: format!("{path} is not in it") })?;
        let bytes = read_all(file, &path)?;
        let actual = Digest::of(&bytes);
        if &actual != digest {
            return Err(ImageError::DigestMismatch { what: path, expected: digest.clone(), actual });
        }
        if !self.blob_path(digest).exists() {
            self.put_small(&bytes, digest)?;
            added.push(digest.clone());
        }
        Ok(bytes)
    }

    /// A layer blob at `path`, checked against `expected` (when the format
    /// names one), kept, and unpacked; its digest and size.
    fn keep_layer(
        &self,
        files: &dyn Files,
        path: &str,
        expected: Option<&Digest>,
        layer: &LayerRecord,
        added: &mut Vec<Digest>,
    ) -> Result<(Digest, u64)> {
        let (file, known) = files
            .open(path)?
            .ok_or_else(|| ImageError::Archive { path: files.what().into(), detail: format!("{path} is not in it") })?;
        let (digest, size) = match (expected, known) {
            (Some(e), Some(k)) if e != &k => {
                return Err(ImageError::DigestMismatch { what: path.into(), expected: e.clone(), actual: k });
            }
            _ => {
                let fresh = expected.is_none_or(|e| !self.blob_path(e).exists());
                let (digest, size) = blobs::copy_in(self.blob_writer()?, file, path, expected)?;
                if fresh {
                    added.push(digest.clone());
                }
                (digest, size)
            }
        };
        let blob = self.blob_path(&digest);
        let stored = File::open(&blob).map_err(|e| ImageError::io(format!("cannot read {}", blob.display()), e))?;
        crate::layers::unpack_blob(self, stored, &digest, &layer.diff_id)?;
        Ok((digest, size))
    }
}

#[derive(serde::Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Vec<String>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

fn read_small(files: &dyn Files, path: &str) -> Result<Option<Vec<u8>>> {
    match files.open(path)? {
        Some((file, _)) => Ok(Some(read_all(file, path)?)),
        None => Ok(None),
    }
}

fn read_all(mut file: File, path: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| ImageError::io(format!("cannot read {path}"), e))?;
    Ok(bytes)
}

/// An OCI layout directory. Names are resolved beneath it, never through a symlink.
struct Dir {
    root: PathBuf,
    shown: String,
}

impl Files for Dir {
    fn open(&self, path: &str) -> Result<Option<(File, Option<Digest>)>> {
        let parts = beneath::components(Path::new(path)).map_err(|_| ImageError::Archive {
            path: self.shown.clone(),
            detail: format!("{path} leaves the layout"),
        })?;
        let Some((last, parents)) = parts.split_last() else { return Ok(None) };
        let root = beneath::open_root(&self.root)
            .map_err(|e| ImageError::Archive { path: self.shown.clone(), detail: e.to_string() })?;
        let dir = match beneath::open_dir(std::os::fd::AsFd::as_fd(&root), parents, false) {
            Ok(d) => d,
            Err(beneath::WalkError::Missing { .. }) => return Ok(None),
            Err(_) => {
                return Err(ImageError::Archive {
                    path: self.shown.clone(),
                    detail: format!("{path} goes through a symlink or a file"),
                });
            }
        };
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::openat(
            &dir,
            last.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some((File::from(fd), None))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(ImageError::Archive { path: self.shown.clone(), detail: format!("{path}: {e}") }),
        }
    }
    fn what(&self) -> &str {
        &self.shown
    }
}

/// A tar's files, spooled into the store's tmp/ with their digests.
struct Spool {
    _dir: tempfile::TempDir,
    files: BTreeMap<String, (PathBuf, Digest)>,
    shown: String,
}

impl Spool {
    fn read(store: &ImageStore, reader: Box<dyn Read + Send>, shown: &str) -> Result<Spool> {
        let refuse = |detail: String| ImageError::Archive { path: shown.to_owned(), detail };
        let dir = store.temp_dir("import-")?;
        let mut files = BTreeMap::new();
        let mut links = Vec::new();
        let mut archive = tar::Archive::new(reader);
        let entries = archive.entries().map_err(|e| refuse(format!("it is not a tar ({e})")))?;
        for (n, entry) in entries.enumerate() {
            let mut entry = entry.map_err(|e| refuse(format!("it is not a readable tar ({e})")))?;
            let name = entry.path().map_err(|e| refuse(e.to_string()))?.into_owned();
            let parts = beneath::components(&name).map_err(|_| refuse(format!("entry {name:?} leaves the archive")))?;
            let key = parts.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/");
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let spooled = dir.path().join(n.to_string());
                    let out = File::create(&spooled).map_err(|e| ImageError::io("cannot spool the archive", e))?;
                    let mut hashing = HashingReader { inner: &mut entry, hasher: Default::default() };
                    let mut out = std::io::BufWriter::new(out);
                    std::io::copy(&mut hashing, &mut out)
                        .map_err(|e| refuse(format!("entry {name:?} cannot be read ({e})")))?;
                    files.insert(key, (spooled, hashing.hasher.finish()));
                }
                // docker save links a layer it has twice.
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    let target = entry.link_name().map_err(|e| refuse(e.to_string()))?.unwrap_or_default().into_owned();
                    let base = if entry.header().entry_type() == tar::EntryType::Symlink {
                        Path::new(&key).parent().map(Path::to_path_buf).unwrap_or_default()
                    } else {
                        PathBuf::new()
                    };
                    links.push((key, base.join(target)));
                }
                _ => {}
            }
        }
        for (key, target) in links {
            let mut parts: Vec<String> = Vec::new();
            for c in target.components() {
                match c {
                    std::path::Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
                    std::path::Component::ParentDir if !parts.is_empty() => {
                        parts.pop();
                    }
                    std::path::Component::CurDir => {}
                    _ => return Err(refuse(format!("link {key} points out of the archive"))),
                }
            }
            if let Some(hit) = files.get(&parts.join("/")).cloned() {
                files.insert(key, hit);
            }
        }
        Ok(Spool { _dir: dir, files, shown: shown.to_owned() })
    }
}

impl Files for Spool {
    fn open(&self, path: &str) -> Result<Option<(File, Option<Digest>)>> {
        let Some((spooled, digest)) = self.files.get(path) else { return Ok(None) };
        let file = File::open(spooled).map_err(|e| ImageError::io("cannot read the spooled archive", e))?;
        Ok(Some((file, Some(digest.clone()))))
    }
    fn what(&self) -> &str {
        &self.shown
    }
}
