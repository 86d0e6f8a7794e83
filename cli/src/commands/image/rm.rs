//! `tinybox image rm REF`: one name of an image, or the image when it has
//! no other; refused while a box uses it.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::images::Images;

use super::super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct RmCmd {
    /// A reference, an image id, or a unique prefix of one.
    pub image: String,
}

impl RmCmd {
    pub fn run(self, app: &App, images: &Images) -> Result<u8, Error> {
        let removed = images.remove(&self.image)?;
        if app.json {
            output::json(&removed);
        } else if removed.deleted {
            eprintln!(
                "tinybox: removed image {} ({} reclaimed)",
                removed.id.short(),
                super::size(removed.reclaimed_bytes)
            );
        } else {
            eprintln!("tinybox: removed the name {} of image {}", removed.refs.join(", "), removed.id.short());
        }
        Ok(0)
    }
}
