//! Hostile layers, built here with the tar crate: nothing they hold may
//! land outside the layer's directory, or keep a privilege bit.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;

use crate::unpack::{UnpackError, unpack};

/// A tar of raw entries (name, type, link target, body, mode), with names
/// written as they are (the tar crate's checked setters would refuse the
/// hostile ones).
fn tar_of(entries: &[(&str, tar::EntryType, &str, &[u8], u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, link, body, mode) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
        if !link.is_empty() {
            h.as_gnu_mut().unwrap().linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_entry_type(*kind);
        h.set_size(body.len() as u64);
        h.set_mode(*mode);
        h.set_cksum();
        b.append(&h, *body).unwrap();
    }
    b.into_inner().unwrap()
}

use tar::EntryType::{Block, Char, Directory as Dir, Fifo, Link, Regular as File, Symlink};

/// A sandbox: `outside` holds a canary and sits beside the layer's dir.
struct Scene {
    _tmp: tempfile::TempDir,
    layer: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn scene() -> Scene {
    let tmp = tempfile::tempdir().unwrap();
    let layer = tmp.path().join("layer");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&layer).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("canary"), b"untouched").unwrap();
    Scene { _tmp: tmp, layer, outside }
}

impl Scene {
    fn outside_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(&self.outside).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("canary")], "something landed outside the layer");
        assert_eq!(std::fs::read(self.outside.join("canary")).unwrap(), b"untouched");
        let parent = self.outside.parent().unwrap();
        let mut beside: Vec<_> = std::fs::read_dir(parent).unwrap().map(|e| e.unwrap().file_name()).collect();
        beside.sort();
        assert_eq!(beside, vec![std::ffi::OsString::from("layer"), std::ffi::OsString::from("outside")]);
    }
}

fn run(
    s: &Scene,
    entries: &[(&str, tar::EntryType, &str, &[u8], u32)],
) -> Result<crate::unpack::LayerMeta, UnpackError> {
    unpack(&tar_of(entries)[..], &s.layer)
}

