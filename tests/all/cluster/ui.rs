//! The web UI in a real browser (issue 15): Debian's `chromium`, headless,
//! loads the JobManager's pages from a running cluster and dumps the DOM
//! its script built (`--dump-dom`), which the tests read: the overview
//! lists the job; the job page draws one node per vertex of the job (as
//! REST counts them), with record counts that grow, a completed
//! checkpoint, and, after a TaskManager is killed, the exception naming
//! it. The throttled-sink test checks the "why slow" rule end to end (REST,
//! `weir status` and the page agree). Pages need the token like the API.
//!
//! With `WEIR_UI_SCREENSHOTS=DIR` set, the throttled-sink test also writes
//! `overview.png` and `job.png` there (how `docs/` got its screenshots).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_tests::artifacts;

use super::harness::{Cluster, READY_TIMEOUT, wait_for};
use crate::util::{describe, toml_path};

/// Debian's chromium (installed by `tests/setup.sh`).
const CHROMIUM: &str = "/usr/bin/chromium";

/// How much virtual time a page gets to load and draw (it polls every
/// second; virtual time waits for its network requests).
const BUDGET_MS: u64 = 4000;

/// Runs headless chromium on `url` with `extra` flags and a fresh
/// profile; returns its stdout. Killed (and the test failed) if it takes
/// longer than [`READY_TIMEOUT`].
fn chromium(url: &str, extra: &[String]) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run tests/setup.sh (it installs Debian's chromium)"
    );
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.path().display()),
            &format!("--virtual-time-budget={BUDGET_MS}"),
        ])
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).ok();
        out
    });
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish loading {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// The DOM of `path` on the cluster's REST port after the page's script
/// ran, the token given in the fragment as a user's link would.
fn dom(cluster: &Cluster, path: &str) -> String {
    let token = cluster.token.as_deref().expect("a token");
    chromium(
        &format!("{}{path}#token={token}", cluster.rest),
        &["--dump-dom".to_owned()],
    )
}

/// A 1280×900 screenshot of `path` into `file`.
fn screenshot(cluster: &Cluster, path: &str, file: &Path) {
    let token = cluster.token.as_deref().expect("a token");
    chromium(
        &format!("{}{path}#token={token}", cluster.rest),
        &[
            format!("--screenshot={}", file.display()),
            "--window-size=1280,900".to_owned(),
            "--hide-scrollbars".to_owned(),
        ],
    );
    assert!(file.exists(), "no screenshot at {}", file.display());
}

/// Every value of attribute `attr` in `html`, in order.
fn attr_values(html: &str, attr: &str) -> Vec<String> {
    let needle = format!("{attr}=\"");
    html.match_indices(&needle)
        .map(|(i, _)| {
            let rest = &html[i + needle.len()..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
        .collect()
}

/// The opening tag of the element carrying `attr="value"`.
fn tag_with<'a>(html: &'a str, attr: &str, value: &str) -> Option<&'a str> {
    let at = html.find(&format!("{attr}=\"{value}\""))?;
    let start = html[..at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    Some(&html[start..=end])
}

/// `attr`'s value inside an opening tag.
fn attr_in(tag: &str, attr: &str) -> Option<String> {
    attr_values(tag, attr).into_iter().next()
}

/// The records a vertex's node in the drawn graph says it emitted.
fn drawn_records_out(html: &str, vertex: &str) -> u64 {
    let tag = tag_with(html, "data-vertex", vertex)
        .unwrap_or_else(|| panic!("no node for vertex {vertex} in the page:\n{html}"));
    attr_in(tag, "data-records-out")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no record count on {tag}"))
}

/// A streaming word count: words from a generator, uppercased (chained to
/// the source), counted per word by two subtasks (a hash exchange) into a
/// sink; checkpointed and restarted on failure. `sink` is the sink's table
/// body.
fn word_job(dir: &Path, name: &str, source_rate: &str, sink: &str, sink_edge: &str) -> PathBuf {
    let spec = dir.join(format!("{name}.toml"));
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "{name}"

[job.checkpoints]
interval_ms = 500

[job.restart]
strategy = "fixed-delay"
attempts = 5
delay_ms = 200

[[source]]
id = "words"
type = "generator"
kind = "words"
vocabulary = 2000
{source_rate}

[[operator]]
id = "upper"
module = {upper}

[[operator]]
id = "count"
module = {count}
key_by = "value"
parallelism = 2
config = {{ emit = "updates" }}

[[sink]]
id = "out"
{sink}

[[edge]]
from = "words"
to = "upper"

[[edge]]
from = "upper"
to = "count"

[[edge]]
from = "count"
to = "out"
{sink_edge}
"#,
            upper = toml_path(Path::new(artifacts::UPPERCASE)),
            count = toml_path(Path::new(artifacts::WORD_COUNT)),
        ),
    )
    .unwrap();
    spec
}

/// The overview lists the job; the job page (a deep link) draws every
/// vertex, its counts grow between two loads, a completed checkpoint is
/// listed; after a TaskManager is killed the exception history names it
/// as the root cause.
#[test]
fn the_ui_shows_the_job_its_graph_checkpoints_and_the_lost_taskmanager() {
    let mut cluster = Cluster::start(2, 2, &["--heartbeat-timeout-ms", "2000"]);
    let spec = word_job(
        cluster.dir.path(),
        "ui-words",
        "rate = 3000",
        "type = \"blackhole\"",
        "",
    );
    let id = cluster.submit(&spec);
    let job = cluster.wait_deployed(&id);
    let vertices: Vec<String> = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    // Running on both TaskManagers (count's two subtasks are spread).
    let on: std::collections::BTreeSet<&str> = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["subtasks"].as_array().unwrap())
        .map(|s| s["taskmanager"].as_str().unwrap())
        .collect();
    assert_eq!(on.len(), 2, "{job}");
    wait_for("a completed checkpoint", || {
        let (_, c) = cluster.get(&format!("/v1/jobs/{id}/checkpoints"));
        c["history"]
            .as_array()?
            .iter()
            .any(|c| c["status"] == "completed")
            .then_some(())
    });

    // The overview, from the root path, lists it.
    let overview = dom(&cluster, "/");
    let row = tag_with(&overview, "data-job", &id)
        .unwrap_or_else(|| panic!("the overview does not list job {id}:\n{overview}"));
    assert_eq!(
        attr_in(row, "data-state").as_deref(),
        Some("running"),
        "{row}"
    );
    assert!(overview.contains("ui-words"), "{overview}");

    // The job page, by a deep link: one node per vertex.
    let page = dom(&cluster, &format!("/ui/jobs/{id}"));
    let mut drawn = attr_values(&page, "data-vertex");
    drawn.sort();
    let mut expected = vertices.clone();
    expected.sort();
    assert_eq!(drawn, expected, "one node per vertex:\n{page}");
    // The chain words → upper is drawn as one.
    assert!(
        attr_values(&page, "data-task").contains(&"words+upper".to_owned()),
        "{page}"
    );
    // Counts that grow between two loads.
    let first = drawn_records_out(&page, "words");
    assert!(first > 0, "the source's node shows no records:\n{page}");
    let later = wait_for("the page to show more records", || {
        let again = dom(&cluster, &format!("/ui/jobs/{id}"));
        let n = drawn_records_out(&again, "words");
        (n > first).then_some(again)
    });
    // A completed checkpoint is listed.
    let completed = attr_values(&later, "data-status")
        .iter()
        .filter(|s| *s == "completed")
        .count();
    assert!(
        completed > 0,
        "no completed checkpoint on the page:\n{later}"
    );
    assert!(!later.contains("class=\"exception\""), "{later}");

    // Kill a TaskManager: the job restarts; the page's exception history
    // names the lost TaskManager.
    cluster.tms[1].kill();
    wait_for("the job to restart after the TaskManager's loss", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        (job["attempt"].as_u64()? >= 1 && job["state"] == "running").then_some(())
    });
    let page = dom(&cluster, &format!("/ui/jobs/{id}"));
    let entries: Vec<&str> = page
        .match_indices("class=\"exception\"")
        .map(|(at, _)| &page[at..at + page[at..].find("</li>").unwrap()])
        .collect();
    assert!(
        !entries.is_empty(),
        "no exception listed after the TaskManager was killed:\n{page}"
    );
    assert!(
        entries
            .iter()
            .any(|e| e.contains("TaskManager tm-2") && e.contains("lost")),
        "an exception names the lost TaskManager as root cause: {entries:?}"
    );
    // And REST keeps it in the job's history, naming the TaskManager.
    let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
    assert!(
        job["exceptions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["taskmanager"] == "tm-2"),
        "{job}"
    );
}

