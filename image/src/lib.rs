//! tinybox's OCI image store: pull images from registries (or import
//! `docker save` archives and OCI layouts), check every blob against its
//! digest, unpack each layer once into a directory of its own, and stack
//! an image's layers into a read-only root filesystem a sandbox can use as
//! an overlay's lower directory. It records which references name each
//! image and which boxes use it, so removal and pruning reclaim the rest.
//!
//! It is deliberately not a container runtime: it starts nothing, knows no
//! box or sandbox, and depends on no other tinybox crate (core depends on
//! it; no driver may). A layer is someone else's tar, so unpacking is a
//! security boundary (`unpack`); see ADR 0028 for the layout and its rules.

pub mod auth;
pub mod beneath;
pub mod blobs;
pub mod config;
pub mod digest;
pub mod disk;
pub mod error;
pub mod flatten;
pub mod import;
pub mod layers;
pub mod minimal;
pub mod platform;
pub mod progress;
pub mod pull;
pub mod records;
pub mod reference;
pub mod registry;
pub mod store;
pub mod unpack;

pub use config::ImageConfig;
pub use digest::Digest;
pub use error::{ImageError, Result};
pub use import::{ImportSource, Imported};
pub use progress::{Progress, Quiet};
pub use pull::Pulled;
pub use records::{ImageRecord, LayerRecord};
pub use registry::{CA_VAR, RegistryOptions};
pub use store::{ImageDetails, ImageStore, Pruned, PrunedImage, Removed};
