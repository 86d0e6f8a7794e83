//! `tinybox image pull|import|ls|inspect|rm|prune`: the store's OCI images,
//! one file per verb, each calling one function of core's `Images`.

mod import;
mod inspect;
mod ls;
mod prune;
mod pull;
mod rm;

use clap::Subcommand;
use tinybox_core::Error;
use tinybox_core::images::Images;

use super::App;

#[derive(Debug, Subcommand)]
pub enum ImageCmd {
    /// Fetch an image from a registry (this machine's platform of a multi-platform one).
    Pull(pull::PullCmd),
    /// Store the images of a `docker save` archive or an OCI image layout (a directory, a tar, or - for stdin).
    Import(import::ImportCmd),
    /// List the stored images.
    Ls,
    /// Show one image: its layers, config, users and root filesystem.
    Inspect(inspect::InspectCmd),
    /// Remove an image (or one of its names), refused while a box uses it.
    Rm(rm::RmCmd),
    /// Remove every image no box uses, and the blobs and layers no image needs.
    Prune(prune::PruneCmd),
}

impl ImageCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let images = images(app)?;
        match self {
            ImageCmd::Pull(c) => c.run(app, &images).await,
            ImageCmd::Import(c) => c.run(app, &images).await,
            ImageCmd::Ls => ls::run(app, &images),
            ImageCmd::Inspect(c) => c.run(app, &images),
            ImageCmd::Rm(c) => c.run(app, &images),
            ImageCmd::Prune(c) => c.run(app, &images),
        }
    }
}

fn images(app: &App) -> Result<Images, Error> {
    app.engine
        .images()
        .ok_or(Error::Image(tinybox_core::images::ImagesError(tinybox_core::images::ImageError::NoStore)))
}

/// Bytes as people read them.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}
