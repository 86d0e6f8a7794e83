//! The store without a registry: layers stacked with whiteouts, a digest
//! mismatch that keeps nothing, users that hold an image, prune.

use std::io::Write;

use crate::digest::Digest;
use crate::import::ImportSource;
use crate::store::ImageStore;
use crate::{ImageError, Quiet};

/// A tar layer of (name, body or None for a directory).
pub fn layer(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, body) in entries {
        let mut h = tar::Header::new_gnu();
        match body {
            Some(body) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(body.len() as u64);
                h.set_mode(0o644);
                b.append_data(&mut h, name, *body).unwrap();
            }
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_mode(0o755);
                b.append_data(&mut h, name, &b""[..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// An OCI layout directory holding one image of `layers` (uncompressed).
pub fn layout(dir: &std::path::Path, name: &str, layers: &[Vec<u8>]) -> Digest {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let d = Digest::of(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).unwrap();
        d
    };
    let diff_ids: Vec<String> = layers.iter().map(|l| put(l).to_string()).collect();
    let platform = crate::platform::Platform::this_machine();
    let config = serde_json::json!({
        "architecture": platform.architecture, "os": platform.os,
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/w", "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = serde_json::to_vec(&config).unwrap();
    let config_digest = put(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest.to_string(), "size": config.len()},
        "layers": layers.iter().map(|l| serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": Digest::of(l).to_string(), "size": l.len()})).collect::<Vec<_>>(),
    });
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let manifest_digest = put(&manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest.to_string(),
            "size": manifest.len(), "annotations": {"io.containerd.image.name": name}}],
    });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    config_digest
}

fn whiteout_image(dir: &std::path::Path) -> Digest {
    let l1 = layer(&[
        ("etc", None),
        ("etc/keep", Some(b"1")),
        ("etc/gone", Some(b"1")),
        ("opq", None),
        ("opq/old", Some(b"1")),
    ]);
    let l2 = layer(&[
        ("etc/.wh.gone", Some(b"")),
        ("opq/.wh..wh..opq", Some(b"")),
        ("opq/new", Some(b"2")),
        ("etc/keep", Some(b"2")),
    ]);
    layout(dir, "127.0.0.1:1/w:1", &[l1, l2])
}

#[test]
fn a_layout_imports_with_whiteouts_and_opaque_directories_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let id = whiteout_image(&tmp.path().join("oci"));
    let store = ImageStore::open(&tmp.path().join("store"));
    let imported = store.import(ImportSource::Path(tmp.path().join("oci")), "oci").unwrap();
    assert_eq!(imported[0].image.id, id);
    let (rootfs, config) = store.rootfs("127.0.0.1:1/w:1").unwrap();
    assert_eq!(std::fs::read(rootfs.join("etc/keep")).unwrap(), b"2");
    assert!(!rootfs.join("etc/gone").exists());
    assert!(!rootfs.join("opq/old").exists());
    assert_eq!(std::fs::read(rootfs.join("opq/new")).unwrap(), b"2");
    assert!(!rootfs.join("etc/.wh.gone").exists() && !rootfs.join("opq/.wh..wh..opq").exists());
    assert_eq!(config.cmd, Some(vec!["/bin/sh".to_string()]));
    assert_eq!(config.working_dir.as_deref(), Some("/w"));
    assert_eq!(config.user.as_deref(), Some("1000"));
    // Imported again from a tar of the layout, on stdin: the same image.
    let mut tar = tar::Builder::new(Vec::new());
    tar.append_dir_all(".", tmp.path().join("oci")).unwrap();
    let bytes = tar.into_inner().unwrap();
    let again = store.import(ImportSource::Reader(Box::new(std::io::Cursor::new(bytes))), "-").unwrap();
    assert_eq!(again[0].image.id, id);
    assert_eq!(store.list().unwrap().len(), 1);
}

#[test]
fn a_blob_that_does_not_match_its_digest_keeps_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let oci = tmp.path().join("oci");
    layout(&oci, "127.0.0.1:1/bad:1", &[layer(&[("f", Some(b"good"))])]);
    // Swap the layer's bytes for others under the same name.
    let layer_digest = Digest::of(&layer(&[("f", Some(b"good"))]));
    let mut f = std::fs::File::create(oci.join("blobs/sha256").join(layer_digest.hex())).unwrap();
    f.write_all(&layer(&[("f", Some(b"evil"))])).unwrap();
    let store = ImageStore::open(&tmp.path().join("store"));
    let e = store.import(ImportSource::Path(oci), "oci").unwrap_err();
    assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
    assert!(!store.blob_path(&layer_digest).exists());
    assert!(store.list().unwrap().is_empty());
    for dir in ["blobs/sha256", "layers/sha256", "rootfs/sha256", "tmp"] {
        let left: Vec<_> = std::fs::read_dir(tmp.path().join("store").join(dir)).unwrap().collect();
        assert!(left.is_empty(), "{dir} kept {left:?}");
    }
}

#[test]
fn a_used_image_is_not_removed_and_prune_reclaims_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("store"));
    whiteout_image(&tmp.path().join("a"));
    layout(&tmp.path().join("b"), "127.0.0.1:1/b:1", &[layer(&[("only-b", Some(b"b"))])]);
    store.import(ImportSource::Path(tmp.path().join("a")), "a").unwrap();
    let b = store.import(ImportSource::Path(tmp.path().join("b")), "b").unwrap().remove(0).image.id;
    let a = store.add_user("127.0.0.1:1/w:1", "box-1").unwrap();
    let e = store.remove("127.0.0.1:1/w:1").unwrap_err();
    assert_eq!(e.to_string(), "image 127.0.0.1:1/w:1 is used by box box-1; remove it first");
    let dry = store.prune(true).unwrap();
    assert_eq!(dry.images.len(), 1);
    assert!(store.rootfs_path(&b).exists());
    let pruned = store.prune(false).unwrap();
    assert_eq!(pruned.images[0].id, b);
    assert!(pruned.blobs >= 3 && pruned.layers == 1, "{pruned:?}");
    assert!(!store.rootfs_path(&b).exists());
    assert!(store.rootfs_path(&a).exists());
    store.remove_user(a.as_str(), "box-1").unwrap();
    let removed = store.remove("127.0.0.1:1/w:1").unwrap();
    assert!(removed.deleted);
    assert!(store.list().unwrap().is_empty());
    let blobs: Vec<_> = std::fs::read_dir(tmp.path().join("store/blobs/sha256")).unwrap().collect();
    assert!(blobs.is_empty());
    let _ = Quiet;
}

#[test]
fn an_unknown_image_is_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(tmp.path());
    let e = store.inspect("nothing:here").unwrap_err();
    assert!(e.to_string().starts_with("no image nothing:here in the store"), "{e}");
}
