//! A minimal image made on this machine, with no registry and no docker:
//! a `docker save` archive ([`save_archive`]) of layers such as
//! [`busybox_layer`] (this machine's static busybox, a shell and its
//! applets). The conformance kit imports one to probe what a sandbox keeps
//! only for image boxes (snapshots, fork), and the live suites build their
//! test images with it.

/// A `docker save` archive of one image `repo_tag` made of `layers`, with
/// `config` (the image config's `config` object: Env, WorkingDir, Cmd)
/// and this machine's platform: what `tinybox image import` reads when no
/// registry or docker is at hand.
pub fn save_archive(repo_tag: &str, layers: &[Vec<u8>], config: serde_json::Value) -> Vec<u8> {
    let hex =
        |b: &[u8]| <sha2::Sha256 as sha2::Digest>::digest(b).iter().map(|x| format!("{x:02x}")).collect::<String>();
    let diff_ids: Vec<String> = layers.iter().map(|l| format!("sha256:{}", hex(l))).collect();
    let cfg = serde_json::json!({
        "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
        "os": "linux",
        "config": config,
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    });
    let cfg = serde_json::to_vec(&cfg).expect("config json");
    let cfg_name = format!("{}.json", hex(&cfg));
    let layer_names: Vec<String> = (0..layers.len()).map(|i| format!("l{i}/layer.tar")).collect();
    let manifest = serde_json::json!([{ "Config": cfg_name, "RepoTags": [repo_tag], "Layers": layer_names }]);
    let manifest = serde_json::to_vec(&manifest).expect("manifest json");
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, body: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, body).expect("tar entry");
    };
    add(&cfg_name, &cfg);
    for (name, layer) in layer_names.iter().zip(layers) {
        add(name, layer);
    }
    add("manifest.json", &manifest);
    b.into_inner().expect("tar")
}

/// A layer with this machine's static busybox at /bin/busybox, the
/// applets `names` linked to it (a bare name in /bin, one with a directory,
/// as `busybox --list-full` gives them, there), /etc/passwd with root, and /tmp: a small
/// image's root that runs a shell. `None` when busybox is not static here.
pub fn busybox_layer(names: &[&str]) -> Option<Vec<u8>> {
    let busybox = std::fs::read("/bin/busybox").ok()?;
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(mode);
        b.append_data(&mut h, name, &b""[..]).expect("tar dir");
    };
    for d in ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "dev", "run", "root"] {
        dir(&mut b, d, 0o755);
    }
    dir(&mut b, "tmp", 0o1777);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(busybox.len() as u64);
    h.set_mode(0o755);
    b.append_data(&mut h, "bin/busybox", &busybox[..]).expect("tar busybox");
    for n in names.iter().filter(|n| !matches!(**n, "busybox" | "bin/busybox")) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        // A name with a directory is where busybox lists it (`usr/bin/env`).
        let path = if n.contains('/') { n.trim_start_matches('/').to_owned() } else { format!("bin/{n}") };
        b.append_link(&mut h, path, "/bin/busybox").expect("tar link");
    }
    let passwd = b"root:x:0:0:root:/root:/bin/sh\n";
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(passwd.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "etc/passwd", &passwd[..]).expect("tar passwd");
    Some(b.into_inner().expect("tar"))
}

/// Every applet this machine's /bin/busybox has, where it lists them
/// (`busybox --list-full`: `bin/sh`, `usr/bin/setsid`), for a layer that
/// runs whatever a probe script uses at the paths programs expect; empty
/// without one.
pub fn busybox_applets() -> Vec<String> {
    std::process::Command::new("/bin/busybox")
        .arg("--list-full")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}
