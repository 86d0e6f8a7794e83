//! The CA a box's proxy makes for itself at its start, and the leaf
//! certificates it signs for the hosts it intercepts, one per host, cached.
//! The CA's key lives in this process's memory only: never in a file, so
//! never in the box, its proxy directory or a snapshot.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::crypto::ring::default_provider;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// How long the CA and its leaves are valid: the proxy's life is a box's,
/// and a proxy started again makes a new CA.
const VALIDITY: Duration = Duration::from_secs(30 * 24 * 60 * 60);

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("making the box's CA: {e}"))
}

/// A box's CA and the TLS server configurations made with it.
pub struct BoxCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl BoxCa {
    /// A fresh CA, named for `box_id`.
    pub fn new(box_id: &str) -> io::Result<BoxCa> {
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, format!("tinybox egress CA for box {box_id}"));
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = rcgen::date_time_ymd(1970, 1, 1)
            + (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default());
        params.not_before = now - Duration::from_secs(60 * 60);
        params.not_after = now + VALIDITY;
        let cert = params.self_signed(&key).map_err(err)?;
        Ok(BoxCa { issuer: Issuer::new(params, key), pem: cert.pem(), leaves: Mutex::new(HashMap::new()) })
    }

    /// The CA's certificate, PEM: what the box trusts.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The server configuration for `host` (canonical), its leaf made on
    /// first use and kept: one signature per host for the proxy's life.
    pub fn server_config(&self, host: &str) -> io::Result<Arc<ServerConfig>> {
        if let Some(config) = self.leaves.lock().map_err(err)?.get(host) {
            return Ok(config.clone());
        }
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(err)?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = rcgen::date_time_ymd(1970, 1, 1)
            + (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default());
        params.not_before = now - Duration::from_secs(60 * 60);
        params.not_after = now + VALIDITY;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(err)?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(err)?;
        // HTTP/1.1 only: the exchange is parsed by hyper's HTTP/1 server.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.leaves.lock().map_err(err)?.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}
