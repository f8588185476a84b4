//! Event time: watermark strategies. Out-of-order input within the bound is
//! on time, beyond it exactly the predicted records are late; an idle
//! source stops stalling event time only when `idle_timeout_ms` says so.
//!
//! The windows are the `window-count` example operator (a tumbling count
//! written with event-time timers); every expectation is computed here from
//! the input, by the rules of `host/job/src/SPEC.md` ("Event time and
//! watermarks").

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use weir_tests::artifacts;

use super::cluster::harness::{Cluster, wait_for};
use crate::util::{describe, read_sink, run_weir, toml_path};
use crate::windows::{per_batch_watermarks, window_job};

/// Window length of every test here.
const WINDOW_MS: i64 = 1_000;

/// SplitMix64, for seeded input.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// One input record: its index (unique), key and event time.
pub(crate) struct Input {
    pub i: usize,
    pub key: String,
    pub ts: i64,
}

impl Input {
    pub(crate) fn line(&self) -> String {
        format!(r#"{{"i":{},"k":"{}","ts":{}}}"#, self.i, self.key, self.ts)
    }
}

/// `n` records, 7 ms apart, each up to `disorder` ms earlier than its slot:
/// every record is at most `disorder` ms older than the newest before it.
pub(crate) fn disordered(n: usize, disorder: u64, seed: u64) -> Vec<Input> {
    (0..n)
        .map(|i| {
            let r = mix(seed ^ i as u64);
            Input {
                i,
                key: format!("k{}", r % 5),
                ts: 1_000_000 + i as i64 * 7 - ((r >> 8) % (disorder + 1)) as i64,
            }
        })
        .collect()
}

/// Window start of `ts`.
fn start_of(ts: i64) -> i64 {
    ts.div_euclid(WINDOW_MS) * WINDOW_MS
}

/// What the job must produce when a source with `max_out_of_orderness_ms =
/// bound` emits its watermark after every batch of `batch` records: the
/// counts per (key, window start) of the records on time, and the indexes
/// of the late ones. A record is late when its window's last millisecond is
/// at or below the watermark that preceded its batch.
fn expected(
    input: &[Input],
    bound: i64,
    batch: usize,
) -> (BTreeMap<(String, i64), u64>, Vec<usize>) {
    let mut counts = BTreeMap::new();
    let mut late = Vec::new();
    let (mut watermark, mut max) = (i64::MIN, i64::MIN);
    for chunk in input.chunks(batch) {
        for r in chunk {
            let start = start_of(r.ts);
            if start + WINDOW_MS - 1 <= watermark {
                late.push(r.i);
            } else {
                *counts.entry((r.key.clone(), start)).or_insert(0) += 1;
            }
            max = max.max(r.ts);
        }
        watermark = max - bound - 1;
    }
    (counts, late)
}

/// Runs `weir run` on the input with the given bound, window parallelism
/// and backend; returns (window counts, late record indexes) as written.
fn run(
    dir: &Path,
    input: &[Input],
    bound: i64,
    batch: usize,
    parallelism: u32,
    backend: &str,
    count: &str,
) -> (BTreeMap<(String, i64), u64>, Vec<usize>) {
    let data = dir.join("input.jsonl");
    let lines: Vec<String> = input.iter().map(Input::line).collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let (spec, windows, late) = window_job(dir, &data, count, parallelism, backend, bound as u64);
    per_batch_watermarks(&spec, batch);
    let out = run_weir(&dir.join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));

    let mut counts = BTreeMap::new();
    for line in read_sink(&windows) {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let key = v["key"].as_str().unwrap().to_owned();
        let start = v["start"].as_i64().unwrap();
        assert_eq!(v["end"].as_i64(), Some(start + WINDOW_MS), "{line}");
        let previous = counts.insert((key, start), v["count"].as_u64().unwrap());
        assert_eq!(previous, None, "a window fired twice: {line}");
    }
    let mut late_indexes: Vec<usize> = read_sink(&late)
        .iter()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            v["i"].as_u64().unwrap() as usize
        })
        .collect();
    late_indexes.sort_unstable();
    (counts, late_indexes)
}

/// The tumbling count as the `window-count` operator (event-time timers
/// in Wasm).
fn wasm_count() -> String {
    format!(
        "module = {}\nconfig = {{ size_ms = {WINDOW_MS} }}",
        toml_path(Path::new(artifacts::WINDOW_COUNT))
    )
}

/// The tumbling count as the host's window operator.
fn builtin_count() -> String {
    format!("window = {{ type = \"tumbling\", size_ms = {WINDOW_MS} }}\naggregate = \"count\"")
}

#[test]
fn disorder_within_the_bound_is_on_time_and_beyond_it_exactly_the_predicted_records_are_late() {
    disorder_within_and_beyond_the_bound(&wasm_count());
}

#[test]
fn the_builtin_tumbling_count_is_exact_under_disorder_and_sends_exactly_the_late_records_aside() {
    disorder_within_and_beyond_the_bound(&builtin_count());
}

