//! `tinybox cp` live: round trips of a file and a tree (modes, mtimes,
//! symlinks) into and out of every sandbox and an ssh host, the `-` tar
//! stream, a stopped box, a box without tar, and a box whose tar is hostile:
//! a probe inside the box builds each attack's tar and the test checks this
//! machine's filesystem from outside.

use std::io::Write;

use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use tinybox_core::model::{BoxSpec, HostName, Placement, SandboxName};
use tinybox_core::{CopyRequest, Direction, Local};
use tinybox_tests::docker::{BASE_IMAGE, Namespace};
use tinybox_tests::microvm::TCG;
use tinybox_tests::sshd::{Sshd, engine};
use tinybox_tests::{Cli, have, need_microvm, skip};

/// A tree with what a copy must keep: modes, mtimes, a symlink, depth.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deep")).unwrap();
    let files: [(&str, &[u8], u32, u64); 4] = [
        ("a.txt", b"hello\n", 0o640, 1_577_934_245),
        ("run.sh", b"#!/bin/sh\necho hi\n", 0o755, 1_546_300_800),
        ("sub/b", b"\0binary\xff", 0o600, 1_600_000_000),
        ("sub/deep/c", b"deep", 0o444, 1_700_000_000),
    ];
    for (name, body, mode, mtime) in files {
        let p = root.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime)).unwrap();
    }
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    std::fs::set_permissions(root.join("sub"), std::fs::Permissions::from_mode(0o750)).unwrap();
}

/// Every entry of `a` is in `b` with the same kind, mode, file mtime,
/// contents and link target, and nothing else is in `b`.
fn assert_same_tree(a: &Path, b: &Path) {
    let ma = std::fs::symlink_metadata(a).unwrap();
    let mb = std::fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{} is missing: {e}", b.display()));
    assert_eq!(ma.file_type(), mb.file_type(), "{}", b.display());
    if ma.file_type().is_symlink() {
        assert_eq!(std::fs::read_link(a).unwrap(), std::fs::read_link(b).unwrap(), "{}", b.display());
        return;
    }
    assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {}", b.display());
    if ma.is_file() {
        assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", b.display());
        assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap(), "contents of {}", b.display());
        return;
    }
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    assert_eq!(names(a), names(b), "entries of {}", b.display());
    for n in names(a) {
        assert_same_tree(&a.join(&n), &b.join(&n));
    }
}

fn cp(cli: &Cli, src: &str, dst: &str) -> (i32, String) {
    let (code, _, err) = cli.run(&["cp", src, dst]);
    (code, err)
}

fn cp_ok(cli: &Cli, src: &str, dst: &str) {
    let (code, err) = cp(cli, src, dst);
    assert_eq!(code, 0, "cp {src} {dst}: {err}");
}

