//! A flooded decision channel under `serve`: overload may shorten an explanation, never
//! lose what a decision acts on. With the queue from the scheduling loop to the sink
//! shrunk to one record and one byte (every record waits as a summary, the loop waits for
//! the sink at every decision), every unplaceable pod still gets its FailedScheduling
//! event, preemption still evicts its victim and binds the preemptor, and `/metrics`
//! counts the shortened records.

use super::fake::Fake;
use super::preemption::{cluster, pending};
use super::{BASE, Running, events_for};
use headroom::config::Config;
use headroom::decisions::ChannelBounds;
use headroom::kube::serve::ServeOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_a_flooded_decision_channel_loses_no_event_and_no_preemption() {
    const BIG: usize = 60;
    let fake = Fake::start().await;
    // Two 4-CPU nodes, each with a 3-CPU pod of priority 100.
    cluster(&fake);
    // Pods no node can ever hold (8 CPUs on 4-CPU nodes; no victim would make room),
    // queued before serve starts so they arrive in one burst.
    for i in 0..BIG {
        fake.put("pods", pending(&format!("big-{i}"), "8", 0, false));
    }
    let config = Config::from_yaml(BASE, "test").expect("test config");
    let mut opts = ServeOptions::new(config, fake.client("a"));
    opts.store = Some(
        headroom_storage::Store::open_temporary(headroom_storage::StoreConfig::default()).unwrap(),
    );
    opts.decision_channel = ChannelBounds {
        records: 1,
        bytes: 1,
    };
    let s = Running::start_with(opts).await;
    // Amid the burst, a high-priority pod that fits only once a low one is evicted.
    fake.put("pods", pending("urgent", "2", 100000, false));

    fake.wait_for(30, "every big pod has its FailedScheduling event", |f| {
        (0..BIG).all(|i| {
            f.list("events").iter().any(|e| {
                e["regarding"]["name"] == format!("big-{i}").as_str()
                    && e["reason"] == "FailedScheduling"
            })
        })
    })
    .await;
    fake.wait_for(30, "urgent bound", |f| {
        f.node_of("default", "urgent").is_some()
    })
    .await;
    let node = fake.node_of("default", "urgent").unwrap();
    let victim = if node == "node-a" { "low-a" } else { "low-b" };
    assert!(
        fake.get("pods", "default", victim).is_none(),
        "{victim} evicted for urgent on {node}"
    );
    assert!(!events_for(&fake, victim, "Preempted").is_empty());
    for i in 0..BIG {
        let failed = events_for(&fake, &format!("big-{i}"), "FailedScheduling");
        assert!(
            failed.iter().any(|e| e["note"]
                .as_str()
                .is_some_and(|n| n.starts_with("0/2 nodes are available: 2 Insufficient cpu."))),
            "big-{i}: {failed:#?}"
        );
    }
    // Every record went as a summary (a one-byte budget), and the summaries are counted.
    let m = reqwest::get(s.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let summarized: f64 = m
        .lines()
        .find_map(|l| {
            l.strip_prefix("headroom_scheduler_decisions_summarized_total ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no summarized counter:\n{m}"));
    assert!(summarized > BIG as f64, "{summarized}");
    s.stop().await;
}
