//! A real OCI registry for the image suites: Debian's `docker-registry`
//! (the CNCF distribution registry) on a free loopback port, its storage
//! in a temporary directory; plain http, or TLS with a CA made here and
//! htpasswd authentication. Also the images the suites push to it, built
//! here: layers made with the tar crate, a config, a manifest, pushed with
//! oci-client.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{ImageIndexEntry, OciImageIndex, OciImageManifest, Platform};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// Why the registry suites cannot run here, or `None`.
pub fn unavailable() -> Option<String> {
    (!crate::have("docker-registry")).then(|| {
        "no docker-registry on PATH (apt-get install docker-registry; contrib/setup/install-deps has it)".into()
    })
}

/// Credentials and trust for a TLS registry with authentication.
pub struct Secured {
    pub user: String,
    pub password: String,
    /// The CA (PEM) that signed the registry's certificate.
    pub ca: PathBuf,
}

/// A registry, stopped when dropped.
pub struct Registry {
    child: Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub secured: Option<Secured>,
}

impl Registry {
    /// Plain http on 127.0.0.1.
    pub fn plain() -> Registry {
        Registry::start(false)
    }

    /// TLS (a certificate for 127.0.0.1 and localhost from a CA made
    /// here) with htpasswd authentication of one user.
    pub fn secured() -> Registry {
        Registry::start(true)
    }