fn disorder_within_and_beyond_the_bound(count: &str) {
    const DISORDER: u64 = 400;
    const BATCH: usize = 10;
    let input = disordered(3_000, DISORDER, 7);

    // The bound covers the disorder: every record counts, none is late.
    let dir = tempfile::tempdir().unwrap();
    let (counts, late) = run(
        dir.path(),
        &input,
        DISORDER as i64,
        BATCH,
        2,
        "rocksdb",
        count,
    );
    let (want_counts, want_late) = expected(&input, DISORDER as i64, BATCH);
    assert!(want_late.is_empty(), "the test's own rule: nothing is late");
    assert_eq!(late, want_late);
    assert_eq!(counts, want_counts);
    assert_eq!(counts.values().sum::<u64>(), input.len() as u64);

    // A quarter of the bound: some records arrive after their window fired.
    let dir = tempfile::tempdir().unwrap();
    let bound = DISORDER as i64 / 4;
    let (counts, late) = run(dir.path(), &input, bound, BATCH, 3, "heap", count);
    let (want_counts, want_late) = expected(&input, bound, BATCH);
    assert!(
        want_late.len() > 10,
        "the input must make some records late: {}",
        want_late.len()
    );
    assert_eq!(late, want_late, "exactly the predicted records are late");
    assert_eq!(counts, want_counts, "the windows hold the rest");
}

/// A job with a fast generator and a followed file that goes quiet after
/// three records, both into a window count; `idle` is the quiet source's
/// `watermark` table.
fn two_sources(dir: &Path, name: &str, idle: &str) -> std::path::PathBuf {
    let quiet = dir.join(format!("{name}.jsonl"));
    // Generator time starts at 1_700_000_000_000 (a window start) and steps
    // 10 ms per record; the quiet source stays inside the first window.
    let base: i64 = 1_700_000_000_000;
    let lines: Vec<String> = (1..=3)
        .map(|i| format!(r#"{{"k":"{i}","ts":{}}}"#, base + i))
        .collect();
    std::fs::write(&quiet, lines.join("\n") + "\n").unwrap();
    let spec = dir.join(format!("{name}.toml"));
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "{name}"

[[source]]
id = "fast"
type = "generator"
kind = "sequence"
keys = 4
rate = 2000

[[source]]
id = "quiet"
type = "file"
path = {quiet}
format = "json-lines"
key_field = "k"
timestamp_field = "ts"
follow = true
{idle}

[[operator]]
id = "count"
module = {m}
config = {{ size_ms = {WINDOW_MS} }}
key_by = "key"

[[sink]]
id = "null"
type = "blackhole"

[[edge]]
from = "fast"
to = "count"

[[edge]]
from = "quiet"
to = "count"

[[edge]]
from = "count"
to = "null"
"#,
            quiet = toml_path(&quiet),
            m = toml_path(Path::new(artifacts::WINDOW_COUNT)),
        ),
    )
    .unwrap();
    spec
}

/// The `count` vertex of job `id`: (records in, records out, watermark).
fn count_vertex(cluster: &Cluster, id: &str) -> Option<(u64, u64, Option<i64>)> {
    let v = cluster.vertex(id, "count")?;
    Some((
        v["records_in"].as_u64()?,
        v["records_out"].as_u64()?,
        v["watermark"].as_i64(),
    ))
}

#[test]
fn an_idle_source_stalls_windows_without_an_idle_timeout_and_not_with_one() {
    let cluster = Cluster::start(1, 2, &[]);
    let dir = cluster.dir.path();
    let stalled = cluster.submit(&two_sources(dir, "stalled", ""));
    let flowing = cluster.submit(&two_sources(
        dir,
        "flowing",
        "watermark = { idle_timeout_ms = 300 }",
    ));
    let first_window_last_ms = 1_700_000_000_000 + WINDOW_MS - 1;

    // With the timeout, the quiet source turns idle and windows fire on the
    // generator's watermark alone, which the REST API shows.
    let watermark = wait_for("windows to fire despite the quiet source", || {
        let (_, out, watermark) = count_vertex(&cluster, &flowing)?;
        (out > 0).then_some(watermark)
    });
    let watermark = watermark.expect("the count vertex reports its watermark");
    assert!(watermark >= first_window_last_ms, "{watermark}");

    // Without it, the quiet source's watermark (its newest record minus 1)
    // holds event time inside the first window for good, however far the
    // generator's time runs: 5000 records are 50 windows' worth.
    let (records_in, out, watermark) = wait_for("the generator to run 50 windows ahead", || {
        count_vertex(&cluster, &stalled).filter(|(records_in, ..)| *records_in >= 5_000)
    });
    assert_eq!(out, 0, "no window may fire ({records_in} records in)");
    let watermark = watermark.expect("the count vertex reports its watermark");
    assert!(watermark < first_window_last_ms, "{watermark}");

    let status = cluster.weir(&["status", &stalled]);
    assert!(status.status.success(), "{}", describe(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("WATERMARK"), "{text}");

    for id in [&stalled, &flowing] {
        let cancel = cluster.weir(&["cancel", id]);
        assert!(cancel.status.success(), "{}", describe(&cancel));
    }
}
