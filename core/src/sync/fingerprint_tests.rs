//! The fingerprint and exclusion rules, and the tar stream they feed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::sync::transfer::{Counters, parse_marker, write_tar};

fn write(root: &Path, rel: &str, contents: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, contents).unwrap();
}

fn fp(root: &Path) -> String {
    Tree::scan(root).unwrap().fingerprint().unwrap()
}

fn paths(root: &Path) -> Vec<String> {
    Tree::scan(root)
        .unwrap()
        .entries
        .iter()
        .filter(|e| matches!(e.kind, Kind::File { .. }))
        .map(|e| String::from_utf8(e.rel.clone()).unwrap())
        .collect()
}

fn sample() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "src/main.rs", "fn main() {}\n");
    write(d.path(), "README", "hello\n");
    write(d.path(), "a/b/c/deep.txt", "deep\n");
    d
}

#[test]
fn the_fingerprint_is_reproducible_and_ignores_modification_times() {
    let d = sample();
    let first = fp(d.path());
    assert_eq!(first.len(), 64);
    assert_eq!(fp(d.path()), first, "same tree, same fingerprint");
    // A copy elsewhere (another machine, another path) is the same tree.
    let other = tempfile::tempdir().unwrap();
    for rel in ["src/main.rs", "README", "a/b/c/deep.txt"] {
        write(other.path(), rel, &std::fs::read_to_string(d.path().join(rel)).unwrap());
    }
    assert_eq!(fp(other.path()), first);
    // touch: new mtime, same content.
    let f = std::fs::File::options().write(true).open(d.path().join("README")).unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(12345)).unwrap();
    assert_eq!(fp(d.path()), first, "mtimes are not hashed");
}

#[test]
fn content_path_and_executable_bit_each_change_it() {
    let d = sample();
    let base = fp(d.path());
    write(d.path(), "README", "hello!\n");
    let changed = fp(d.path());
    assert_ne!(changed, base, "content");
    write(d.path(), "README", "hello\n");
    assert_eq!(fp(d.path()), base, "back to the same content");
    std::fs::set_permissions(d.path().join("README"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_ne!(fp(d.path()), base, "executable bit");
    std::fs::set_permissions(d.path().join("README"), std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(fp(d.path()), base);
    std::fs::rename(d.path().join("README"), d.path().join("README2")).unwrap();
    assert_ne!(fp(d.path()), base, "path");
    std::fs::rename(d.path().join("README2"), d.path().join("README")).unwrap();
    // Moving content between files is a change even though the multiset of contents is not.
    write(d.path(), "x", "1");
    write(d.path(), "y", "2");
    let xy = fp(d.path());
    write(d.path(), "x", "2");
    write(d.path(), "y", "1");
    assert_ne!(fp(d.path()), xy);
}

#[test]
fn the_rules_are_part_of_the_identity() {
    let d = sample();
    let base = fp(d.path());
    // A rule that excludes nothing still changes what the fingerprint describes.
    write(d.path(), ".boxignore", "nothing-matches-this\n");
    let with_rules = fp(d.path());
    assert_ne!(with_rules, base);
    // The same file set under different rule text is a different tree.
    write(d.path(), ".boxignore", "nothing-matches-that\n");
    assert_ne!(fp(d.path()), with_rules);
}

#[test]
fn gitignore_then_boxignore_with_full_semantics() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    write(r, ".gitignore", "target/\n.env\n*.log\n/build\nlogs/\n**/gen/*.rs\nkeep/*\n!keep/this\n");
    write(r, ".boxignore", "!.env\n!important.log\nsecret.txt\n");
    for f in [
        "target/debug/app",
        "src/lib.rs",
        ".env",
        "x.log",
        "important.log",
        "build/out",
        "sub/build/out",
        "logs/a",
        "sub/logs",
        "a/gen/g.rs",
        "a/gen/g.txt",
        "keep/this",
        "keep/that",
        "secret.txt",
        "sub/secret.txt",
    ] {
        write(r, f, "x");
    }
    let got = paths(r);
    let expected = [
        ".boxignore",
        ".env",
        ".gitignore",
        "a/gen/g.txt",
        "important.log",
        "keep/this",
        "src/lib.rs",
        "sub/build/out",
        "sub/logs",
    ];
    assert_eq!(got, expected, "negation, anchoring, directory-only, ** and precedence");
}

#[test]
fn a_negation_cannot_reach_into_an_excluded_directory() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), ".gitignore", "node_modules/\n");
    write(d.path(), ".boxignore", "!node_modules/keep.js\n");
    write(d.path(), "node_modules/keep.js", "x");
    write(d.path(), "index.js", "x");
    assert_eq!(paths(d.path()), [".boxignore", ".gitignore", "index.js"], "as git does");
}

