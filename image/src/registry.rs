//! Talking to a registry through oci-client: which scheme, which roots of
//! trust, which credentials, and what its failures mean in our words.
//!
//! https always, verified against the system's roots plus the CA file the
//! caller names. Plain http only for a loopback registry (`reference::
//! is_loopback`), and only when it answers a TLS hello with plain http: a
//! loopback registry that speaks TLS with a bad certificate is refused, not
//! downgraded.

use std::path::{Path, PathBuf};

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::auth::{self, Credentials};
use crate::digest::Digest;
use crate::error::{ImageError, Result};

/// The environment variable naming an extra CA file for registries.
pub const CA_VAR: &str = "TINYBOX_REGISTRY_CA";

const MANIFEST_TYPES: &[&str] = &[
    oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
    oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// An extra CA (PEM) to trust; else `TINYBOX_REGISTRY_CA` when set.
    pub ca_file: Option<PathBuf>,
}

/// One registry, connected.
pub struct Remote {
    client: Client,
    auth: RegistryAuth,
    registry: String,
    has_credentials: bool,
    config_shown: String,
}

impl Remote {
    /// A client for the registry of `reference`, settled on its scheme by
    /// fetching `reference`'s manifest, which it returns with its digest.
    pub async fn open(reference: &Reference, options: &RegistryOptions) -> Result<(Remote, Vec<u8>, Digest)> {
        // ring, not aws-lc: one crypto provider for the process (an error only says one is set).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let registry = reference.registry().to_owned();
        let credentials = auth::for_registry(&registry)?;
        let has_credentials = credentials != Credentials::Anonymous;
        let auth = match credentials {
            Credentials::Anonymous => RegistryAuth::Anonymous,
            Credentials::Basic { user, password } => RegistryAuth::Basic(user, password),
        };
        let ca = match options
            .ca_file
            .clone()
            .or_else(|| std::env::var_os(CA_VAR).filter(|v| !v.is_empty()).map(PathBuf::from))
        {
            Some(path) => Some(read_ca(&path)?),
            None => None,
        };
        let make = |protocol: ClientProtocol| -> Result<Client> {
            // The system's roots, read once, and the caller's CA: given as the
            // only roots, so no client reads the system's again (reqwest's
            // platform verifier reads every file of /etc/ssl/certs per client).
            let mut roots = system_roots().to_vec();
            roots.extend(ca.iter().cloned());
            let config = ClientConfig {
                protocol,
                tls_certs_only: roots,
                platform_resolver: None,
                connect_timeout: Some(std::time::Duration::from_secs(10)),
                read_timeout: Some(std::time::Duration::from_secs(60)),
                ..ClientConfig::default()
            };
            Client::try_from(config)
                .map_err(|e| ImageError::Registry { registry: registry.clone(), detail: e.to_string() })
        };
        let config_shown = auth::config_path().display().to_string();
        let mut remote = Remote {
            client: make(ClientProtocol::Https)?,
            auth,
            registry: registry.clone(),
            has_credentials,
            config_shown,
        };
        match remote.manifest(reference).await {
            Err(ImageError::PlainHttp { .. }) if crate::reference::is_loopback(&registry) => {
                remote.client = make(ClientProtocol::Http)?;
                let (body, digest) = remote.manifest(reference).await?;
                Ok((remote, body, digest))
            }
            Err(e) => Err(e),
            Ok((body, digest)) => Ok((remote, body, digest)),
        }
    }

    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The manifest `reference` names (a tag, or a digest it is checked
    /// against), and the digest of its bytes.
    pub async fn manifest(&self, reference: &Reference) -> Result<(Vec<u8>, Digest)> {
        let (body, _) = self
            .client
            .pull_manifest_raw(reference, &self.auth, MANIFEST_TYPES)
            .await
            .map_err(|e| self.error(e, reference))?;
        let actual = Digest::of(&body);
        if let Some(expected) = reference.digest() {
            let expected = Digest::parse(expected)?;
            if actual != expected {
                return Err(ImageError::DigestMismatch {
                    what: format!("the manifest of {}", reference.whole()),
                    expected,
                    actual,
                });
            }
        }
        Ok((body.to_vec(), actual))
    }

    /// A small blob (a config) in memory, checked against its digest.
    pub async fn small_blob(&self, reference: &Reference, digest: &Digest) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.client.pull_blob(reference, digest.as_str(), &mut out).await.map_err(|e| self.error(e, reference))?;
        let actual = Digest::of(&out);
        if &actual != digest {
            return Err(ImageError::DigestMismatch {
                what: format!("blob {digest}"),
                expected: digest.clone(),
                actual,
            });
        }
        Ok(out)
    }

