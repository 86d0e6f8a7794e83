//! The kit's own image, for a sandbox that boots images from tinybox's
//! store (`image_disk`, the microVM): such a sandbox never fetches one
//! itself, so a kit asked for no image imports this one — the host's
//! busybox-static with a link for each of its applets, at the paths
//! busybox lists — and verifies boxes made from it. Its bytes are the same
//! every time (fixed times and owners), so it is one image however often
//! the kit runs, and a later run finds it in the store.

use std::path::Path;

use tinybox_core::Tinybox;
use tinybox_core::images::ImportSource;

/// The reference the kit's image is stored under.
pub const KIT_IMAGE: &str = "tinybox-verify/busybox:1";

/// `KIT_IMAGE` in `tb`'s store, imported now if it is not there yet.
pub async fn ensure(tb: &Tinybox) -> Result<String, String> {
    let images = tb.images().ok_or("this engine has no store to keep an image in")?;
    if images.rootfs(KIT_IMAGE).is_ok() {
        return Ok(KIT_IMAGE.to_owned());
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or("the kit builds its image from busybox-static, which is not installed")?;
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    write_archive(busybox, dir.path()).map_err(|e| format!("cannot build the kit's image: {e}"))?;
    images.import(ImportSource::Path(dir.path().to_owned()), "the kit's image").await.map_err(|e| e.to_string())?;
    Ok(KIT_IMAGE.to_owned())
}

/// A `docker save` layout of one layer in `dir`.
fn write_archive(busybox: &Path, dir: &Path) -> std::io::Result<()> {
    let layer = layer(busybox)?;
    let diff_id = tinybox_core::images::Digest::of(&layer);
    std::fs::write(dir.join("layer.tar"), &layer)?;
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id.as_str()]},
    });
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&config)?)?;
    let manifest = serde_json::json!([{"Config": "config.json", "RepoTags": [KIT_IMAGE], "Layers": ["layer.tar"]}]);
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec(&manifest)?)
}

fn layer(busybox: &Path) -> std::io::Result<Vec<u8>> {
    let list = std::process::Command::new(busybox).arg("--list-full").output()?;
    let applets = String::from_utf8_lossy(&list.stdout).into_owned();
    let mut tar = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h
    };
    for d in ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root"] {
        tar.append_data(&mut header(tar::EntryType::Directory, 0o755, 0), d, std::io::empty())?;
    }
    tar.append_data(&mut header(tar::EntryType::Directory, 0o1777, 0), "tmp", std::io::empty())?;
    let bytes = std::fs::read(busybox)?;
    tar.append_data(&mut header(tar::EntryType::Regular, 0o755, bytes.len() as u64), "bin/busybox", &bytes[..])?;
    for applet in applets.lines().filter(|a| !a.is_empty() && *a != "bin/busybox") {
        tar.append_link(&mut header(tar::EntryType::Symlink, 0o777, 0), applet, "/bin/busybox")?;
    }
    let passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n";
    tar.append_data(&mut header(tar::EntryType::Regular, 0o644, passwd.len() as u64), "etc/passwd", &passwd[..])?;
    tar.into_inner()
}
