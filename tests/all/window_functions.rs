//! Window functions in Wasm (contract 0.1.3) end to end: aggregates and
//! process-window functions in the host's window operator, against
//! independent computations, at parallelism 1 and 4, on both backends, in
//! `weir run` and on a cluster, with allowed lateness, session merging,
//! count windows, and exactly-once under TaskManager kills; modules in the
//! wrong place are refused with a message.
//!
//! The input's value is an integer (`value_field = "x"`). Expectations are
//! computed here: a window's records are found by the window rules of
//! `windows.rs` (tumbling: `ts - ts mod size`; sliding: every window of
//! `size` starting at a multiple of `slide` covering `ts`; sessions: sorted
//! timestamps cut where neighbours are more than `gap` apart), and the
//! expected lines are formatted here, byte for byte as the examples
//! document them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weir_tests::artifacts;

use super::cluster::harness::Cluster;
use crate::event_time::{Input, disordered, mix};
use crate::exactly_once::{committed_lines, kill_repeatedly};
use crate::util::{assert_fails_with, describe, read_sink, run_weir, toml_path};

const DISORDER: u64 = 300;

/// (key, start, end) → the window's values in arrival order.
type Contents = BTreeMap<(String, i64, i64), Vec<i64>>;

/// Each record's value: an integer in -100..=100.
fn x_of(r: &Input) -> i64 {
    (mix(r.i as u64 ^ 0xABCD) % 201) as i64 - 100
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

fn tumbling(input: &[Input], size: i64) -> Contents {
    sliding(input, size, size)
}

fn sliding(input: &[Input], size: i64, slide: i64) -> Contents {
    let mut out = Contents::new();
    for r in input {
        let mut start = r.ts.div_euclid(slide) * slide;
        while start > r.ts - size {
            out.entry((r.key.clone(), start, start + size))
                .or_default()
                .push(x_of(r));
            start -= slide;
        }
    }
    out
}

fn sessions(input: &[Input], gap: i64) -> Contents {
    let mut by_key: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for r in input {
        by_key.entry(&r.key).or_default().push((r.ts, x_of(r)));
    }
    let mut out = Contents::new();
    for (key, mut records) in by_key {
        records.sort_unstable();
        let mut session: Vec<i64> = Vec::new();
        let mut first = records[0].0;
        for (i, &(t, x)) in records.iter().enumerate() {
            if i > 0 && t - records[i - 1].0 > gap {
                out.insert((key.to_owned(), first, records[i - 1].0 + gap), session);
                (first, session) = (t, Vec::new());
            }
            session.push(x);
        }
        let last = records[records.len() - 1].0;
        out.insert((key.to_owned(), first, last + gap), session);
    }
    out
}

/// `window-stats`' line for each window.
fn stats_lines(contents: &Contents) -> Vec<String> {
    let mut out: Vec<String> = contents
        .iter()
        .map(|((key, start, end), xs)| {
            format!(
                r#"{{"key":"{key}","start":{start},"end":{end},"count":{},"sum":{},"min":{},"max":{}}}"#,
                xs.len(),
                xs.iter().sum::<i64>(),
                xs.iter().min().unwrap(),
                xs.iter().max().unwrap()
            )
        })
        .collect();
    out.sort();
    out
}

/// `window-top`'s line for each window.
fn top_lines(contents: &Contents) -> Vec<String> {
    let mut out: Vec<String> = contents
        .iter()
        .map(|((key, start, end), xs)| {
            let mut top = xs.clone();
            top.sort_unstable_by(|a, b| b.cmp(a));
            top.truncate(3);
            let top: Vec<String> = top.iter().map(i64::to_string).collect();
            format!(
                r#"{{"key":"{key}","start":{start},"end":{end},"count":{},"top":[{}]}}"#,
                xs.len(),
                top.join(",")
            )
        })
        .collect();
    out.sort();
    out
}

/// A job: the input file → window operator `w` (TOML lines `window`, its
/// module `module`) → `out` (and `w:late` → `late`).
fn spec(
    dir: &Path,
    data: &Path,
    window: &str,
    module: &str,
    parallelism: u32,
    backend: &str,
) -> (PathBuf, PathBuf, PathBuf) {
    let (out, late) = (dir.join("out.jsonl"), dir.join("late.jsonl"));
    let spec = dir.join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "window-functions"
state_backend = "{backend}"

[[source]]
id = "events"
type = "file"
path = {data}
format = "json-lines"
key_field = "k"
timestamp_field = "ts"
value_field = "x"
watermark = {{ max_out_of_orderness_ms = {DISORDER} }}

[[operator]]
id = "w"
{window}
module = {module}
key_by = "key"
parallelism = {parallelism}

[[sink]]
id = "out"
type = "file"
path = {out}
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
to = "out"

[[edge]]
from = "w:late"
to = "late"
"#,
            data = toml_path(data),
            module = toml_path(Path::new(module)),
            out = toml_path(&out),
            late = toml_path(&late),
        ),
    )
    .unwrap();
    (spec, out, late)
}

