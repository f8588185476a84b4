//! NATS JetStream → keyed count → NATS JetStream on a cluster, exactly
//! once through TaskManager kills and through the broker going away.
//!
//! The input is published into a stream by the test (word `w<i % K>` on
//! subject `words.<word>`), the job counts per word and emits every update
//! (`word-count`, `emit = "updates"`) to a sink with `delivery =
//! "exactly-once"`; the test then reads the whole output stream and
//! compares it with the updates it computes itself: word `w` seen `n`
//! times gives exactly `w\t1` … `w\tn`, each once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use weir_tests::artifacts;

use super::harness::{Cluster, wait_for};
use crate::exactly_once::{kill_repeatedly, restores};
use crate::nats::{NatsClient, NatsServer};
use crate::util::{describe, toml_path, toml_str};

const WORDS: u64 = 23;

fn count_spec(url: &str) -> String {
    format!(
        r#"
[job]
name = "nats-count"
parallelism = 2
buffer_timeout_ms = 5

[job.checkpoints]
interval_ms = 300
timeout_ms = 20000

[job.restart]
strategy = "fixed-delay"
attempts = 1000
delay_ms = 200

[[source]]
id = "words"
type = "nats"
url = {url}
stream = "WORDS"
subject = "words.>"
key_subject_token = 1

[[operator]]
id = "count"
module = {m}
key_by = "key"
config = {{ emit = "updates" }}

[[sink]]
id = "counts"
type = "nats"
url = {url}
subject = "counts.out"
key_header = "Weir-Key"
delivery = "exactly-once"

[[edge]]
from = "words"
to = "count"

[[edge]]
from = "count"
to = "counts"
"#,
        url = toml_str(url),
        m = toml_path(std::path::Path::new(artifacts::WORD_COUNT)),
    )
}

/// Input records `from..to`: (subject, payload).
fn words(from: u64, to: u64) -> Vec<(String, String)> {
    (from..to)
        .map(|i| {
            let w = format!("w{}", i % WORDS);
            (format!("words.{w}"), w)
        })
        .collect()
}

/// Publishes records `0..total` in chunks of `chunk`, one chunk per
/// `pause`, on a thread of its own, until done or `stop` is set.
fn publish_paced(
    url: String,
    total: u64,
    chunk: u64,
    pause: std::time::Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let client = NatsClient::connect(&url);
        let mut next = 0;
        while next < total && !stop.load(Ordering::Relaxed) {
            let end = (next + chunk).min(total);
            client.publish(&words(next, end));
            next = end;
            // Pacing the input, not synchronising: the job reads whatever
            // has arrived.
            std::thread::sleep(pause);
        }
    })
}

/// Every update of `total` records, as `(word, "word\tcount")`.
fn expected_updates(total: u64) -> Vec<(Option<String>, String)> {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, w) in words(0, total) {
        let n = seen.entry(w.clone()).or_default();
        *n += 1;
        out.push((Some(w.clone()), format!("{w}\t{n}")));
    }
    out.sort();
    out
}

/// Waits until the output stream holds at least `total` messages, cancels
/// the job (no commit can follow), and checks that the output is exactly
/// the expected updates, each once.
fn assert_output_exactly_once(cluster: &Cluster, id: &str, client: &NatsClient, total: u64) {
    wait_for(&format!("{total} count updates in COUNTS"), || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_ne!(job["state"], "failed", "the job failed: {job}");
        (client.count("COUNTS") >= total).then_some(())
    });
    let cancel = cluster.weir(&["cancel", id]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    cluster.wait_job(id, |s| s == "canceled" || s == "failed");
    let mut got: Vec<(Option<String>, String)> = client
        .read_all("COUNTS", "Weir-Key")
        .into_iter()
        .map(|r| (r.key, r.payload))
        .collect();
    got.sort();
    let expected = expected_updates(total);
    if got != expected {
        let mut counts: BTreeMap<&(Option<String>, String), i64> = BTreeMap::new();
        for e in &expected {
            *counts.entry(e).or_default() -= 1;
        }
        for g in &got {
            *counts.entry(g).or_default() += 1;
        }
        let duplicated: Vec<_> = counts.iter().filter(|(_, c)| **c > 0).take(10).collect();
        let missing: Vec<_> = counts.iter().filter(|(_, c)| **c < 0).take(10).collect();
        panic!(
            "{} updates for {} expected; duplicated e.g. {duplicated:?}; missing e.g. {missing:?}",
            got.len(),
            expected.len()
        );
    }
}

fn streams(server: &NatsServer) -> NatsClient {
    let client = server.client();
    client.create_stream("WORDS", &["words.>"]);
    client.create_stream("COUNTS", &["counts.>"]);
    client
}

/// The acceptance test: TaskManagers SIGKILLed five times while the input
/// arrives; every count update is in the output stream exactly once.
#[test]
fn nats_to_nats_count_is_exactly_once_under_taskmanager_kills() {
    let server = NatsServer::start();
    let client = streams(&server);
    let mut cluster = Cluster::start(2, 1, &["--heartbeat-timeout-ms", "2000"]);
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(&spec, count_spec(&server.url())).unwrap();
    let total = 40_000;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = publish_paced(
        server.url(),
        total,
        100,
        std::time::Duration::from_millis(100),
        stop.clone(),
    );
    let id = cluster.submit(&spec);
    kill_repeatedly(&mut cluster, &id, 5);
    assert!(restores(&cluster, &id) >= 5, "restored at least 5 times");
    publisher.join().expect("the publisher");
    assert_output_exactly_once(&cluster, &id, &client, total);
}

/// The broker is killed mid-job and started again (same port, same store)
/// once the job noticed: the job restarts from its checkpoint and the
/// output is still exactly once.
#[test]
fn nats_to_nats_count_is_exactly_once_across_a_broker_outage() {
    let mut server = NatsServer::start();
    let client = streams(&server);
    let cluster = Cluster::start(1, 2, &["--heartbeat-timeout-ms", "2000"]);
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(&spec, count_spec(&server.url())).unwrap();
    let first = 3_000;
    client.publish(&words(0, first));
    let id = cluster.submit(&spec);
    wait_for("some output committed before the outage", || {
        (client.count("COUNTS") > 0).then_some(())
    });
    drop(client);
    server.stop();
    let restores_before = restores(&cluster, &id);
    wait_for("the job to notice the broker is gone", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_ne!(job["state"], "failed", "the job failed: {job}");
        (job["state"] != "running").then_some(())
    });
    server.restart();
    let client = server.client();
    wait_for("the job to restart from its checkpoint", || {
        (restores(&cluster, &id) > restores_before).then_some(())
    });
    let total = 6_000;
    client.publish(&words(first, total));
    assert_output_exactly_once(&cluster, &id, &client, total);
}

/// A server nobody listens on: `weir submit` refuses the job at once,
/// naming the source and the address (bounded by the connect timeout, not
/// a hang).
#[test]
fn a_cluster_refuses_a_job_whose_nats_server_is_unreachable() {
    let cluster = Cluster::start(1, 2, &[]);
    let url = format!("nats://127.0.0.1:{}", crate::nats::free_port());
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(&spec, count_spec(&url)).unwrap();
    let out = cluster.weir(&["submit", &spec.display().to_string()]);
    crate::util::assert_fails_with(&out, 2, &["source `words`", &url, "cannot reach"]);
}
