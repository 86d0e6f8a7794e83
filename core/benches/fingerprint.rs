//! Fingerprint throughput on a warm cache: scan (walk + exclusion rules) and
//! hash a real tree. The tree is TINYBOX_BENCH_TREE (default: this
//! repository); its size is written to TINYBOX_BENCH_OUT/fingerprint-tree.json
//! so the report can turn time into MB/s and files/s.
//! Run: cargo bench -p tinybox-core --bench fingerprint
//! (`scan_and_hash_cached` is the same with a warm leaf cache, as an
//! unchanged sync runs it.)

use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use tinybox_core::sync::Tree;

fn fingerprint(c: &mut Criterion) {
    let root = std::env::var_os("TINYBOX_BENCH_TREE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let tree = Tree::scan(&root).expect("scan the benchmark tree");
    let (files, bytes) = tree.totals();
    if let Some(out) = std::env::var_os("TINYBOX_BENCH_OUT") {
        let stats = format!("{{\"files\": {files}, \"bytes\": {bytes}, \"root\": {:?}}}\n", root.display().to_string());
        std::fs::write(PathBuf::from(out).join("fingerprint-tree.json"), stats).expect("write tree stats");
    }
    // Warm the cache once, then measure scan + hash together.
    tree.fingerprint().expect("fingerprint");
    let mut group = c.benchmark_group("fingerprint");
    group.sample_size(10);
    group.bench_function("scan", |b| b.iter(|| Tree::scan(&root).expect("scan")));
    group.bench_function("scan_and_hash", |b| {
        b.iter(|| Tree::scan(&root).expect("scan").fingerprint().expect("fingerprint"))
    });
    // What an unchanged sync does: scan, and hash only files whose metadata
    // changed since the leaf cache was saved (none, once it is warm).
    let cache = tempfile::tempdir().expect("a cache directory");
    Tree::scan(&root).expect("scan").fingerprint_cached(cache.path()).expect("fill the cache");
    group.bench_function("scan_and_hash_cached", |b| {
        b.iter(|| Tree::scan(&root).expect("scan").fingerprint_cached(cache.path()).expect("fingerprint"))
    });
    group.finish();
}

criterion_group!(benches, fingerprint);
criterion_main!(benches);
