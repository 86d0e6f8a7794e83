//! An image's root filesystem as core hands it to a sandbox that declares
//! `Feature::ImageRoot` (docs/adr/0029-namespace-image-boxes.md): core
//! resolves the box's `oci_image` source in its own image store and sends
//! the prepared, read-only root and the parts of the image's config that
//! shape a command. A driver reads nothing of core's store but this.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The read-only root filesystem of an image and how its commands start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRoot {
    /// The image's identifier (its config digest), for the driver's records.
    pub id: String,
    /// The flattened root filesystem on the box's host, read-only to every box.
    pub rootfs: PathBuf,
    /// `NAME=VALUE` lines every command starts with, beneath the box's own.
    #[serde(default)]
    pub env: Vec<String>,
    /// Where commands start when the caller names no directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// The image's `User`, as the image wrote it (`name`, `uid`, `uid:gid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// The image's base disk (ext4, raw, read-only), for a sandbox
    /// declaring `Feature::ImageDisk` (the microVM, ADR 0036).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<PathBuf>,
}
