//! `tinybox cp` against a box that plays against the caller, live (issue
//! 28, ADR 0026). Probes run inside the box; what they did is checked from
//! outside, on this machine's filesystem:
//!
//! - a 1 TiB file with no blocks is refused on its size, nothing left; a
//!   sparse file under the bound lands with its holes (`st_blocks`); a
//!   dense file over the bound, and a tree whose files add up past it, are
//!   refused and removed; a `-` tar stream stops at the bound (namespace as
//!   this user and rootless, docker, one microVM);
//! - a destination through a symlink the box planted in its workspace is
//!   refused with the victim untouched, and a directory the box made 0777
//!   (2777 where it may set setgid) lands 0755 (namespace both ways, docker);
//! - a copy into a namespace box's `/tmp`, which the next command never
//!   sees, is refused naming what the box keeps (both ways), and so is the
//!   module's `fs.write` there; the module's `fs.read` of a terabyte file
//!   is refused on its size (MCP's `read_file`: tests/tests/mcp.rs).

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Output;

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::docker::Namespace;
use tinybox_tests::microvm::TCG;
use tinybox_tests::{have, need_microvm, skip};

const TIB: u64 = 1 << 40;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `script` in box `id`, which must succeed.
fn in_box(env: &BoxEnv, id: &str, script: &str) {
    let out = env.run(&["exec", id, "--", "sh", "-c", script]);
    assert!(out.status.success(), "{}: {script}: {}", env.who.label(), err(&out));
}

/// A directory the principal owns, for what a copy lands.
fn owned_dir(env: &BoxEnv) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    env.who.own(dir.path());
    dir
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// A refusal: exit 1, one line, holding every one of `words`.
fn assert_refused(out: &Output, what: &str, words: &[&str]) {
    let e = err(out);
    assert_eq!(out.status.code(), Some(1), "{what}: not refused: {e}");
    assert_eq!(e.trim().lines().count(), 1, "{what}: {e}");
    for w in words {
        assert!(e.contains(w), "{what}: {w:?} not in {e}");
    }
}

/// The bounds on a copy out of box `id`, whose workspace (at /workspace)
/// the probes write; `sparse` is the apparent size of the sparse file that
/// must land with its holes.
fn bounds(env: &BoxEnv, id: &str, sparse: u64) {
    let who = env.who.label();
    let out = owned_dir(env);
    let at = |n: &str| out.path().join(n);
    // A file of a terabyte and no blocks: refused on its size, nothing made.
    in_box(env, id, &format!("dd if=/dev/zero of=/workspace/huge bs=1 count=0 seek={TIB} 2>/dev/null"));
    let got = env.run(&["cp", "--max-size", "1G", &format!("{id}:/workspace/huge"), s(&at("huge"))]);
    assert_refused(&got, who, &["1 TiB", "over the copy's bound of 1 GiB", "--max-size"]);
    assert!(names(out.path()).is_empty(), "{who}: left {:?}", names(out.path()));
    // Sparse under the bound: lands with its holes and its bytes.
    let mark = sparse / 2 + 12345;
    in_box(
        env,
        id,
        &format!(
            "dd if=/dev/zero of=/workspace/sparse bs=1 count=0 seek={sparse} 2>/dev/null && printf data | dd of=/workspace/sparse bs=1 seek={mark} conv=notrunc 2>/dev/null"
        ),
    );
    let got = env.run(&["cp", &format!("{id}:/workspace/sparse"), s(&at("sparse"))]);
    assert!(got.status.success(), "{who}: {}", err(&got));
    let meta = std::fs::metadata(at("sparse")).unwrap();
    assert_eq!(meta.len(), sparse, "{who}: length");
    assert!(meta.blocks() * 512 <= 1 << 20, "{who}: {} bytes of blocks for 4 bytes of data", meta.blocks() * 512);
    let mut back = [0u8; 8];
    std::fs::File::open(at("sparse")).unwrap().read_exact_at(&mut back, mark - 2).unwrap();
    assert_eq!(&back, b"\0\0data\0\0", "{who}: contents");
    std::fs::remove_file(at("sparse")).unwrap();
    // Dense over the bound: one file claiming more, and a tree adding up to more.
    in_box(
        env,
        id,
        "mkdir -p /workspace/tree/sub && echo hi > /workspace/tree/a && \
         dd if=/dev/urandom of=/workspace/tree/sub/b bs=1024 count=1536 2>/dev/null && \
         dd if=/dev/urandom of=/workspace/tree/sub/c bs=1024 count=1536 2>/dev/null && \
         dd if=/dev/urandom of=/workspace/dense bs=1024 count=3072 2>/dev/null",
    );
    let got = env.run(&["cp", "--max-size", "2M", &format!("{id}:/workspace/dense"), s(&at("dense"))]);
    assert_refused(&got, who, &["3 MiB", "over the copy's bound of 2 MiB"]);
    let got = env.run(&["cp", "--max-size", "2M", &format!("{id}:/workspace/tree"), s(&at("tree"))]);
    assert_refused(&got, who, &["stopped at its bound of 2 MiB written", "nothing of it was left"]);
    assert!(names(out.path()).is_empty(), "{who}: left {:?}", names(out.path()));
    // Into an existing directory: what was there stays, what the copy made goes.
    std::fs::create_dir(at("keep")).unwrap();
    std::fs::write(at("keep/mine"), "mine").unwrap();
    env.who.own_tree(&at("keep"));
    let got = env.run(&["cp", "--max-size", "2M", &format!("{id}:/workspace/tree"), s(&at("keep"))]);
    assert_refused(&got, who, &["--max-size"]);
    assert_eq!(names(&at("keep")), ["mine"], "{who}");
    // A tar stream out stops at the bound.
    let got = env.run(&["cp", "--max-size", "1M", &format!("{id}:/workspace/tree"), "-"]);
    assert_refused(&got, who, &["tar stream stopped at the copy's bound of 1 MiB"]);
    assert!(got.stdout.len() as u64 <= 1 << 20, "{who}: {} bytes sent", got.stdout.len());
}

