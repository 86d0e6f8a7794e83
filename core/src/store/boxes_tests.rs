//! The one-file-per-box layout: what it writes, what it refuses, and how a
//! store an older build wrote moves to it.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::model::{BoxSpec, Placement};

fn id(s: &str) -> BoxId {
    BoxId::new(s).unwrap()
}

fn record(name: &str) -> BoxInfo {
    BoxInfo::creating(id(name), BoxSpec::new(Placement::local_passthrough()), None)
}

fn ids(files: &BoxFiles) -> Vec<String> {
    files.list().unwrap().into_iter().map(|b| b.id.to_string()).collect()
}

#[test]
fn the_first_change_makes_a_private_directory_and_reads_make_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b");
    let files = BoxFiles::open(&dir);
    assert!(files.list().unwrap().is_empty());
    assert!(files.get(&id("box-0")).unwrap().is_none());
    assert_eq!(files.next_free_id().unwrap(), id("box-0"));
    assert!(!tmp.path().join("a").exists(), "reading made a directory");
    files.insert(record("box-0")).unwrap();
    for d in [dir.clone(), dir.join("boxes")] {
        assert_eq!(fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700, "{}", d.display());
    }
    assert_eq!(ids(&files), ["box-0"]);
}

#[test]
fn each_box_is_a_file_of_its_own_beside_a_marker_an_older_build_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let files = BoxFiles::open(tmp.path());
    for name in ["box-10", "box-2", "web"] {
        files.insert(record(name)).unwrap();
    }
    let marker: serde_json::Value = serde_json::from_slice(&fs::read(files.marker_path()).unwrap()).unwrap();
    // Version 1 builds refuse a newer version, and find no boxes to drop.
    assert_eq!(marker["version"], 2);
    assert_eq!(marker["boxes"], serde_json::json!([]));
    let one: BoxInfo = serde_json::from_slice(&fs::read(tmp.path().join("boxes/web.json")).unwrap()).unwrap();
    assert_eq!(one, record("web"));
    assert_eq!(ids(&files), ["box-2", "box-10", "web"], "listed in box order");

    let inode = |p: &str| std::os::unix::fs::MetadataExt::ino(&fs::metadata(tmp.path().join(p)).unwrap());
    let (marker_before, record_before) = (inode("boxes.json"), inode("boxes/box-2.json"));
    assert!(files.remove(&id("box-5")).unwrap().is_none());
    assert!(matches!(files.insert(record("box-2")), Err(StoreError::Exists(_))));
    files.update(&id("box-2"), &mut |_| {}).unwrap();
    assert_eq!(inode("boxes.json"), marker_before, "a change rewrote the marker");
    assert_eq!(inode("boxes/box-2.json"), record_before, "a no-op rewrote the record");
}

#[test]
fn the_lowest_free_number_is_found_without_reading_every_record() {
    let tmp = tempfile::tempdir().unwrap();
    let files = BoxFiles::open(tmp.path());
    for n in 0..6 {
        assert_eq!(files.next_free_id().unwrap(), id(&format!("box-{n}")));
        files.insert(record(&format!("box-{n}"))).unwrap();
    }
    files.remove(&id("box-4")).unwrap();
    files.remove(&id("box-1")).unwrap();
    assert_eq!(files.next_free_id().unwrap(), id("box-1"));
    files.insert(record("box-1")).unwrap();
    assert_eq!(files.next_free_id().unwrap(), id("box-4"));
    // A bound lost or damaged only costs lookups, never a taken number.
    fs::write(tmp.path().join("boxes/.lowest"), "garbage").unwrap();
    assert_eq!(files.next_free_id().unwrap(), id("box-4"));
    fs::remove_file(tmp.path().join("boxes/.lowest")).unwrap();
    assert_eq!(files.next_free_id().unwrap(), id("box-4"));
}

