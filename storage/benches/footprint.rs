//! Footprint: bytes per sample on disk and memory per active series. Prints numbers
//! (no criterion timing; sizes are not timings).
//!
//! - disk: 5,000 realistic series × 24 h at 15 s (28.8 M samples), flushed every other
//!   scrape as in production, then `checkpoint`; bytes/sample = size of the live sled
//!   directory / samples, of a compacted copy (`Store::compact_to`) / samples, and the sum
//!   of chunk value sizes / samples (the encoding alone, without sled's overhead);
//! - memory: RSS growth and the store's own accounting for 310,000 series (the
//!   5,000-node case) with a few samples each, plus the ingest rate of 310 k series
//!   scraped 20 times with a flush after each scrape.
#![allow(missing_docs)]

mod common;

use std::time::Instant;

use headroom_storage::{Store, StoreConfig};

fn disk() {
    const SERIES: usize = 5_000;
    const ROUNDS: i64 = 5_760;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let mut g = common::Gen::new(&store, SERIES, 3);
    let t = Instant::now();
    for round in 0..ROUNDS {
        g.scrape(&store, round);
        if round % 2 == 1 {
            store.flush().unwrap();
        }
    }
    store.checkpoint().unwrap();
    let el = t.elapsed();
    let samples = SERIES as u64 * ROUNDS as u64;
    let live_disk = common::dir_bytes(dir.path());
    let compacted = tempfile::tempdir().unwrap();
    let cdir = compacted.path().join("db");
    store.compact_to(&cdir).unwrap();
    drop(store);
    let disk = common::dir_bytes(&cdir);
    let encoded = encoded_bytes(&cdir);
    println!(
        "disk: {SERIES} series x {ROUNDS} samples = {samples} samples ingested in {el:?} ({:.0} samples/s incl. flushes)",
        samples as f64 / el.as_secs_f64()
    );
    println!(
        "disk: live sled directory after checkpoint {live_disk} bytes = {:.2} B/sample",
        live_disk as f64 / samples as f64
    );
    println!(
        "disk: compacted copy (Store::compact_to) {disk} bytes = {:.2} B/sample",
        disk as f64 / samples as f64
    );
    println!(
        "disk: chunk values {} bytes = {:.2} B/sample; by metric:",
        encoded.0,
        encoded.0 as f64 / samples as f64
    );
    for (m, (b, n)) in encoded.1 {
        println!("        {m:<40} {:.2} B/sample", b as f64 / n as f64);
    }
}

/// Sum of chunk value sizes (total, and per metric as (bytes, samples)).
fn encoded_bytes(dir: &std::path::Path) -> (u64, std::collections::BTreeMap<String, (u64, u64)>) {
    let store = Store::open(dir, StoreConfig::default()).unwrap();
    let mut per = std::collections::BTreeMap::new();
    let mut total = 0;
    for info in store.select(&[]).unwrap() {
        let e = per.entry(info.metric.clone()).or_insert((0u64, 0u64));
        for (_, bytes) in store.raw_chunk_sizes(info.id).unwrap() {
            e.0 += bytes as u64;
            total += bytes as u64;
        }
        e.1 += store.query_range(info.id, 0, i64::MAX).unwrap().len() as u64;
    }
    (total, per)
}

fn memory() {
    const SERIES: usize = 310_000;
    let rss0 = common::rss_bytes();
    let store = Store::open_temporary(StoreConfig::default()).unwrap();
    let mut g = common::Gen::new(&store, SERIES, 4);
    g.scrape(&store, 0);
    let st = store.stats();
    println!(
        "memory: {SERIES} series, 1 sample each, before any flush: store accounting {:.0} B/series index+head, RSS growth {:.0} B/series (incl. the generator's state and the unflushed log buffer)",
        st.index_bytes as f64 / st.series as f64,
        common::rss_bytes().saturating_sub(rss0) as f64 / SERIES as f64
    );
    let t = Instant::now();
    const ROUNDS: i64 = 20;
    for round in 1..=ROUNDS {
        g.scrape(&store, round);
        store.flush().unwrap();
    }
    let el = t.elapsed();
    let n = SERIES as u64 * ROUNDS as u64;
    println!(
        "ingest: {SERIES} series x {ROUNDS} scrapes, flush after each: {n} samples in {el:?} = {:.0} samples/s",
        n as f64 / el.as_secs_f64()
    );
    let st = store.stats();
    let rss = common::rss_bytes().saturating_sub(rss0);
    println!(
        "memory: {} series; index+head overhead {:.0} B/series (store accounting), open chunks {:.0} B/series for {} samples/series; RSS growth {:.0} B/series (includes sled cache and generator)",
        st.series,
        st.index_bytes as f64 / st.series as f64,
        st.head_chunk_bytes as f64 / st.series as f64,
        ROUNDS,
        rss as f64 / st.series as f64,
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    memory();
    disk();
}
