//! Nexmark (issue 16): the queries of `udfs/jobs/nexmark/` run by `weir run`
//! over the `nexmark` generator, each compared line by line with the same
//! query in SQL run by DuckDB (`udfs/jobs/nexmark/oracle.py`) over the same
//! events, written to a file by `udfs/jobs/nexmark/generate.toml`.
//!
//! The oracle is independent of Weir's code: DuckDB computes the windows,
//! sessions, joins and maxima from the raw events. 100,000 events at 1,000
//! events per second of event time give 100 s of event time: ten q7
//! windows, fifty q5 windows, thousands of q11 sessions, hundreds of q3
//! matches (some of whose auctions come before their seller), thousands of
//! q4 winning bids in five categories (and as many q6 rows, most averaging
//! a full eleven auctions of a seller), hundreds of q8 new users. Queries
//! run at parallelism 2 (the stateless parts and the sink split over two
//! subtasks) on RocksDB, q4, q5, q6 and q7 also on the heap backend.
//!
//! q12's windows follow the wall clock, so which window a bid lands in
//! depends on when it was processed: the test checks that every window is
//! a well-formed window of the run's wall clock (aligned, one per bidder and
//! start, at least one bid) and compares each bidder's total over its
//! windows with DuckDB's count of the bidder's bids.
//!
//! q4's result is a changelog (one updated row per winning bid, as Flink's
//! non-windowed `GROUP BY`) whose order within a category depends on the
//! channels; its last row per category is compared, after checking that
//! the changelog counts each category's auctions one by one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{describe, read_sink, repo_root, run_weir};

pub(crate) const EVENTS: &str = "100000";

/// Where tests/setup.sh installs DuckDB for Python.
fn duckdb_dir() -> PathBuf {
    let tools = std::env::var_os("WEIR_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/weir/tools")
        });
    let dir = tools.join("duckdb-2.0.1");
    assert!(
        dir.join("duckdb").is_dir(),
        "DuckDB for Python is missing at {}: run `bash tests/setup.sh`",
        dir.display()
    );
    dir
}

pub(crate) fn nexmark_dir() -> PathBuf {
    repo_root().join("udfs/jobs/nexmark")
}

/// `weir run` of the committed spec `name.toml`, its sink redirected to
/// `out` in `dir`.
pub(crate) fn run_job(dir: &Path, name: &str, out: &Path, extra: &[&str]) {
    let spec = nexmark_dir().join(format!("{name}.toml"));
    let count = format!("source.events.count={EVENTS}");
    let sink = format!("sink.out.path={}", out.display());
    let mut args = vec![
        "run",
        spec.to_str().unwrap(),
        "--allow-path",
        dir.to_str().unwrap(),
        "--set",
        &count,
        "--set",
        &sink,
    ];
    args.extend_from_slice(extra);
    let result = run_weir(&dir.join("cache"), &args);
    assert!(result.status.success(), "{name}: {}", describe(&result));
}

/// The oracle's sorted lines for `query` over `events`.
pub(crate) fn oracle(events: &Path, query: &str) -> Vec<String> {
    let out = Command::new("python3")
        .arg(nexmark_dir().join("oracle.py"))
        .arg(events)
        .arg(query)
        .env("PYTHONPATH", duckdb_dir())
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "oracle {query}: {}", describe(&out));
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// The fewest result lines each query has over these events: a query that
/// broke into writing (almost) nothing cannot pass by agreeing with an
/// oracle that found as little.
fn least_lines(query: &str) -> usize {
    match query {
        // Five categories.
        "q4" => 5,
        // A row per winning bid.
        "q6" => 1000,
        // Ten windows.
        "q7" => 10,
        "q8" => 100,
        _ => 1,
    }
}

/// q4's last row per category (the one counting the most auctions), after
/// checking that each category's rows count 1, 2, … auctions, one row per
/// winning bid.
fn final_rows_per_category(lines: Vec<String>) -> Vec<String> {
    let mut rows: std::collections::BTreeMap<u64, Vec<(u64, String)>> = Default::default();
    for line in lines {
        let row: serde_json::Value = serde_json::from_str(&line).expect("q4 writes JSON");
        let category = row["category"].as_u64().expect("a category");
        let auctions = row["auctions"].as_u64().expect("a count of auctions");
        rows.entry(category).or_default().push((auctions, line));
    }
    rows.into_values()
        .map(|mut changelog| {
            changelog.sort();
            let counts: Vec<u64> = changelog.iter().map(|(n, _)| *n).collect();
            assert!(
                counts.iter().copied().eq(1..=counts.len() as u64),
                "q4: a category's rows do not count its auctions one by one: {counts:?}"
            );
            changelog.pop().expect("a row").1
        })
        .collect()
}