/// `weir run` of window function `module` over `input`: the sorted output
/// lines; nothing may be late.
fn run(
    input: &[Input],
    window: &str,
    module: &str,
    parallelism: u32,
    backend: &str,
) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("input.jsonl");
    std::fs::write(&data, lines(input)).unwrap();
    let (spec, out, late) = spec(dir.path(), &data, window, module, parallelism, backend);
    let run = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(run.status.success(), "{}", describe(&run));
    assert_eq!(read_sink(&late), Vec::<String>::new(), "nothing is late");
    let mut got = read_sink(&out);
    got.sort();
    got
}

const TUMBLING: &str = "window = { type = \"tumbling\", size_ms = 500 }";
const SLIDING: &str = "window = { type = \"sliding\", size_ms = 1000, slide_ms = 250 }";
const SESSION: &str = "window = { type = \"session\", gap_ms = 40 }";

#[test]
fn a_wasm_aggregate_equals_the_independent_stats_on_every_assigner_backend_and_parallelism() {
    let input = disordered(4_000, DISORDER, 31);
    let session = sessions(&input, 40);
    assert!(
        session.len() > 100 && session.values().any(|xs| xs.len() > 3),
        "the input must make many multi-record sessions"
    );
    for (window, expected, parallelism, backend) in [
        (TUMBLING, tumbling(&input, 500), 4, "rocksdb"),
        (SLIDING, sliding(&input, 1000, 250), 1, "heap"),
        (SESSION, session.clone(), 4, "heap"),
        (SESSION, session, 1, "rocksdb"),
    ] {
        let got = run(
            &input,
            window,
            artifacts::WINDOW_STATS,
            parallelism,
            backend,
        );
        let expected = stats_lines(&expected);
        assert_eq!(
            got.len(),
            expected.len(),
            "{window} p={parallelism} {backend}"
        );
        assert!(
            got == expected,
            "{window} p={parallelism} {backend}: first difference {:?}",
            got.iter().zip(&expected).find(|(a, b)| a != b)
        );
    }
}

#[test]
fn a_process_window_function_sees_every_record_of_its_window_also_across_merged_sessions() {
    let input = disordered(4_000, DISORDER, 37);
    for (window, expected, parallelism, backend) in [
        (SESSION, sessions(&input, 40), 4, "rocksdb"),
        (SLIDING, sliding(&input, 1000, 250), 1, "heap"),
    ] {
        let got = run(&input, window, artifacts::WINDOW_TOP, parallelism, backend);
        let expected = top_lines(&expected);
        assert_eq!(
            got.len(),
            expected.len(),
            "{window} p={parallelism} {backend}"
        );
        assert!(
            got == expected,
            "{window} p={parallelism} {backend}: windows differ"
        );
    }
}

