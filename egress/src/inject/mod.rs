//! Secrets a box uses but never reads (ADR 0032), the proxy's side: for a
//! CONNECT to a host a secret is bound to (or a header rule names), the
//! proxy ends the box's TLS itself with a leaf of the box's own CA
//! ([`ca`]), opens its own TLS to the upstream (verified against the
//! system's roots and `TINYBOX_EGRESS_CA`), and carries each HTTP/1.1
//! request across ([`exchange`]) with the placeholders in its headers
//! replaced by the values. Every other tunnel is left untouched.

pub mod ca;
pub mod exchange;
mod prefixed;
pub mod rewrite;
mod scrub;

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::RootCertStore;
use rustls::crypto::ring::default_provider;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::secrets::{InjectRules, Values};

pub use ca::BoxCa;

/// The system bundles a box's CA bundle starts from, the first found.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

/// Everything one box's proxy needs to inject: its rules, the values (in
/// this process's memory only), its CA, and how it trusts upstreams.
pub struct Injector {
    pub rules: InjectRules,
    values: Values,
    pub ca: BoxCa,
    upstream: Arc<ClientConfig>,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("Injector").field("box_id", &self.rules.box_id).finish_non_exhaustive()
    }
}

impl Injector {
    /// An injector for `rules` with `values`, a fresh CA, and upstreams
    /// trusted by the system's roots and those in `extra_roots` (a PEM file).
    pub fn new(rules: InjectRules, values: Values, extra_roots: Option<&Path>) -> io::Result<Injector> {
        if let Some(missing) = rules.secrets.iter().find(|s| !values.contains_key(&s.name)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no value was given for secret {}", missing.name),
            ));
        }
        let ca = BoxCa::new(&rules.box_id)?;
        let upstream = Arc::new(upstream_config(extra_roots)?);
        Ok(Injector { rules, values, ca, upstream })
    }

    /// The value of secret `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Each value with its placeholder, for scrubbing answers.
    pub(crate) fn pairs(&self) -> scrub::Pairs {
        scrub::Pairs::new(
            self.rules
                .secrets
                .iter()
                .filter_map(|s| Some((self.value(&s.name)?.as_bytes().to_vec(), s.placeholder.as_bytes().to_vec())))
                .collect(),
        )
    }

    /// How the proxy's TLS to upstreams is made.
    pub fn upstream(&self) -> Arc<ClientConfig> {
        self.upstream.clone()
    }

    /// What the box trusts: the system's roots, then the box's CA.
    pub fn bundle(&self) -> String {
        let system = SYSTEM_BUNDLES.iter().find_map(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        let mut bundle = system;
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(self.ca.pem());
        bundle
    }
}

/// The system's roots and those in `extra` (the tests' own CA).
fn upstream_config(extra: Option<&Path>) -> io::Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if let Some(path) = extra {
        let fail = |e: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| fail(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| fail(e.to_string()))?;
        if certs.is_empty() {
            return Err(fail("no certificate in it".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| fail(e.to_string()))?;
        }
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
