//! The cluster end to end: a JobManager and TaskManagers as separate `weir`
//! processes on 127.0.0.1, jobs submitted with the CLI, results checked
//! against expectations computed here.

mod cancel;
pub mod harness;
mod identity;
mod kafka;
mod nats;
mod observe;
mod recovery;
mod ui;

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use weir_tests::artifacts;

use crate::util::{describe, kjv, read_sink, toml_path};
use crate::word_count::{expected_counts, word_count_spec};
use harness::{Cluster, Daemon, client_command, read_token, wait_for, word_after};

fn counts_in(out: &Path) -> HashMap<String, u64> {
    let mut got = HashMap::new();
    for line in read_sink(out) {
        let (word, count) = line
            .rsplit_once('\t')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        assert!(
            got.insert(word.to_owned(), count).is_none(),
            "word {word:?} emitted twice"
        );
    }
    got
}

fn u64_at(v: &Value, path: &[&str]) -> u64 {
    let mut at = v;
    for p in path {
        at = &at[*p];
    }
    at.as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

fn vertex<'a>(job: &'a Value, id: &str) -> &'a Value {
    job["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["id"] == id))
        .unwrap_or_else(|| panic!("no vertex {id} in {job}"))
}

/// Word count at parallelism 4 over two TaskManagers: the hash exchange
/// between tokenize and count crosses QUIC; the output is the exact count.
#[test]
fn word_count_across_two_taskmanagers_over_quic() {
    let cluster = Cluster::start(2, 2, &[]);
    let out = cluster.dir.path().join("counts.txt");
    let spec = cluster.dir.path().join("job.toml");
    let text = word_count_spec(&kjv(), &out).replace(
        "[job]\nname = \"word-count\"",
        "[job]\nname = \"word-count\"\nparallelism = 4",
    );
    assert!(text.contains("parallelism = 4"));
    std::fs::write(&spec, text).unwrap();

    let id = cluster.submit(&spec);
    let job = cluster.wait_job(&id, |s| s != "running");
    assert_eq!(job["state"], "finished", "{job}");

    // Subtasks ran on both TaskManagers...
    let count = vertex(&job, "count");
    let tms: std::collections::HashSet<&str> = count["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["taskmanager"].as_str().unwrap())
        .collect();
    assert_eq!(tms.len(), 2, "count's subtasks on both TaskManagers: {job}");
    // ...and records crossed the network in both directions.
    for tm in ["tm-1", "tm-2"] {
        let info = cluster.taskmanager(tm);
        assert!(
            u64_at(&info, &["net", "bytes_sent"]) > 0,
            "{tm} sent nothing: {info}"
        );
        assert!(
            u64_at(&info, &["net", "bytes_received"]) > 0,
            "{tm} got nothing: {info}"
        );
    }

    let expected = expected_counts(&std::fs::read_to_string(kjv()).unwrap());
    let got = counts_in(&out);
    assert_eq!(got.len(), expected.len(), "distinct words");
    assert!(got == expected, "counts differ from the independent count");
    // The job's metrics agree with the text.
    let words: u64 = expected.values().sum();
    assert_eq!(
        u64_at(vertex(&job, "count"), &["records_in"]),
        words,
        "{job}"
    );

    // `weir status` shows the job and where it ran.
    let status = cluster.weir(&["status", &id]);
    assert!(status.status.success(), "{}", describe(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("finished") && text.contains("tm-2"), "{text}");
}

const BATCH: u64 = 64;
const CAPACITY: u64 = 2;
const SINK_RATE: u64 = 5_000;
const BUFFER_KB: u64 = 8;
const CREDITS: u64 = 2;

/// A fast source on one TaskManager, a slow sink on the other: the
/// sender's network buffers stay under the credit bound and the source
/// produces no faster than the sink consumes.
#[test]
fn backpressure_crosses_taskmanagers() {
    let mut cluster = Cluster::start(0, 1, &[]);
    let net = [
        "--network-buffer-kb",
        &BUFFER_KB.to_string(),
        "--credits",
        &CREDITS.to_string(),
    ]
    .map(str::to_owned);
    let net: Vec<&str> = net.iter().map(String::as_str).collect();
    cluster.add_taskmanager(1, &net);
    cluster.add_taskmanager(1, &net);
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "backpressure"
batch_size = {BATCH}
channel_capacity = {CAPACITY}
buffer_timeout_ms = 5

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
record_bytes = 100
slot_sharing_group = "sources"

[[operator]]
id = "up"
module = {m}
slot_sharing_group = "sources"

[[sink]]
id = "slow"
type = "blackhole"
rate = {SINK_RATE}
slot_sharing_group = "sinks"

[[edge]]
from = "gen"
to = "up"

[[edge]]
from = "up"
to = "slow"
partition = "rebalance"
"#,
            m = toml_path(Path::new(artifacts::UPPERCASE))
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    let running = cluster.wait_job(&id, |s| s == "running");
    let source_tm = vertex(&running, "gen")["subtasks"][0]["taskmanager"]
        .as_str()
        .unwrap()
        .to_owned();
    let sink_tm = vertex(&running, "slow")["subtasks"][0]["taskmanager"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(
        source_tm, sink_tm,
        "source and sink on different TaskManagers"
    );

    // Sender-side memory: one channel of (credits + 1) buffers.
    let buffer = BUFFER_KB << 10;
    let net_bound = (CREDITS + 1) * buffer;
    // Records between the source's count and the sink's: the sender's
    // mpsc (1 message of ≤ BATCH), its buffers, the receiver's QUIC buffers
    // (credits × buffer), the sink task's input channel (CAPACITY batches)
    // and the batch in hand at each end; records are ≥ 100 bytes encoded.
    let records_in_flight = (1 + CAPACITY + 2) * BATCH + (2 * CREDITS + 1) * buffer / 100;
    // Metrics of the two ends come from two heartbeats (every 200 ms):
    // allow one second of sink progress for the skew.
    let skew = SINK_RATE;
    let bound = records_in_flight + skew;

    let mut samples = 0;
    let mut last_sink = 0;
    while samples < 10 {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        assert_eq!(job["state"], "running", "{job}");
        let produced = u64_at(vertex(&job, "gen"), &["records_out"]);
        let consumed = u64_at(vertex(&job, "slow"), &["records_in"]);
        if consumed > last_sink + SINK_RATE / 2 {
            samples += 1;
            last_sink = consumed;
            assert!(
                produced <= consumed + bound,
                "the source ran ahead: produced {produced}, consumed {consumed}, bound {bound}"
            );
        }
        let sender = cluster.taskmanager(&source_tm);
        let buffered = u64_at(&sender, &["net", "max_buffered_bytes"]);
        eprintln!("produced {produced}, consumed {consumed}, sender buffered at most {buffered} B");
        assert!(
            buffered <= net_bound,
            "sender buffered {buffered} bytes, over the credit bound {net_bound}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // It did fill its buffers (a bound that is never approached tests nothing).
    let sender = cluster.taskmanager(&source_tm);
    assert!(
        u64_at(&sender, &["net", "max_buffered_bytes"]) >= buffer,
        "the sender never filled a buffer: {sender}"
    );
    // Its channel waited for credits (the slow sink's backpressure, over
    // the network), and holds one channel out.
    assert!(
        u64_at(&sender, &["net", "credit_wait_ns"]) > 0,
        "the sender never waited for a credit: {sender}"
    );
    assert_eq!(u64_at(&sender, &["net", "channels_out"]), 1, "{sender}");
    let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
    assert!(
        u64_at(vertex(&job, "gen"), &["backpressured_ms"]) > 0,
        "the source never waited: {job}"
    );
    let cancel = cluster.weir(&["cancel", &id]);
    assert!(cancel.status.success(), "{}", describe(&cancel));
    let job = cluster.wait_job(&id, |s| s == "canceled" || s == "failed");
    assert_eq!(job["state"], "canceled", "{job}");
}

/// SIGKILL a TaskManager under a running job: the heartbeat timeout
/// declares it lost, the job fails naming it, the other TaskManager's
/// subtasks are canceled and its slots freed.
#[test]
fn killed_taskmanager_fails_its_job_with_the_reason() {
    let mut cluster = Cluster::start(2, 1, &["--heartbeat-timeout-ms", "2000"]);
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "endless"
parallelism = 2

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
rate = 2000

[[operator]]
id = "up"
module = {m}

[[sink]]
id = "null"
type = "blackhole"

[[edge]]
from = "gen"
to = "up"

[[edge]]
from = "up"
to = "null"
partition = "rebalance"
"#,
            m = toml_path(Path::new(artifacts::UPPERCASE))
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    let job = cluster.wait_job(&id, |s| s == "running");
    // Wait until both TaskManagers report running subtasks.
    wait_for("every subtask running", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        job["vertices"]
            .as_array()?
            .iter()
            .all(|v| v["state"] == "running")
            .then_some(())
    });
    assert_eq!(job["state"], "running");

    let victim_pid = cluster.tms[1].pid();
    cluster.tms[1].kill();
    let job = cluster.wait_job(&id, |s| s == "failed");
    let failure = job["failure"].as_str().unwrap_or_default().to_owned();
    assert!(
        failure.contains("TaskManager tm-2") && failure.contains("lost"),
        "failure names the TaskManager: {failure:?} (killed pid {victim_pid})"
    );
    assert!(failure.contains("no heartbeat"), "{failure:?}");

    let tm = cluster.taskmanager("tm-2");
    assert_eq!(tm["state"], "lost", "{tm}");
    let survivor = wait_for("the surviving TaskManager's slot to be free", || {
        let tm = cluster.taskmanager("tm-1");
        (tm["slots_free"] == 1).then_some(tm)
    });
    assert_eq!(survivor["state"], "active");

    let status = cluster.weir(&["status", &id]);
    assert!(status.status.success(), "{}", describe(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("failed") && text.contains("TaskManager tm-2") && text.contains("lost"),
        "`weir status` shows the reason:\n{text}"
    );
}

/// A TaskManager whose certificate comes from another CA is refused: it
/// never registers, and the JobManager lists no TaskManager.
#[test]
fn taskmanager_from_another_ca_cannot_register() {
    let cluster = Cluster::start(0, 1, &[]);
    let other = cluster.dir.path().join("other-ca");
    let out = cluster.weir(&[
        "cluster",
        "init",
        &other.display().to_string(),
        "--taskmanager",
        "intruder",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let args: Vec<String> = [
        "taskmanager",
        "--jobmanager",
        &cluster.rpc,
        "--slots",
        "1",
        "--id",
        "intruder",
        "--data-dir",
        &cluster.dir.path().join("intruder").display().to_string(),
        "--certs",
        &other.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let intruder = Daemon::spawn(cluster.dir.path(), "intruder", &args);
    // It tries, and the handshake fails (twice, so it also retried).
    let text = intruder.wait_stderr("cannot connect");
    assert!(
        text.to_lowercase().contains("certificate") || text.contains("tls") || text.contains("TLS"),
        "the failure is about certificates:\n{text}"
    );
    let (_, tms) = cluster.get("/v1/taskmanagers");
    assert_eq!(tms, Value::Array(vec![]), "nobody registered");
    let jm = cluster.jm.stderr_text();
    assert!(!jm.contains("registered"), "{jm}");
}

/// The JobManager restarts on the same address: the module store is still
/// there, and the TaskManager registers again by itself.
#[test]
fn jobmanager_restart_keeps_modules_and_taskmanagers_come_back() {
    let mut cluster = Cluster::start(1, 1, &[]);
    let up = cluster.weir(&[
        "upload",
        artifacts::UPPERCASE,
        "--name",
        "upper",
        "--version",
        "1.0",
    ]);
    assert!(up.status.success(), "{}", describe(&up));

    assert!(cluster.jm.terminate().success());
    let ready = cluster.restart_jobmanager();
    // The same REST token: the file of the first start, reused.
    let file = word_after(&ready, "token-file").expect("a token file");
    assert_eq!(Some(file.clone().into()), cluster.token_file, "{ready}");
    assert_eq!(
        Some(read_token(Path::new(&file))),
        cluster.token,
        "the token is reused"
    );

    // The TaskManager printed its first registration already; the second
    // one is the reconnect.
    let tm = &mut cluster.tms[0];
    tm.wait_line("registered with");
    assert_eq!(
        tm.seen
            .iter()
            .filter(|l| l.contains("registered with"))
            .count(),
        2,
        "{:?}",
        tm.seen
    );
    let listed = cluster.weir(&["modules", "--json"]);
    assert!(listed.status.success(), "{}", describe(&listed));
    let modules: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(
        modules
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "upper" && m["version"] == "1.0"),
        "{modules}"
    );
    assert_eq!(cluster.taskmanager("tm-1")["state"], "active");
}

/// `weir local`: one process, a JobManager and two TaskManagers with QUIC
/// between them; a submitted job runs to the right result. With
/// `--metrics`, each TaskManager serves its own `/metrics`.
#[test]
fn weir_local_runs_a_submitted_job() {
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "local",
        "--taskmanagers",
        "2",
        "--slots",
        "2",
        "--rest",
        "127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
        "--data-dir",
        &dir.path().join("data").display().to_string(),
        "--allow-path",
        &dir.path().display().to_string(),
        "--allow-path",
        &crate::util::data_dir().display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let mut local = Daemon::spawn(dir.path(), "local", &args);
    let line = local.wait_line("local cluster ready");
    let rest = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("rest url")
        .to_owned();
    let token_file = word_after(&line, "token-file").expect("the token file in the line");
    assert!(
        token_file.starts_with(&dir.path().join("data").display().to_string()),
        "the token is in the data dir: {line}"
    );
    let out = dir.path().join("counts.txt");
    let spec = dir.path().join("job.toml");
    let text = word_count_spec(&kjv(), &out).replace(
        "[job]\nname = \"word-count\"",
        "[job]\nname = \"word-count\"\nparallelism = 3",
    );
    std::fs::write(&spec, text).unwrap();
    let weir = |args: &[&str]| {
        client_command(dir.path())
            .args(args)
            .env("WEIR_JOBMANAGER", &rest)
            .env("WEIR_REST_TOKEN_FILE", &token_file)
            .output()
            .unwrap()
    };
    let submitted = weir(&["submit", "--json", &spec.display().to_string()]);
    assert!(submitted.status.success(), "{}", describe(&submitted));
    let id = serde_json::from_slice::<Value>(&submitted.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = wait_for("the job to end", || {
        let out = weir(&["status", "--json", &id]);
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let s = v["state"].as_str()?.to_owned();
        (s != "running").then_some(s)
    });
    assert_eq!(state, "finished");
    let expected = expected_counts(&std::fs::read_to_string(kjv()).unwrap());
    assert!(
        counts_in(&out) == expected,
        "counts differ from the independent count"
    );
    // Each TaskManager printed its own metrics address (printed before the
    // ready line), and answers there for itself.
    let stderr = local.stderr_text();
    for tm in ["tm-1", "tm-2"] {
        let prefix = format!("taskmanager {tm} metrics http://");
        let url = stderr
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no metrics address for {tm} in:\n{stderr}"));
        let mut r = ureq::get(format!("http://{url}")).call().unwrap();
        let text = r.body_mut().read_to_string().unwrap();
        let slots = format!(r#"weir_taskmanager_slots{{taskmanager="{tm}"}} 2"#);
        assert!(text.contains(&slots), "{tm}'s /metrics:\n{text}");
    }
    local.terminate();
}

/// `weir jobmanager --max-job-state-mb`: a job with more keyed state than
/// the cluster allows fails, naming the limit, and is not restarted
/// although its restart strategy would. With checkpoints, whichever sees it
/// first fails it: a completed checkpoint's size or the live sample below.
#[test]
fn a_job_over_the_clusters_state_quota_fails_without_restarting() {
    let failure = fail_over_quota("[job.checkpoints]\ninterval_ms = 300\n");
    assert!(failure.contains("over the cluster's limit"), "{failure}");
}

/// The quota holds without checkpoints too: the TaskManagers sample each
/// keyed subtask's state size about once a second and report it with
/// their heartbeats, and the JobManager fails the job for good once the
/// sum is over the limit (before this, a job without checkpoints could
/// grow its state without bound).
#[test]
fn a_job_without_checkpoints_over_the_state_quota_fails_too() {
    let failure = fail_over_quota("");
    assert!(
        failure.contains("keyed state takes") && failure.contains("over the cluster's limit"),
        "{failure}"
    );
}

/// Runs [`growing_job`] (with `checkpoints`) on a cluster with a 1 MiB
/// state quota; asserts it failed on its first attempt, naming the flag,
/// and returns why it failed.
fn fail_over_quota(checkpoints: &str) -> String {
    let cluster = Cluster::start(1, 2, &["--max-job-state-mb", "1"]);
    let id = cluster.submit(&growing_job(&cluster, checkpoints));
    let job = cluster.wait_job(&id, |s| s == "failed" || s == "finished" || s == "canceled");
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(
        job["attempt"], 0,
        "restarted although over the quota: {job}"
    );
    let failure = job["failure"].as_str().unwrap_or_default().to_owned();
    assert!(failure.contains("--max-job-state-mb"), "{job}");
    failure
}

/// An endless keyed count over a million distinct words: its state grows
/// without bound. `checkpoints` goes into `[job]`'s tables.
fn growing_job(cluster: &Cluster, checkpoints: &str) -> std::path::PathBuf {
    let spec = cluster.dir.path().join("growing.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "growing"

{checkpoints}

[job.restart]
strategy = "fixed-delay"
attempts = 5
delay_ms = 100

[[source]]
id = "words"
type = "generator"
kind = "words"
vocabulary = 1000000

[[operator]]
id = "count"
module = {count}
key_by = "value"
config = {{ emit = "updates" }}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "words"
to = "count"

[[edge]]
from = "count"
to = "out"
"#,
            count = toml_path(Path::new(artifacts::WORD_COUNT)),
        ),
    )
    .unwrap();
    spec
}