fn check(dir: &Path, events: &Path, query: &str, extra: &[&str]) {
    let out = dir.join(format!(
        "{query}-{}.txt",
        extra.join("-").replace(['=', '.'], "_")
    ));
    run_job(dir, query, &out, extra);
    let mut got = read_sink(&out);
    if query == "q4" {
        got = final_rows_per_category(got);
    }
    got.sort();
    let want = oracle(events, query);
    assert!(
        want.len() >= least_lines(query),
        "{query}: the oracle found {} lines, expected at least {}",
        want.len(),
        least_lines(query)
    );
    assert_same_lines(&format!("{query} {extra:?}"), &got, &want);
}

/// Fails with the first differing lines unless Weir's sorted lines `got`
/// equal DuckDB's `want`.
pub(crate) fn assert_same_lines(what: &str, got: &[String], want: &[String]) {
    if got != want {
        let missing: Vec<_> = want.iter().filter(|l| !got.contains(l)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|l| !want.contains(l)).take(5).collect();
        panic!(
            "{what}: Weir wrote {} lines, DuckDB {}\nmissing (first 5): {missing:#?}\nunexpected (first 5): {extra:#?}",
            got.len(),
            want.len()
        );
    }
}

/// q12 (bids per bidder in processing-time tumbling windows). The input is
/// throttled to about 4 s of wall-clock time and the windows shortened to
/// 1 s (the job's 10 s would need a 20 s run to close windows on timers
/// rather than only at the end of input), so windows close on their
/// processing-time timers during the run and the last ones at the end of
/// input.
fn check_q12(dir: &Path, events: &Path) {
    const SIZE_MS: i64 = 1000;
    let out = dir.join("q12.txt");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let size = format!("operator.count.config.size_ms={SIZE_MS}");
    let before = now();
    run_job(
        dir,
        "q12",
        &out,
        &[
            "--parallelism",
            "2",
            "--set",
            "source.events.rate=25000",
            "--set",
            &size,
        ],
    );
    let after = now();
    let mut totals: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut windows = std::collections::BTreeSet::new();
    let mut starts = std::collections::BTreeSet::new();
    for line in read_sink(&out) {
        let row: serde_json::Value = serde_json::from_str(&line).expect("q12 writes JSON");
        let field = |name: &str| {
            row[name]
                .as_i64()
                .unwrap_or_else(|| panic!("q12: no {name}: {line}"))
        };
        let (bidder, count) = (field("bidder") as u64, field("bid_count"));
        let (start, end) = (field("window_start"), field("window_end"));
        assert!(count >= 1, "q12: an empty window: {line}");
        assert!(
            start % SIZE_MS == 0 && end == start + SIZE_MS,
            "q12: not a tumbling window of {SIZE_MS} ms: {line}"
        );
        assert!(
            start >= before - before % SIZE_MS && start <= after,
            "q12: a window outside the run's wall clock [{before}, {after}]: {line}"
        );
        assert!(
            windows.insert((bidder, start)),
            "q12: a bidder's window emitted twice: {line}"
        );
        starts.insert(start);
        *totals.entry(bidder).or_default() += count as u64;
    }
    assert!(
        starts.len() >= 3,
        "q12: a run of {} ms gave only the windows {starts:?}",
        after - before
    );
    let mut got: Vec<String> = totals
        .iter()
        .map(|(bidder, bids)| format!(r#"{{"bidder":{bidder},"bids":{bids}}}"#))
        .collect();
    got.sort();
    let want = oracle(events, "q12");
    assert!(
        want.len() >= 1000,
        "q12: the oracle found {} bidders, expected at least 1000",
        want.len()
    );
    if got != want {
        let missing: Vec<_> = want.iter().filter(|l| !got.contains(l)).take(5).collect();
        let extra_lines: Vec<_> = got.iter().filter(|l| !want.contains(l)).take(5).collect();
        panic!(
            "q12: Weir's totals for {} bidders, DuckDB's for {}\nmissing (first 5): {missing:#?}\nunexpected (first 5): {extra_lines:#?}",
            got.len(),
            want.len()
        );
    }
}

#[test]
fn every_query_matches_duckdb_over_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    run_job(dir.path(), "generate", &events, &[]);
    let generated = std::fs::read_to_string(&events).unwrap();
    assert_eq!(generated.lines().count(), 100_000);
    let p2 = ["--parallelism", "2"];
    for query in ["q0", "q1", "q2", "q3", "q8", "q11"] {
        check(dir.path(), &events, query, &p2);
    }
    for query in ["q4", "q5", "q6", "q7"] {
        check(dir.path(), &events, query, &p2);
        check(
            dir.path(),
            &events,
            query,
            &["--set", "job.state_backend=heap"],
        );
    }
    check_q12(dir.path(), &events);
}
