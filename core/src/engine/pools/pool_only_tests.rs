//! What `--pool-only` says of an empty pool: that the daemon is refilling
//! it (and how many are being made) when one runs, and how to start one
//! when none does.

use crate::Tinybox;
use crate::driver::DriverConfig;
use crate::model::{BoxInfo, BoxSpec, Placement};
use crate::request::CreateRequest;
use tinybox_sdk::model::BoxId;

async fn refusal(tb: &Tinybox) -> String {
    let taker = CreateRequest { pool: Some("p".into()), pool_only: true, ..CreateRequest::default() };
    match tb.create_requested(&taker).await {
        Err(e) => e.to_string(),
        Ok(made) => panic!("an empty pool handed out {}", made.info.id),
    }
}

#[tokio::test]
async fn an_empty_pool_says_the_daemon_refills_it_when_one_runs_and_how_to_start_one_when_none_does() {
    let store = tempfile::tempdir().unwrap();
    let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
    let tb = Tinybox::open_with(store.path(), config).unwrap();
    let request = CreateRequest { sandbox: Some(tinybox_sdk::model::SandboxName::passthrough()), ..Default::default() };
    tb.pool_create("p", request, 2).await.unwrap();

    let said = refusal(&tb).await;
    assert!(
        said.ends_with("has no box ready (--pool-only refuses a cold create); `tinybox daemon start` refills pools"),
        "{said}"
    );

    // A daemon holds the lock and is between rounds: nothing is being made yet.
    let held = crate::supervisor::try_supervise(store.path()).unwrap().expect("the lock is free");
    let said = refusal(&tb).await;
    assert!(said.contains("the daemon refills it at its next round"), "{said}");
    assert!(!said.contains("daemon start"), "a running daemon is not to be started: {said}");

    // It is making one member now, and another pool's member is no business of this one's.
    let member = |id: &str, pool: &str| BoxInfo {
        pool: Some(pool.into()),
        ..BoxInfo::creating(BoxId::new(id).unwrap(), BoxSpec::new(Placement::local_passthrough()), Some(1))
    };
    tb.store().insert(member("box-7", "p")).unwrap();
    tb.store().insert(member("box-8", "q")).unwrap();
    let said = refusal(&tb).await;
    assert!(said.ends_with("(--pool-only refuses a cold create); the daemon is refilling it: 1 filling"), "{said}");

    drop(held);
    assert!(refusal(&tb).await.ends_with("`tinybox daemon start` refills pools"));
}