#[test]
fn dot_dot_is_refused_and_writes_nothing_outside() {
    let s = scene();
    let e = run(&s, &[("../outside/evil", File, "", b"x", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::Climbs { .. }), "{e}");
    let e = run(scene_reset(&s), &[("a/../../outside/evil", File, "", b"x", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::Climbs { .. }), "{e}");
    s.outside_untouched();
}

fn scene_reset(s: &Scene) -> &Scene {
    let _ = std::fs::remove_dir_all(&s.layer);
    std::fs::create_dir(&s.layer).unwrap();
    s
}

#[test]
fn absolute_names_are_refused() {
    let s = scene();
    let target = format!("{}/evil", s.outside.display());
    let e = run(&s, &[(&target, File, "", b"x", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::Absolute { .. }), "{e}");
    s.outside_untouched();
}

#[test]
fn a_file_through_a_symlink_of_the_layer_is_refused() {
    let s = scene();
    let out = s.outside.display().to_string();
    for entries in [
        vec![("link", Symlink, out.as_str(), &b""[..], 0o777), ("link/evil", File, "", b"x", 0o644)],
        vec![("link", Symlink, "../outside", &b""[..], 0o777), ("link/evil", File, "", b"x", 0o644)],
        vec![
            ("d", Dir, "", &b""[..], 0o755),
            ("d/link", Symlink, "../../outside", b"", 0o777),
            ("d/link/x/evil", File, "", b"x", 0o644),
        ],
        vec![("link", Symlink, "../outside", &b""[..], 0o777), ("link/sub", Dir, "", b"", 0o755)],
    ] {
        let e = run(scene_reset(&s), &entries).unwrap_err();
        assert!(matches!(e, UnpackError::ThroughSymlink { .. }), "{e}");
    }
    s.outside_untouched();
}

#[test]
fn a_file_over_a_symlink_replaces_the_link_not_its_target() {
    let s = scene();
    let canary = s.outside.join("canary").display().to_string();
    run(&s, &[("link", Symlink, canary.as_str(), b"", 0o777), ("link", File, "", b"mine", 0o644)]).unwrap();
    assert_eq!(std::fs::read(s.layer.join("root/link")).unwrap(), b"mine");
    s.outside_untouched();
}

#[test]
fn hard_links_out_of_the_layer_or_to_nothing_are_refused() {
    let s = scene();
    let canary = s.outside.join("canary").display().to_string();
    let e = run(&s, &[("h", Link, canary.as_str(), b"", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::HardLinkOut { .. }), "{e}");
    let e = run(scene_reset(&s), &[("h", Link, "../outside/canary", b"", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::HardLinkOut { .. }), "{e}");
    let e = run(scene_reset(&s), &[("h", Link, "absent", b"", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::HardLinkMissing { .. }), "{e}");
    // Through a symlink of the layer to a file outside.
    let e = run(scene_reset(&s), &[("l", Symlink, "../outside", b"", 0o777), ("h", Link, "l/canary", b"", 0o644)])
        .unwrap_err();
    assert!(matches!(e, UnpackError::ThroughSymlink { .. }), "{e}");
    // A hard link to a symlink that points out links the symlink itself.
    run(scene_reset(&s), &[("l", Symlink, canary.as_str(), b"", 0o777), ("h", Link, "l", b"", 0o644)]).unwrap();
    assert!(s.layer.join("root/h").symlink_metadata().unwrap().file_type().is_symlink());
    s.outside_untouched();
    assert_eq!(std::fs::metadata(s.outside.join("canary")).unwrap().nlink(), 1);
}

use std::os::unix::fs::MetadataExt;

#[test]
fn a_good_hard_link_shares_the_file() {
    let s = scene();
    run(&s, &[("a", File, "", b"data", 0o644), ("b", Link, "a", b"", 0o644)]).unwrap();
    let a = std::fs::metadata(s.layer.join("root/a")).unwrap();
    let b = std::fs::metadata(s.layer.join("root/b")).unwrap();
    assert_eq!(a.ino(), b.ino());
}

#[test]
fn devices_and_fifos_are_skipped() {
    let s = scene();
    let meta =
        run(&s, &[("dev/null", Char, "", b"", 0o666), ("sda", Block, "", b"", 0o660), ("p", Fifo, "", b"", 0o644)])
            .unwrap();
    assert_eq!(meta.skipped.len(), 3);
    assert!(!s.layer.join("root/sda").exists());
    assert!(!s.layer.join("root/p").exists());
    assert!(!s.layer.join("root/dev/null").exists());
}

#[test]
fn no_file_keeps_setuid_setgid_or_sticky() {
    let s = scene();
    run(
        &s,
        &[
            ("su", File, "", b"#!", 0o4755),
            ("sg", File, "", b"#!", 0o2755),
            ("st", File, "", b"x", 0o1644),
            ("tmp", Dir, "", b"", 0o1777),
        ],
    )
    .unwrap();
    for name in ["su", "sg", "st"] {
        let mode = std::fs::metadata(s.layer.join("root").join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o7000, 0, "{name} kept {mode:o}");
    }
    assert_eq!(std::fs::metadata(s.layer.join("root/sg")).unwrap().permissions().mode() & 0o777, 0o755);
    // Sticky on a directory is no privilege and /tmp needs it.
    assert_eq!(std::fs::metadata(s.layer.join("root/tmp")).unwrap().permissions().mode() & 0o7777, 0o1777);
}

#[test]
fn a_directory_closed_to_its_owner_is_opened_here_and_remembered() {
    let s = scene();
    let meta = run(&s, &[("ro", Dir, "", b"", 0o555), ("ro/f", File, "", b"x", 0o444)]).unwrap();
    assert_eq!(meta.closed_dirs.get(Path::new("ro")), Some(&0o555));
    assert_eq!(std::fs::metadata(s.layer.join("root/ro")).unwrap().permissions().mode() & 0o777, 0o755);
}

#[test]
fn the_diff_id_is_the_digest_of_the_whole_tar() {
    let s = scene();
    let tar = tar_of(&[("a", File, "", b"data", 0o644)]);
    let meta = unpack(&tar[..], &s.layer).unwrap();
    assert_eq!(meta.diff_id.unwrap(), crate::digest::Digest::of(&tar));
}

#[test]
fn whiteouts_stay_as_markers() {
    let s = scene();
    run(&s, &[("d/.wh.gone", File, "", b"", 0o644), ("e/.wh..wh..opq", File, "", b"", 0o644)]).unwrap();
    assert!(s.layer.join("root/d/.wh.gone").is_file());
    assert!(s.layer.join("root/e/.wh..wh..opq").is_file());
    let e = run(scene_reset(&s), &[("d/.wh.", File, "", b"", 0o644)]).unwrap_err();
    assert!(matches!(e, UnpackError::BadWhiteout { .. }), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever names a layer uses, made of the pieces attacks are made
    /// of, nothing lands outside: an entry is unpacked beneath the layer or
    /// the layer is refused.
    #[test]
    fn no_name_escapes(parts in prop::collection::vec(
        prop::collection::vec(prop::sample::select(vec!["..", ".", "a", "link", "outside", "", "b"]), 1..5), 1..6),
        absolute in prop::collection::vec(any::<bool>(), 6),
    ) {
        let s = scene();
        let names: Vec<String> = parts.iter().zip(&absolute).map(|(p, abs)| {
            let joined = p.join("/");
            if *abs { format!("/{joined}") } else { joined }
        }).filter(|n| !n.is_empty() && n.len() < 90).collect();
        let mut entries: Vec<(&str, tar::EntryType, &str, &[u8], u32)> = vec![("link", Symlink, "../outside", b"", 0o777)];
        for (i, n) in names.iter().enumerate() {
            let kind = [File, Dir, Symlink, Link][i % 4];
            entries.push((n.as_str(), kind, if kind == File || kind == Dir { "" } else { "../outside/canary" }, b"x", 0o644));
        }
        let _ = run(&s, &entries);
        s.outside_untouched();
    }
}
