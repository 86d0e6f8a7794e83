//! Interrupted creates: `inspect` asks the sandbox what is there and says
//! who was making it; `reap` removes those whose creator ended, and leaves
//! a create under way and a record that names no creator.

use std::sync::Arc;

use tinybox_sdk::model::BoxId;
use tinybox_sdk::protocol::BoxState;

use crate::Tinybox;
use crate::clock::ManualClock;
use crate::driver::DriverConfig;
use crate::model::{BoxInfo, BoxSpec, Creator, Placement};
use crate::store::{MemoryStore, Store};

/// Over the workspace's own host driver (target/debug, beside this test's deps/).
fn engine(store: Arc<MemoryStore>) -> Tinybox {
    let exe = std::env::current_exe().unwrap();
    let built = exe.parent().and_then(|deps| deps.parent()).unwrap().to_path_buf();
    let config = DriverConfig { search_dirs: vec![built], ..DriverConfig::from_env() };
    Tinybox::with_parts(store, None, Arc::new(ManualClock::new(5)), config).unwrap()
}

fn creating(id: &str, creator: Option<Creator>) -> BoxInfo {
    // Persistent: no ttl, so only an interrupted create is a reason to reap it.
    let mut spec = BoxSpec::new(Placement::local_passthrough());
    spec.lifecycle = crate::model::Lifecycle::Persistent { autosnapshot_secs: 60 };
    BoxInfo { creator, ..BoxInfo::creating(BoxId::new(id).unwrap(), spec, Some(1)) }
}

/// A creator that has ended: a child, killed and waited for.
fn ended() -> Creator {
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let me = Creator::this_process().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let start = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().parse().unwrap();
    let creator = Creator { pid: child.id(), start, ..me };
    assert!(creator.may_be_running());
    child.kill().unwrap();
    child.wait().unwrap();
    creator
}

#[tokio::test]
async fn reap_removes_a_create_whose_creator_ended_and_leaves_one_under_way() {
    let store = Arc::new(MemoryStore::new());
    let dead = ended();
    store.insert(creating("box-0", Some(dead.clone()))).unwrap();
    store.insert(creating("box-1", Creator::this_process())).unwrap();
    store.insert(creating("box-2", None)).unwrap();
    let tb = engine(store.clone());
    let reaped = tb.reap().await.unwrap();
    assert_eq!(reaped.len(), 1, "{reaped:?}");
    assert_eq!(reaped[0].id.as_str(), "box-0");
    assert_eq!((reaped[0].expired_at, reaped[0].interrupted_by, &reaped[0].error), (None, Some(dead.pid), &None));
    assert!(reaped[0].why().contains(&format!("its creator, pid {}, has ended", dead.pid)), "{}", reaped[0].why());
    let json = serde_json::to_value(&reaped[0]).unwrap();
    assert_eq!(json, serde_json::json!({"id": "box-0", "interrupted_by": dead.pid}));
    let left: Vec<String> = store.list().unwrap().into_iter().map(|b| b.id.to_string()).collect();
    assert_eq!(left, ["box-1", "box-2"], "under way, and a record that names no creator, stay");
}

#[tokio::test]
async fn inspect_of_a_creating_box_asks_its_sandbox_and_says_who_is_making_it() {
    let store = Arc::new(MemoryStore::new());
    let dead = ended();
    store.insert(creating("box-0", Some(dead.clone()))).unwrap();
    store.insert(creating("box-1", Creator::this_process())).unwrap();
    let tb = engine(store);
    let seen = tb.inspect(&BoxId::new("box-0").unwrap()).await.unwrap();
    assert_eq!(seen.state, BoxState::Gone);
    let detail = seen.state_detail.unwrap();
    assert!(
        detail.starts_with(&format!("its create was interrupted (its creator, pid {}, has ended)", dead.pid)),
        "{detail}"
    );
    assert!(detail.ends_with("its sandbox says: a passthrough create makes nothing"), "{detail}");
    let seen = tb.inspect(&BoxId::new("box-1").unwrap()).await.unwrap();
    let detail = seen.state_detail.unwrap();
    assert!(detail.starts_with(&format!("being created by pid {}", std::process::id())), "{detail}");
}

#[test]
fn a_record_made_here_names_this_process_and_one_from_an_older_build_names_none() {
    let info = BoxInfo::creating_here(BoxId::new("box-0").unwrap(), BoxSpec::new(Placement::local_passthrough()), None);
    assert_eq!(info.creator.as_ref().map(|c| c.pid), Some(std::process::id()));
    assert!(!info.interrupted_create());
    let mut old = serde_json::to_value(&info).unwrap();
    old.as_object_mut().unwrap().remove("creator");
    let old: BoxInfo = serde_json::from_value(old).unwrap();
    assert_eq!(old.creator, None);
    assert!(!old.interrupted_create(), "left to its ttl");
}