/// Round trips a tree and a file through `dir` in box `id`, and copies into
/// and out of existing directories, checking each arrival here.
fn round_trips(cli: &Cli, id: &str, dir: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    make_tree(&src);
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    // A tree, renamed on the way in and on the way out.
    cp_ok(cli, &s(&src), &format!("{id}:{dir}/tree"));
    let back = scratch.path().join("back");
    cp_ok(cli, &format!("{id}:{dir}/tree"), &s(&back));
    assert_same_tree(&src, &back);
    // Into existing directories, keeping the name.
    cp_ok(cli, &s(&src.join("run.sh")), &format!("{id}:{dir}/"));
    let into = scratch.path().join("into");
    std::fs::create_dir(&into).unwrap();
    cp_ok(cli, &format!("{id}:{dir}/run.sh"), &s(&into));
    assert_same_tree(&src.join("run.sh"), &into.join("run.sh"));
    // A file over an existing file.
    cp_ok(cli, &s(&src.join("a.txt")), &format!("{id}:{dir}/run.sh"));
    cp_ok(cli, &format!("{id}:{dir}/run.sh"), &s(&into.join("run.sh")));
    assert_same_tree(&src.join("a.txt"), &into.join("run.sh"));
    // What is missing is named.
    let (code, err) = cp(cli, &format!("{id}:{dir}/no-such"), &s(&into));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("box {id} has no {dir}/no-such")), "{err}");
    // A tree holding what cp does not copy is refused here, naming it.
    let odd = scratch.path().join("odd");
    std::fs::create_dir(&odd).unwrap();
    let fifo = std::process::Command::new("mkfifo").arg(odd.join("fifo")).status().unwrap();
    assert!(fifo.success());
    let (code, err) = cp(cli, &s(&odd), &format!("{id}:{dir}/odd"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fifo") && err.contains("files, directories and symlinks only"), "{err}");
}

/// `tar | tinybox cp - BOX:DIR` and `tinybox cp BOX:DIR - | tar`.
fn tar_streams(cli: &Cli, id: &str, dir: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    make_tree(&src);
    let packed = std::process::Command::new("tar").arg("-c").arg("-C").arg(&src).arg(".").output().unwrap();
    assert!(packed.status.success());
    let mut child = cli.cmd(&["cp", "-", &format!("{id}:{dir}")]).stdin(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(&packed.stdout).unwrap();
    assert!(child.wait().unwrap().success(), "cp - {id}:{dir}");
    let out = cli.cmd(&["cp", &format!("{id}:{dir}"), "-"]).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let back = scratch.path().join("back");
    std::fs::create_dir(&back).unwrap();
    let mut untar =
        std::process::Command::new("tar").arg("-x").arg("-C").arg(&back).stdin(Stdio::piped()).spawn().unwrap();
    untar.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    assert!(untar.wait().unwrap().success());
    let name = Path::new(dir).file_name().unwrap();
    assert_same_tree(&src, &back.join(name));
}

fn need_bwrap(test: &str) -> bool {
    if !have("bwrap") {
        skip(test, "bwrap is not installed (apt-get install bubblewrap)");
        return false;
    }
    true
}

fn need_docker(test: &str) -> bool {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        skip(test, &why);
        return false;
    }
    true
}

#[test]
fn namespace_round_trips_and_streams() {
    if !need_bwrap("copy::namespace_round_trips_and_streams") {
        return;
    }
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let id = cli.create(&["--sandbox", "namespace", "--workspace", ws.path().to_str().unwrap()]);
    round_trips(&cli, &id, "/workspace");
    std::fs::create_dir(ws.path().join("streamed")).unwrap();
    tar_streams(&cli, &id, "/workspace/streamed");
    cli.run(&["rm", &id]);
}

#[test]
fn passthrough_round_trips() {
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    let id = cli.create(&["--sandbox", "passthrough", "--workspace", dir.path().to_str().unwrap()]);
    round_trips(&cli, &id, dir.path().to_str().unwrap());
    cli.run(&["rm", &id]);
}

#[test]
fn docker_image_box_round_trips_and_streams() {
    if !need_docker("copy::docker_image_box_round_trips_and_streams") {
        return;
    }
    let ns = Namespace::new("cp-image");
    let cli = Cli::new();
    // No workspace: the copy reaches the image's own filesystem.
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--image", BASE_IMAGE]);
    round_trips(&cli, &id, "/tmp");
    let (code, _, err) = cli.run(&["exec", &id, "--", "mkdir", "/streamed"]);
    assert_eq!(code, 0, "{err}");
    tar_streams(&cli, &id, "/streamed");
    cli.run(&["rm", &id]);
}

#[test]
fn a_stopped_box_is_refused_with_what_to_do() {
    if !need_docker("copy::a_stopped_box_is_refused_with_what_to_do") {
        return;
    }
    let ns = Namespace::new("cp-stopped");
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let id = cli.create(&[
        "--sandbox",
        "docker",
        "--namespace",
        &ns.name,
        "--persistent",
        "--workspace",
        ws.path().to_str().unwrap(),
    ]);
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let file = ws.path().join("f");
    std::fs::write(&file, "x").unwrap();
    let (code, err) = cp(&cli, file.to_str().unwrap(), &format!("{id}:/tmp/"));
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("stopped") && err.contains(&format!("tinybox resume {id}")), "{err}");
    cli.run(&["rm", &id]);
}

