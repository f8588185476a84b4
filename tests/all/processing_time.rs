//! Processing-time timers: registered by an operator, kept in the
//! checkpoint, restored after a TaskManager is killed, fired once on the
//! wall clock. The `idle-alert` operator registers one timer per key, a
//! fixed time after it saw the key; the input then goes quiet (a followed
//! file), so only the timers can produce output.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use weir_tests::artifacts;

use super::cluster::harness::{Cluster, wait_for};
use crate::exactly_once::{committed_lines, completed_checkpoints, restores};
use crate::util::{describe, toml_path};

/// How long after its last record a key alerts: long enough that the kill
/// and the restore happen before any timer is due.
const TIMEOUT_MS: u64 = 15_000;
const KEYS: usize = 40;

#[test]
fn processing_time_timers_survive_a_kill_and_fire_once() {
    let mut cluster = Cluster::start(1, 2, &["--heartbeat-timeout-ms", "2000"]);
    let dir = cluster.dir.path().to_owned();
    let input = dir.join("events.jsonl");
    let lines: Vec<String> = (0..KEYS * 3)
        .map(|i| format!(r#"{{"k":"k{}","n":{i}}}"#, i % KEYS))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = dir.join("out/alerts.txt");
    let spec = dir.join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "idle-alerts"

[job.checkpoints]
interval_ms = 300

[[source]]
id = "events"
type = "file"
path = {input}
format = "json-lines"
key_field = "k"
follow = true

[[operator]]
id = "alert"
module = {m}
config = {{ timeout_ms = {TIMEOUT_MS} }}
key_by = "key"

[[sink]]
id = "out"
type = "file"
path = {out}

[[edge]]
from = "events"
to = "alert"

[[edge]]
from = "alert"
to = "out"
"#,
            input = toml_path(&input),
            m = toml_path(Path::new(artifacts::IDLE_ALERT)),
            out = toml_path(&out),
        ),
    )
    .unwrap();
    let submitted = Instant::now();
    let id = cluster.submit(&spec);
    // Every record reached the operator, then a checkpoint completed: it
    // holds every key's timer.
    wait_for("every record at the operator", || {
        let alert = cluster.vertex(&id, "alert")?;
        (alert["records_in"].as_u64()? == (KEYS * 3) as u64).then_some(())
    });
    let seen = completed_checkpoints(&cluster, &id)
        .first()
        .copied()
        .unwrap_or(0);
    wait_for("a checkpoint after the records", || {
        (completed_checkpoints(&cluster, &id)
            .first()
            .copied()
            .unwrap_or(0)
            > seen)
            .then_some(())
    });
    let before = restores(&cluster, &id);
    assert!(
        committed_lines(&out).is_empty(),
        "no timer may have fired yet ({} ms after submit)",
        submitted.elapsed().as_millis()
    );
    assert!(
        submitted.elapsed() < Duration::from_millis(TIMEOUT_MS),
        "the machine is too slow for this test's timeout: the kill must come before the timers"
    );
    cluster.tms[0].kill();
    cluster.restart_taskmanager(0);
    wait_for("the job to restart from the checkpoint", || {
        (restores(&cluster, &id) > before).then_some(())
    });

    // The restored timers fire: one alert per key, committed once.
    let alerts = wait_for("an alert for every key", || {
        let lines = committed_lines(&out);
        (lines.len() >= KEYS).then_some(lines)
    });
    // Two more checkpoints: nothing fires again.
    let now = completed_checkpoints(&cluster, &id)
        .first()
        .copied()
        .unwrap_or(0);
    wait_for("two more checkpoints", || {
        (completed_checkpoints(&cluster, &id)
            .first()
            .copied()
            .unwrap_or(0)
            >= now + 2)
            .then_some(())
    });
    let alerts_later = committed_lines(&out);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in &alerts_later {
        *counts.entry(line.clone()).or_insert(0) += 1;
    }
    let expected: BTreeMap<String, usize> = (0..KEYS).map(|k| (format!("k{k}\tidle"), 1)).collect();
    assert_eq!(counts, expected, "one alert per key, each once");
    assert_eq!(alerts.len(), alerts_later.len());
    let cancel = cluster.weir(&["cancel", &id]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
}
