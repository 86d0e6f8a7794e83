//! The egress test world's HTTPS side, for the secrets suites (ADR 0032):
//! a CA of the test's own (the proxy trusts it through `TINYBOX_EGRESS_CA`,
//! as it would a public root), a leaf for the test names, and an HTTPS
//! server for a [`crate::netns::TestHost`] that records every request head
//! it gets to a file on this machine and answers `ok`, or, for `GET /echo`,
//! the request head itself (as a host echoing requests would).

use std::path::{Path, PathBuf};

/// A test CA and a leaf signed by it, in a directory of their own, and
/// the file the server records request heads in.
pub struct TlsWorld {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub heads: PathBuf,
}

/// The line ending each recorded head.
pub const END: &str = "--end--";

impl TlsWorld {
    /// A CA and a leaf for `names`.
    pub fn new(names: &[&str]) -> TlsWorld {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let dir = tempfile::tempdir().expect("tls world dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "tinybox secrets test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut leaf_params = CertificateParams::new(names).expect("leaf params");
        leaf_params.distinguished_name.push(DnType::CommonName, "tinybox secrets test server");
        let leaf = leaf_params.signed_by(&leaf_key, &ca).expect("leaf");
        let path = |name: &str| dir.path().join(name);
        let (ca_path, cert, key, heads) = (path("ca.pem"), path("cert.pem"), path("key.pem"), path("heads.log"));
        std::fs::write(&ca_path, ca.pem()).expect("write ca");
        std::fs::write(&cert, leaf.pem()).expect("write cert");
        std::fs::write(&key, leaf_key.serialize_pem()).expect("write key");
        std::fs::write(&heads, "").expect("write heads");
        TlsWorld { dir, ca: ca_path, cert, key, heads }
    }

    /// The HTTPS server on `addr:port`, a Python program printing `ready`
    /// once it listens.
    pub fn server_program(&self, addr: &str, port: u16) -> String {
        let q = |p: &Path| format!("{:?}", p.to_str().expect("utf-8 path"));
        format!(
            r#"import socket,ssl,threading
ctx=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain({cert},{key})
lock=threading.Lock()
def serve(c):
 try:
  c.settimeout(20)
  s=ctx.wrap_socket(c,server_side=True)
  data=b''
  while b'\r\n\r\n' not in data:
   d=s.recv(4096)
   if not d: break
   data+=d
  with lock:
   with open({heads},'ab') as f: f.write(data.split(b'\r\n\r\n',1)[0]+b'\r\n{END}\r\n')
  body=data if data.startswith(b'GET /echo ') else b'ok\n'
  s.sendall(b'HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' % len(body)+body)
  s.close()
 except Exception: pass
 c.close()
s=socket.socket()
s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind(('{addr}',{port}))
s.listen(16)
print('ready',flush=True)
while True:
 c,_=s.accept()
 threading.Thread(target=serve,args=(c,),daemon=True).start()
"#,
            cert = q(&self.cert),
            key = q(&self.key),
            heads = q(&self.heads),
        )
    }

    /// Every request head the server recorded, oldest first.
    pub fn heads(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.heads).unwrap_or_default();
        text.split(&format!("{END}\r\n")).filter(|h| !h.trim().is_empty()).map(str::to_owned).collect()
    }

    /// The one recorded head whose request line has `path` (`GET /a ...`).
    pub fn head_for(&self, path: &str) -> Option<String> {
        self.heads().into_iter().find(|h| h.split_whitespace().nth(1) == Some(path))
    }
}

/// `requests` for the box's Python (the system's, /usr/bin/python3),
/// installed from PyPI into `dir` (the box sees it as
/// `/workspace/<name>`); the reason when it cannot be.
pub fn install_requests(dir: &Path) -> Result<(), String> {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location"])
        .arg("--target")
        .arg(dir)
        .arg("requests")
        .output()
        .map_err(|e| format!("cannot run /usr/bin/python3 -m pip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("pip install requests failed: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}