#[test]
fn a_box_without_tar_is_named() {
    if !need_bwrap("copy::a_box_without_tar_is_named") {
        return;
    }
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    // The box's PATH has sh and nothing else.
    std::fs::create_dir(ws.path().join("bin")).unwrap();
    std::os::unix::fs::symlink("/bin/sh", ws.path().join("bin/sh")).unwrap();
    let w = ws.path().to_str().unwrap();
    let id = cli.create(&["--sandbox", "namespace", "--workspace", w, "--env", "PATH=/workspace/bin"]);
    let (code, err) = cp(&cli, &format!("{id}:/workspace/bin"), ws.path().join("out").to_str().unwrap());
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        format!(
            "tinybox: box {id} has no program tar, which tinybox cp runs in the box; use an image that has sh and tar"
        )
    );
    cli.run(&["rm", &id]);
}

/// Writes the tar of `attack` to stdout, as a hostile box's `tar -c` would.
/// It runs inside the box (python3 is the host's /usr, read-only there).
const HOSTILE_TAR: &str = r#"
import io, sys, tarfile
attack = open('/workspace/evil/attack').read().strip()
outside = open('/workspace/evil/outside').read().strip()
t = tarfile.open(fileobj=sys.stdout.buffer, mode='w|', format=tarfile.GNU_FORMAT)
def add(name, kind=tarfile.REGTYPE, body=b'', mode=0o644, link=''):
    i = tarfile.TarInfo(name); i.type = kind; i.mode = mode; i.size = len(body); i.linkname = link; i.mtime = 1000
    t.addfile(i, io.BytesIO(body) if kind == tarfile.REGTYPE else None)
if attack == 'dotdot':
    add('x', tarfile.DIRTYPE, mode=0o755); add('x/../../escaped', body=b'pwned')
elif attack == 'absolute':
    add('x', tarfile.DIRTYPE, mode=0o755); add(outside + '/escaped', body=b'pwned')
elif attack == 'symlink-then-write':
    add('x', tarfile.DIRTYPE, mode=0o755); add('x/l', tarfile.SYMTYPE, link=outside); add('x/l/escaped', body=b'pwned')
elif attack == 'symlink-root':
    add('x', tarfile.SYMTYPE, link=outside); add('x/escaped', body=b'pwned')
elif attack == 'hardlink-out':
    add('x', tarfile.DIRTYPE, mode=0o755); add('x/h', tarfile.LNKTYPE, link=outside + '/secret')
elif attack == 'hardlink-climb':
    add('x', tarfile.DIRTYPE, mode=0o755); add('x/h', tarfile.LNKTYPE, link='x/../../outside/secret')
elif attack == 'hardlink-unknown':
    add('x', tarfile.DIRTYPE, mode=0o755); add('x/h', tarfile.LNKTYPE, link='x/never-written')
elif attack == 'device':
    i = tarfile.TarInfo('x'); i.type = tarfile.CHRTYPE; i.devmajor = 1; i.devminor = 3; i.mode = 0o666; t.addfile(i)
elif attack == 'fifo':
    add('x', tarfile.DIRTYPE, mode=0o755); add('x/p', tarfile.FIFOTYPE)
elif attack == 'second-root':
    add('x', tarfile.DIRTYPE, mode=0o755); add('y/escaped', body=b'pwned')
elif attack == 'setuid':
    add('x', body=b'#!/bin/sh\n', mode=0o6755)
elif attack == 'sticky-dir':
    add('x', tarfile.DIRTYPE, mode=0o3777); add('x/f', body=b'ok', mode=0o4700)
t.close()
"#;

