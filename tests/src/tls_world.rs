//! The egress test world's HTTPS side, for the secrets suites (ADR 0032):
//! a CA of the test's own (the proxy trusts it through `TINYBOX_EGRESS_CA`,
//! as it would a public root), a leaf for the test names, and an HTTPS
//! server for a [`crate::netns::TestHost`] that records every request head
//! it gets to a file on this machine and answers `ok`, or, for `GET /echo`,
//! the request head itself (as a host echoing requests would), or, under
//! `/files/`, the files of [`TlsWorld::files`] to a request carrying the
//! value in [`TlsWorld::auth`] (`Bearer VALUE`, or `Basic` with VALUE as
//! the password, as git and pip send a token in a URL), else 401.

use std::path::{Path, PathBuf};

/// A test CA and a leaf signed by it, in a directory of their own, and
/// the file the server records request heads in.
pub struct TlsWorld {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub heads: PathBuf,
    /// What `/files/` serves (a git repository, a package index).
    pub files: PathBuf,
    /// The value a `/files/` request must carry (written by the test).
    pub auth: PathBuf,
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
        let (files, auth) = (path("files"), path("auth"));
        std::fs::create_dir(&files).expect("files dir");
        TlsWorld { dir, ca: ca_path, cert, key, heads, files, auth }
    }

    /// The HTTPS server on `addr:port`, a Python program printing `ready`
    /// once it listens.
    pub fn server_program(&self, addr: &str, port: u16) -> String {
        let q = |p: &Path| format!("{:?}", p.to_str().expect("utf-8 path"));
        format!(
            r#"import base64,os,socket,ssl,threading
ctx=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain({cert},{key})
lock=threading.Lock()
def authorized(head):
 try: value=open({auth}).read().strip()
 except OSError: return False
 for line in head.split(b'\r\n')[1:]:
  k,_,v=line.partition(b':')
  if k.strip().lower()!=b'authorization': continue
  scheme,_,cred=v.strip().partition(b' ')
  if scheme.lower()==b'bearer' and cred.strip().decode()==value: return True
  if scheme.lower()==b'basic':
   try: user,_,password=base64.b64decode(cred.strip()).decode().partition(':')
   except Exception: return False
   if password==value: return True
 return False
def answer(head):
 path=head.split(b' ')[1].split(b'?')[0].decode()
 if not path.startswith('/files/'):
  return b'200 OK',head if head.startswith(b'GET /echo ') else b'ok\n',b''
 if not authorized(head):
  return b'401 Unauthorized',b'who are you\n',b'WWW-Authenticate: Basic realm="files"\r\n'
 rel=path[len('/files/'):]
 name=os.path.normpath(os.path.join({files},rel))
 if not name.startswith({files}+'/') and name!={files}: return b'404 Not Found',b'no\n',b''
 if os.path.isdir(name): name=os.path.join(name,'index.html')
 try: body=open(name,'rb').read()
 except OSError: return b'404 Not Found',b'no\n',b''
 return b'200 OK',body,b'Content-Type: text/html\r\n' if name.endswith('.html') else b''
def serve(c):
 try:
  c.settimeout(20)
  s=ctx.wrap_socket(c,server_side=True)
  data=b''
  while b'\r\n\r\n' not in data:
   d=s.recv(4096)
   if not d: break
   data+=d
  head=data.split(b'\r\n\r\n',1)[0]
  with lock:
   with open({heads},'ab') as f: f.write(head+b'\r\n{END}\r\n')
  status,body,extra=answer(head if not data.startswith(b'GET /echo ') else data)
  kind=b'' if extra.startswith(b'Content-Type') else b'Content-Type: text/plain\r\n'
  s.sendall(b'HTTP/1.0 '+status+b'\r\n'+kind+extra+b'Content-Length: %d\r\nConnection: close\r\n\r\n' % len(body)+body)
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
            files = q(&self.files),
            auth = q(&self.auth),
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
    install_python(dir, &["requests"])
}

/// `packages` from PyPI for the system's Python, into `dir`.
pub fn install_python(dir: &Path, packages: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location"])
        .arg("--target")
        .arg(dir)
        .args(packages)
        .output()
        .map_err(|e| format!("cannot run /usr/bin/python3 -m pip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("pip install {} failed: {}", packages.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn sh(script: &str, dir: &Path) -> Result<(), String> {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{script}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The line the world's git repository's README holds.
pub const REPO_MARK: &str = "cloned through the injecting proxy";
/// The value the world's package prints when imported.
pub const PACKAGE_MARK: &str = "installed through the injecting proxy";

impl TlsWorld {
    /// A bare git repository at `/files/repo.git` that git clones over
    /// dumb HTTP (its `info/refs` made by `git update-server-info`), with
    /// one commit whose README holds [`REPO_MARK`].
    pub fn add_git_repository(&self) -> Result<(), String> {
        let git = "git -c user.name=tinybox -c user.email=tinybox@test.invalid -c init.defaultBranch=main";
        sh(
            &format!(
                "{git} init -q src && echo '{REPO_MARK}' > src/README && {git} -C src add README && \
                 {git} -C src commit -qm one && {git} clone -q --bare src repo.git && \
                 git -C repo.git update-server-info && rm -rf src"
            ),
            &self.files,
        )
    }

    /// A package index at `/files/simple/` (PEP 503) with one wheel,
    /// `tbxprobe` 1.0, whose module's `MARK` is [`PACKAGE_MARK`].
    pub fn add_package_index(&self) -> Result<(), String> {
        let script = format!(
            r#"import base64,hashlib,os,zipfile
name='tbxprobe-1.0-py3-none-any.whl'
files={{'tbxprobe/__init__.py':"MARK = '{PACKAGE_MARK}'\n",
 'tbxprobe-1.0.dist-info/METADATA':'Metadata-Version: 2.1\nName: tbxprobe\nVersion: 1.0\n',
 'tbxprobe-1.0.dist-info/WHEEL':'Wheel-Version: 1.0\nGenerator: tinybox-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n'}}
def digest(b): return 'sha256='+base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()
record=''.join('%s,%s,%d\n'%(n,digest(t.encode()),len(t.encode())) for n,t in files.items())+'tbxprobe-1.0.dist-info/RECORD,,\n'
with zipfile.ZipFile(name,'w') as z:
 for n,t in files.items(): z.writestr(n,t)
 z.writestr('tbxprobe-1.0.dist-info/RECORD',record)
sha=hashlib.sha256(open(name,'rb').read()).hexdigest()
os.makedirs('simple/tbxprobe',exist_ok=True)
open('simple/index.html','w').write('<html><body><a href="tbxprobe/">tbxprobe</a></body></html>')
open('simple/tbxprobe/index.html','w').write('<html><body><a href="../../%s#sha256=%s">%s</a></body></html>'%(name,sha,name))
"#
        );
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", &script])
            .current_dir(&self.files)
            .output()
            .map_err(|e| format!("cannot run /usr/bin/python3: {e}"))?;
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
    }
}

/// undici from npm into `dir/node_modules`, so Node's own `fetch` in a box
/// takes the proxy (Node 20 reads no `HTTPS_PROXY` itself; undici's
/// `EnvHttpProxyAgent` is how its users give it one).
pub fn install_undici(dir: &Path) -> Result<(), String> {
    let out = std::process::Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
        .arg(dir)
        .arg("undici@6")
        .output()
        .map_err(|e| format!("cannot run npm: {e} (apt-get install nodejs npm)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("npm install undici failed: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}