fn need_bwrap(test: &str) -> bool {
    if !have("bwrap") {
        skip(test, "bwrap is not installed (apt-get install bubblewrap)");
        return false;
    }
    true
}

#[test]
fn namespace_copies_out_keep_holes_and_stop_at_the_bound() {
    const TEST: &str = "copy_bounds::namespace_copies_out_keep_holes_and_stop_at_the_bound";
    if !need_bwrap(TEST) {
        return;
    }
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        let id = env.create(&["--sandbox", "namespace"]);
        bounds(&env, &id, 512 << 20);
        env.run(&["rm", &id]);
    }
}

#[test]
fn docker_copies_out_keep_holes_and_stop_at_the_bound() {
    const TEST: &str = "copy_bounds::docker_copies_out_keep_holes_and_stop_at_the_bound";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &why);
    }
    let ns = Namespace::new("cp-bounds");
    let env = BoxEnv::new(&Principal::Me);
    let id = env.create(&["--sandbox", "docker", "--namespace", &ns.name]);
    bounds(&env, &id, 512 << 20);
    env.run(&["rm", &id]);
}

#[test]
fn a_microvm_copy_out_keeps_holes_and_stops_at_the_bound() {
    need_microvm!("copy_bounds::a_microvm_copy_out_keeps_holes_and_stops_at_the_bound");
    let env = BoxEnv::new(&Principal::Me);
    let id = env.create(TCG);
    // Small: an emulated guest's tar sends every zero.
    bounds(&env, &id, 16 << 20);
    env.run(&["rm", &id]);
}

/// A box planting a link in its workspace to send a copy elsewhere, and
/// making a directory anyone may write.
fn planted(env: &BoxEnv, id: &str) {
    let who = env.who.label();
    let victim = owned_dir(env);
    let ws = env.workspace.path();
    in_box(
        env,
        id,
        &format!(
            "mkdir -p /workspace/src && echo s > /workspace/src/f && ln -sfn {v} /workspace/race2 && \
             mkdir -p /workspace/deep && ln -sfn ../race2 /workspace/deep/up && \
             mkdir /workspace/open && chmod 777 /workspace/open && {{ chmod 2777 /workspace/open 2>/dev/null || true; }} && echo x > /workspace/open/f && chmod 666 /workspace/open/f",
            v = s(victim.path())
        ),
    );
    for dst in ["race2/x", "race2", "race2/", "deep/up/x", "src/../race2/x"] {
        let got = env.run(&["cp", &format!("{id}:/workspace/src"), &format!("{}/{dst}", s(ws))]);
        assert_refused(&got, &format!("{who}: {dst}"), &["a symlink in box", "workspace", "which the box can point"]);
        assert!(names(victim.path()).is_empty(), "{who}: {dst}: written into the victim: {:?}", names(victim.path()));
    }
    // Reached from inside the workspace, by a relative path: the same.
    let got = env.cli(&["cp", &format!("{id}:/workspace/src"), "race2/x"]).current_dir(ws).output().unwrap();
    assert_refused(&got, who, &["a symlink in box"]);
    assert!(names(victim.path()).is_empty(), "{who}: written into the victim");
    // Without the link, a copy into the workspace lands.
    let got = env.run(&["cp", &format!("{id}:/workspace/src"), &format!("{}/copied", s(ws))]);
    assert!(got.status.success(), "{who}: {}", err(&got));
    assert_eq!(std::fs::read_to_string(ws.join("copied/f")).unwrap(), "s\n");
    // 2777 in the box: 0755 here, and its file 0644.
    let out = owned_dir(env);
    let got = env.run(&["cp", &format!("{id}:/workspace/open"), s(&out.path().join("open"))]);
    assert!(got.status.success(), "{who}: {}", err(&got));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&out.path().join("open")), 0o755, "{who}");
    assert_eq!(mode(&out.path().join("open/f")), 0o644, "{who}");
}

