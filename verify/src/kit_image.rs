//! The kit's own image, for a sandbox whose images come from tinybox's
//! store (`image_root`): such a sandbox never fetches one itself, so a kit
//! asked for no image imports this one — this machine's static busybox and
//! every applet it lists (`tinybox_image::minimal`) — and makes boxes from
//! it: every box of a sandbox that boots image disks (the microVM), the
//! image-box claims of one that also makes boxes over a directory
//! (image_claims.rs). Its bytes are the same every time, so it is one image
//! however often the kit runs, and a later run finds it in the store.

use tinybox_core::Tinybox;
use tinybox_core::images::{ImportSource, minimal};

/// The reference the kit's image is stored under.
pub const KIT_IMAGE: &str = "tinybox-verify/busybox:1";

/// `KIT_IMAGE` in `tb`'s store, imported now if it is not there yet.
pub async fn ensure(tb: &Tinybox) -> Result<String, String> {
    let images = tb.images().ok_or("this engine has no store to keep an image in")?;
    if images.rootfs(KIT_IMAGE).is_ok() {
        return Ok(KIT_IMAGE.to_owned());
    }
    let applets = minimal::busybox_applets();
    let layer = minimal::busybox_layer(&applets.iter().map(String::as_str).collect::<Vec<_>>())
        .ok_or("the kit builds its image from a static /bin/busybox, which this machine lacks (busybox-static)")?;
    let config = serde_json::json!({ "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"] });
    let archive = minimal::save_archive(KIT_IMAGE, &[layer], config);
    images
        .import(ImportSource::Reader(Box::new(std::io::Cursor::new(archive))), "the kit's image")
        .await
        .map_err(|e| e.to_string())?;
    Ok(KIT_IMAGE.to_owned())
}