#[test]
fn a_wasm_count_aggregate_gives_the_built_in_counts_byte_for_byte() {
    let input = disordered(3_000, DISORDER, 41);
    for window in [
        TUMBLING,
        SESSION,
        "window = { type = \"global\", count = 7 }",
    ] {
        let wasm = run(&input, window, artifacts::COUNT_AGGREGATE, 2, "rocksdb");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("input.jsonl");
        std::fs::write(&data, lines(&input)).unwrap();
        let (spec, out, _) = crate::windows::window_job(
            dir.path(),
            &data,
            &format!("{window}\naggregate = \"count\""),
            2,
            "rocksdb",
            DISORDER,
        );
        let ran = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
        assert!(ran.status.success(), "{}", describe(&ran));
        let mut built_in = read_sink(&out);
        built_in.sort();
        assert!(!built_in.is_empty(), "{window}");
        assert_eq!(wasm, built_in, "{window}");
    }
}

#[test]
fn a_late_record_within_the_lateness_refires_a_wasm_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("input.jsonl");
    // As windows.rs's built-in case: one record per batch, a watermark after
    // each.
    let records = [
        (100, 5),
        (200, -2),
        (1200, 8),
        (300, 40),
        (1600, 1),
        (400, 3),
    ];
    let input: Vec<String> = records
        .iter()
        .enumerate()
        .map(|(i, (t, x))| format!(r#"{{"i":{i},"k":"a","ts":{t},"x":{x}}}"#))
        .collect();
    std::fs::write(&data, input.join("\n") + "\n").unwrap();
    let (spec, out, late) = spec(
        dir.path(),
        &data,
        "window = { type = \"tumbling\", size_ms = 1000 }\nallowed_lateness_ms = 500",
        artifacts::WINDOW_STATS,
        1,
        "rocksdb",
    );
    let text = std::fs::read_to_string(&spec).unwrap().replace(
        "max_out_of_orderness_ms = 300",
        "max_out_of_orderness_ms = 0",
    );
    std::fs::write(&spec, text).unwrap();
    crate::windows::per_batch_watermarks(&spec, 1);
    let ran = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(ran.status.success(), "{}", describe(&ran));
    assert_eq!(
        read_sink(&out),
        [
            r#"{"key":"a","start":0,"end":1000,"count":2,"sum":3,"min":-2,"max":5}"#,
            r#"{"key":"a","start":0,"end":1000,"count":3,"sum":43,"min":-2,"max":40}"#,
            r#"{"key":"a","start":1000,"end":2000,"count":2,"sum":9,"min":1,"max":8}"#,
        ]
    );
    // The late record goes aside as it came: its value is `x`.
    assert_eq!(read_sink(&late), ["3"]);
}

#[test]
fn window_functions_run_on_a_cluster() {
    let cluster = Cluster::start(2, 2, &[]);
    let dir = cluster.dir.path();
    let input = disordered(4_000, DISORDER, 43);
    let data = dir.join("input.jsonl");
    std::fs::write(&data, lines(&input)).unwrap();
    for (name, window, module, expected) in [
        (
            "stats",
            TUMBLING,
            artifacts::WINDOW_STATS,
            stats_lines(&tumbling(&input, 500)),
        ),
        (
            "top",
            SESSION,
            artifacts::WINDOW_TOP,
            top_lines(&sessions(&input, 40)),
        ),
    ] {
        let job_dir = dir.join(name);
        std::fs::create_dir_all(&job_dir).unwrap();
        let (spec, out, late) = spec(&job_dir, &data, window, module, 4, "rocksdb");
        let id = cluster.submit(&spec);
        let job = cluster.wait_job(&id, |s| s != "running" && s != "created");
        assert_eq!(job["state"], "finished", "{job}");
        assert_eq!(
            read_sink(&late),
            Vec::<String>::new(),
            "{name}: nothing is late"
        );
        let mut got = read_sink(&out);
        got.sort();
        assert_eq!(got.len(), expected.len(), "{name}");
        assert!(got == expected, "{name}: windows differ");
    }
}

/// A process-window function keeps its windows' records in the state:
/// TaskManagers killed five times, the committed windows are exactly the
/// independent ones, each once.
#[test]
fn a_process_window_function_is_exactly_once_under_taskmanager_kills() {
    let mut cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "2000"]);
    let dir = cluster.dir.path().to_owned();
    let input = disordered(60_000, DISORDER, 47);
    let data = dir.join("input.jsonl");
    std::fs::write(&data, lines(&input)).unwrap();
    let out = dir.join("out/windows.jsonl");
    let spec = dir.join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "window-function-exactly-once"
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
value_field = "x"
rate = 3000
watermark = {{ max_out_of_orderness_ms = {DISORDER} }}