#[test]
fn a_hostile_tar_from_a_box_writes_nothing_outside_the_destination() {
    if !need_bwrap("copy::a_hostile_tar_from_a_box_writes_nothing_outside_the_destination") {
        return;
    }
    if !have("python3") {
        skip("copy::a_hostile_tar_from_a_box_writes_nothing_outside_the_destination", "python3 is not installed");
        return;
    }
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let evil = ws.path().join("evil");
    std::fs::create_dir(&evil).unwrap();
    // The box's `tar` is the attacker's: it prints the attack's archive.
    std::fs::write(evil.join("mk.py"), HOSTILE_TAR).unwrap();
    std::fs::write(evil.join("tar"), "#!/bin/sh\nexec python3 /workspace/evil/mk.py\n").unwrap();
    std::fs::set_permissions(evil.join("tar"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // What the copy names exists; what arrives is the hostile tar's.
    std::fs::write(ws.path().join("x"), "x").unwrap();
    let w = ws.path().to_str().unwrap();
    let id = cli.create(&["--sandbox", "namespace", "--workspace", w, "--env", "PATH=/workspace/evil:/usr/bin:/bin"]);

    let refused = [
        "dotdot",
        "absolute",
        "symlink-then-write",
        "symlink-root",
        "hardlink-out",
        "hardlink-climb",
        "hardlink-unknown",
        "device",
        "fifo",
        "second-root",
    ];
    for attack in refused {
        // scratch/land is the destination's parent; scratch/outside holds
        // a secret and must be untouched; nothing may appear in scratch
        // but those two.
        let scratch = tempfile::tempdir().unwrap();
        let (land, outside) = (scratch.path().join("land"), scratch.path().join("outside"));
        std::fs::create_dir(&land).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::fs::write(evil.join("attack"), attack).unwrap();
        std::fs::write(evil.join("outside"), outside.to_str().unwrap()).unwrap();
        let (code, err) = cp(&cli, &format!("{id}:/workspace/x"), land.join("x").to_str().unwrap());
        assert_eq!(code, 1, "{attack}: the copy was not refused: {err}");
        assert!(err.contains("refused the box's tar"), "{attack}: {err}");
        assert_eq!(err.lines().count(), 1, "{attack}: {err}");
        let mut top: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        top.sort();
        assert_eq!(top, ["land", "outside"], "{attack}: something was written beside the destination");
        let out: Vec<_> = std::fs::read_dir(&outside).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(out, ["secret"], "{attack}: something was written outside");
        assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "secret");
        for e in walk(&land) {
            let m = std::fs::symlink_metadata(&e).unwrap();
            let t = m.file_type();
            assert!(t.is_file() || t.is_dir() || t.is_symlink(), "{attack}: {} is a special file", e.display());
            if t.is_file() {
                assert_ne!(std::fs::read(&e).unwrap(), b"secret", "{attack}: {} holds the secret", e.display());
                assert_ne!(std::fs::read(&e).unwrap(), b"pwned", "{attack}: {} was written", e.display());
            }
        }
    }

    // Privilege bits never arrive; the files are the caller's.
    let scratch = tempfile::tempdir().unwrap();
    std::fs::write(evil.join("attack"), "setuid").unwrap();
    cp_ok(&cli, &format!("{id}:/workspace/x"), scratch.path().join("x").to_str().unwrap());
    let m = std::fs::metadata(scratch.path().join("x")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o755, "setuid/setgid survived");
    assert_eq!((m.uid(), m.gid()), (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw()));
    std::fs::write(evil.join("attack"), "sticky-dir").unwrap();
    cp_ok(&cli, &format!("{id}:/workspace/x"), scratch.path().join("d").to_str().unwrap());
    // Made 3777 in the box: no one but the caller may write it here.
    assert_eq!(std::fs::metadata(scratch.path().join("d")).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::metadata(scratch.path().join("d/f")).unwrap().mode() & 0o7777, 0o700);
    cli.run(&["rm", &id]);
}

fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                todo.push(p.clone());
            }
            all.push(p);
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_host_box_round_trips() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return skip("copy::an_ssh_host_box_round_trips", &why),
    };
    let tb = engine(&[("far", sshd.entry("root", None))]);
    let spec = BoxSpec::new(Placement::new(HostName::new("far").unwrap(), SandboxName::passthrough()));
    let info = tb.create(spec).await.unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    make_tree(&src);
    // The far side is this machine reached through sshd: a directory of its own.
    let remote = tempfile::tempdir().unwrap();
    let there = format!("{}/tree", remote.path().display());
    let copy = |direction, box_path: &str, local| CopyRequest {
        box_id: info.id.clone(),
        direction,
        box_path: box_path.to_owned(),
        local: Local::Path(local),
        max_size: None,
    };
    tb.copy(copy(Direction::In, &there, src.clone())).await.unwrap();
    let back = scratch.path().join("back");
    tb.copy(copy(Direction::Out, &there, back.clone())).await.unwrap();
    assert_same_tree(&src, &back);
    tb.remove(&info.id).await.unwrap();
}

