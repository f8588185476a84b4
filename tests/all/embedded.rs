//! `weir run` is the cluster runtime in one process: a job with
//! `[job.checkpoints]` whose operator fails once mid-stream restarts from
//! its latest checkpoint, and its committed output is exactly once.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use weir_host::connectors::AllowedRoots;
use weir_host::embedded::{EmbeddedCluster, EmbeddedConfig};
use weir_host::wasm::Runtime;
use weir_tests::artifacts;

use crate::exactly_once::assert_exactly_once;
use crate::util::{describe, toml_path, weir};

/// An embedded cluster (what `weir run` starts) working in `dir`, whose
/// file connectors may use `dir` and the bundled data; `slots` as
/// [`EmbeddedConfig::slots`]. Call inside a tokio runtime.
pub fn cluster(dir: &Path, runtime: Arc<Runtime>, slots: Option<u32>) -> Option<EmbeddedCluster> {
    let roots = AllowedRoots::new([dir, &crate::util::data_dir()]).ok()?;
    EmbeddedCluster::start(
        EmbeddedConfig {
            work_dir: dir.join("work"),
            checkpoint_dir: dir.join("checkpoints"),
            allowed_roots: roots,
            buffer_size: 1024,
            slots,
            metrics: None,
        },
        runtime,
    )
    .ok()
}

/// A per-key sequence generator (parallelism 2) → `fail-once` (fails on
/// the first attempt after `fail_at` records per subtask) → the sequence
/// checker → two-phase-commit file sinks.
fn fail_once_spec(out: &Path, alerts: &Path, count: u64, rate: u64, fail_at: u64) -> String {
    format!(
        r#"
[job]
name = "fail-once"
parallelism = 2

[job.checkpoints]
interval_ms = 100
timeout_ms = 30000

[job.restart]
strategy = "fixed-delay"
attempts = 3
delay_ms = 100

[[source]]
id = "seq"
type = "generator"
kind = "sequence"
count = {count}
keys = 4
rate = {rate}

[[operator]]
id = "flaky"
module = {flaky}
config = {{ fail_at = {fail_at} }}

[[operator]]
id = "check"
module = {check}
key_by = "key"
config = {{ step = "4" }}

[[sink]]
id = "out"
type = "file"
path = {out}

[[sink]]
id = "alerts"
type = "file"
path = {alerts}

[[edge]]
from = "seq"
to = "flaky"

[[edge]]
from = "flaky"
to = "check"

[[edge]]
from = "check"
to = "out"

[[edge]]
from = "check:alerts"
to = "alerts"
"#,
        flaky = toml_path(Path::new(artifacts::FAIL_ONCE)),
        check = toml_path(Path::new(artifacts::SEQUENCE_CHECK)),
        out = toml_path(out),
        alerts = toml_path(alerts),
    )
}

#[test]
fn weir_run_restarts_a_failed_job_from_its_latest_checkpoint_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (out, alerts) = (dir.path().join("out.txt"), dir.path().join("alerts.txt"));
    // 4,000 records/s over two subtasks: each fails after about 1.5 s, with
    // a checkpoint every 100 ms before that; 12,000 records in all.
    let count = 12_000;
    let spec = dir.path().join("job.toml");
    std::fs::write(&spec, fail_once_spec(&out, &alerts, count, 4_000, 3_000)).unwrap();
    let run = weir(&cache)
        .arg("run")
        .arg(&spec)
        .arg("--json")
        .output()
        .expect("weir runs");
    assert!(run.status.success(), "{}", describe(&run));
    let summary: Value = serde_json::from_slice(&run.stdout).expect("a JSON summary");

    // It failed once and was restarted from a completed checkpoint.
    let restores = summary["checkpoints"]["restores"].as_array().unwrap();
    assert_eq!(restores.len(), 1, "one restart: {summary}");
    assert_eq!(summary["attempt"], 1, "{summary}");
    let from = restores[0]["checkpoint"].as_u64();
    assert!(
        from.is_some(),
        "restarted from a checkpoint, not from scratch: {summary}"
    );
    let completed: Vec<u64> = summary["checkpoints"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "completed")
        .filter_map(|c| c["id"].as_u64())
        .collect();
    assert!(!completed.is_empty(), "{summary}");
    // The checkpoints stay where `weir run` said, under the spec's folder.
    let stored = dir.path().join(".weir").join("checkpoints");
    assert!(stored.is_dir(), "{}", describe(&run));

    // Every record committed exactly once, in order per key, nothing else.
    assert_exactly_once(&out, &alerts, count);
}

#[test]
fn weir_run_without_restarts_fails_with_the_operators_error() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (out, alerts) = (dir.path().join("out.txt"), dir.path().join("alerts.txt"));
    let spec = dir.path().join("job.toml");
    let text = fail_once_spec(&out, &alerts, 2_000, 0, 100)
        .replace("rate = 0\n", "")
        .replace("strategy = \"fixed-delay\"", "strategy = \"none\"")
        .replace("attempts = 3\ndelay_ms = 100\n", "");
    std::fs::write(&spec, text).unwrap();
    let run = weir(&cache)
        .arg("run")
        .arg(&spec)
        .output()
        .expect("weir runs");
    crate::util::assert_fails_with(
        &run,
        1,
        &[
            "fail-once",
            "flaky",
            "weir-test-fail-once: failing on the first attempt",
        ],
    );
}
