//! The cost of one small protocol call: two peers joined by an in-memory
//! pipe, exactly as core and a driver are joined by stdio, minus the kernel.
//! Run: cargo bench -p tinybox-sdk --bench roundtrip

use criterion::{Criterion, criterion_group, criterion_main};
use jsonrpsee::RpcModule;
use tinybox_sdk::peer::{Peer, PeerOptions};
use tinybox_sdk::protocol::CancelParams;

fn pair(rt: &tokio::runtime::Runtime) -> Peer {
    rt.block_on(async {
        let (core_side, driver_side) = tokio::io::duplex(64 * 1024);
        let (core_read, core_write) = tokio::io::split(core_side);
        let (driver_read, driver_write) = tokio::io::split(driver_side);
        let mut methods = RpcModule::new(());
        methods.register_method("cancel", |params, _, _| params.parse::<CancelParams>().map(|_| ())).expect("unique");
        // The driver side answers; keep it alive for the benchmark's life.
        let driver = Peer::start(driver_read, driver_write, methods, PeerOptions { expect_response_first: false });
        std::mem::forget(driver);
        Peer::start(core_read, core_write, RpcModule::new(()), PeerOptions { expect_response_first: true })
    })
}

fn roundtrip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let core = pair(&rt);
    c.bench_function("protocol round trip (cancel call, in-memory pipe)", |b| {
        b.to_async(&rt).iter(|| async {
            let () = core.call("cancel", CancelParams { exec_id: "x1-1".into() }).await.expect("call");
        })
    });
}

criterion_group!(benches, roundtrip);
criterion_main!(benches);
