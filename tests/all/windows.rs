//! The host's window operator end to end: sliding and session windows
//! against an independent computation (parallelism 1 and 4, RocksDB and
//! heap, `weir run` and a cluster), allowed lateness, and exactly-once
//! windows under TaskManager kills.
//!
//! Every expectation is computed here from the input: sliding windows as
//! "every window of `size` starting at a multiple of `slide` that covers
//! the record", sessions as "sorted timestamps of a key, cut where two
//! neighbours are more than `gap` apart".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cluster::harness::Cluster;
use crate::event_time::{Input, disordered, mix};
use crate::exactly_once::{committed_lines, kill_repeatedly};
use crate::util::{describe, read_sink, run_weir, toml_path};

/// (key, start, end) → aggregate value.
pub(crate) type Windows = BTreeMap<(String, i64, i64), f64>;

/// Each record's number: what `sum` adds up.
fn x_of(r: &Input) -> i64 {
    (mix(r.i as u64) % 100) as i64
}

fn lines(input: &[Input]) -> String {
    input
        .iter()
        .map(|r| {
            format!(
                r#"{{"i":{},"k":"{}","ts":{},"x":{}}}"#,
                r.i,
                r.key,
                r.ts,
                x_of(r)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn sliding_sums(input: &[Input], size: i64, slide: i64) -> Windows {
    let mut out = Windows::new();
    for r in input {
        let mut start = r.ts.div_euclid(slide) * slide;
        while start > r.ts - size {
            *out.entry((r.key.clone(), start, start + size))
                .or_insert(0.0) += x_of(r) as f64;
            start -= slide;
        }
    }
    out
}

fn session_counts(input: &[Input], gap: i64) -> Windows {
    let mut by_key: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for r in input {
        by_key.entry(&r.key).or_default().push(r.ts);
    }
    let mut out = Windows::new();
    for (key, mut ts) in by_key {
        ts.sort_unstable();
        let (mut first, mut count) = (ts[0], 0.0);
        for (i, &t) in ts.iter().enumerate() {
            if i > 0 && t - ts[i - 1] > gap {
                out.insert((key.to_owned(), first, ts[i - 1] + gap), count);
                (first, count) = (t, 0.0);
            }
            count += 1.0;
        }
        out.insert((key.to_owned(), first, ts[ts.len() - 1] + gap), count);
    }
    out
}

/// A job: the input file → window operator `w` (its TOML lines in
/// `window`) → `windows`, late records → `late`.
pub(crate) fn window_job(
    dir: &Path,
    data: &Path,
    window: &str,
    parallelism: u32,
    backend: &str,
    bound: u64,
) -> (PathBuf, PathBuf, PathBuf) {
    let (windows, late) = (dir.join("windows.jsonl"), dir.join("late.jsonl"));
    let spec = dir.join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "windows"
state_backend = "{backend}"

[[source]]
id = "events"
type = "file"
path = {data}
format = "json-lines"
key_field = "k"
timestamp_field = "ts"
watermark = {{ max_out_of_orderness_ms = {bound} }}

[[operator]]
id = "w"
{window}
key_by = "key"
parallelism = {parallelism}

[[sink]]
id = "windows"
type = "file"
path = {windows}
parallelism = {parallelism}

[[sink]]
id = "late"
type = "file"
path = {late}
parallelism = 1

[[edge]]
from = "events"
to = "w"

[[edge]]
from = "w"
to = "windows"

[[edge]]
from = "w:late"
to = "late"
"#,
            data = toml_path(data),
            windows = toml_path(&windows),
            late = toml_path(&late),
        ),
    )
    .unwrap();
    (spec, windows, late)
}

/// Makes the job at `spec` emit its watermark after every batch of
/// `batch` records: then which records are late depends on the input only.
pub(crate) fn per_batch_watermarks(spec: &Path, batch: usize) {
    let text = std::fs::read_to_string(spec).unwrap().replace(
        "[job]\n",
        &format!("[job]\nbatch_size = {batch}\nwatermark_interval_ms = 0\n"),
    );
    std::fs::write(spec, text).unwrap();
}

/// The windows in a sink's lines; `field` is the aggregate's name.
pub(crate) fn parse_windows(lines: &[String], field: &str) -> Windows {
    let mut out = Windows::new();
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let key = (
            v["key"].as_str().unwrap().to_owned(),
            v["start"].as_i64().unwrap(),
            v["end"].as_i64().unwrap(),
        );
        let value = v[field]
            .as_f64()
            .unwrap_or_else(|| panic!("no {field}: {line}"));
        assert!(
            out.insert(key, value).is_none(),
            "a window fired twice: {line}"
        );
    }
    out
}

const DISORDER: u64 = 300;

const SLIDING: &str = "window = { type = \"sliding\", size_ms = 1000, slide_ms = 250 }\n\
                       aggregate = \"sum\"\nfield = \"json:x\"";
const SESSION: &str = "window = { type = \"session\", gap_ms = 40 }\naggregate = \"count\"";

/// `weir run` of one window over the input; nothing may be late (the
/// bound covers the disorder).
fn run_windows(
    input: &[Input],
    window: &str,
    parallelism: u32,
    backend: &str,
    field: &str,
) -> Windows {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("input.jsonl");
    std::fs::write(&data, lines(input)).unwrap();
    let (spec, windows, late) =
        window_job(dir.path(), &data, window, parallelism, backend, DISORDER);
    let out = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(read_sink(&late), Vec::<String>::new(), "nothing is late");
    parse_windows(&read_sink(&windows), field)
}

#[test]
fn sliding_windows_equal_the_independent_sums_at_parallelism_1_and_4_on_both_backends() {
    let input = disordered(4_000, DISORDER, 11);
    let expected = sliding_sums(&input, 1000, 250);
    for (parallelism, backend) in [(1, "rocksdb"), (4, "heap")] {
        let got = run_windows(&input, SLIDING, parallelism, backend, "sum");
        assert_eq!(got.len(), expected.len(), "p={parallelism} {backend}");
        assert!(got == expected, "p={parallelism} {backend}: sums differ");
    }
}

#[test]
fn session_windows_merge_across_bridging_records_and_equal_the_independent_sessions() {
    // Sparse keys: gaps of 7 ms per record over 5 keys make sessions of a
    // few records; disorder makes records arrive that bridge two of them.
    let input = disordered(4_000, DISORDER, 5);
    let expected = session_counts(&input, 40);
    assert!(
        expected.len() > 100 && expected.values().any(|c| *c > 3.0),
        "the input must make many multi-record sessions: {}",
        expected.len()
    );
    for (parallelism, backend) in [(4, "rocksdb"), (1, "heap")] {
        let got = run_windows(&input, SESSION, parallelism, backend, "count");
        assert_eq!(got.len(), expected.len(), "p={parallelism} {backend}");
        assert!(
            got == expected,
            "p={parallelism} {backend}: sessions differ"
        );
    }
}

#[test]
fn a_late_record_within_the_lateness_refires_its_window_and_one_beyond_goes_aside() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("input.jsonl");
    // Key a; one record per batch, a watermark after each (timestamp - 1).
    let ts = [100, 200, 1200, 300, 1600, 400];
    let input: Vec<String> = ts
        .iter()
        .enumerate()
        .map(|(i, t)| format!(r#"{{"i":{i},"k":"a","ts":{t}}}"#))
        .collect();
    std::fs::write(&data, input.join("\n") + "\n").unwrap();
    let (spec, windows, late) = window_job(
        dir.path(),
        &data,
        "window = { type = \"tumbling\", size_ms = 1000 }\naggregate = \"count\"\n\
         allowed_lateness_ms = 500",
        1,
        "rocksdb",
        0,
    );
    per_batch_watermarks(&spec, 1);
    let out = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    // 1200 moves the watermark to 1199: [0, 1000) fires with 2. 300 is late
    // but within 500 ms of lateness: it fires again with 3. 1600 (watermark
    // 1599 >= 999 + 500) ends the lateness: 400 goes to the late output.
    assert_eq!(
        read_sink(&windows),
        [
            r#"{"key":"a","start":0,"end":1000,"count":2}"#,
            r#"{"key":"a","start":0,"end":1000,"count":3}"#,
            r#"{"key":"a","start":1000,"end":2000,"count":2}"#,
        ]
    );
    assert_eq!(read_sink(&late), [r#"{"i":5,"k":"a","ts":400}"#]);
}

#[test]
fn windows_on_a_cluster_equal_the_independent_computation() {
    let cluster = Cluster::start(2, 2, &[]);
    let dir = cluster.dir.path();
    let input = disordered(4_000, DISORDER, 23);
    let data = dir.join("input.jsonl");
    std::fs::write(&data, lines(&input)).unwrap();
    for (name, window, field, expected) in [
        ("sliding", SLIDING, "sum", sliding_sums(&input, 1000, 250)),
        ("session", SESSION, "count", session_counts(&input, 40)),
    ] {
        let job_dir = dir.join(name);
        std::fs::create_dir_all(&job_dir).unwrap();
        let (spec, windows, late) = window_job(&job_dir, &data, window, 4, "rocksdb", DISORDER);
        let id = cluster.submit(&spec);
        let job = cluster.wait_job(&id, |s| s != "running" && s != "created");
        assert_eq!(job["state"], "finished", "{job}");
        assert_eq!(
            read_sink(&late),
            Vec::<String>::new(),
            "{name}: nothing is late"
        );
        let got = parse_windows(&read_sink(&windows), field);
        assert_eq!(got.len(), expected.len(), "{name}");
        assert!(got == expected, "{name}: windows differ");
    }
}

/// A windowed count with checkpoints; TaskManagers killed five times: the
/// committed windows are exactly the independent count, each once.
#[test]
fn a_windowed_count_is_exactly_once_under_taskmanager_kills() {
    let mut cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "2000"]);
    let dir = cluster.dir.path().to_owned();
    let input = disordered(150_000, DISORDER, 3);
    let data = dir.join("input.jsonl");
    std::fs::write(&data, lines(&input)).unwrap();
    let out = dir.join("out/windows.jsonl");
    let spec = dir.join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "windows-exactly-once"
parallelism = 2

[job.checkpoints]
interval_ms = 300

[job.restart]
strategy = "fixed-delay"
attempts = 100
delay_ms = 200

[[source]]
id = "events"
type = "file"
path = {data}
format = "json-lines"
key_field = "k"
timestamp_field = "ts"
rate = 3000
watermark = {{ max_out_of_orderness_ms = {DISORDER} }}

[[operator]]
id = "w"
window = {{ type = "tumbling", size_ms = 500 }}
aggregate = "count"
key_by = "key"

[[sink]]
id = "out"
type = "file"
path = {out}

[[edge]]
from = "events"
to = "w"

[[edge]]
from = "w"
to = "out"
"#,
            data = toml_path(&data),
            out = toml_path(&out),
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    kill_repeatedly(&mut cluster, &id, 5);
    let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{job}");

    let mut expected = Windows::new();
    for r in &input {
        let start = r.ts.div_euclid(500) * 500;
        *expected
            .entry((r.key.clone(), start, start + 500))
            .or_insert(0.0) += 1.0;
    }
    let got = parse_windows(&committed_lines(&out), "count");
    assert_eq!(got.len(), expected.len(), "windows committed");
    assert!(got == expected, "counts differ from the independent count");
}

/// A running windowed count and interval join rescaled (a savepoint of
/// their window and join state, restored at another parallelism): the
/// committed results are still exactly the independent ones.
#[test]
fn windows_and_joins_rescale_through_a_savepoint_without_losing_state() {
    let cluster = Cluster::start(2, 4, &[]);
    let dir = cluster.dir.path().to_owned();
    let input = disordered(60_000, DISORDER, 9);
    let data = dir.join("input.jsonl");
    std::fs::write(&data, lines(&input)).unwrap();
    let (windows_out, pairs_out) = (dir.join("out/windows.jsonl"), dir.join("out/pairs.jsonl"));
    let spec = dir.join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "rescaled-windows"
parallelism = 2

[job.checkpoints]
interval_ms = 300

[[source]]
id = "events"
type = "file"
path = {data}
format = "json-lines"
key_field = "k"
timestamp_field = "ts"
rate = 6000
watermark = {{ max_out_of_orderness_ms = {DISORDER} }}

[[operator]]
id = "w"
window = {{ type = "tumbling", size_ms = 500 }}
aggregate = "sum"
field = "json:x"
key_by = "key"

[[operator]]
id = "j"
join = {{ type = "interval", lower_ms = -3, upper_ms = 3 }}
key_by = "key"

[[sink]]
id = "windows"
type = "file"
path = {windows_out}

[[sink]]
id = "pairs"
type = "file"
path = {pairs_out}

[[edge]]
from = "events"
to = "w"

[[edge]]
from = "events"
to = "j"
input = "left"

[[edge]]
from = "events"
to = "j"
input = "right"

[[edge]]
from = "w"
to = "windows"

[[edge]]
from = "j"
to = "pairs"
"#,
            data = toml_path(&data),
            windows_out = toml_path(&windows_out),
            pairs_out = toml_path(&pairs_out),
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    crate::cluster::harness::wait_for("a completed checkpoint", || {
        (!crate::exactly_once::completed_checkpoints(&cluster, &id).is_empty()).then_some(())
    });
    let rescaled = cluster.weir(&["rescale", &id, "w=3", "j=4"]);
    assert!(rescaled.status.success(), "{}", describe(&rescaled));
    let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{job}");
    let parallelism = |v: &str| {
        job["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == v)
            .unwrap()["parallelism"]
            .clone()
    };
    assert_eq!(
        (parallelism("w"), parallelism("j")),
        (3.into(), 4.into()),
        "{job}"
    );

    let mut expected = Windows::new();
    for r in &input {
        let start = r.ts.div_euclid(500) * 500;
        *expected
            .entry((r.key.clone(), start, start + 500))
            .or_insert(0.0) += x_of(r) as f64;
    }
    let got = parse_windows(&committed_lines(&windows_out), "sum");
    assert!(got == expected, "window sums differ after the rescale");
    // The self-join: every ordered pair of a key's records at most 3 ms apart.
    let mut by_key: BTreeMap<&str, Vec<&Input>> = BTreeMap::new();
    for r in &input {
        by_key.entry(&r.key).or_default().push(r);
    }
    let mut want: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for records in by_key.values() {
        for l in records {
            for r in records {
                if (l.ts - 3..=l.ts + 3).contains(&r.ts) {
                    *want.entry((l.i, r.i)).or_insert(0) += 1;
                }
            }
        }
    }
    let mut pairs: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for line in committed_lines(&pairs_out) {
        let v: Value = serde_json::from_str(&line).unwrap();
        let pair = (
            v["left"]["i"].as_u64().unwrap() as usize,
            v["right"]["i"].as_u64().unwrap() as usize,
        );
        *pairs.entry(pair).or_insert(0) += 1;
    }
    assert_eq!(pairs.len(), want.len(), "distinct pairs after the rescale");
    assert!(pairs == want, "join pairs differ after the rescale");
}
