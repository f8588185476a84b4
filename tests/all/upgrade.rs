//! Upgrading a running job in place (`weir upgrade`) on a cluster of
//! separate processes: refused before anything stops when the new module
//! does not fit (a state changing kind, a state dropped, not a
//! component); a word count upgraded mid-stream to a version that stores
//! another layout and migrates the old one, then rescaled, its final
//! counts equal to an independent count; an upgrade whose savepoint
//! cannot be written leaves the job on its old modules, and a migration
//! that fails for one key rolls the job back to them, its output
//! exactly-once through both.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use weir_tests::artifacts;

use crate::cluster::harness::{Cluster, wait_for};
use crate::exactly_once::{committed_lines, completed_checkpoints};
use crate::util::{describe, kjv_head, toml_path};
use crate::word_count::expected_counts;

/// Lines of `input` (at `rate` lines/s) → tokenize → the counter `counter`
/// (parallelism 2, `emit` as given) → a two-phase-commit file sink, with
/// checkpoints.
pub(crate) fn spec(input: &Path, out: &Path, counter: &str, emit: &str, rate: u32) -> String {
    format!(
        r#"
[job]
name = "upgraded"
buffer_timeout_ms = 5

[job.checkpoints]
interval_ms = 300
timeout_ms = 20000

[[source]]
id = "lines"
type = "file"
path = {input}
rate = {rate}

[[operator]]
id = "tokenize"
module = {tokenize}
config = {{ lowercase = true }}

[[operator]]
id = "count"
module = {counter}
key_by = "key"
parallelism = 2
config = {{ emit = "{emit}" }}

[[sink]]
id = "out"
type = "file"
path = {out}

[[edge]]
from = "lines"
to = "tokenize"

[[edge]]
from = "tokenize"
to = "count"

[[edge]]
from = "count"
to = "out"
"#,
        input = toml_path(input),
        tokenize = toml_path(Path::new(artifacts::TOKENIZE)),
        counter = toml_path(Path::new(counter)),
        out = toml_path(out),
    )
}

/// Job `id` as the REST API shows it.
fn job(cluster: &Cluster, id: &str) -> Value {
    cluster.get(&format!("/v1/jobs/{id}")).1
}

/// `weir upgrade JOB ARGS...`.
fn upgrade(cluster: &Cluster, id: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["upgrade", id];
    all.extend_from_slice(args);
    cluster.weir(&all)
}

/// An upgrade of running job `id` with `args` is refused before anything
/// stops: non-zero exit naming `expected`; the job runs on, never
/// restarted, without a savepoint or an upgrade.
fn refused(cluster: &Cluster, id: &str, args: &[&str], expected: &[&str]) {
    let out = upgrade(cluster, id, args);
    assert!(!out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in expected {
        assert!(
            err.contains(needle),
            "wanted {needle:?}: {}",
            describe(&out)
        );
    }
    let job = job(cluster, id);
    assert_eq!(job["state"], "running", "{job}");
    assert_eq!(job["attempt"], 0, "restarted: {job}");
    assert_eq!(job["savepoints"], Value::Array(Vec::new()), "{job}");
    assert_eq!(job["upgrades"], Value::Array(Vec::new()), "{job}");
}

/// `word\tcount` lines as a map (a repeated word is a bug).
pub(crate) fn counts(lines: &[String]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for line in lines {
        let (word, n) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("not word\\tcount: {line:?}"));
        let n: u64 = n.parse().unwrap();
        assert!(
            counts.insert(word.to_owned(), n).is_none(),
            "{word} emitted twice"
        );
    }
    counts
}

