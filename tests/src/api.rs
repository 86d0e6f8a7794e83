//! Helpers for the HTTP API suites: a `tinybox serve` of the test's own
//! (its address read from the first line it prints), a tiny HTTP/1.1
//! client, and the E2B `base` image (busybox with the host's bash and
//! python3, since no registry is reachable) and the official `e2b` Python
//! SDK in a venv under target/.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::{Cli, KillOnDrop};

/// A running `tinybox serve` over a store of its own.
pub struct Server {
    pub cli: Cli,
    pub url: String,
    pub addr: String,
    pub token: String,
    _child: KillOnDrop,
}

impl Server {
    /// Starts `tinybox serve --listen 127.0.0.1:0 FLAGS` and waits for its address.
    pub fn start(flags: &[&str]) -> Server {
        let cli = Cli::new();
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(flags);
        let mut child = cli
            .cmd(&args)
            .env("TINYBOX_DRIVER_PATH", crate::bin_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tinybox serve");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("read the address");
        let url = first.trim().to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "tinybox serve printed no address: {first:?}");
        let token = std::fs::read_to_string(cli.home.path().join("api-token")).expect("the token file");
        let addr = url.trim_start_matches("http://").to_owned();
        Server { cli, url, addr, token: token.trim().to_owned(), _child: KillOnDrop(child) }
    }

    /// Asks the server to stop (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_raw(self._child.0.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM tinybox serve");
        self._child.0.wait().expect("wait for tinybox serve")
    }

    /// One request: (status, body).
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<u8>) {
        let mut s = TcpStream::connect(&self.addr).expect("connect to tinybox serve");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let mut rest = raw[split + 4..].to_vec();
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            rest = dechunk(&rest);
        }
        (status, rest)
    }

    /// A request with the server's token and a JSON body: (status, JSON).
    pub fn json(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> (u16, serde_json::Value) {
        let auth = format!("Bearer {}", self.token);
        let text = body.map(|b| b.to_string()).unwrap_or_default();
        let mut headers = vec![("Authorization", auth.as_str())];
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        let (status, bytes) = self.request(method, path, &headers, text.as_bytes());
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
        (status, v)
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

/// The E2B `base` image the suites use: busybox plus the host's bash and
/// python3 (the SDK runs every command as `/bin/bash -l -c`).
pub const BASE_IMAGE: &str = "tinybox-e2b-base:test";

/// Builds [`BASE_IMAGE`] when it is missing; why it cannot be, otherwise.
pub fn base_image() -> Result<&'static str, String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY.get_or_init(build_base).clone().map(|()| BASE_IMAGE)
}

fn build_base() -> Result<(), String> {
    if let Some(why) = crate::docker::unavailable() {
        return Err(why);
    }
    if crate::docker::docker(&["image", "inspect", BASE_IMAGE]).0 == 0 {
        return Ok(());
    }
    let python = std::fs::read_link("/usr/bin/python3").map_err(|e| format!("no /usr/bin/python3 to copy: {e}"))?;
    let python = python.to_string_lossy().into_owned();
    let mut files: Vec<String> = vec!["/bin/bash".into(), "/usr/bin/python3".into(), format!("/usr/bin/{python}")];
    for bin in ["/bin/bash", &format!("/usr/bin/{python}")] {
        let out = Command::new("ldd").arg(bin).output().map_err(|e| format!("ldd: {e}"))?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(path) = line.split_whitespace().find(|w| w.starts_with('/')) {
                files.push(path.to_owned());
            }
        }
    }
    files.sort();
    files.dedup();
    let container = format!("tinybox-e2b-base-{}", std::process::id());
    crate::docker::docker_ok(&["create", "--name", &container, crate::docker::BASE_IMAGE, "true"]);
    let tar = Command::new("tar")
        .args([
            "-c",
            "-h",
            "--exclude=test",
            "--exclude=__pycache__",
            "--exclude=site-packages",
            "--exclude=dist-packages",
            "-f",
            "-",
        ])
        .args(&files)
        .arg(format!("/usr/lib/{python}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("tar: {e}"))?;
    let copied = Command::new("docker")
        .args(["cp", "-", &format!("{container}:/")])
        .stdin(tar.stdout.expect("tar stdout"))
        .output()
        .map_err(|e| format!("docker cp: {e}"))?;
    // E2B's base has sudo; commands here already run as the box's one user.
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bin = dir.path().join("usr/local/bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    std::fs::write(bin.join("sudo"), "#!/bin/sh\nexec \"$@\"\n").map_err(|e| e.to_string())?;
    let exe = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
    std::fs::set_permissions(bin.join("sudo"), exe).map_err(|e| e.to_string())?;
    let shimmed =
        crate::docker::docker(&["cp", &format!("{}/.", dir.path().display()), &format!("{container}:/")]).0 == 0;
    let made = (copied.status.success() && shimmed)
        .then(|| crate::docker::docker(&["commit", "--change", "CMD [\"sh\"]", &container, BASE_IMAGE]));
    crate::docker::docker(&["rm", "-f", &container]);
    match made {
        Some((0, _, _)) => {}
        Some((_, _, err)) => return Err(format!("docker commit of the E2B base image failed: {err}")),
        None => {
            return Err(format!(
                "docker cp into the E2B base image failed: {}",
                String::from_utf8_lossy(&copied.stderr)
            ));
        }
    }
    let (code, _, err) = crate::docker::docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        BASE_IMAGE,
        "/bin/bash",
        "-c",
        &format!("{python} -c 'print(1)'"),
    ]);
    if code != 0 {
        return Err(format!("the E2B base image does not run bash and python: {err}"));
    }
    Ok(())
}

/// A python with the official `e2b` SDK: a venv under target/, made (with
/// `pip install e2b` from PyPI) on first use.
pub fn e2b_python() -> Result<PathBuf, String> {
    static READY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    READY.get_or_init(make_venv).clone()
}

fn make_venv() -> Result<PathBuf, String> {
    let venv = crate::bin_dir().parent().map(|t| t.join("e2b-venv")).ok_or("no target dir")?;
    let python = venv.join("bin/python");
    let has = |p: &PathBuf| Command::new(p).args(["-c", "import e2b"]).status().is_ok_and(|s| s.success());
    if python.is_file() && has(&python) {
        return Ok(python);
    }
    if !crate::have("python3") {
        return Err("no python3 on PATH (apt-get install python3-venv)".into());
    }
    let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().map_err(|e| e.to_string())?;
    if !made.success() {
        return Err("python3 -m venv failed (apt-get install python3-venv)".into());
    }
    let pip = Command::new(venv.join("bin/pip")).args(["install", "-q", "e2b"]).status().map_err(|e| e.to_string())?;
    if !pip.success() || !has(&python) {
        return Err("pip install e2b failed (PyPI unreachable?)".into());
    }
    Ok(python)
}
