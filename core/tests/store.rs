//! The store contract, run against both stores, and the file store's
//! handling of documents it did not write itself.

use std::collections::BTreeMap;
use std::fs;

use proptest::prelude::*;
use tinybox_core::model::{BoxId, BoxInfo, BoxSpec, HostName, Phase, Placement, SandboxName, SnapshotId};
use tinybox_core::model::{SnapshotRecord, TemplateName};
use tinybox_core::store::{FileStore, MemoryStore, Store, StoreError, Template, TemplateStore, insert_new};

fn id(s: &str) -> BoxId {
    BoxId::new(s).unwrap()
}

fn record(name: &str) -> BoxInfo {
    BoxInfo::creating(id(name), BoxSpec::new(Placement::local_passthrough()), Some(1))
}

fn ids(store: &dyn Store) -> Vec<String> {
    store.list().unwrap().into_iter().map(|b| b.id.to_string()).collect()
}

fn crud(store: &dyn Store) {
    assert!(store.list().unwrap().is_empty());
    assert_eq!(store.get(&id("box-0")).unwrap(), None);
    store.insert(record("box-0")).unwrap();
    store.insert(record("box-1")).unwrap();
    assert_eq!(store.get(&id("box-0")).unwrap(), Some(record("box-0")));
    assert_eq!(ids(store), ["box-0", "box-1"]);

    let updated = store.update(&id("box-1"), &mut |b| b.phase = Phase::Created).unwrap();
    assert_eq!(updated.phase, Phase::Created);
    assert_eq!(store.get(&id("box-1")).unwrap().unwrap().phase, Phase::Created);
    assert_eq!(store.get(&id("box-0")).unwrap().unwrap().phase, Phase::Creating);

    assert_eq!(store.remove(&id("box-0")).unwrap(), Some(record("box-0")));
    assert_eq!(store.remove(&id("box-0")).unwrap(), None);
    assert_eq!(ids(store), ["box-1"]);
}

fn exists_and_not_found(store: &dyn Store) {
    store.insert(record("box-0")).unwrap();
    let mut changed = record("box-0");
    changed.created_at = Some(99);
    match store.insert(changed) {
        Err(StoreError::Exists(got)) => assert_eq!(got, id("box-0")),
        other => panic!("expected Exists, got {other:?}"),
    }
    assert_eq!(store.get(&id("box-0")).unwrap().unwrap().created_at, Some(1), "a refused insert changes nothing");

    let mut called = false;
    match store.update(&id("box-7"), &mut |_| called = true) {
        Err(StoreError::NotFound(got)) => assert_eq!(got, id("box-7")),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!called, "the change must not run for a missing box");
    assert_eq!(ids(store), ["box-0"]);
}

fn lowest_free_is_reused(store: &dyn Store) {
    for expected in ["box-0", "box-1", "box-2"] {
        assert_eq!(insert_new(store, &mut record_for).unwrap(), id(expected));
    }
    store.remove(&id("box-1")).unwrap();
    assert_eq!(store.next_free_id().unwrap(), id("box-1"));
    assert_eq!(insert_new(store, &mut record_for).unwrap(), id("box-1"));
    assert_eq!(store.next_free_id().unwrap(), id("box-3"));
}

fn record_for(id: BoxId) -> BoxInfo {
    BoxInfo::creating(id, BoxSpec::new(Placement::local_passthrough()), Some(1))
}

fn ordering_is_numeric(store: &dyn Store) {
    for name in ["box-10", "box-2", "box-1", "box-20"] {
        store.insert(record(name)).unwrap();
    }
    assert_eq!(ids(store), ["box-1", "box-2", "box-10", "box-20"]);
}

macro_rules! contract_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn insert_get_list_update_remove() {
                let (_dir, store) = $make;
                crud(&store);
            }

            #[test]
            fn duplicate_is_exists_and_missing_is_not_found() {
                let (_dir, store) = $make;
                exists_and_not_found(&store);
            }

            #[test]
            fn lowest_free_id_is_reused_after_a_removal() {
                let (_dir, store) = $make;
                lowest_free_is_reused(&store);
            }

            #[test]
            fn list_orders_box_2_before_box_10() {
                let (_dir, store) = $make;
                ordering_is_numeric(&store);
            }
        }
    };
}