#[test]
fn a_word_count_upgraded_mid_stream_migrates_its_state_and_counts_exactly() {
    let cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "5000"]);
    let dir = cluster.dir.path();
    let text = kjv_head(30_000);
    let input = dir.join("input.txt");
    std::fs::write(&input, &text).unwrap();
    let out = dir.join("out/counts.txt");
    let job_spec = dir.join("job.toml");
    std::fs::write(
        &job_spec,
        spec(&input, &out, artifacts::WORD_COUNT, "final", 1_000),
    )
    .unwrap();
    let id = cluster.submit(&job_spec);
    wait_for("a completed checkpoint", || {
        assert_eq!(job(&cluster, &id)["state"], "running");
        (!completed_checkpoints(&cluster, &id).is_empty()).then_some(())
    });

    // Refused before anything stops.
    let module = |path: &str| format!("count={path}");
    refused(
        &cluster,
        &id,
        &["--module", &module(artifacts::COUNT_AS_LIST)],
        &["operator `count` state `count`", "list state"],
    );
    refused(
        &cluster,
        &id,
        &["--module", &module(artifacts::SEQUENCE_CHECK)],
        &[
            "operator `count` state `count`",
            "--allow-non-restored-state",
        ],
    );
    let garbage = dir.join("not-a-component.wasm");
    std::fs::write(&garbage, b"\0asm\x01\0\0\0 and then nonsense").unwrap();
    refused(
        &cluster,
        &id,
        &["--module", &module(&garbage.display().to_string())],
        &["not-a-component"],
    );
    refused(
        &cluster,
        &id,
        &["--module", "nope=word-count@1"],
        &["no operator `nope`"],
    );

    // A dry run says what would happen and stops nothing.
    let planned = upgrade(
        &cluster,
        &id,
        &["--dry-run", "--module", &module(artifacts::WORD_COUNT_V2)],
    );
    assert!(planned.status.success(), "{}", describe(&planned));
    let plan = String::from_utf8_lossy(&planned.stdout);
    assert!(
        plan.contains(
            "operator `count` state `count`: would be migrated from version 0.1.0 to 2.0.0"
        ),
        "{plan}"
    );
    let detail = job(&cluster, &id);
    assert_eq!(detail["attempt"], 0, "{detail}");
    assert_eq!(detail["upgrades"], Value::Array(Vec::new()), "{detail}");
    assert_eq!(detail["savepoints"], Value::Array(Vec::new()), "{detail}");

    // The upgrade: version 2 stores (count, first seen) and migrates
    // version 1's counts.
    let upgraded = upgrade(
        &cluster,
        &id,
        &["--module", &module(artifacts::WORD_COUNT_V2)],
    );
    assert!(upgraded.status.success(), "{}", describe(&upgraded));
    let said = String::from_utf8_lossy(&upgraded.stdout);
    assert!(said.contains("upgraded (upgrade 1): down for"), "{said}");
    assert!(
        said.contains("migrated operator `count` state `count`")
            && said.contains("version 0.1.0 → 2.0.0"),
        "{said}"
    );
    let detail = job(&cluster, &id);
    assert_eq!(detail["state"], "running", "{detail}");
    assert_eq!(detail["upgrades"][0]["status"], "completed", "{detail}");
    assert!(detail["upgrades"][0]["downtime_ms"].is_u64(), "{detail}");
    let migrated = detail["upgrades"][0]["migrated"][0]["entries"]
        .as_u64()
        .unwrap();
    assert!(migrated > 0, "{detail}");
    let versions = detail["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{detail}");
    let count = |v: &Value| {
        v["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["operator"] == "count")
            .unwrap()["version"]
            .clone()
    };
    assert_eq!(count(&versions[0]), "0.1.0");
    assert_eq!(count(&versions[1]), "2.0.0");
    assert_eq!(versions[1]["upgrade"], 1);
    let (_, checkpoints) = cluster.get(&format!("/v1/jobs/{id}/checkpoints"));
    assert!(
        checkpoints["restores"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["upgrade"] == 1),
        "the upgrade's restore is marked: {checkpoints}"
    );
    let status = cluster.weir(&["status", &id]);
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        shown.contains("version 2") && shown.contains("upgrade 1: completed"),
        "{shown}"
    );

    // Version 2's extra field is set for a word counted before the
    // upgrade: its first-seen time is -1 (unknown), as the migration says.
    let savepoint = dir.join("after-upgrade");
    let taken = cluster.weir(&["savepoint", &id, &savepoint.display().to_string()]);
    assert!(taken.status.success(), "{}", describe(&taken));
    let query = cluster.weir(&[
        "savepoint",
        "query",
        &savepoint.display().to_string(),
        "--operator",
        "count",
        "--state",
        "count",
        "--key",
        "beginning",
    ]);
    assert!(query.status.success(), "{}", describe(&query));
    let stored = String::from_utf8_lossy(&query.stdout);
    assert!(
        stored.trim_end().ends_with(&"\\xff".repeat(8)),
        "(count, first seen = -1) expected: {stored}"
    );

    // Rescaled (an upgrade changing only parallelism): the counter goes
    // from 2 subtasks to 4, each taking its key groups' state.
    let rescaled = cluster.weir(&["rescale", &id, "count=4"]);
    assert!(rescaled.status.success(), "{}", describe(&rescaled));
    let detail = job(&cluster, &id);
    assert_eq!(detail["upgrades"][0]["status"], "completed", "{detail}");
    let counter = detail["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "count")
        .unwrap();
    assert_eq!(counter["parallelism"], 4, "{detail}");
    // The first upgrade's savepoint is deleted once the second completed
    // (the job restores from its own checkpoints, or the newest one).
    let savepoint_of =
        |i: usize| PathBuf::from(detail["upgrades"][i]["savepoint"].as_str().unwrap());
    assert!(savepoint_of(0).join("_savepoint").exists(), "{detail}");
    wait_for("the first upgrade's savepoint deleted", || {
        (!savepoint_of(1).exists()).then_some(())
    });

    // The final counts are exactly an independent count of the input.
    let done = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(done["state"], "finished", "{done}");
    let got = counts(&committed_lines(&out));
    let expected = expected_counts(&text);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the counts differ from the input's");
}

