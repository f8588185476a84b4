//! Operating a cluster (issue 15): Prometheus scrapes the JobManager and
//! the TaskManagers (Debian's real `prometheus` server, queried over its
//! HTTP API, and `promtool check metrics` on the expositions), and
//! `weir logs` shows what the operators logged, per operator and subtask.

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use weir_tests::artifacts;

use super::harness::{Cluster, wait_for, word_after};
use crate::util::{describe, toml_path};

/// A job whose `chatty` operator logs `burst` lines and counts each
/// record: a generator (`count`: bounded, else endless at `rate` records
/// a second) → chatty (parallelism 2) → blackhole.
fn chatty_spec(count: Option<u64>, rate: u64, burst: u64) -> String {
    let count = count.map_or(String::new(), |n| format!("count = {n}\n"));
    format!(
        r#"
[job]
name = "chatty-job"

[[source]]
id = "words"
type = "generator"
kind = "words"
vocabulary = 20
rate = {rate}
{count}parallelism = 2

[[operator]]
id = "chatty"
module = {module}
config = {{ burst = {burst} }}
parallelism = 2

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "words"
to = "chatty"

[[edge]]
from = "chatty"
to = "out"
"#,
        module = toml_path(Path::new(artifacts::CHATTY)),
    )
}

/// `%`-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A `prometheus` server process in a temporary directory, stopped (and
/// reaped) when dropped.
struct Prometheus {
    child: Child,
    url: String,
    agent: ureq::Agent,
    log: std::path::PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts it on a free loopback port with `config`, storing under
    /// `dir`, and waits until it is ready.
    fn start(dir: &Path, config: &str) -> Prometheus {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        // A free port: bound by us, then given to it (prometheus has no
        // port 0 with a way to learn the port).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("`prometheus` runs: tests/setup.sh installs Debian's package");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let p = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            agent,
            log,
        };
        wait_for("prometheus to be ready", || {
            let ready = p.agent.get(format!("{}/-/ready", p.url)).call();
            ready.ok().filter(|r| r.status() == 200)
        });
        p
    }

    /// The result vector of an instant query.
    fn query(&self, q: &str) -> Vec<Value> {
        let url = format!("{}/api/v1/query?query={}", self.url, encode(q));
        let mut r = self.agent.get(url).call().expect("prometheus answers");
        let v: Value = r.body_mut().read_json().expect("JSON");
        assert_eq!(v["status"], "success", "{q}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The value of the one series `q` yields, once it yields one.
    fn value(&self, q: &str) -> Option<f64> {
        let result = self.query(q);
        let series = result.first()?;
        series["value"][1].as_str()?.parse().ok()
    }
}

/// `promtool check metrics` on `text`: (exit code, output).
fn promtool_check(text: &str) -> (Option<i32>, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`promtool` runs (Debian's prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), describe(&out))
}

/// The address a TaskManager printed as `... metrics http://ADDR/metrics`.
fn metrics_address(cluster: &Cluster, tm: usize) -> String {
    let line = cluster.tms[tm]
        .seen
        .iter()
        .find(|l| l.contains(" metrics http://"))
        .unwrap_or_else(|| panic!("no metrics line: {:?}", cluster.tms[tm].seen))
        .clone();
    let url = word_after(&line, "metrics").unwrap();
    url.trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned()
}

/// Issue 15's acceptance: Debian's Prometheus scrapes a JobManager (with
/// its token) and two TaskManagers; the job's source records-out counter
/// is non-zero and rising, the operator's own counter is there with its
/// labels, and `promtool check metrics` accepts every exposition.
#[test]
fn prometheus_scrapes_the_jobmanager_and_two_taskmanagers() {
    let mut cluster = Cluster::start(0, 2, &[]);
    cluster.add_taskmanager(2, &["--metrics", "127.0.0.1:0"]);
    cluster.add_taskmanager(2, &["--metrics", "127.0.0.1:0"]);
    let tms = [metrics_address(&cluster, 0), metrics_address(&cluster, 1)];
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(&spec, chatty_spec(None, 200, 1)).unwrap();
    let id = cluster.submit(&spec);
    cluster.wait_job(&id, |s| s == "running");

    let jm = cluster.rest.trim_start_matches("http://").to_owned();
    let token_file = cluster.token_file.clone().expect("a token file");
    let prom_dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: weir-jobmanager
    authorization:
      credentials_file: {token}
    static_configs:
      - targets: ["{jm}"]
  - job_name: weir-taskmanagers
    static_configs:
      - targets: ["{tm1}", "{tm2}"]
"#,
        token = token_file.display(),
        tm1 = tms[0],
        tm2 = tms[1],
    );
    let prometheus = Prometheus::start(prom_dir.path(), &config);

    // Every target is scraped and up (the JobManager with its token).
    wait_for("all three targets up", || {
        let up = prometheus.query("up == 1");
        (up.len() == 3).then_some(())
    });
    // The source's records-out counter, summed over its subtasks on both
    // TaskManagers: non-zero, then higher at a later scrape.
    let source = format!(r#"sum(weir_records_out_total{{job_id="{id}",vertex="words"}})"#);
    let first = wait_for("the source's records to be scraped", || {
        prometheus.value(&source).filter(|v| *v > 0.0)
    });
    wait_for("the source's records to rise", || {
        prometheus.value(&source).filter(|v| *v > first)
    });
    // The operator's own counter, labeled with job, operator and subtask.
    let counters = wait_for("chatty's records_seen counter", || {
        let q = format!(r#"weir_operator_metric_total{{job_id="{id}",name="records_seen"}}"#);
        let series = prometheus.query(&q);
        (series.len() == 2).then_some(series)
    });
    let mut subtasks: Vec<String> = counters
        .iter()
        .map(|s| {
            let m = &s["metric"];
            assert_eq!(m["operator"], "chatty", "{s}");
            assert_eq!(m["job_name"], "chatty-job", "{s}");
            assert_eq!(
                m["job"], "weir-taskmanagers",
                "Prometheus's own job label: {s}"
            );
            m["subtask"].as_str().unwrap().to_owned()
        })
        .collect();
    subtasks.sort();
    assert_eq!(subtasks, ["0", "1"]);
    // `weir logs` shows each subtask's first line, with operator and subtask.
    wait_for("chatty's lines in `weir logs`", || {
        let out = cluster.weir(&["logs", &id, "--operator", "chatty"]);
        assert!(out.status.success(), "{}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        [0, 1]
            .iter()
            .all(|s| {
                text.contains(&format!(
                    "INFO  chatty[{s}] chatty opened: subtask {s} of 2"
                ))
            })
            .then_some(())
    });
    // And the JobManager's own series, through the token.
    let state = format!(r#"weir_job_state{{job_id="{id}",state="running"}}"#);
    assert_eq!(prometheus.value(&state), Some(1.0));
    // Each TaskManager's resident memory, labeled with its id.
    let memory = prometheus.query("weir_taskmanager_memory_rss_bytes > 0");
    assert_eq!(memory.len(), 2, "{memory:?}");

    // promtool accepts each exposition as served.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let (status, jm_text) = cluster.get_text("/metrics");
    assert_eq!(status, 200, "{jm_text}");
    assert!(
        jm_text.contains("weir_job_vertex_records_out_total"),
        "{jm_text}"
    );
    let mut texts = vec![("jobmanager".to_owned(), jm_text)];
    for tm in &tms {
        let mut r = agent.get(format!("http://{tm}/metrics")).call().unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain; version=0.0.4")
        );
        texts.push((tm.clone(), r.body_mut().read_to_string().unwrap()));
    }
    for (who, text) in &texts {
        let (code, out) = promtool_check(text);
        assert_eq!(code, Some(0), "promtool on {who}'s metrics: {out}\n{text}");
    }
    // Each TaskManager runs one chatty subtask: its Wasm instance's calls,
    // time in them and memory are there, above 0.
    for (who, text) in &texts[1..] {
        for family in [
            "weir_wasm_calls_total{",
            "weir_wasm_call_seconds_total{",
            "weir_wasm_memory_bytes{",
        ] {
            let value = text
                .lines()
                .find(|l| {
                    l.starts_with(family)
                        && l.contains(&format!(r#"job_id="{id}""#))
                        && l.contains(r#"vertex="chatty""#)
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {family} for chatty on {who}:\n{text}"));
            assert!(value > 0.0, "{family} on {who}: {value}");
        }
    }
    let log = std::fs::read_to_string(&prometheus.log).unwrap_or_default();
    drop(prometheus);
    assert!(
        !log.contains("level=error"),
        "prometheus logged errors:\n{log}"
    );
    let out = cluster.weir(&["cancel", &id]);
    assert!(out.status.success(), "{}", describe(&out));
}

/// `weir logs` shows the operators' lines with operator and subtask; a
/// guest that logs 100 lines per record in a tight loop (far over the
/// rate limit) still finishes, its rings stay within their bounds on the
/// JobManager, and what was dropped is counted and said.
#[test]
fn weir_logs_shows_each_operators_lines_and_a_chatty_guest_stays_bounded() {
    let cluster = Cluster::start(2, 2, &[]);
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(&spec, chatty_spec(Some(4000), 100_000, 100)).unwrap();
    let id = cluster.submit(&spec);
    let job = cluster.wait_job(&id, |s| !matches!(s, "running" | "deploying"));
    assert_eq!(job["state"], "finished", "{job}");

    let out = cluster.weir(&["logs", &id, "--operator", "chatty"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for subtask in [0, 1] {
        // The newest lines are kept: the records' lines, not the first.
        assert!(
            text.contains(&format!("INFO  chatty[{subtask}] saw w")),
            "a record's line of subtask {subtask}:\n{text}"
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dropped"), "the drops are said: {stderr}");

    // One subtask only.
    let out = cluster.weir(&["logs", &id, "--operator", "chatty", "--subtask", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.is_empty() && text.lines().all(|l| l.contains(" chatty[1] ")),
        "{text}"
    );

    // The JobManager keeps at most its ring's bound per subtask.
    let (status, view) = cluster.get(&format!("/v1/jobs/{id}/logs?operator=chatty&subtask=0"));
    assert_eq!(status, 200, "{view}");
    let lines = view["lines"].as_array().unwrap().len();
    assert!(
        lines > 0 && lines <= weir_host::telemetry::logs::RING_LINES,
        "{lines} lines kept"
    );
    // 4000 records x 100 lines: far over what the rate limit lets through.
    assert!(
        view["dropped"].as_u64().unwrap() > 100_000,
        "{}",
        view["dropped"]
    );

    // `--follow` on an ended job prints what there is and returns.
    let out = cluster.weir(&["logs", &id, "--follow", "--subtask", "0"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("chatty[0]"));

    // Bad requests are clear errors, not empty answers.
    let out = cluster.weir(&["logs", &id, "--operator", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no operator `nope`"),
        "{}",
        describe(&out)
    );
    let (status, _) = cluster.get(&format!("/v1/jobs/{id}/logs?subtask=7"));
    assert_eq!(status, 400);
}

/// Latency markers (`job.latency_tracking_interval_ms`): behind a sink
/// throttled to 1,000 records/s, records queue in its input channel, and
/// so do the markers: the sink's p99 is far above the first operator's,
/// which is chained to the source. Both come from markers that crossed the
/// job: the REST API shows them per vertex, the JobManager's `/metrics`
/// as a gauge per quantile.
#[test]
fn latency_markers_show_the_queue_in_front_of_a_throttled_sink() {
    let mut cluster = Cluster::start(0, 2, &[]);
    cluster.add_taskmanager(2, &["--metrics", "127.0.0.1:0"]);
    let spec = cluster.dir.path().join("job.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "latency"
batch_size = 100
latency_tracking_interval_ms = 20

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
rate = 5000

[[operator]]
id = "op"
module = {module}

[[sink]]
id = "slow"
type = "blackhole"
rate = 1000
slot_sharing_group = "sink"

[[edge]]
from = "gen"
to = "op"

[[edge]]
from = "op"
to = "slow"
"#,
            module = toml_path(Path::new(artifacts::UPPERCASE)),
        ),
    )
    .unwrap();
    let id = cluster.submit(&spec);
    let latency = |vertex: &str| {
        cluster
            .vertex(&id, vertex)
            .and_then(|v| serde_json::from_value::<Value>(v["latency_ms"].clone()).ok())
            .filter(|l| l["samples"].as_u64().unwrap_or(0) >= 50)
    };
    // Enough markers at both, and the sink's queue full (its window of
    // samples then only holds markers that waited in it).
    let (op, slow) = wait_for("50 latency samples at the operator and the sink", || {
        let op = latency("op")?;
        let slow = latency("slow")?;
        (slow["p50"].as_u64()? > 100).then_some((op, slow))
    });
    let p99 = |l: &Value| l["p99"].as_u64().expect("p99");
    assert!(
        p99(&slow) > p99(&op),
        "sink p99 {} ms is not above the operator's {} ms: {slow} vs {op}",
        p99(&slow),
        p99(&op)
    );
    assert_eq!(latency("gen"), None, "a source measures no latency");
    // The TaskManager's memory, from its heartbeats (the UI's TaskManager
    // page shows it).
    let (_, tms) = cluster.get("/v1/taskmanagers");
    let memory = &tms[0]["memory"];
    let rss = memory["rss_bytes"].as_u64().unwrap_or(0);
    assert!(
        rss > 0 && memory["peak_rss_bytes"].as_u64().unwrap_or(0) >= rss,
        "{tms}"
    );
    // The sink's p99, above 0: per vertex on the JobManager's `/metrics`,
    // per subtask on the TaskManager's.
    let p99 = |text: &str, family: &str, labels: &[&str]| {
        let gauge = text
            .lines()
            .find(|l| {
                l.starts_with(family)
                    && l.contains(r#"vertex="slow""#)
                    && l.contains(r#"quantile="0.99""#)
                    && labels.iter().all(|label| l.contains(label))
            })
            .unwrap_or_else(|| panic!("no {family} p99 for the sink in:\n{text}"));
        let seconds: f64 = gauge.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(seconds > 0.0, "{gauge}");
    };
    let (status, text) = cluster.get_text("/metrics");
    assert_eq!(status, 200, "{text}");
    p99(&text, "weir_job_vertex_latency_seconds{", &[]);
    let text = scrape(&metrics_address(&cluster, 0));
    p99(&text, "weir_latency_seconds{", &[r#"subtask="0""#]);
    // The queue in front of the throttled sink is what the markers waited
    // in: its fill is high (the sink takes 1,000 of the 5,000 records a
    // second; a full queue reads 1, one just taken from 7/8).
    let fill = text
        .lines()
        .find(|l| l.starts_with("weir_input_queue_fill_ratio{") && l.contains(r#"vertex="slow""#))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no input queue fill for the sink in:\n{text}"));
    assert!(
        fill >= 0.5,
        "the throttled sink's input queue is {fill} full"
    );
}

/// `GET http://ADDR/metrics` of a TaskManager, as text.
fn scrape(addr: &str) -> String {
    let mut r = ureq::get(format!("http://{addr}/metrics"))
        .call()
        .unwrap_or_else(|e| panic!("GET http://{addr}/metrics: {e}"));
    r.body_mut().read_to_string().unwrap()
}

/// `job.metrics = false`: the TaskManager's `/metrics` has none of the
/// job's built-in per-subtask samples (which a job with metrics has, see
/// `prometheus_scrapes_the_jobmanager_and_two_taskmanagers`) but still the
/// operator's own counter; the JobManager still counts each vertex's
/// records, and says the load is not measured rather than guess it.
#[test]
fn a_job_without_metrics_keeps_its_record_counts_and_the_operators_own() {
    let mut cluster = Cluster::start(0, 2, &[]);
    cluster.add_taskmanager(2, &["--metrics", "127.0.0.1:0"]);
    let tm = metrics_address(&cluster, 0);
    let spec = cluster.dir.path().join("job.toml");
    let text = chatty_spec(None, 200, 1).replacen("[job]\n", "[job]\nmetrics = false\n", 1);
    assert!(text.contains("metrics = false"), "{text}");
    std::fs::write(&spec, text).unwrap();
    let id = cluster.submit(&spec);
    let job = format!(r#"job_id="{id}""#);
    let text = wait_for("chatty's own counter on the TaskManager's /metrics", || {
        let text = scrape(&tm);
        text.lines()
            .any(|l| {
                l.starts_with("weir_operator_metric_total{")
                    && l.contains(&job)
                    && l.contains(r#"name="records_seen""#)
            })
            .then_some(text)
    });
    for family in [
        "weir_records_in_total{",
        "weir_records_out_total{",
        "weir_bytes_in_total{",
        "weir_busy_seconds_total{",
        "weir_idle_seconds_total{",
    ] {
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with(family) && l.contains(&job)),
            "{family} of a job with metrics = false:\n{text}"
        );
    }
    wait_for("the source's records counted by the JobManager", || {
        let words = cluster.vertex(&id, "words")?;
        (words["records_out"].as_u64()? > 0).then_some(())
    });
    let message = wait_for("the bottleneck's message", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        job["bottleneck"]["message"].as_str().map(str::to_owned)
    });
    assert!(message.contains("metrics = false"), "{message}");
    let out = cluster.weir(&["cancel", &id]);
    assert!(out.status.success(), "{}", describe(&out));
}

/// A keyed word count over two TaskManagers of one slot each: the source
/// and one counting subtask on one, the other counting subtask on the
/// other, so the hash exchange crosses the network. `backend` is the job's
/// state backend.
fn keyed_spec(name: &str, backend: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
state_backend = "{backend}"

[[source]]
id = "words"
type = "generator"
kind = "words"
vocabulary = 500
rate = 2000

[[operator]]
id = "count"
module = {count}
key_by = "value"
parallelism = 2
config = {{ emit = "updates" }}

[[sink]]
id = "out"
type = "blackhole"
parallelism = 2

[[edge]]
from = "words"
to = "count"

[[edge]]
from = "count"
to = "out"
"#,
        count = toml_path(Path::new(artifacts::WORD_COUNT)),
    )
}

/// The value of the first sample of `family` on a line holding every one
/// of `labels` (`name="value"` each).
fn sample(text: &str, family: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .find(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|label| l.contains(label))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Each TaskManager's `/metrics` shows its counting subtask's keyed state
/// size labeled with the job's backend (RocksDB, then heap), and the
/// network channels between the two TaskManagers with their credits;
/// once the job is cancelled, no channel stays open and no credit held.
#[test]
fn state_size_per_backend_and_network_credits_on_each_taskmanager() {
    let mut cluster = Cluster::start(0, 1, &[]);
    cluster.add_taskmanager(1, &["--metrics", "127.0.0.1:0"]);
    cluster.add_taskmanager(1, &["--metrics", "127.0.0.1:0"]);
    let tms = [metrics_address(&cluster, 0), metrics_address(&cluster, 1)];
    for backend in ["rocksdb", "heap"] {
        let spec = cluster.dir.path().join(format!("{backend}.toml"));
        std::fs::write(&spec, keyed_spec(&format!("count-{backend}"), backend)).unwrap();
        let id = cluster.submit(&spec);
        let job = format!(r#"job_id="{id}""#);
        let labels = [
            job.as_str(),
            r#"vertex="count""#,
            &format!(r#"backend="{backend}""#),
        ];
        for tm in &tms {
            let size = wait_for(&format!("{backend} state size on {tm}"), || {
                sample(&scrape(tm), "weir_state_size_bytes", &labels).filter(|v| *v > 0.0)
            });
            // At least one word and its count.
            assert!(size > 8.0, "{backend} state of {size} bytes on {tm}");
        }
        // One TaskManager sends to the other: its channel holds credits or
        // has buffers in flight, the other reads the stream.
        wait_for("a channel between the TaskManagers", || {
            let texts = [scrape(&tms[0]), scrape(&tms[1])];
            let value = |i: usize, family: &str, labels: &[&str]| {
                sample(&texts[i], family, labels).unwrap_or_else(|| {
                    panic!("no {family} {labels:?} on {}:\n{}", tms[i], texts[i])
                })
            };
            let out = [0, 1].map(|i| {
                value(
                    i,
                    "weir_taskmanager_network_channels",
                    &[r#"direction="out""#],
                )
            });
            let sender = out.iter().position(|open| *open >= 1.0)?;
            let receiver = 1 - sender;
            let inbound = value(
                receiver,
                "weir_taskmanager_network_channels",
                &[r#"direction="in""#],
            );
            let held = value(sender, "weir_taskmanager_network_credits_available", &[])
                + value(sender, "weir_taskmanager_network_buffers_in_flight", &[]);
            // Only its presence is checked here (`value` panics without
            // it): it stays 0 unless a credit wait ended, which
            // `backpressure_crosses_taskmanagers` asserts.
            let _waited = value(
                sender,
                "weir_taskmanager_network_credit_wait_seconds_total",
                &[],
            );
            (inbound >= 1.0 && held >= 1.0).then_some(())
        });
        let out = cluster.weir(&["cancel", &id]);
        assert!(out.status.success(), "{}", describe(&out));
        cluster.wait_job(&id, |s| s == "canceled");
        wait_for("every channel closed after the cancel", || {
            tms.iter()
                .all(|tm| {
                    let text = scrape(tm);
                    [
                        ("weir_taskmanager_network_channels", r#"direction="out""#),
                        ("weir_taskmanager_network_channels", r#"direction="in""#),
                        ("weir_taskmanager_network_credits_available", ""),
                        ("weir_taskmanager_network_buffers_in_flight", ""),
                    ]
                    .iter()
                    .all(|(family, label)| sample(&text, family, &[label]) == Some(0.0))
                })
                .then_some(())
        });
    }
}