[[operator]]
id = "w"
window = {{ type = "tumbling", size_ms = 500 }}
module = {module}
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
            module = toml_path(Path::new(artifacts::WINDOW_TOP)),
            out = toml_path(&out),
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    kill_repeatedly(&mut cluster, &id, 5);
    let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{job}");
    let mut got = committed_lines(&out);
    got.sort();
    let expected = top_lines(&tumbling(&input, 500));
    assert_eq!(got.len(), expected.len(), "windows committed");
    assert!(got == expected, "windows differ from the independent ones");
}

/// The other SDKs' `window-stats` and `window-top` (`stats`, `top`): a
/// sliding aggregate with merged sessions and a session process-window
/// function give the independent windows, byte for byte as Rust's.
pub(crate) fn check_window_functions(lang: &str, stats: &Path, top: &Path) {
    let input = disordered(1_500, DISORDER, 53);
    for (window, module, expected) in [
        (SLIDING, stats, stats_lines(&sliding(&input, 1000, 250))),
        (SESSION, stats, stats_lines(&sessions(&input, 40))),
        (SESSION, top, top_lines(&sessions(&input, 40))),
    ] {
        let got = run(&input, window, &module.display().to_string(), 2, "rocksdb");
        assert_eq!(
            got.len(),
            expected.len(),
            "{lang}: {window} {}",
            module.display()
        );
        assert!(
            got == expected,
            "{lang}: {window} {}: first difference {:?}",
            module.display(),
            got.iter().zip(&expected).find(|(a, b)| a != b)
        );
    }
}

#[test]
fn a_module_in_the_wrong_place_is_refused_with_what_to_do() {
    let input = disordered(10, 0, 1);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("input.jsonl");
    std::fs::write(&data, lines(&input)).unwrap();
    // An ordinary operator as a window's function.
    let (not_a_function, _, _) = spec(dir.path(), &data, TUMBLING, artifacts::TOKENIZE, 1, "heap");
    let out = run_weir(
        &dir.path().join("cache"),
        &["run", not_a_function.to_str().unwrap()],
    );
    assert_fails_with(
        &out,
        2,
        &[
            "operator `w`",
            "kind is `none`",
            "aggregate or process-window",
        ],
    );
    // A component from before window functions (contract 0.1.0).
    let (old, _, _) = spec(
        dir.path(),
        &data,
        TUMBLING,
        artifacts::LEGACY_COUNT,
        1,
        "heap",
    );
    let out = run_weir(&dir.path().join("cache"), &["run", old.to_str().unwrap()]);
    assert_fails_with(
        &out,
        2,
        &[
            "operator `w`",
            "must export `weir:operator/window-function`",
        ],
    );
    // A window function without a window.
    let (no_window, _, _) = spec(dir.path(), &data, "", artifacts::WINDOW_STATS, 1, "heap");
    let out = run_weir(
        &dir.path().join("cache"),
        &["run", no_window.to_str().unwrap()],
    );
    assert_fails_with(
        &out,
        2,
        &["operator `w`", "is a window function", "`window` table"],
    );
}