    fn start(secure: bool) -> Registry {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        );
        let secured = secure.then(|| {
            let (ca, cert, key) = certificates(dir.path());
            config.push_str(&format!("  tls:\n    certificate: {}\n    key: {}\n", cert.display(), key.display()));
            let (user, password) = ("tester".to_owned(), "s3cret-pass".to_owned());
            let hash =
                bcrypt::hash_with_result(&password, 4).expect("bcrypt").format_for_version(bcrypt::Version::TwoY);
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{hash}\n")).expect("write htpasswd");
            config
                .push_str(&format!("auth:\n  htpasswd:\n    realm: tinybox-test\n    path: {}\n", htpasswd.display()));
            Secured { user, password, ca }
        });
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("write registry config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log file");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            if let Some(status) = child.try_wait().expect("wait") {
                panic!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(dir.path().join("registry.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "docker-registry did not listen on 127.0.0.1:{port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Registry { child, dir, port, secured }
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A reference in this registry.
    pub fn reference(&self, repo_tag: &str) -> String {
        format!("{}/{repo_tag}", self.host())
    }

    /// A client that can push here (trusting the CA, with the credentials).
    pub fn client(&self) -> (Client, RegistryAuth) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = ClientConfig { platform_resolver: None, ..ClientConfig::default() };
        let auth = match &self.secured {
            None => {
                config.protocol = ClientProtocol::Http;
                RegistryAuth::Anonymous
            }
            Some(s) => {
                config.extra_root_certificates = vec![Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: std::fs::read(&s.ca).expect("read CA"),
                }];
                RegistryAuth::Basic(s.user.clone(), s.password.clone())
            }
        };
        (Client::try_from(config).expect("oci client"), auth)
    }

    /// Pushes an image of `layers` (uncompressed tars, bottom first) for
    /// `os/arch` as `repo_tag`; returns (manifest digest, image id).
    pub fn push(&self, repo_tag: &str, layers: &[Vec<u8>], os: &str, arch: &str) -> (String, String) {
        let config = serde_json::json!({
            "Env": ["PATH=/bin", "GREETING=hello"], "Cmd": ["/bin/sh"], "WorkingDir": "/srv", "User": "1000:1000",
        });
        self.push_with_config(repo_tag, layers, os, arch, config)
    }

    /// [`Registry::push`] with `config` as the image config's `config`
    /// (Env, Cmd, WorkingDir, User, ...).
    pub fn push_with_config(
        &self,
        repo_tag: &str,
        layers: &[Vec<u8>],
        os: &str,
        arch: &str,
        config: serde_json::Value,
    ) -> (String, String) {
        let (client, auth) = self.client();
        let reference: Reference = self.reference(repo_tag).parse().expect("reference");
        let image_layers: Vec<ImageLayer> = layers.iter().map(|l| ImageLayer::oci_v1(l.clone(), None)).collect();
        let diff_ids: Vec<String> = image_layers.iter().map(|l| l.sha256_digest()).collect();
        let config = serde_json::json!({
            "architecture": arch, "os": os,
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        let config = Config::oci_v1(serde_json::to_vec(&config).expect("config"), None);
        let id = config.sha256_digest();
        let manifest = OciImageManifest::build(&image_layers, &config, None);
        runtime().block_on(async {
            client.push(&reference, &image_layers, config, &auth, Some(manifest)).await.expect("push");
            let digest = client.fetch_manifest_digest(&reference, &auth).await.expect("manifest digest");
            (digest, id)
        })
    }

    /// Pushes an index at `repo_tag` listing the manifests `entries`
    /// (digest, os, arch) already pushed to the same repository.
    pub fn push_index(&self, repo_tag: &str, entries: &[(String, &str, &str)]) {
        let (client, auth) = self.client();
        let reference: Reference = self.reference(repo_tag).parse().expect("reference");
        runtime().block_on(async {
            let mut manifests = Vec::new();
            for (digest, os, arch) in entries {
                let by_digest = reference.clone_with_digest(digest.clone());
                let (raw, _) = client
                    .pull_manifest_raw(&by_digest, &auth, &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE])
                    .await
                    .expect("manifest");
                manifests.push(ImageIndexEntry {
                    media_type: oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.into(),
                    digest: digest.clone(),
                    size: raw.len() as i64,
                    platform: Some(Platform {
                        architecture: (*arch).into(),
                        os: (*os).into(),
                        os_version: None,
                        os_features: None,
                        variant: None,
                        features: None,
                    }),
                    annotations: None,
                    artifact_type: None,
                });
            }
            let index = OciImageIndex {
                schema_version: 2,
                media_type: Some(oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE.into()),
                manifests,
                artifact_type: None,
                annotations: None,
            };
            client.push_manifest_list(&reference, &auth, index).await.expect("push index");
        });
    }

    /// Where the registry keeps blob `digest` (`sha256:HEX`).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.path().join(format!("data/docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A docker config dir whose config.json gives `registry` these credentials.
pub fn docker_config(dir: &Path, registry: &str, user: &str, password: &str) -> PathBuf {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = serde_json::json!({"auths": {registry: {"auth": auth}}});
    std::fs::create_dir_all(dir).expect("docker config dir");
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&config).expect("json")).expect("write config.json");
    dir.to_owned()
}

/// A tar layer of `(name, Some(body))` files and `(name, None)` directories.
pub fn layer(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, body) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        match body {
            Some(body) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(body.len() as u64);
                h.set_mode(0o644);
                b.append_data(&mut h, name, *body).expect("tar file");
            }
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_mode(0o755);
                b.append_data(&mut h, name, &b""[..]).expect("tar dir");
            }
        }
    }
    b.into_inner().expect("tar")
}

/// A layer with an entry named exactly `name` (`../x` and the like),
/// written raw: the tar crate's own setters refuse such names.
pub fn hostile_layer(name: &str, body: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().expect("gnu").name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append(&h, body).expect("tar");
    b.into_inner().expect("tar")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// A CA and a leaf for 127.0.0.1 and localhost: (ca.pem, cert.pem, key.pem).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "tinybox test CA");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let mut leaf_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("leaf params");
    leaf_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let leaf = leaf_params.signed_by(&leaf_key, &ca).expect("leaf");
    let (ca_path, cert_path, key_path) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&ca_path, ca.pem()).expect("write ca");
    std::fs::write(&cert_path, leaf.pem()).expect("write cert");
    std::fs::write(&key_path, leaf_key.serialize_pem()).expect("write key");
    (ca_path, cert_path, key_path)
}
