//! `tinybox image pull REF [--registry-ca FILE]`, with a progress bar on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tinybox_core::Error;
use tinybox_core::images::{Images, Progress, RegistryOptions};

use super::super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct PullCmd {
    /// The image: NAME[:TAG] or NAME@sha256:HEX (`busybox`, `127.0.0.1:5000/app:1`).
    pub reference: String,
    /// A CA certificate (PEM) to trust for this registry, beside the system's.
    #[arg(long, value_name = "FILE", env = "TINYBOX_REGISTRY_CA")]
    pub registry_ca: Option<PathBuf>,
}

impl PullCmd {
    pub async fn run(self, app: &App, images: &Images) -> Result<u8, Error> {
        let options = RegistryOptions { ca_file: self.registry_ca };
        let bar = Bar::new(!app.json && std::io::stderr().is_terminal());
        let pulled = images.pull(&self.reference, &options, &bar).await;
        bar.done();
        let pulled = pulled?;
        if app.json {
            output::json(&pulled);
        } else if pulled.cached {
            eprintln!("tinybox: {} is up to date ({})", pulled.reference, pulled.image.id.short());
        } else {
            eprintln!(
                "tinybox: pulled {} ({}, {} layers, {} fetched)",
                pulled.reference,
                pulled.image.id.short(),
                pulled.image.layers.len(),
                super::size(pulled.fetched_bytes)
            );
        }
        Ok(0)
    }
}

/// indicatif's bar on stderr, or nothing.
struct Bar(Option<ProgressBar>);

impl Bar {
    fn new(shown: bool) -> Bar {
        Bar(shown.then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.set_message("pulling");
            bar
        }))
    }

    fn done(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn start(&self, bytes: u64, blobs: usize) {
        if let Some(bar) = &self.0 {
            bar.set_length(bytes);
            bar.set_message(format!("pulling {blobs} layers"));
        }
    }
    fn advance(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }
    fn phase(&self, what: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(what.to_owned());
        }
    }
}
