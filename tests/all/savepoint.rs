//! Savepoints on a cluster of separate processes: stop a job with a
//! savepoint mid-stream, inspect it, refuse bad or incompatible ones before
//! anything starts, and resume from it with the keyed operator at another
//! parallelism: every record committed exactly once, no gap or repeat seen.

use std::path::Path;

use serde_json::Value;
use weir_tests::artifacts;

use crate::cluster::harness::{Cluster, wait_for};
use crate::exactly_once::{assert_exactly_once, committed_lines, completed_checkpoints};
use crate::util::{describe, toml_path};

/// Per-key sequences (source parallelism `sources`) → the checker
/// (`checkers`) → two-phase-commit file sinks (parallelism 2), with
/// checkpoints.
fn spec(out: &Path, alerts: &Path, count: u64, rate: u64, sources: u32, checkers: u32) -> String {
    spec_on(out, alerts, count, rate, sources, checkers, "rocksdb")
}

/// [`spec`] on state backend `backend`.
fn spec_on(
    out: &Path,
    alerts: &Path,
    count: u64,
    rate: u64,
    sources: u32,
    checkers: u32,
    backend: &str,
) -> String {
    format!(
        r#"
[job]
name = "savepointed"
buffer_timeout_ms = 5
state_backend = "{backend}"

[job.checkpoints]
interval_ms = 300
timeout_ms = 20000

[[source]]
id = "seq"
type = "generator"
kind = "sequence"
count = {count}
keys = 8
rate = {rate}
parallelism = {sources}

[[operator]]
id = "check"
module = {m}
key_by = "key"
config = {{ step = "8" }}
parallelism = {checkers}

[[sink]]
id = "out"
type = "file"
path = {out}
parallelism = 2

[[sink]]
id = "alerts"
type = "file"
path = {alerts}
parallelism = 2

[[edge]]
from = "seq"
to = "check"

[[edge]]
from = "check"
to = "out"

[[edge]]
from = "check:alerts"
to = "alerts"
"#,
        m = toml_path(Path::new(artifacts::SEQUENCE_CHECK)),
        out = toml_path(out),
        alerts = toml_path(alerts),
    )
}

fn job_count(cluster: &Cluster) -> usize {
    let (_, jobs) = cluster.get("/v1/jobs");
    jobs.as_array().map(Vec::len).unwrap_or(0)
}