contract_tests!(memory, ((), MemoryStore::new()));
contract_tests!(file, {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    (dir, store)
});

#[test]
fn a_second_file_store_on_the_directory_sees_the_same_boxes() {
    let dir = tempfile::tempdir().unwrap();
    FileStore::open(dir.path()).unwrap().insert(record("box-3")).unwrap();
    assert_eq!(ids(&FileStore::open(dir.path()).unwrap()), ["box-3"]);
    assert!(dir.path().join("boxes.lock").exists());
}

/// Every operation on a store holding `text` is refused as corrupt, and the
/// bytes on disk are exactly what they were.
fn assert_refused(text: &str, needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    fs::write(store.path(), text).unwrap();
    let results: Vec<(&str, Result<(), StoreError>)> = vec![
        ("list", store.list().map(drop)),
        ("get", store.get(&id("box-0")).map(drop)),
        ("next_free_id", store.next_free_id().map(drop)),
        ("insert", store.insert(record("box-5"))),
        ("update", store.update(&id("box-0"), &mut |b| b.created_at = None).map(drop)),
        ("remove", store.remove(&id("box-0")).map(drop)),
        ("insert_new", insert_new(&store, &mut record_for).map(drop)),
    ];
    for (op, result) in results {
        let err = result.expect_err(op);
        let StoreError::Corrupt { path, detail } = &err else {
            panic!("{op} on {text:?}: expected Corrupt, got {err:?}")
        };
        assert_eq!(path, store.path());
        let message = err.to_string();
        assert!(message.contains(&store.path().display().to_string()), "{op}: {message}");
        assert!(detail.contains(needle), "{op}: detail {detail:?} lacks {needle:?}");
    }
    assert_eq!(fs::read(store.path()).unwrap(), text.as_bytes(), "a corrupt document was written over");
}

#[test]
fn a_corrupt_document_is_refused_and_left_untouched() {
    assert_refused("{\"version\": 1, \"boxes\": [", "EOF");
    assert_refused("not json at all", "expected");
    assert_refused("", "EOF");
    assert_refused(r#"{"version": 1, "boxes": {"box-0": {}}}"#, "expected a sequence");
    assert_refused(r#"[1, 2]"#, "invalid type");
    assert_refused(r#""a string""#, "expected struct");
    assert_refused(r#"{"version": 1}"#, "missing field `boxes`");
}

#[test]
fn a_hand_edited_invalid_box_name_is_corrupt() {
    let mut doc = serde_json::json!({"version": 1, "boxes": [record("box-0")]});
    doc["boxes"][0]["id"] = "../x".into();
    assert_refused(&doc.to_string(), "\"../x\"");
}

#[test]
fn a_document_from_an_older_build_loads_and_never_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let old = r#"{"boxes": [{"id": "box-0", "spec": {
        "workspace": {"host": "local", "sandbox": "passthrough"},
        "runner": {"host": "local", "sandbox": "passthrough"}}}]}"#;
    fs::write(store.path(), old).unwrap();

    let boxes = store.list().unwrap();
    assert_eq!(boxes.len(), 1);
    let b = &boxes[0];
    assert_eq!((b.created_at, b.phase, b.runner.is_none()), (None, Phase::Created, true));
    assert!(b.snapshots.is_empty() && b.spec.ports.is_empty() && b.spec.env.is_empty());
    assert_eq!(b.spec.namespace, "default");
    assert!(!b.is_expired(u64::MAX), "a box with no creation time must never expire");

    // The next write moves the store to one file per box (layout version
    // 2) without losing the old box.
    assert_eq!(insert_new(&store, &mut record_for).unwrap(), id("box-1"));
    let written: serde_json::Value = serde_json::from_slice(&fs::read(store.path()).unwrap()).unwrap();
    assert_eq!(written["version"], 2);
    assert!(dir.path().join("boxes/box-0.json").is_file());
    assert_eq!(store.get(&id("box-0")).unwrap().as_ref(), Some(b));
}

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._-]{1,64}".prop_filter("`.` and `..` are reserved", |s| s != "." && s != "..")
}

fn box_id() -> impl Strategy<Value = BoxId> {
    prop_oneof![(0u64..5000).prop_map(|n| format!("box-{n}")), name()].prop_map(|s| BoxId::new(s).unwrap())
}

