//! Moving an expiry: from now, under a create's rules, never a persistent box's.

use std::sync::Arc;

use tinybox_sdk::model::{BoxId, HostName, SandboxName};

use crate::Tinybox;
use crate::clock::ManualClock;
use crate::driver::DriverConfig;
use crate::error::{Error, LifecycleError};
use crate::model::{BoxInfo, BoxSpec, Lifecycle, Placement};
use crate::store::{MemoryStore, Store};

fn engine(clock: Arc<ManualClock>, boxes: &[(&str, Lifecycle)]) -> Tinybox {
    let store = Arc::new(MemoryStore::new());
    for (id, lifecycle) in boxes {
        let mut spec = BoxSpec::new(Placement::new(HostName::local(), SandboxName::new("docker").unwrap()));
        spec.lifecycle = *lifecycle;
        store.insert(BoxInfo::creating(BoxId::new(*id).unwrap(), spec, Some(1000))).unwrap();
    }
    let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
    Tinybox::with_parts(store, None, clock, config).unwrap()
}

#[test]
fn an_ephemeral_box_ends_the_given_seconds_from_now() {
    let clock = Arc::new(ManualClock::new(1000));
    let tb = engine(clock.clone(), &[("box-0", Lifecycle::ephemeral(std::time::Duration::from_secs(60)))]);
    let id = BoxId::new("box-0").unwrap();
    clock.advance(50);
    assert_eq!(tb.expire_in(&id, 300).unwrap().expires_at(), Some(1350));
    assert_eq!(tb.get(&id).unwrap().expires_at(), Some(1350), "the store has the new expiry");
    // Shorter works too: the box then ends sooner than it would have.
    assert_eq!(tb.expire_in(&id, 1).unwrap().expires_at(), Some(1051));
}

#[test]
fn a_zero_or_too_long_timeout_and_a_persistent_box_are_refused_unchanged() {
    let clock = Arc::new(ManualClock::new(1000));
    let persistent = Lifecycle::persistent(std::time::Duration::from_secs(60));
    let tb =
        engine(clock, &[("box-0", Lifecycle::ephemeral(std::time::Duration::from_secs(60))), ("box-1", persistent)]);
    let id = BoxId::new("box-0").unwrap();
    for secs in [0, crate::request::MAX_LIFETIME.as_secs() + 1] {
        let e = tb.expire_in(&id, secs).unwrap_err();
        assert!(matches!(e, Error::Request(_)), "{secs}: {e}");
        assert_eq!(tb.get(&id).unwrap().expires_at(), Some(1060), "{secs}: unchanged");
    }
    let e = tb.expire_in(&BoxId::new("box-1").unwrap(), 60).unwrap_err();
    assert!(matches!(e, Error::Lifecycle(LifecycleError::NoExpiry(_))), "{e}");
    assert!(e.to_string().contains("persistent"), "{e}");
}