/// `weir submit --from-savepoint`, expected to be refused (exit 2) with
/// `expected` in its message, starting nothing.
fn refused(cluster: &Cluster, spec: &Path, savepoint: &Path, expected: &str) {
    let before = job_count(cluster);
    let out = cluster.weir(&[
        "submit",
        &spec.display().to_string(),
        "--from-savepoint",
        &savepoint.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(expected), "wanted {expected:?}: {err}");
    assert_eq!(
        job_count(cluster),
        before,
        "a refused submission started a job"
    );
}

#[test]
fn a_job_stopped_with_a_savepoint_resumes_rescaled_exactly_once() {
    let cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "5000"]);
    let dir = cluster.dir.path();
    let (out, alerts) = (dir.join("out/seq.txt"), dir.join("out/alerts.txt"));
    let count = 60_000;
    let first = dir.join("first.toml");
    std::fs::write(&first, spec(&out, &alerts, count, 3_000, 2, 2)).unwrap();
    let id = cluster.submit(&first);

    // Mid-stream: running, with a completed checkpoint.
    wait_for("a completed checkpoint", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_eq!(job["state"], "running", "{job}");
        (!completed_checkpoints(&cluster, &id).is_empty()).then_some(())
    });
    let savepoint = dir.join("savepoints/one");
    let stopped = cluster.weir(&["stop", &id, "--savepoint", &savepoint.display().to_string()]);
    assert!(stopped.status.success(), "{}", describe(&stopped));
    let said = String::from_utf8_lossy(&stopped.stdout);
    assert!(said.contains("the job stopped at it"), "{said}");
    let job = cluster.wait_job(&id, |s| s == "canceled" || s == "failed");
    assert_eq!(job["state"], "canceled", "{job}");
    assert_eq!(job["savepoints"][0]["status"], "completed", "{job}");
    // Stopped mid-stream: part of the input is committed, not all of it.
    let committed = committed_lines(&out).len() as u64;
    assert!(
        committed < count,
        "the job ran to its end before the stop ({committed} lines); slow its source"
    );

    // What it holds, checked file by file.
    let shown = cluster.weir(&["savepoint", "inspect", &savepoint.display().to_string()]);
    assert!(shown.status.success(), "{}", describe(&shown));
    let text = String::from_utf8_lossy(&shown.stdout);
    for needle in [
        "job `savepointed`",
        "check",
        "seq",
        "match their recorded size",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    let inspected = cluster.weir(&[
        "savepoint",
        "inspect",
        "--json",
        &savepoint.display().to_string(),
    ]);
    let metadata: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    let check = metadata["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["uid"] == "check")
        .unwrap();
    let keys: u64 = check["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"]["entries"][0].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(keys, 8, "one last-seen entry per key: {check}");

    // One key's stored value: the last number of key 3 the checker saw,
    // which is the last committed one (the sinks committed up to the
    // savepoint, no further).
    let last_of_3 = committed_lines(&out)
        .iter()
        .map(|l| l.parse::<u64>().unwrap())
        .filter(|n| n % 8 == 3)
        .max()
        .expect("key 3 has committed records");
    let sp = savepoint.display().to_string();
    let query = |args: &[&str]| {
        let mut all = vec!["savepoint", "query", sp.as_str(), "--operator", "check"];
        all.extend_from_slice(args);
        cluster.weir(&all)
    };
    let shown = query(&["--state", "last", "--key", "3", "--codec", "u64"]);
    assert!(shown.status.success(), "{}", describe(&shown));
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout).trim(),
        last_of_3.to_string()
    );
    let missing = query(&["--state", "last", "--key", "no-such-key"]);
    assert_eq!(missing.status.code(), Some(1), "{}", describe(&missing));
    let unknown = query(&["--state", "nope", "--key", "3"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", describe(&unknown));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("its states: last"),
        "{}",
        describe(&unknown)
    );

    // Refused before anything starts: a savepoint with a flipped byte, one
    // that is not there, one whose sources would change parallelism.
    let resume = dir.join("resume.toml");
    std::fs::write(&resume, spec(&out, &alerts, count, 30_000, 2, 4)).unwrap();
    let broken = dir.join("savepoints/broken");
    copy_dir(&savepoint, &broken);
    let state = broken.join("check/0.state");
    let mut bytes = std::fs::read(&state).unwrap();
    let at = bytes.len() - 40;
    bytes[at] ^= 1;
    std::fs::write(&state, bytes).unwrap();
    refused(&cluster, &resume, &broken, "checksum mismatch");
    refused(
        &cluster,
        &resume,
        &dir.join("savepoints/none"),
        "No such file",
    );
    let rescaled_source = dir.join("rescaled-source.toml");
    std::fs::write(&rescaled_source, spec(&out, &alerts, count, 30_000, 4, 4)).unwrap();
    refused(
        &cluster,
        &rescaled_source,
        &savepoint,
        "keep their parallelism",
    );
    // Another job's savepoint: its state would be dropped.
    let other = dir.join("other.toml");
    std::fs::write(
        &other,
        crate::word_count::word_count_spec(&crate::util::kjv(), &dir.join("out/counts.txt")),
    )
    .unwrap();
    refused(&cluster, &other, &savepoint, "cannot restore the savepoint");

    // Resumed with the checker at parallelism 4 (from 2), from a copy of
    // the savepoint elsewhere: it runs to the end of its input.
    let moved = dir.join("moved-savepoint");
    copy_dir(&savepoint, &moved);
    let submitted = cluster.weir(&[
        "submit",
        "--json",
        &resume.display().to_string(),
        "--from-savepoint",
        &moved.display().to_string(),
    ]);
    assert!(submitted.status.success(), "{}", describe(&submitted));
    let created: Value = serde_json::from_slice(&submitted.stdout).unwrap();
    let resumed = created["id"].as_str().unwrap().to_owned();
    let job = cluster.wait_job(&resumed, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{job}");
    assert_eq!(
        job["from_savepoint"],
        moved.canonicalize().unwrap().display().to_string()
    );
    let check = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "check")
        .unwrap();
    assert_eq!(check["parallelism"], 4, "{check}");
    assert_exactly_once(&out, &alerts, count);
}