/// A job whose sink is throttled: the JobManager names the sink as the
/// bottleneck (the vertices before it are backpressured), and `weir
/// status` and the page say the same.
#[test]
fn a_throttled_sink_is_named_the_bottleneck() {
    const SINK_RATE: u64 = 3000;
    let cluster = Cluster::start(1, 4, &[]);
    let spec = word_job(
        cluster.dir.path(),
        "slow-sink",
        "",
        &format!("type = \"blackhole\"\nrate = {SINK_RATE}"),
        "partition = \"rebalance\"",
    );
    let id = cluster.submit(&spec);
    cluster.wait_deployed(&id);
    let job = wait_for("a bottleneck named", || {
        let (_, job) = cluster.get(&format!("/v1/jobs/{id}"));
        job["bottleneck"]["vertex"].is_string().then_some(job)
    });
    let b = &job["bottleneck"];
    assert_eq!(b["vertex"], "out", "{b}");
    assert!(b["busy_ratio"].as_f64().unwrap() >= 0.5, "{b}");
    assert_eq!(b["upstream"][0]["vertex"], "count", "{b}");
    let message = b["message"].as_str().unwrap().to_owned();
    assert!(
        message.starts_with("`out` is the bottleneck: busy ")
            && message.contains("`count` upstream is backpressured"),
        "{message}"
    );
    // The rates agree with the throttle: the sink takes what it allows.
    let sink = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "out")
        .unwrap();
    let taken = sink["records_in_per_s"].as_f64().unwrap();
    assert!(
        taken <= SINK_RATE as f64 * 1.5,
        "the sink took {taken}/s, over its rate {SINK_RATE}/s"
    );

    let status = cluster.weir(&["status", &id]);
    assert!(status.status.success(), "{}", describe(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("why this speed: `out` is the bottleneck"),
        "{text}"
    );

    let page = dom(&cluster, &format!("/ui/jobs/{id}"));
    let diagnosis = tag_with(&page, "class", "diagnosis has-bottleneck")
        .unwrap_or_else(|| panic!("no diagnosis on the page:\n{page}"));
    assert_eq!(
        attr_in(diagnosis, "data-bottleneck").as_deref(),
        Some("out")
    );
    let node = tag_with(&page, "data-vertex", "out").unwrap();
    assert!(
        node.contains("bottleneck"),
        "the sink's node is marked: {node}"
    );

    if let Some(dir) = std::env::var_os("WEIR_UI_SCREENSHOTS") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        screenshot(&cluster, "/ui/", &dir.join("overview.png"));
        screenshot(&cluster, &format!("/ui/jobs/{id}"), &dir.join("job.png"));
    }
}