#[test]
fn only_the_root_ignore_files_are_read() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "sub/.gitignore", "*.txt\n");
    write(d.path(), "sub/a.txt", "x");
    assert_eq!(paths(d.path()), ["sub/.gitignore", "sub/a.txt"]);
}

#[test]
fn symbolic_links_are_skipped_never_followed() {
    let d = sample();
    let base = fp(d.path());
    std::os::unix::fs::symlink("/etc", d.path().join("etc-link")).unwrap();
    std::os::unix::fs::symlink("README", d.path().join("readme-link")).unwrap();
    std::os::unix::fs::symlink(".", d.path().join("a/loop")).unwrap();
    assert_eq!(fp(d.path()), base);
    assert!(!paths(d.path()).iter().any(|p| p.contains("link") || p.contains("loop")));
}

#[test]
fn the_marker_is_never_part_of_the_tree() {
    let d = sample();
    let base = fp(d.path());
    write(d.path(), MARKER, "0000");
    assert_eq!(fp(d.path()), base);
}

#[test]
fn an_unclosed_class_is_read_literally_as_git_does() {
    let d = sample();
    write(d.path(), ".boxignore", "a[\n");
    write(d.path(), "a[", "x");
    assert!(!paths(d.path()).contains(&"a[".to_owned()));
}

#[test]
fn not_a_directory_is_refused() {
    let d = sample();
    assert!(matches!(Tree::scan(&d.path().join("README")), Err(SyncError::NotADirectory(_))));
    assert!(matches!(Tree::scan(&d.path().join("missing")), Err(SyncError::Io { .. })));
}

#[test]
fn markers_parse_only_as_fingerprints() {
    let f = "a".repeat(64);
    assert_eq!(parse_marker(format!("{f}\n").as_bytes()), Some(f.clone()));
    assert_eq!(parse_marker(b""), None);
    assert_eq!(parse_marker(b"garbage"), None);
    assert_eq!(parse_marker(&[0xff; 64]), None);
    assert_eq!(parse_marker("g".repeat(64).as_bytes()), None);
}

#[test]
fn the_tar_stream_holds_relative_paths_modes_and_contents() {
    let d = sample();
    std::fs::set_permissions(d.path().join("README"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(d.path().join("empty")).unwrap();
    let tree = Tree::scan(d.path()).unwrap();
    let counters = Arc::new(Counters::default());
    let mut stream = Vec::new();
    write_tar(&tree, &mut stream, &counters).unwrap();
    assert_eq!(counters.bytes.load(std::sync::atomic::Ordering::Relaxed), stream.len() as u64);
    assert_eq!(counters.files.load(std::sync::atomic::Ordering::Relaxed), 3);
    let mut archive = tar::Archive::new(stream.as_slice());
    let mut seen = Vec::new();
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().into_owned();
        assert!(path.is_relative() && !path.components().any(|c| c == std::path::Component::ParentDir), "{path:?}");
        let mode = e.header().mode().unwrap();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut e, &mut body).unwrap();
        seen.push((path.to_string_lossy().into_owned(), mode, body));
    }
    assert!(seen.contains(&("README".into(), 0o755, "hello\n".into())));
    assert!(seen.contains(&("src/main.rs".into(), 0o644, "fn main() {}\n".into())));
    assert!(seen.iter().any(|(p, m, _)| p == "empty" && *m == 0o755));

    // The system tar unpacks it to the same tree.
    let out = tempfile::tempdir().unwrap();
    let mut tar = std::process::Command::new("tar")
        .args(["-x", "-f", "-", "-C"])
        .arg(out.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &stream).unwrap();
    drop(tar.stdin.take());
    assert!(tar.wait().unwrap().success());
    assert_eq!(fp(out.path()), fp(d.path()));
}