/// How a job is stopped and resumed.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// `weir stop --savepoint`, `weir submit --from-savepoint`.
    Savepoint,
    /// `weir cancel`, `weir submit --from-checkpoint` of its latest
    /// retained checkpoint.
    RetainedCheckpoint,
}

/// Runs the job with the checker at `from.0` on backend `from.1`, stops it
/// mid-stream `via` a savepoint or a retained checkpoint, resumes it at
/// `to.0` on `to.1`, and checks the committed output.
fn stop_and_resume(cluster: &Cluster, case: &str, via: Via, from: (u32, &str), to: (u32, &str)) {
    let dir = cluster.dir.path().join(case);
    let (out, alerts) = (dir.join("out/seq.txt"), dir.join("out/alerts.txt"));
    let count = 30_000;
    std::fs::create_dir_all(&dir).unwrap();
    let first = dir.join("first.toml");
    std::fs::write(
        &first,
        spec_on(&out, &alerts, count, 3_000, 2, from.0, from.1),
    )
    .unwrap();
    let id = cluster.submit(&first);
    wait_for(&format!("{case}: a completed checkpoint"), || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_eq!(job["state"], "running", "{case}: {job}");
        (!completed_checkpoints(cluster, &id).is_empty()).then_some(())
    });
    let (flag, path) = match via {
        Via::Savepoint => {
            let savepoint = dir.join("savepoint");
            let stopped =
                cluster.weir(&["stop", &id, "--savepoint", &savepoint.display().to_string()]);
            assert!(stopped.status.success(), "{case}: {}", describe(&stopped));
            cluster.wait_job(&id, |s| s == "canceled");
            ("--from-savepoint", savepoint)
        }
        Via::RetainedCheckpoint => {
            let canceled = cluster.weir(&["cancel", &id]);
            assert!(canceled.status.success(), "{case}: {}", describe(&canceled));
            cluster.wait_job(&id, |s| s == "canceled");
            // The newest completed checkpoint, once its metadata is stored:
            // its output may have been committed, so it is where to resume.
            let latest = wait_for(&format!("{case}: the latest checkpoint stored"), || {
                let (_, v) = cluster.get(&format!("/v1/jobs/{id}/checkpoints"));
                let newest = completed_checkpoints(cluster, &id).into_iter().max()?;
                (v["latest"].as_u64() == Some(newest)).then_some(newest)
            });
            let path = cluster
                .dir
                .path()
                .join("jm/checkpoints")
                .join(&id)
                .join(format!("chk-{latest}"));
            ("--from-checkpoint", path)
        }
    };
    assert!(
        (committed_lines(&out).len() as u64) < count,
        "{case}: the job ended before the stop"
    );
    let resume = dir.join("resume.toml");
    std::fs::write(
        &resume,
        spec_on(&out, &alerts, count, 30_000, 2, to.0, to.1),
    )
    .unwrap();
    let submitted = cluster.weir(&[
        "submit",
        "--json",
        &resume.display().to_string(),
        flag,
        &path.display().to_string(),
    ]);
    assert!(
        submitted.status.success(),
        "{case}: {}",
        describe(&submitted)
    );
    let created: Value = serde_json::from_slice(&submitted.stdout).unwrap();
    let resumed = created["id"].as_str().unwrap().to_owned();
    let job = cluster.wait_job(&resumed, |s| s == "finished" || s == "failed");
    assert_eq!(job["state"], "finished", "{case}: {job}");
    assert_exactly_once(&out, &alerts, count);
}

