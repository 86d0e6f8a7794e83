//! The part of an image's config a sandbox uses to start a box from it.

use crate::digest::Digest;
use crate::error::{ImageError, Result};

/// Env, WorkingDir, User, Entrypoint and Cmd, as the image sets them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageConfig {
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    pub os: String,
    pub architecture: String,
    /// The digests of the uncompressed layers, bottom first.
    pub diff_ids: Vec<Digest>,
}

impl ImageConfig {
    pub fn parse(bytes: &[u8], id: &Digest) -> Result<ImageConfig> {
        let bad = |detail: String| ImageError::BadConfig { id: id.clone(), detail };
        let parsed: oci_spec::image::ImageConfiguration =
            serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let diff_ids =
            parsed.rootfs().diff_ids().iter().map(|d| Digest::parse(d)).collect::<std::result::Result<Vec<_>, _>>()?;
        let c = parsed.config().clone().unwrap_or_default();
        let empty = |s: Option<String>| s.filter(|s| !s.is_empty());
        Ok(ImageConfig {
            env: c.env().clone().unwrap_or_default(),
            working_dir: empty(c.working_dir().clone()),
            user: empty(c.user().clone()),
            entrypoint: c.entrypoint().clone(),
            cmd: c.cmd().clone(),
            os: parsed.os().to_string(),
            architecture: parsed.architecture().to_string(),
            diff_ids,
        })
    }
}