#[test]
fn the_cached_fingerprint_is_the_fingerprint_and_sees_every_change_made_since() {
    let d = sample();
    let cache = tempfile::tempdir().unwrap();
    let cached = |root: &Path| Tree::scan(root).unwrap().fingerprint_cached(cache.path()).unwrap();
    assert_eq!(cached(d.path()), fp(d.path()), "a cold cache");
    assert_eq!(cached(d.path()), fp(d.path()), "a warm cache");
    // Changes made right after a scan are in its racy window, so the cache
    // never holds them; each one must still show.
    write(d.path(), "src/main.rs", "fn main() { changed() }\n");
    assert_eq!(cached(d.path()), fp(d.path()), "a content change");
    let same_size = "fn main() { chxnged() }\n";
    write(d.path(), "src/main.rs", same_size);
    assert_eq!(cached(d.path()), fp(d.path()), "a same-size change");
}

#[test]
fn a_file_rewritten_with_its_old_modification_time_is_read_again() {
    let d = sample();
    let cache = tempfile::tempdir().unwrap();
    let file = d.path().join("src/main.rs");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&file).unwrap().set_modified(old).unwrap();
    // Scan as if an hour had passed, so nothing is racily clean and the
    // file's leaf is cached.
    let mut tree = Tree::scan(d.path()).unwrap();
    tree.scanned_at += std::time::Duration::from_secs(3600 * 2);
    let before = tree.fingerprint_cached(cache.path()).unwrap();
    // Same size, same modification time: only the change time differs.
    std::fs::write(&file, "fn mxin() {}\n").unwrap();
    std::fs::File::options().write(true).open(&file).unwrap().set_modified(old).unwrap();
    let after = Tree::scan(d.path()).unwrap().fingerprint_cached(cache.path()).unwrap();
    assert_ne!(after, before, "the cache hid a change");
    assert_eq!(after, fp(d.path()));
}

#[test]
fn an_unchanged_file_is_taken_from_the_cache_not_read() {
    let d = sample();
    let cache = tempfile::tempdir().unwrap();
    let tree = Tree::scan(d.path()).unwrap();
    let main = tree.entries.iter().find(|e| e.rel == b"src/main.rs").unwrap();
    // A cache that lies about one file whose metadata still matches: if the
    // fingerprint changes, the file's bytes were not read.
    let lie = blake3::hash(b"not what the file holds");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    crate::sync::leaf_cache::LeafCache::load(cache.path(), d.path()).save([(&main.rel[..], main.stat, lie)], later);
    let through_cache = Tree::scan(d.path()).unwrap().fingerprint_cached(cache.path()).unwrap();
    assert_ne!(through_cache, fp(d.path()), "the cached leaf was not used");
}

#[test]
fn a_cache_that_already_holds_the_tree_is_not_written_again() {
    let d = sample();
    let cache = tempfile::tempdir().unwrap();
    // Scans as if an hour had passed, so nothing is racily clean.
    let later = |root: &Path| {
        let mut tree = Tree::scan(root).unwrap();
        tree.scanned_at += std::time::Duration::from_secs(3600);
        tree.fingerprint_cached(cache.path()).unwrap()
    };
    let saved_as = || {
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::read_dir(cache.path()).unwrap().next().unwrap().unwrap().path();
        std::fs::metadata(file).unwrap().ino()
    };
    assert_eq!(later(d.path()), fp(d.path()));
    let first = saved_as();
    assert_eq!(later(d.path()), fp(d.path()));
    assert_eq!(saved_as(), first, "an unchanged tree rewrote its cache");
    // A new file, then a removed one: each is saved (replaced by rename).
    write(d.path(), "src/new.rs", "// new\n");
    assert_eq!(later(d.path()), fp(d.path()));
    let second = saved_as();
    assert_ne!(second, first, "a new file was not saved");
    std::fs::remove_file(d.path().join("src/new.rs")).unwrap();
    assert_eq!(later(d.path()), fp(d.path()));
    assert_ne!(saved_as(), second, "a removed file was kept in the cache");
}