fn box_info() -> impl Strategy<Value = BoxInfo> {
    let snapshot = (name(), any::<Option<u64>>())
        .prop_map(|(n, taken_at)| SnapshotRecord { id: SnapshotId::new(n).unwrap(), taken_at });
    let env = proptest::collection::btree_map(name(), "[ -~]{0,16}", 0..3);
    (
        box_id(),
        name(),
        name(),
        name(),
        any::<Option<u64>>(),
        any::<bool>(),
        proptest::collection::vec(snapshot, 0..3),
        env,
    )
        .prop_map(|(id, host, sandbox, namespace, created_at, created, snapshots, env)| {
            let place = Placement::new(HostName::new(host).unwrap(), SandboxName::new(sandbox).unwrap());
            let mut spec = BoxSpec::new(place).with_runner(Placement::local_passthrough());
            spec.namespace = namespace;
            spec.env = env;
            let mut info = BoxInfo::creating(id, spec, created_at);
            info.phase = if created { Phase::Created } else { Phase::Creating };
            info.snapshots = snapshots;
            info
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_document_of_valid_boxes_round_trips(boxes in proptest::collection::vec(box_info(), 0..8)) {
        // Identifiers are unique within a store; keep the last of any repeat.
        let unique: BTreeMap<BoxId, BoxInfo> = boxes.into_iter().map(|b| (b.id.clone(), b)).collect();
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        for info in unique.values() {
            store.insert(info.clone()).unwrap();
        }
        let reread = FileStore::open(dir.path()).unwrap().list().unwrap();
        let mut expected: Vec<BoxInfo> = unique.into_values().collect();
        tinybox_core::store::sort_boxes(&mut expected);
        prop_assert_eq!(reread, expected);
    }
}

fn template(name: &str, snapshot: &str) -> Template {
    Template {
        name: TemplateName::new(name).unwrap(),
        snapshot: SnapshotId::new(snapshot).unwrap(),
        sandbox: SandboxName::new("docker").unwrap(),
        host: HostName::local(),
        created_at: Some(42),
        workspace_dir: None,
    }
}

fn template_names(store: &TemplateStore) -> Vec<String> {
    store.list().unwrap().into_iter().map(|t| t.name.to_string()).collect()
}

#[test]
fn templates_save_get_list_remove() {
    let dir = tempfile::tempdir().unwrap();
    let store = TemplateStore::open(dir.path()).unwrap();
    let web = TemplateName::new("web").unwrap();
    assert!(store.list().unwrap().is_empty());
    assert_eq!(store.save(template("web", "sha-aaaaaaaaaaaa")).unwrap(), None);
    assert_eq!(store.save(template("api", "sha-bbbbbbbbbbbb")).unwrap(), None);
    assert_eq!(template_names(&store), ["api", "web"]);
    assert_eq!(store.get(&web).unwrap(), Some(template("web", "sha-aaaaaaaaaaaa")));

    let replaced = store.save(template("web", "sha-cccccccccccc")).unwrap();
    assert_eq!(replaced, Some(template("web", "sha-aaaaaaaaaaaa")));
    assert_eq!(store.get(&web).unwrap().unwrap().snapshot.as_str(), "sha-cccccccccccc");
    assert_eq!(template_names(&TemplateStore::open(dir.path()).unwrap()), ["api", "web"]);

    assert_eq!(store.remove(&web).unwrap(), Some(template("web", "sha-cccccccccccc")));
    assert_eq!(store.remove(&web).unwrap(), None);
    assert_eq!(store.get(&web).unwrap(), None);
    assert_eq!(template_names(&store), ["api"]);
}

#[test]
fn a_corrupt_templates_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = TemplateStore::open(dir.path()).unwrap();
    let text = r#"{"version": 1, "templates": [{"name": "../up", "snapshot": "s", "sandbox": "d", "host": "local"}]}"#;
    fs::write(store.path(), text).unwrap();
    let web = TemplateName::new("web").unwrap();
    let results = [
        store.list().map(drop),
        store.get(&web).map(drop),
        store.save(template("web", "sha-aaaaaaaaaaaa")).map(drop),
        store.remove(&web).map(drop),
    ];
    for result in results {
        match result {
            Err(err @ StoreError::Corrupt { .. }) => {
                assert!(err.to_string().contains(&store.path().display().to_string()), "{err}")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    assert_eq!(fs::read(store.path()).unwrap(), text.as_bytes());
    // The box document is a different file and is unaffected.
    FileStore::open(dir.path()).unwrap().insert(record("box-0")).unwrap();
}

#[test]
fn templates_never_touch_the_box_document() {
    let dir = tempfile::tempdir().unwrap();
    let boxes = FileStore::open(dir.path()).unwrap();
    boxes.insert(record("box-0")).unwrap();
    let before = fs::read(boxes.path()).unwrap();
    let templates = TemplateStore::open(dir.path()).unwrap();
    templates.save(template("web", "sha-aaaaaaaaaaaa")).unwrap();
    templates.remove(&TemplateName::new("web").unwrap()).unwrap();
    assert_eq!(fs::read(boxes.path()).unwrap(), before);
    assert_eq!(templates.path(), dir.path().join("templates.json"));
    assert!(!String::from_utf8(before).unwrap().contains("templates"));
    assert!(dir.path().join("templates.lock").exists());
}

fn open_engine(dir: &std::path::Path) -> Result<tinybox_core::Tinybox, tinybox_core::Error> {
    tinybox_core::Tinybox::open_with(dir, tinybox_core::driver::DriverConfig::from_env())
}

#[test]
fn a_store_that_resolves_into_a_system_directory_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    // /run is a system directory like /etc, and a scratch one: before the
    // check, opening the store wrote its lock files into the target.
    let target = std::path::PathBuf::from(format!("/run/tinybox-store-test-{}", std::process::id()));
    fs::create_dir(&target).unwrap();
    let cases = [
        (tmp.path().join("to-run"), Some(target.clone()), "inside /run"),
        (tmp.path().join("to-etc"), Some("/etc".into()), "resolves to /etc, which is inside /etc"),
        (tmp.path().join("to-root"), Some("/".into()), "is the root of the machine"),
        ("/usr/share/tinybox-store-test".into(), None, "inside /usr"),
    ];
    let etc_before: Vec<_> = fs::read_dir("/etc").unwrap().flatten().map(|e| e.file_name()).collect();
    for (store, link_to, expected) in cases {
        if let Some(to) = &link_to {
            std::os::unix::fs::symlink(to, &store).unwrap();
        }
        let err = open_engine(&store).err().expect("a store in a system directory opened");
        let text = err.to_string();
        assert!(text.contains(expected) && text.contains("--store or TINYBOX_HOME"), "{}: {text}", store.display());
        assert_eq!(text.lines().count(), 1, "{text}");
    }
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0, "the refused store wrote into {}", target.display());
    fs::remove_dir(&target).unwrap();
    let etc_after: Vec<_> = fs::read_dir("/etc").unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(etc_before, etc_after);
    assert!(!std::path::Path::new("/usr/share/tinybox-store-test").exists());
}

#[test]
fn a_store_of_another_user_is_refused_and_one_of_ours_through_a_symlink_works() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let engine = open_engine(&link).unwrap();
    engine.store().insert(record("box-0")).unwrap();
    assert!(real.join("boxes.json").is_file(), "the store is the directory the link names");

    if rustix::process::geteuid().as_raw() != 0 {
        println!("skipped: the other-user half needs root, to give a directory away");
        return;
    }
    std::os::unix::fs::chown(&real, Some(65534), Some(65534)).unwrap();
    let before: Vec<_> = fs::read_dir(&real).unwrap().flatten().map(|e| e.file_name()).collect();
    let err = open_engine(&link).err().expect("another user's store opened").to_string();
    assert!(err.contains("belongs to uid 65534, not to this user (uid 0)"), "{err}");
    let after: Vec<_> = fs::read_dir(&real).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(before, after);
}

#[test]
fn opening_and_reading_a_store_makes_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    // One that does not exist yet, and one that exists and is empty.
    for dir in [tmp.path().join("new/store"), tmp.path().to_owned()] {
        let engine = open_engine(&dir).unwrap();
        assert!(engine.list().unwrap().is_empty());
        assert!(engine.get(&id("box-3")).is_err());
        let templates = TemplateStore::open(&dir).unwrap();
        assert!(templates.list().unwrap().is_empty());
        let left: Vec<_> = fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.path()).collect();
        assert!(left.is_empty(), "{}: reading made {left:?}", dir.display());
    }
}
