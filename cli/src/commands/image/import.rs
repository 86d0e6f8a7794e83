//! `tinybox image import FILE|-`: a `docker save` archive or an OCI image
//! layout (a directory or a tar of one), from a file or stdin.

use std::path::PathBuf;

use clap::Args;
use tinybox_core::Error;
use tinybox_core::images::{Images, ImportSource};

use super::super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct ImportCmd {
    /// The archive or layout directory; `-` reads a tar from stdin.
    pub source: PathBuf,
}

impl ImportCmd {
    pub async fn run(self, app: &App, images: &Images) -> Result<u8, Error> {
        let shown = self.source.display().to_string();
        let source = if shown == "-" {
            ImportSource::Reader(Box::new(std::io::stdin()))
        } else {
            ImportSource::Path(self.source)
        };
        let imported =
            crate::progress::spin(app.json, format!("importing {shown}"), images.import(source, &shown)).await?;
        if app.json {
            output::json(&imported);
        } else {
            for i in &imported {
                let name = i.reference.clone().unwrap_or_else(|| "(no name)".into());
                eprintln!("tinybox: imported {name} ({}, {} layers)", i.image.id.short(), i.image.layers.len());
            }
        }
        Ok(0)
    }
}
