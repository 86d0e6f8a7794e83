//! The image store's errors. Each names the bad value and the rule, and
//! says what to do next where there is something to do.

use std::io;
use std::path::PathBuf;

use crate::digest::{BadDigest, Digest};
use crate::unpack::UnpackError;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{reference:?} is not an image reference ({detail}); one looks like NAME[:TAG] or NAME@sha256:HEX")]
    BadReference { reference: String, detail: String },
    #[error("no image {0} in the store; `tinybox image ls` lists them, `tinybox image pull {0}` fetches it")]
    NotFound(String),
    #[error("{0} names more than one image in the store; give more of the id")]
    Ambiguous(String),
    #[error("image {image} is used by {}; remove {} first", plural_boxes(.boxes), if .boxes.len() == 1 { "it" } else { "them" })]
    InUse { image: String, boxes: Vec<String> },
    #[error("{reference} has no image for {want} (it has {}); tinybox runs images of this machine's platform only", .have.join(", "))]
    NoPlatform { reference: String, want: String, have: Vec<String> },
    #[error("{what} has digest {actual}, not the {expected} it is named by; it was refused and nothing of it was kept")]
    DigestMismatch { what: String, expected: Digest, actual: Digest },
    #[error("layer {layer} unpacks to {actual}, not the diff id {expected} the image's config names; it was refused")]
    DiffIdMismatch { layer: Digest, expected: Digest, actual: Digest },
    #[error(
        "{what} is {size} bytes, not the {expected} its descriptor says; it was refused and nothing of it was kept"
    )]
    SizeMismatch { what: String, size: u64, expected: u64 },
    #[error("cannot reach registry {registry} ({detail}); check the name and that it is up")]
    Unreachable { registry: String, detail: String },
    #[error(
        "registry {registry} wants credentials and none are set for it; `docker login {registry}` or an auths entry in {config} gives them"
    )]
    NoCredentials { registry: String, config: String },
    #[error(
        "registry {registry} refused the credentials for it in {config}; check them with `docker login {registry}`"
    )]
    BadCredentials { registry: String, config: String },
    #[error(
        "the credentials for {registry} are kept by the credential helper docker-credential-{helper}, which tinybox does not run; add an auths entry for {registry} to {config}"
    )]
    CredentialHelper { registry: String, helper: String, config: String },
    #[error("{path} is not a docker config tinybox can read ({detail})")]
    DockerConfig { path: PathBuf, detail: String },
    #[error(
        "registry {registry} answered in plain http; plain http is spoken only to localhost, 127.0.0.0/8 and ::1 registries (as docker does), everything else needs https"
    )]
    PlainHttp { registry: String },
    #[error(
        "registry {registry} has a certificate this machine does not trust ({detail}); pass --registry-ca FILE (or set TINYBOX_REGISTRY_CA) with the CA that signed it"
    )]
    Untrusted { registry: String, detail: String },
    #[error("the registry CA {path} cannot be used ({detail}); it must be a PEM file of one or more certificates")]
    BadCa { path: PathBuf, detail: String },
    #[error("registry {registry}: {detail}")]
    Registry { registry: String, detail: String },
    #[error("{what} has media type {media_type}, which is not {expected}")]
    MediaType { what: String, media_type: String, expected: &'static str },
    #[error("layer {layer} was refused: {source}")]
    Layer {
        layer: Digest,
        #[source]
        source: UnpackError,
    },
    #[error("{path} cannot be imported: {detail}")]
    Archive { path: String, detail: String },
    #[error("config {id} is not an image config ({detail})")]
    BadConfig { id: Digest, detail: String },
    #[error("{0}")]
    Digest(#[from] BadDigest),
    #[error("the image store's {path} is damaged ({detail}); `tinybox image prune` keeps what is whole")]
    Corrupt { path: PathBuf, detail: String },
    #[error("this engine has no store directory, so it keeps no images")]
    NoStore,
    #[error("cannot build the image's base disk: {detail}")]
    Disk { detail: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn plural_boxes(boxes: &[String]) -> String {
    match boxes {
        [one] => format!("box {one}"),
        many => format!("boxes {}", many.join(", ")),
    }
}

impl ImageError {
    pub fn io(context: impl Into<String>, source: io::Error) -> ImageError {
        ImageError::Io { context: context.into(), source }
    }

    /// Whether this is a refusal of input (a reference, an archive, a
    /// layer, a digest) rather than trouble reaching or writing something.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ImageError::Io { .. }
                | ImageError::Unreachable { .. }
                | ImageError::Corrupt { .. }
                | ImageError::Disk { .. }
        )
    }
}

pub type Result<T, E = ImageError> = std::result::Result<T, E>;