#[test]
fn a_migration_that_fails_for_one_key_rolls_the_job_back_exactly_once() {
    let cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "5000"]);
    let dir = cluster.dir.path();
    // `seven` 7 times first (the count the new module's migration
    // refuses), then words seen once each.
    let mut text = "seven\n".repeat(7);
    for i in 0..25_000 {
        text.push_str(&format!("w{i}\n"));
    }
    let input = dir.join("input.txt");
    std::fs::write(&input, &text).unwrap();
    let out = dir.join("out/updates.txt");
    let job_spec = dir.join("job.toml");
    // Written to emit final counts; submitted to emit every update: the
    // `--set` is the JobManager's to apply, and stays with the job.
    std::fs::write(
        &job_spec,
        spec(&input, &out, artifacts::WORD_COUNT, "final", 1_500),
    )
    .unwrap();
    let submitted = cluster.weir(&[
        "submit",
        "--json",
        &job_spec.display().to_string(),
        "--set",
        "operator.count.config.emit=updates",
    ]);
    assert!(submitted.status.success(), "{}", describe(&submitted));
    let created: Value = serde_json::from_slice(&submitted.stdout).unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    // `seven` reached 7 before the savepoint: its update is committed.
    wait_for("seven counted to 7", || {
        assert_eq!(job(&cluster, &id)["state"], "running");
        let seen =
            out.parent().unwrap().exists() && committed_lines(&out).iter().any(|l| l == "seven\t7");
        seen.then_some(())
    });

    // A savepoint that cannot be written (its folder is a file): the
    // upgrade fails, and the job, stopped at the savepoint's checkpoint,
    // goes on with its old modules from that checkpoint.
    let upgrades = dir.join("jm/upgrades");
    std::fs::write(&upgrades, b"in the way").unwrap();
    let unwritable = upgrade(
        &cluster,
        &id,
        &["--module", &format!("count={}", artifacts::MIGRATE_FAIL)],
    );
    assert!(!unwritable.status.success(), "{}", describe(&unwritable));
    let err = String::from_utf8_lossy(&unwritable.stderr);
    assert!(
        err.contains("the savepoint failed") && err.contains("old modules"),
        "{}",
        describe(&unwritable)
    );
    // Running again, every subtask deployed (the next upgrade's savepoint
    // is refused before that).
    let detail = cluster.wait_deployed(&id);
    assert_eq!(detail["upgrades"][0]["status"], "failed", "{detail}");
    std::fs::remove_file(&upgrades).unwrap();

    let failed = upgrade(
        &cluster,
        &id,
        &["--module", &format!("count={}", artifacts::MIGRATE_FAIL)],
    );
    assert!(!failed.status.success(), "{}", describe(&failed));
    let err = String::from_utf8_lossy(&failed.stderr);
    for needle in [
        "rolled back",
        "operator `count` state `count` key \"seven\"",
        "refuses it on purpose",
    ] {
        assert!(
            err.contains(needle),
            "wanted {needle:?}: {}",
            describe(&failed)
        );
    }
    let detail = job(&cluster, &id);
    assert_eq!(detail["upgrades"][0]["status"], "rolled_back", "{detail}");
    assert_eq!(detail["upgrades"][1]["status"], "failed", "{detail}");
    assert_eq!(
        detail["versions"].as_array().unwrap().len(),
        1,
        "still the first version: {detail}"
    );

    // Back on its old modules, it runs to the end: every update once.
    let done = cluster.wait_job(&id, |s| s == "finished" || s == "failed");
    assert_eq!(done["state"], "finished", "{done}");
    let mut got = committed_lines(&out);
    got.sort();
    let mut expected: Vec<String> = (1..=7).map(|n| format!("seven\t{n}")).collect();
    expected.extend((0..25_000).map(|i| format!("w{i}\t1")));
    expected.sort();
    assert_eq!(got.len(), expected.len(), "lost or repeated updates");
    assert!(got == expected, "the committed updates differ");
}