#[test]
fn a_microvm_box_round_trips_a_file() {
    need_microvm!("copy::a_microvm_box_round_trips_a_file");
    let cli = Cli::new();
    let id = cli.create(TCG);
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    make_tree(&src);
    cp_ok(&cli, src.join("sub").to_str().unwrap(), &format!("{id}:/tmp/sub"));
    let back = scratch.path().join("back");
    cp_ok(&cli, &format!("{id}:/tmp/sub"), back.to_str().unwrap());
    assert_same_tree(&src.join("sub"), &back);
    cli.run(&["rm", &id]);
}

mod module_support;

#[test]
fn the_module_reads_writes_and_lists_files_inline_and_by_handle() {
    let test = "copy::the_module_reads_writes_and_lists_files_inline_and_by_handle";
    if !have("python3") {
        return skip(test, "python3 is not on PATH");
    }
    let mut sandboxes = vec!["passthrough"];
    if module_support::namespace_available(test) {
        sandboxes.push("namespace");
    }
    for sandbox in sandboxes {
        let dir = module_support::temp();
        let (store, ws) = (dir.path().join("store"), dir.path().join("ws"));
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("big"), vec![b'a'; 2 << 20]).unwrap();
        let at = if sandbox == "passthrough" { ws.to_str().unwrap().to_owned() } else { "/workspace".to_owned() };
        let p = |name: &str| format!("{at}/{name}");
        let calls = serde_json::json!([
            ["create", { "sandbox": sandbox, "workspace": ws }],
            ["fs.write", { "id": "$id", "path": p("hello.sh"), "content": "hi\n", "mode": 0o4755 }],
            ["fs.write", { "id": "$id", "path": p("bin"), "content_base64": "AP8=" }],
            ["fs.read", { "id": "$id", "path": p("hello.sh") }],
            ["fs.read", { "id": "$id", "path": p("bin") }],
            ["fs.read", { "id": "$id", "path": p("big") }],
            ["fs.read", { "id": "$id", "path": p("big"), "stream": true }],
            ["exec.wait", { "exec": "$exec", "max_output_bytes": 4 << 20 }],
            ["fs.list", { "id": "$id", "path": at }],
            ["fs.read", { "id": "$id", "path": p("missing") }],
            ["fs.write", { "id": "$id", "path": p("x"), "content": "a", "content_base64": "AA==" }],
            ["rm", { "id": "$id" }],
        ]);
        let r = module_support::python_calls(&store, &calls);
        assert_eq!(r.len(), 12, "{sandbox}: {r:?}");
        for (i, expect_ok) in [(0, true), (1, true), (2, true), (3, true), (4, true), (6, true), (7, true), (8, true)] {
            assert_eq!(r[i]["ok"].is_object(), expect_ok, "{sandbox}: call {i}: {}", r[i]);
        }
        // Written through the box, checked here: the mode without setuid.
        let written = std::fs::metadata(ws.join("hello.sh")).unwrap();
        assert_eq!((std::fs::read(ws.join("hello.sh")).unwrap(), written.mode() & 0o7777), (b"hi\n".to_vec(), 0o755));
        assert_eq!(std::fs::read(ws.join("bin")).unwrap(), [0, 255]);
        assert_eq!(r[3]["ok"]["content"], "hi\n");
        assert_eq!(r[4]["ok"]["content_base64"], "AP8=");
        // Too big inline: refused, naming the bound and the way out.
        assert_eq!(r[5]["error"]["code"], "invalid_argument", "{}", r[5]);
        assert!(r[5]["error"]["message"].as_str().unwrap().contains("over the 1048576-byte bound"), "{}", r[5]);
        // By handle, whole.
        assert_eq!(
            (r[7]["ok"]["exit_code"].clone(), r[7]["ok"]["stdout"].as_str().unwrap().len()),
            (json!(0), 2 << 20)
        );
        let entries = r[8]["ok"]["entries"].as_array().unwrap();
        let hello = entries.iter().find(|e| e["name"] == "hello.sh").unwrap();
        assert_eq!(
            (hello["kind"].clone(), hello["mode"].clone(), hello["size"].clone()),
            (json!("file"), json!(0o755), json!(3))
        );
        assert_eq!(entries.iter().find(|e| e["name"] == "big").unwrap()["size"], 2 << 20);
        assert!(r[9]["error"]["message"].as_str().unwrap().contains("missing"), "{}", r[9]);
        assert_eq!(r[10]["error"]["code"], "invalid_argument");
    }
}