/// Pages and assets need the token like the API: 401 without it (a page's
/// 401 carries only the empty shell that asks for the token, and a browser
/// shows that prompt, not the data); 200 with it; without token rules
/// (`--rest-insecure-loopback`) the UI just loads.
#[test]
fn ui_pages_need_the_token() {
    let cluster = Cluster::start(0, 1, &[]);
    let token = cluster.token.clone().unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get = |path: &str, token: Option<&str>| {
        let mut req = agent.get(format!("{}{path}", cluster.rest));
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut r = req.call().unwrap();
        let status = r.status().as_u16();
        let kind = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (
            status,
            kind,
            r.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    for path in ["/", "/ui/", "/ui/jobs/abc", "/ui/modules"] {
        let (status, kind, body) = get(path, None);
        assert_eq!(status, 401, "{path} without the token");
        assert!(kind.starts_with("text/html"), "{path}: {kind}");
        assert!(body.contains("id=\"login\""), "{path}: {body}");
        let (status, _, wrong) = get(path, Some("not-the-token"));
        assert_eq!(status, 401, "{path} with a wrong token");
        assert_eq!(wrong, body, "the same empty shell");
        let (status, _, _) = get(path, Some(&token));
        assert_eq!(status, 200, "{path} with the token");
    }
    for path in ["/ui/assets/app.js", "/ui/assets/style.css"] {
        let (status, kind, body) = get(path, None);
        assert_eq!(status, 401, "{path} without the token");
        assert!(
            kind.starts_with("application/json"),
            "{path}: {kind} {body}"
        );
        let (status, kind, body) = get(path, Some(&token));
        assert_eq!(status, 200, "{path}");
        assert!(kind.starts_with("text/"), "{kind}");
        assert!(!body.is_empty());
    }
    let (status, _, _) = get("/ui/assets/nope.js", Some(&token));
    assert_eq!(status, 404);

    // In a browser without the token: the prompt, and no data.
    let page = chromium(&format!("{}/ui/", cluster.rest), &["--dump-dom".to_owned()]);
    let form = tag_with(&page, "id", "login").expect("the login form");
    assert!(!form.contains("hidden"), "the prompt shows: {form}");
    assert!(!page.contains("class=\"cards\""), "{page}");
    // A wrong token in the link: refused, said so.
    let page = chromium(
        &format!("{}/ui/#token=wrong", cluster.rest),
        &["--dump-dom".to_owned()],
    );
    assert!(page.contains("That token was refused."), "{page}");
    assert!(!page.contains("class=\"cards\""), "{page}");
    // The right one: the overview.
    let page = dom(&cluster, "/ui/");
    assert!(page.contains("class=\"cards\""), "{page}");

    // Without token rules, the UI loads as it is.
    let open = Cluster::start(0, 1, &["--rest-insecure-loopback"]);
    let page = chromium(&format!("{}/ui/", open.rest), &["--dump-dom".to_owned()]);
    assert!(page.contains("class=\"cards\""), "{page}");
}