#[test]
fn a_version_1_document_is_read_as_it_is_and_moved_by_the_first_change() {
    let tmp = tempfile::tempdir().unwrap();
    let old = [record("box-0"), record("box-3"), record("dev")];
    let doc = serde_json::json!({"version": 1, "boxes": old});
    fs::write(tmp.path().join("boxes.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    let files = BoxFiles::open(tmp.path());
    assert_eq!(ids(&files), ["box-0", "box-3", "dev"]);
    assert_eq!(files.get(&id("dev")).unwrap(), Some(record("dev")));
    assert_eq!(files.next_free_id().unwrap(), id("box-1"));
    assert!(!tmp.path().join("boxes").exists(), "a read migrated the store");

    files.insert(record("box-1")).unwrap();
    let marker: serde_json::Value = serde_json::from_slice(&fs::read(files.marker_path()).unwrap()).unwrap();
    assert_eq!(marker["version"], 2);
    assert_eq!(ids(&files), ["box-0", "box-1", "box-3", "dev"], "no box was lost or orphaned");
    assert_eq!(files.get(&id("box-3")).unwrap(), Some(record("box-3")));
    assert_eq!(files.next_free_id().unwrap(), id("box-2"));
}

#[test]
fn an_interrupted_migration_leaves_the_document_in_force_and_is_redone() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = serde_json::json!({"version": 1, "boxes": [record("box-0")]});
    fs::write(tmp.path().join("boxes.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    // What a migration killed before its marker leaves: files for boxes,
    // one of which the document (still in force) no longer holds.
    fs::create_dir(tmp.path().join("boxes")).unwrap();
    fs::write(tmp.path().join("boxes/box-0.json"), serde_json::to_vec(&record("box-0")).unwrap()).unwrap();
    fs::write(tmp.path().join("boxes/box-9.json"), serde_json::to_vec(&record("box-9")).unwrap()).unwrap();
    let files = BoxFiles::open(tmp.path());
    assert_eq!(ids(&files), ["box-0"], "the document is in force until the marker replaces it");
    files.update(&id("box-0"), &mut |b| b.created_at = Some(7)).unwrap();
    assert_eq!(ids(&files), ["box-0"]);
    assert_eq!(files.get(&id("box-0")).unwrap().unwrap().created_at, Some(7));
}

#[test]
fn records_without_their_marker_are_adopted_not_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let files = BoxFiles::open(tmp.path());
    files.insert(record("box-0")).unwrap();
    files.insert(record("box-1")).unwrap();
    fs::remove_file(files.marker_path()).unwrap();
    assert_eq!(ids(&files), ["box-0", "box-1"]);
    files.insert(record("box-2")).unwrap();
    assert_eq!(ids(&files), ["box-0", "box-1", "box-2"]);
    assert!(files.marker_path().exists(), "the change wrote the marker back");
}

#[test]
fn what_the_layout_cannot_hold_is_corrupt_and_left_untouched() {
    let one = serde_json::to_string(&record("box-0")).unwrap();
    for marker in [
        r#"{"version": 3, "boxes": []}"#.to_owned(),
        format!(r#"{{"version": 2, "boxes": [{one}]}}"#),
        format!(r#"{{"boxes": [{one}, {one}]}}"#),
        "{".to_owned(),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let files = BoxFiles::open(tmp.path());
        fs::write(files.marker_path(), &marker).unwrap();
        assert!(matches!(files.list(), Err(StoreError::Corrupt { .. })), "{marker}");
        assert!(matches!(files.insert(record("box-1")), Err(StoreError::Corrupt { .. })), "{marker}");
        assert_eq!(fs::read_to_string(files.marker_path()).unwrap(), marker, "a corrupt marker was rewritten");
    }
    // A record filed under another box's name.
    let tmp = tempfile::tempdir().unwrap();
    let files = BoxFiles::open(tmp.path());
    files.insert(record("box-0")).unwrap();
    fs::write(tmp.path().join("boxes/box-0.json"), serde_json::to_vec(&record("box-1")).unwrap()).unwrap();
    assert!(matches!(files.get(&id("box-0")), Err(StoreError::Corrupt { .. })));
    assert!(matches!(files.list(), Err(StoreError::Corrupt { .. })));
}

#[test]
fn temporary_files_of_killed_writers_are_cleared_by_the_next_change_only() {
    let tmp = tempfile::tempdir().unwrap();
    let files = BoxFiles::open(tmp.path());
    files.insert(record("box-0")).unwrap();
    let stale = tmp.path().join(".boxes.tmp/record.abc123.tmp");
    fs::write(&stale, b"{").unwrap();
    files.list().unwrap();
    assert!(stale.exists(), "readers leave temporary files alone");
    files.insert(record("box-1")).unwrap();
    assert!(!stale.exists());
    assert_eq!(ids(&files), ["box-0", "box-1"], "a temporary file is never a box");
}

#[test]
fn several_boxes_are_read_in_the_order_asked_in_either_layout() {
    let asked = [id("dev"), id("box-9"), id("box-0"), id("dev")];
    let want = |got: Vec<Option<BoxInfo>>| {
        let names: Vec<Option<String>> = got.into_iter().map(|b| b.map(|b| b.id.to_string())).collect();
        assert_eq!(names, [Some("dev".into()), None, Some("box-0".into()), Some("dev".into())]);
    };
    let tmp = tempfile::tempdir().unwrap();
    let files = BoxFiles::open(tmp.path());
    assert_eq!(files.get_many(&asked).unwrap(), vec![None; 4], "an empty store has none of them");
    let doc = serde_json::json!({"version": 1, "boxes": [record("box-0"), record("dev")]});
    fs::write(tmp.path().join("boxes.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    want(files.get_many(&asked).unwrap());
    files.insert(record("box-1")).unwrap();
    assert!(tmp.path().join("boxes").is_dir(), "the change moved the store to one file per box");
    want(files.get_many(&asked).unwrap());
    assert_eq!(files.get_many(&[]).unwrap(), vec![]);
}
