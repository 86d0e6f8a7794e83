//! `tinybox image prune [--dry-run]`: removes the images no box uses, and
//! the blobs, layers and root filesystems no image needs.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::images::Images;

use super::super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct PruneCmd {
    /// Only say what would be removed.
    #[arg(long)]
    pub dry_run: bool,
}

impl PruneCmd {
    pub fn run(self, app: &App, images: &Images) -> Result<u8, Error> {
        let pruned = images.prune(self.dry_run)?;
        if app.json {
            output::json(&pruned);
            return Ok(0);
        }
        let verb = if pruned.dry_run { "would remove" } else { "removed" };
        for i in &pruned.images {
            let name = if i.refs.is_empty() { i.id.short().to_owned() } else { i.refs.join(", ") };
            eprintln!("tinybox: {verb} image {name}");
        }
        eprintln!(
            "tinybox: {verb} {} images, {} blobs and {} layers ({})",
            pruned.images.len(),
            pruned.blobs,
            pruned.layers,
            super::size(pruned.reclaimed_bytes)
        );
        Ok(0)
    }
}