#[test]
fn namespace_a_destination_through_a_planted_link_is_refused() {
    const TEST: &str = "copy_bounds::namespace_a_destination_through_a_planted_link_is_refused";
    if !need_bwrap(TEST) {
        return;
    }
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        let id = env.create(&["--sandbox", "namespace"]);
        planted(&env, &id);
        env.run(&["rm", &id]);
    }
}

#[test]
fn docker_a_destination_through_a_planted_link_is_refused() {
    const TEST: &str = "copy_bounds::docker_a_destination_through_a_planted_link_is_refused";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &why);
    }
    let ns = Namespace::new("cp-planted");
    let env = BoxEnv::new(&Principal::Me);
    let id = env.create(&["--sandbox", "docker", "--namespace", &ns.name]);
    planted(&env, &id);
    env.run(&["rm", &id]);
}

#[test]
fn namespace_a_copy_where_the_box_keeps_nothing_is_refused() {
    const TEST: &str = "copy_bounds::namespace_a_copy_where_the_box_keeps_nothing_is_refused";
    if !need_bwrap(TEST) {
        return;
    }
    for who in Principal::all(TEST) {
        let who_is = who.label();
        let env = BoxEnv::new(&who);
        let id = env.create(&["--sandbox", "namespace"]);
        let src = owned_dir(&env);
        let file = src.path().join("f");
        std::fs::write(&file, "kept?").unwrap();
        env.who.own(&file);
        // The record as JSON (the table's "expires in" moves with the clock).
        let before = env.run(&["--json", "inspect", &id]).stdout;
        for dst in ["/tmp/x", "/tmp/", "/etc/x", "/workspace/../tmp/x"] {
            let got = env.run(&["cp", s(&file), &format!("{id}:{dst}")]);
            assert_refused(
                &got,
                &format!("{who_is}: {dst}"),
                &[&format!("namespace box {id} keeps only /workspace between commands"), "copy to /workspace/..."],
            );
        }
        assert_eq!(
            String::from_utf8_lossy(&env.run(&["--json", "inspect", &id]).stdout),
            String::from_utf8_lossy(&before),
            "{who_is}: the box's record changed"
        );
        // Where the box keeps it: copied, and the next command sees it.
        for dst in ["/workspace/x", "y"] {
            let got = env.run(&["cp", s(&file), &format!("{id}:{dst}")]);
            assert!(got.status.success(), "{who_is}: {dst}: {}", err(&got));
        }
        let shown = env.run(&["exec", &id, "--", "cat", "/workspace/x", "/workspace/y"]);
        assert_eq!(String::from_utf8_lossy(&shown.stdout), "kept?kept?", "{who_is}: {}", err(&shown));
        env.run(&["rm", &id]);
    }
}

mod module_support;

#[test]
fn the_modules_file_calls_refuse_a_terabyte_read_and_an_unkept_write() {
    const TEST: &str = "copy_bounds::the_modules_file_calls_refuse_a_terabyte_read_and_an_unkept_write";
    if !have("python3") {
        return skip(TEST, "python3 is not on PATH");
    }
    if !module_support::namespace_available(TEST) {
        return;
    }
    let dir = module_support::temp();
    let (store, ws) = (dir.path().join("store"), dir.path().join("ws"));
    std::fs::create_dir(&ws).unwrap();
    // A terabyte of holes, made here: the box sees it in /workspace.
    std::fs::File::create(ws.join("huge")).unwrap().set_len(TIB).unwrap();
    let calls = serde_json::json!([
        ["create", { "sandbox": "namespace", "workspace": ws }],
        ["fs.read", { "id": "$id", "path": "/workspace/huge" }],
        ["fs.write", { "id": "$id", "path": "/tmp/x", "content": "gone?" }],
        ["fs.write", { "id": "$id", "path": "/workspace/x", "content": "kept" }],
        ["rm", { "id": "$id" }],
    ]);
    let r = module_support::python_calls(&store, &calls);
    assert_eq!(r.len(), 5, "{r:?}");
    let message = |i: usize| r[i]["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message(1).contains("1099511627776 bytes, over the 1048576-byte bound"), "{}", r[1]);
    assert!(message(2).contains("keeps only /workspace between commands"), "{}", r[2]);
    assert!(r[3]["ok"].is_object(), "{}", r[3]);
    assert_eq!(std::fs::read_to_string(ws.join("x")).unwrap(), "kept");
}
