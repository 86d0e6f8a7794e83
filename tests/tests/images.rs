//! The image store against a real registry (Debian's docker-registry on
//! loopback, plain and TLS with htpasswd), driven through the `tinybox`
//! binary: pulls, the cache, whiteouts, platforms, trust, credentials,
//! refusals that change nothing, imports of `docker save`, rm and prune.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tinybox_core::images::Images;
use tinybox_tests::Cli;
use tinybox_tests::registry::{self, Registry, hostile_layer, layer};

const FILE: &str = "images";

fn skip_unless_registry(test: &str) -> bool {
    match registry::unavailable() {
        Some(reason) => {
            tinybox_tests::skip(&format!("{FILE}::{test}"), &reason);
            true
        }
        None => false,
    }
}

/// `tinybox --json image ARGS` with `DOCKER_CONFIG` (an empty one unless given): (status, json, stderr).
fn image(cli: &Cli, args: &[&str], docker_config: &Path, env: &[(&str, &str)]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["--json", "image"];
    all.extend_from_slice(args);
    let mut cmd = cli.cmd(&all);
    cmd.env("DOCKER_CONFIG", docker_config).env_remove("TINYBOX_REGISTRY_CA");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run tinybox");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), json, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn no_creds() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A failure is one line on stderr (and a JSON error), a non-zero exit.
fn refused(code: i32, json: &serde_json::Value, err: &str, needle: &str) {
    assert_ne!(code, 0, "expected a refusal, got success: {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    assert!(err.contains(needle), "{needle:?} not in: {err}");
    assert!(json["error"]["message"].as_str().is_some_and(|m| m.contains(needle)), "{json}");
}

/// What the store holds, to show a refusal changed nothing.
fn store_listing(cli: &Cli) -> Vec<String> {
    let images = cli.home.path().join("images");
    let mut out = Vec::new();
    for dir in ["blobs/sha256", "layers/sha256", "rootfs/sha256", "tmp"] {
        for e in std::fs::read_dir(images.join(dir)).into_iter().flatten().flatten() {
            out.push(format!("{dir}/{}", e.file_name().to_string_lossy()));
        }
    }
    out.push(std::fs::read_to_string(images.join("images.json")).unwrap_or_default());
    out.sort();
    out
}

fn whiteout_layers() -> Vec<Vec<u8>> {
    vec![
        layer(&[
            ("etc", None),
            ("etc/keep", Some(b"one")),
            ("etc/gone", Some(b"one")),
            ("cache", None),
            ("cache/old", Some(b"one")),
        ]),
        layer(&[("etc/.wh.gone", Some(b"")), ("cache/.wh..wh..opq", Some(b"")), ("cache/new", Some(b"two"))]),
        layer(&[("etc/keep", Some(b"three")), ("bin", None), ("bin/tool", Some(b"#!/bin/sh\n"))]),
    ]
}

fn rootfs_of(cli: &Cli, name: &str) -> PathBuf {
    let (code, json, err) = image(cli, &["inspect", name], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    PathBuf::from(json["rootfs"].as_str().expect("rootfs path"))
}

#[test]
fn a_pull_stacks_layers_with_whiteouts_and_a_second_pull_uses_the_cache() {
    if skip_unless_registry("a_pull_stacks_layers_with_whiteouts_and_a_second_pull_uses_the_cache") {
        return;
    }
    let reg = Registry::plain();
    let (_, id) = reg.push("app:1", &whiteout_layers(), "linux", "amd64");
    let cli = Cli::new();
    let creds = no_creds();
    let reference = reg.reference("app:1");
    let (code, json, err) = image(&cli, &["pull", &reference], creds.path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["id"], id);
    assert_eq!(json["cached"], false);
    assert_eq!(json["layers"].as_array().unwrap().len(), 3);
    let rootfs = rootfs_of(&cli, &reference);
    assert_eq!(std::fs::read(rootfs.join("etc/keep")).unwrap(), b"three");
    assert!(!rootfs.join("etc/gone").exists(), "the whiteout was not applied");
    assert!(!rootfs.join("cache/old").exists(), "the opaque directory was not applied");
    assert_eq!(std::fs::read(rootfs.join("cache/new")).unwrap(), b"two");
    assert!(!rootfs.join("etc/.wh.gone").exists());
    // The config a sandbox will honour.
    let (_, inspect, _) = image(&cli, &["inspect", &reference], creds.path(), &[]);
    assert_eq!(inspect["config"]["working_dir"], "/srv");
    assert_eq!(inspect["config"]["user"], "1000:1000");
    assert_eq!(inspect["config"]["cmd"], serde_json::json!(["/bin/sh"]));
    let before = store_listing(&cli);
    let (code, json, err) = image(&cli, &["pull", &reference], creds.path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["cached"], true);
    assert_eq!(json["fetched_bytes"], 0);
    assert_eq!(store_listing(&cli), before, "a cached pull changed the store");
    // Layers are shared: a second image on the same base unpacks only its own.
    let mut layers = whiteout_layers();
    layers.truncate(2);
    layers.push(layer(&[("extra", Some(b"x"))]));
    reg.push("app:2", &layers, "linux", "amd64");
    let (code, json, err) = image(&cli, &["pull", &reg.reference("app:2")], creds.path(), &[]);
    assert_eq!(code, 0, "{err}");
    let fetched = json["fetched_bytes"].as_u64().unwrap();
    assert_eq!(fetched, layers[2].len() as u64, "the shared layers were fetched again");
    let (_, list, _) = image(&cli, &["ls"], creds.path(), &[]);
    assert_eq!(list.as_array().unwrap().len(), 2);
}

#[test]
fn an_interrupted_pull_resumes_from_the_blobs_it_had_verified() {
    if skip_unless_registry("an_interrupted_pull_resumes_from_the_blobs_it_had_verified") {
        return;
    }
    let reg = Registry::plain();
    let layers = whiteout_layers();
    reg.push("app:1", &layers, "linux", "amd64");
    let cli = Cli::new();
    let reference = reg.reference("app:1");
    let (code, _, err) = image(&cli, &["pull", &reference], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    // What a pull killed after its downloads leaves: blobs named, no
    // record, no layer, no root; a half-written file in tmp/; and one blob
    // torn (a crash before its bytes reached the disk).
    let images = cli.home.path().join("images");
    std::fs::remove_file(images.join("images.json")).unwrap();
    for dir in ["layers/sha256", "rootfs/sha256"] {
        for e in std::fs::read_dir(images.join(dir)).unwrap().flatten() {
            tinybox_core::images::remove_tree(&e.path()).unwrap();
        }
    }
    std::fs::write(images.join("tmp/blob-half"), b"half a download").unwrap();
    let torn = sha256_hex(&layers[1]);
    std::fs::write(images.join("blobs/sha256").join(&torn), &layers[1][..100]).unwrap();
    let (code, json, err) = image(&cli, &["pull", &reference], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["cached"], false);
    assert_eq!(json["fetched_bytes"], layers[1].len() as u64, "only the torn blob is fetched again");
    let rootfs = rootfs_of(&cli, &reference);
    assert_eq!(std::fs::read(rootfs.join("cache/new")).unwrap(), b"two");
    let (code, _, err) = image(&cli, &["prune", "--dry-run"], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(images.join("tmp/blob-half").exists(), "a dry run removed something");
    Images::open(cli.home.path()).add_user(&reference, "box-1").unwrap();
    let (code, _, err) = image(&cli, &["prune"], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!images.join("tmp/blob-half").exists(), "prune left an interrupted pull's file");
    assert!(rootfs.join("cache/new").exists(), "prune removed an image in use");
}

#[test]
fn an_index_with_no_entry_for_this_machine_is_one_line_naming_what_it_has() {
    if skip_unless_registry("an_index_with_no_entry_for_this_machine_is_one_line_naming_what_it_has") {
        return;
    }
    let reg = Registry::plain();
    let (arm, _) = reg.push("multi:arm64", &[layer(&[("arm", Some(b"1"))])], "linux", "arm64");
    let (s390, _) = reg.push("multi:s390x", &[layer(&[("s390", Some(b"1"))])], "linux", "s390x");
    reg.push_index("multi:1", &[(arm, "linux", "arm64"), (s390, "linux", "s390x")]);
    let cli = Cli::new();
    let (code, json, err) = image(&cli, &["pull", &reg.reference("multi:1")], no_creds().path(), &[]);
    refused(code, &json, &err, "has no image for linux/amd64 (it has linux/arm64, linux/s390x)");
    assert!(store_listing(&cli).iter().all(|e| !e.starts_with("blobs") && !e.starts_with("rootfs")));
    // An index that has this machine's entry gives it.
    let (amd, id) = reg.push("multi:amd64", &[layer(&[("amd", Some(b"1"))])], "linux", "amd64");
    let (arm, _) = reg.push("multi:arm64", &[layer(&[("arm", Some(b"1"))])], "linux", "arm64");
    reg.push_index("multi:2", &[(arm, "linux", "arm64"), (amd, "linux", "amd64")]);
    let (code, json, err) = image(&cli, &["pull", &reg.reference("multi:2")], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["id"], id);
    assert!(json["index_digest"].is_string());
}

#[test]
fn plain_http_is_spoken_only_to_a_loopback_name() {
    if skip_unless_registry("plain_http_is_spoken_only_to_a_loopback_name") {
        return;
    }
    let reg = Registry::plain();
    reg.push("app:1", &[layer(&[("f", Some(b"1"))])], "linux", "amd64");
    let cli = Cli::new();
    // 0.0.0.0 reaches this machine's loopback on Linux, but it is not a
    // loopback name: the same plain registry is refused under it.
    let (code, json, err) = image(&cli, &["pull", &format!("0.0.0.0:{}/app:1", reg.port)], no_creds().path(), &[]);
    refused(code, &json, &err, "answered in plain http; plain http is spoken only to localhost, 127.0.0.0/8 and ::1");
    assert_eq!(store_listing(&cli), vec![String::new()]);
    let (code, _, err) = image(&cli, &["pull", &format!("localhost:{}/app:1", reg.port)], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn tls_is_verified_with_the_given_ca_and_credentials_come_from_the_docker_config() {
    if skip_unless_registry("tls_is_verified_with_the_given_ca_and_credentials_come_from_the_docker_config") {
        return;
    }
    let reg = Registry::secured();
    let secured = reg.secured.as_ref().unwrap();
    let (_, id) = reg.push("private:1", &whiteout_layers(), "linux", "amd64");
    let reference = reg.reference("private:1");
    let cli = Cli::new();
    let tmp = tempfile::tempdir().unwrap();
    let good = registry::docker_config(&tmp.path().join("good"), &reg.host(), &secured.user, &secured.password);
    let bad = registry::docker_config(&tmp.path().join("bad"), &reg.host(), &secured.user, "wrong");
    let ca = secured.ca.display().to_string();
    // No CA: the certificate is refused, and a TLS server is never downgraded to http.
    let (code, json, err) = image(&cli, &["pull", &reference], &good, &[]);
    refused(code, &json, &err, "has a certificate this machine does not trust");
    // The CA but no credentials.
    let (code, json, err) = image(&cli, &["pull", &reference, "--registry-ca", &ca], no_creds().path(), &[]);
    refused(code, &json, &err, "wants credentials and none are set for it");
    // Wrong credentials.
    let (code, json, err) = image(&cli, &["pull", &reference, "--registry-ca", &ca], &bad, &[]);
    refused(code, &json, &err, "refused the credentials for it");
    assert_eq!(store_listing(&cli), vec![String::new()], "a refused pull changed the store");
    // The CA from the environment and the right credentials.
    let (code, json, err) = image(&cli, &["pull", &reference], &good, &[("TINYBOX_REGISTRY_CA", &ca)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["id"], id);
    // The credentials are never copied into the store.
    for entry in walk(&cli.home.path().join("images")) {
        if entry.is_file() {
            let bytes = std::fs::read(&entry).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&secured.password),
                "{} holds the password",
                entry.display()
            );
        }
    }
}

#[test]
fn credentials_a_helper_keeps_are_refused_by_the_helper_s_name() {
    if skip_unless_registry("credentials_a_helper_keeps_are_refused_by_the_helper_s_name") {
        return;
    }
    let reg = Registry::plain();
    let cli = Cli::new();
    let config = tempfile::tempdir().unwrap();
    let helpers = serde_json::json!({"credHelpers": {reg.host(): "secretservice"}});
    std::fs::write(config.path().join("config.json"), helpers.to_string()).unwrap();
    let (code, json, err) = image(&cli, &["pull", &reg.reference("app:1")], config.path(), &[]);
    refused(
        code,
        &json,
        &err,
        "kept by the credential helper docker-credential-secretservice, which tinybox does not run",
    );
    let store = serde_json::json!({"credsStore": "desktop", "auths": {reg.host(): {}}});
    std::fs::write(config.path().join("config.json"), store.to_string()).unwrap();
    let (code, json, err) = image(&cli, &["pull", &reg.reference("app:1")], config.path(), &[]);
    refused(code, &json, &err, "docker-credential-desktop");
    assert_eq!(store_listing(&cli), vec![String::new()]);
}

/// A tmpfs of `size` mounted at `dir` for one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tinybox-image-test"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_disk_that_fills_during_a_pull_is_one_line_and_records_nothing() {
    if skip_unless_registry("a_disk_that_fills_during_a_pull_is_one_line_and_records_nothing") {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        tinybox_tests::skip(
            &format!("{FILE}::a_disk_that_fills_during_a_pull_is_one_line_and_records_nothing"),
            "mounting a small tmpfs needs root",
        );
        return;
    }
    let reg = Registry::plain();
    // Bytes that do not compress, more than the store's disk holds.
    let mut noise = Vec::with_capacity(6 << 20);
    let mut x: u64 = 0x9e3779b97f4a7c15;
    while noise.len() < 6 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend_from_slice(&x.to_le_bytes());
    }
    reg.push("big:1", &[layer(&[("noise", Some(&noise))])], "linux", "amd64");
    let cli = Cli::new();
    let _disk = Tmpfs::mount(&cli.home.path().join("images"), "4m").unwrap();
    let (code, json, err) = image(&cli, &["pull", &reg.reference("big:1")], no_creds().path(), &[]);
    refused(code, &json, &err, "No space left on device");
    assert_eq!(store_listing(&cli), vec![String::new()], "a pull that ran out of disk left something");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.symlink_metadata().unwrap().is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_blob_that_does_not_match_its_digest_is_refused_and_nothing_of_it_is_kept() {
    if skip_unless_registry("a_blob_that_does_not_match_its_digest_is_refused_and_nothing_of_it_is_kept") {
        return;
    }
    let reg = Registry::plain();
    let good = layer(&[("f", Some(b"the real bytes"))]);
    reg.push("app:1", std::slice::from_ref(&good), "linux", "amd64");
    // The registry serves what is in its storage: change it under the same name and size.
    let digest = format!("sha256:{}", sha256_hex(&good));
    let evil = layer(&[("f", Some(b"the evil bytes"))]);
    assert_eq!(evil.len(), good.len());
    std::fs::write(reg.blob_file(&digest), &evil).unwrap();
    let cli = Cli::new();
    let (code, json, err) = image(&cli, &["pull", &reg.reference("app:1")], no_creds().path(), &[]);
    refused(code, &json, &err, "nothing of it was kept");
    assert_eq!(store_listing(&cli), vec![String::new()], "a refused pull left something");
}

fn sha256_hex(bytes: &[u8]) -> String {
    tinybox_core::images::Digest::of(bytes).hex().to_owned()
}

#[test]
fn a_hostile_layer_from_a_registry_is_refused_and_lands_nowhere() {
    if skip_unless_registry("a_hostile_layer_from_a_registry_is_refused_and_lands_nowhere") {
        return;
    }
    let reg = Registry::plain();
    let cli = Cli::new();
    let escape = "../../../../../../../../../../../../tmp/tinybox-image-escape";
    let _ = std::fs::remove_file("/tmp/tinybox-image-escape");
    reg.push("evil:1", &[hostile_layer(escape, b"escaped")], "linux", "amd64");
    let (code, json, err) = image(&cli, &["pull", &reg.reference("evil:1")], no_creds().path(), &[]);
    refused(code, &json, &err, "climbs out of the layer with ..");
    assert!(!Path::new("/tmp/tinybox-image-escape").exists());
    assert!(!cli.home.path().join("images/tinybox-image-escape").exists());
    assert_eq!(store_listing(&cli), vec![String::new()], "a refused pull left something");
}

#[test]
fn a_registry_that_is_down_or_an_unknown_image_is_one_line() {
    if skip_unless_registry("a_registry_that_is_down_or_an_unknown_image_is_one_line") {
        return;
    }
    let cli = Cli::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (code, json, err) = image(&cli, &["pull", &format!("127.0.0.1:{port}/app:1")], no_creds().path(), &[]);
    refused(code, &json, &err, "cannot reach registry");
    assert_eq!(json["error"]["kind"], "unavailable");
    let reg = Registry::plain();
    let (code, json, err) = image(&cli, &["pull", &reg.reference("nothing:here")], no_creds().path(), &[]);
    refused(code, &json, &err, "it has no image");
    let (code, json, err) = image(&cli, &["inspect", "nothing:here"], no_creds().path(), &[]);
    refused(code, &json, &err, "no image nothing:here in the store");
    assert_eq!(store_listing(&cli), vec![String::new()]);
}

#[test]
fn rm_refuses_an_image_a_box_uses_and_prune_reclaims_the_rest() {
    if skip_unless_registry("rm_refuses_an_image_a_box_uses_and_prune_reclaims_the_rest") {
        return;
    }
    let reg = Registry::plain();
    reg.push("kept:1", &whiteout_layers(), "linux", "amd64");
    reg.push("loose:1", &[layer(&[("loose", Some(b"1"))])], "linux", "amd64");
    let cli = Cli::new();
    for r in ["kept:1", "loose:1"] {
        let (code, _, err) = image(&cli, &["pull", &reg.reference(r)], no_creds().path(), &[]);
        assert_eq!(code, 0, "{err}");
    }
    let images = Images::open(cli.home.path());
    let kept = reg.reference("kept:1");
    let id = images.add_user(&kept, "box-7").unwrap();
    let (code, json, err) = image(&cli, &["rm", &kept], no_creds().path(), &[]);
    refused(code, &json, &err, "is used by box box-7; remove it first");
    let (code, json, err) = image(&cli, &["prune", "--dry-run"], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["images"].as_array().unwrap().len(), 1);
    assert!(rootfs_of(&cli, &reg.reference("loose:1")).exists(), "a dry run removed something");
    let (code, json, err) = image(&cli, &["prune"], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["images"][0]["refs"], serde_json::json!([reg.reference("loose:1")]));
    assert!(json["reclaimed_bytes"].as_u64().unwrap() > 0);
    assert!(images.rootfs(&kept).unwrap().0.exists(), "prune removed an image in use");
    images.remove_user(id.as_str(), "box-7").unwrap();
    let (code, json, err) = image(&cli, &["rm", &kept], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["deleted"], true);
    let left = store_listing(&cli);
    assert!(
        left.iter().all(|e| !e.starts_with("blobs/") && !e.starts_with("layers/") && !e.starts_with("rootfs/")),
        "{left:?}"
    );
}

#[test]
fn a_docker_save_archive_imports_from_a_file_and_from_stdin() {
    if let Some(reason) = tinybox_tests::docker::unavailable() {
        tinybox_tests::skip(&format!("{FILE}::a_docker_save_archive_imports_from_a_file_and_from_stdin"), &reason);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("busybox.tar");
    tinybox_tests::docker::docker_ok(&["save", "-o", archive.to_str().unwrap(), tinybox_tests::docker::BASE_IMAGE]);
    let docker_id = tinybox_tests::docker::docker_ok(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        tinybox_tests::docker::BASE_IMAGE,
    ]);
    let cli = Cli::new();
    let (code, json, err) = image(&cli, &["import", archive.to_str().unwrap()], no_creds().path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json[0]["id"], docker_id, "the image id is not docker's");
    assert_eq!(json[0]["reference"], "docker.io/library/busybox:latest");
    let rootfs = rootfs_of(&cli, "busybox");
    assert!(rootfs.join("bin/busybox").is_file());
    // From stdin, into another store.
    let other = Cli::new();
    let mut cmd = other.cmd(&["--json", "image", "import", "-"]);
    let out = cmd.stdin(std::fs::File::open(&archive).unwrap()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["id"], docker_id);
    // Something that is neither is one line and changes nothing.
    std::fs::write(tmp.path().join("junk.tar"), b"not a tar at all").unwrap();
    let before = store_listing(&cli);
    let (code, json, err) =
        image(&cli, &["import", tmp.path().join("junk.tar").to_str().unwrap()], no_creds().path(), &[]);
    refused(code, &json, &err, "cannot be imported");
    assert_eq!(store_listing(&cli), before);
}