    /// A blob as a stream of chunks (checked by the caller as it lands).
    pub async fn blob_stream(
        &self,
        reference: &Reference,
        digest: &Digest,
    ) -> Result<futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>> {
        let desc = oci_client::manifest::OciDescriptor { digest: digest.to_string(), ..Default::default() };
        let sized = self.client.pull_blob_stream(reference, &desc).await.map_err(|e| self.error(e, reference))?;
        Ok(sized.stream)
    }

    /// oci-client's error, in our words.
    pub fn error(&self, e: OciDistributionError, reference: &Reference) -> ImageError {
        let registry = self.registry.clone();
        let config = self.config_shown.clone();
        match &e {
            OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => {
                return if self.has_credentials {
                    ImageError::BadCredentials { registry, config }
                } else {
                    ImageError::NoCredentials { registry, config }
                };
            }
            OciDistributionError::ImageManifestNotFoundError(_) => {
                return ImageError::Registry { registry, detail: format!("it has no image {}", reference.whole()) };
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                let codes: Vec<String> = envelope.errors.iter().map(|e| format!("{:?}", e.code)).collect();
                let unknown = codes.iter().any(|c| c.contains("Unknown"));
                let denied = codes.iter().any(|c| c.contains("Unauthorized") || c.contains("Denied"));
                if denied {
                    return if self.has_credentials {
                        ImageError::BadCredentials { registry, config }
                    } else {
                        ImageError::NoCredentials { registry, config }
                    };
                }
                if unknown {
                    return ImageError::Registry { registry, detail: format!("it has no image {}", reference.whole()) };
                }
            }
            OciDistributionError::ServerError { code: 404, .. } => {
                return ImageError::Registry { registry, detail: format!("it has no image {}", reference.whole()) };
            }
            OciDistributionError::DigestError(d) => {
                return ImageError::Registry { registry, detail: format!("a digest did not match: {d}") };
            }
            _ => {}
        }
        match tls_failure(&e) {
            Some(TlsFailure::NotTls) => ImageError::PlainHttp { registry },
            Some(TlsFailure::Certificate(detail)) => ImageError::Untrusted { registry, detail },
            None if is_connect(&e) => ImageError::Unreachable { registry, detail: chain(&e) },
            None => ImageError::Registry { registry, detail: chain(&e) },
        }
    }
}

/// This machine's trusted roots (the same files the platform verifier
/// reads on Linux), loaded once per process.
fn system_roots() -> &'static [Certificate] {
    static ROOTS: std::sync::OnceLock<Vec<Certificate>> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        rustls_native_certs::load_native_certs()
            .certs
            .into_iter()
            .map(|c| Certificate { encoding: CertificateEncoding::Der, data: c.to_vec() })
            .collect()
    })
}

fn read_ca(path: &Path) -> Result<Certificate> {
    let data = std::fs::read(path).map_err(|e| ImageError::BadCa { path: path.to_owned(), detail: e.to_string() })?;
    if !String::from_utf8_lossy(&data).contains("-----BEGIN CERTIFICATE-----") {
        return Err(ImageError::BadCa { path: path.to_owned(), detail: "no PEM certificate in it".into() });
    }
    Ok(Certificate { encoding: CertificateEncoding::Pem, data })
}

enum TlsFailure {
    /// The server answered the TLS hello with something that is not TLS.
    NotTls,
    Certificate(String),
}

/// The rustls error under `e`, if a TLS handshake is what failed. rustls'
/// error sits inside an io::Error, whose `source` skips it, so each
/// io::Error's own payload is looked at too.
fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let found = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = found {
            return Some(match tls {
                rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => TlsFailure::NotTls,
                other => TlsFailure::Certificate(other.to_string()),
            });
        }
        next = err.source().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static))
        });
    }
    None
}

fn is_connect(e: &OciDistributionError) -> bool {
    matches!(e, OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout())
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(err) = next {
        let part = err.to_string();
        if !s.contains(&part) {
            s.push_str(": ");
            s.push_str(&part);
        }
        next = err.source();
    }
    s
}