/// The resume matrix: from a savepoint and from a retained checkpoint,
/// the keyed checker 2→2, 2→4, 4→2, 4→1, each on RocksDB, on the heap, and
/// from RocksDB to the heap.
#[test]
fn jobs_resume_across_parallelisms_and_backends() {
    let cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "5000"]);
    for via in [Via::Savepoint, Via::RetainedCheckpoint] {
        for (from, to) in [(2, 2), (2, 4), (4, 2), (4, 1)] {
            for (a, b) in [
                ("rocksdb", "rocksdb"),
                ("heap", "heap"),
                ("rocksdb", "heap"),
            ] {
                let case = format!("{via:?}-p{from}-{a}-to-p{to}-{b}");
                stop_and_resume(&cluster, &case, via, (from, a), (to, b));
            }
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `weir run --savepoint-on-exit`: Ctrl-C stops the job with a savepoint;
/// `weir run --from-savepoint` resumes it with the checker rescaled, on
/// the heap: exactly once.
#[test]
fn weir_run_stops_with_a_savepoint_on_ctrl_c_and_resumes_from_it() {
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let (out, alerts) = (
        dir.path().join("out/seq.txt"),
        dir.path().join("out/alerts.txt"),
    );
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let count = 40_000;
    let first = dir.path().join("first.toml");
    std::fs::write(
        &first,
        spec_on(&out, &alerts, count, 3_000, 2, 2, "rocksdb"),
    )
    .unwrap();
    let savepoint = dir.path().join("savepoint");
    let cache = dir.path().join("cache");
    let child = crate::util::weir(&cache)
        .arg("run")
        .arg(&first)
        .arg("--savepoint-on-exit")
        .arg(&savepoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Readiness: a checkpoint completed (its output is committed).
    let output = crate::ctrl_c::interrupt_when(child, "committed output", || {
        !committed_lines(&out).is_empty()
    });

    assert!(output.status.success(), "{}", describe(&output));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("stopped with a savepoint"), "{err}");
    assert!(
        (committed_lines(&out).len() as u64) < count,
        "the job ran to its end before Ctrl-C; slow its source"
    );

    let resume = dir.path().join("resume.toml");
    std::fs::write(&resume, spec_on(&out, &alerts, count, 30_000, 2, 4, "heap")).unwrap();
    let resumed = crate::util::weir(&cache)
        .arg("run")
        .arg(&resume)
        .arg("--from-savepoint")
        .arg(&savepoint)
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", describe(&resumed));
    assert_exactly_once(&out, &alerts, count);
}

/// `weir savepoint JOB DIR`: the job keeps running, takes checkpoints
/// again once the savepoint is written, and ends with its output exactly
/// once; the savepoint checks out.
#[test]
fn a_savepoint_leaves_the_job_running() {
    let cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "5000"]);
    let dir = cluster.dir.path();
    let (out, alerts) = (dir.join("out/seq.txt"), dir.join("out/alerts.txt"));
    let count = 30_000;
    let spec_file = dir.join("job.toml");
    std::fs::write(&spec_file, spec(&out, &alerts, count, 6_000, 2, 2)).unwrap();
    let id = cluster.submit(&spec_file);
    wait_for("a completed checkpoint", || {
        (!completed_checkpoints(&cluster, &id).is_empty()).then_some(())
    });
    let savepoint = dir.join("savepoints/live");
    let taken = cluster.weir(&["savepoint", &id, &savepoint.display().to_string()]);
    assert!(taken.status.success(), "{}", describe(&taken));
    let (_, list) = cluster.get(&format!("/v1/jobs/{id}/savepoints"));
    let at = list[0]["checkpoint"].as_u64().unwrap();
    assert_eq!(list[0]["status"], "completed", "{list}");
    assert_eq!(list[0]["stop"], false, "{list}");

    let job = cluster.wait_job(&id, |s| s == "finished" || s == "failed" || s == "canceled");
    assert_eq!(job["state"], "finished", "{job}");
    assert!(
        completed_checkpoints(&cluster, &id).iter().any(|c| *c > at),
        "no checkpoint completed after the savepoint's ({at}): checkpoints did not resume"
    );
    assert_exactly_once(&out, &alerts, count);
    let shown = cluster.weir(&["savepoint", "inspect", &savepoint.display().to_string()]);
    assert!(shown.status.success(), "{}", describe(&shown));
    let (_, detail) = cluster.get(&format!("/v1/jobs/{id}"));
    assert_eq!(detail["savepoints"][0]["dir"], list[0]["dir"], "{detail}");

    // A job that ended takes no savepoint: refused, saying why.
    let again = cluster.weir(&[
        "savepoint",
        &id,
        &dir.join("savepoints/late").display().to_string(),
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", describe(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("only a running job takes a savepoint"),
        "{}",
        describe(&again)
    );
}

/// `weir stop --drain`: the sources send the final watermark before the
/// savepoint's barrier, so every event-time timer fires and its output is
/// committed with the savepoint. The word count emits a word's count only
/// when its timer fires (at the final watermark): nothing is committed
/// before the drain, and after it exactly the counts the savepoint holds.
#[test]
fn stop_with_drain_commits_what_every_timer_emits_with_the_savepoint() {
    let cluster = Cluster::start(1, 4, &["--heartbeat-timeout-ms", "5000"]);
    let dir = cluster.dir.path();
    let text = crate::util::kjv_head(30_000);
    let input = dir.join("input.txt");
    std::fs::write(&input, &text).unwrap();
    let out = dir.join("out/counts.txt");
    let spec = dir.join("job.toml");
    let job = crate::upgrade::spec(&input, &out, artifacts::WORD_COUNT, "final", 1_500);
    std::fs::write(&spec, job).unwrap();
    let id = cluster.submit(&spec);
    wait_for("a completed checkpoint", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_eq!(job["state"], "running", "{job}");
        (!completed_checkpoints(&cluster, &id).is_empty()).then_some(())
    });
    let committed = || {
        if out.parent().unwrap().exists() {
            committed_lines(&out)
        } else {
            Vec::new()
        }
    };
    assert!(committed().is_empty(), "final counts before the end");

    let savepoint = dir.join("drained");
    let sp = savepoint.display().to_string();
    let stopped = cluster.weir(&["stop", &id, "--savepoint", &sp, "--drain"]);
    assert!(stopped.status.success(), "{}", describe(&stopped));
    assert!(
        String::from_utf8_lossy(&stopped.stdout).contains("drained and stopped"),
        "{}",
        describe(&stopped)
    );
    let job = cluster.wait_job(&id, |s| s == "canceled" || s == "failed");
    assert_eq!(job["state"], "canceled", "{job}");
    assert_eq!(job["savepoints"][0]["drain"], true, "{job}");

    // Mid-stream: some words counted, not the whole input.
    let counts = crate::upgrade::counts(&committed());
    let total: u64 = counts.values().sum();
    let all: u64 = crate::word_count::expected_counts(&text).values().sum();
    assert!(total > 0 && total < all, "{total} of {all} words");
    // Exactly the savepoint's state: one count per key it holds, each
    // equal to the stored one.
    let inspected = cluster.weir(&["savepoint", "inspect", "--json", &sp]);
    let metadata: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    let keys: u64 = metadata["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["uid"] == "count")
        .unwrap()["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"]["entries"][0].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        keys,
        counts.len() as u64,
        "a count committed per stored key"
    );
    for word in ["the", "and", "god"] {
        let stored = cluster.weir(&[
            "savepoint",
            "query",
            &sp,
            "--operator",
            "count",
            "--state",
            "count",
            "--key",
            word,
            "--codec",
            "u64",
        ]);
        assert!(stored.status.success(), "{}", describe(&stored));
        assert_eq!(
            String::from_utf8_lossy(&stored.stdout).trim(),
            counts[word].to_string(),
            "{word}"
        );
    }
}
