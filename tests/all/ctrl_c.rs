//! An unbounded job runs until Ctrl-C (SIGINT), then stops its sources,
//! drains, prints its summary and exits 0 — with every record the source
//! produced written to the sink.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use weir_tests::artifacts;

use crate::util::{toml_path, weir};

/// Writes `DIR/unbounded.toml`: job `name`, an endless sequence generator
/// (20 000 records a second) → `uppercase` → a sink whose type (and
/// options) are `sink`.
fn unbounded_spec(dir: &Path, name: &str, sink: &str) -> std::path::PathBuf {
    let spec = dir.join("unbounded.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[job]
name = "{name}"

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
rate = 20000

[[operator]]
id = "up"
module = {m}

[[sink]]
id = "out"
{sink}

[[edge]]
from = "gen"
to = "up"

[[edge]]
from = "up"
to = "out"
"#,
            m = toml_path(Path::new(artifacts::UPPERCASE)),
        ),
    )
    .unwrap();
    spec
}

#[test]
fn unbounded_job_stops_cleanly_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let spec = unbounded_spec(
        dir.path(),
        "unbounded",
        &format!("type = \"file\"\npath = {}", toml_path(&out)),
    );
    let child = weir(&dir.path().join("cache"))
        .args(["run", "--json", spec.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kills weir if an assertion below fails, so no process outlives the test.
    // Readiness: records reach the sink file.
    let output = interrupt_when(child, "output", || {
        std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) >= 4096
    });
    assert!(
        output.status.success(),
        "{}",
        crate::util::describe(&output)
    );

    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let produced = summary["source_records"].as_u64().unwrap();
    let lines = std::fs::read_to_string(&out).unwrap().lines().count() as u64;
    assert!(produced > 0);
    assert_eq!(lines, produced, "every produced record reached the sink");
}

/// `weir run --metrics 127.0.0.1:0` serves the job's Prometheus metrics
/// while it runs, at the address it prints: the source's records-out
/// counter is there and rises between two scrapes.
#[test]
fn weir_run_serves_metrics_while_the_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    let spec = unbounded_spec(dir.path(), "observed", r#"type = "blackhole""#);
    let stderr = dir.path().join("stderr.txt");
    let child = weir(&dir.path().join("cache"))
        .args(["run", spec.to_str().unwrap(), "--metrics", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let records_out = |text: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("weir_records_out_total{")
                    && l.contains(r#"job_name="observed""#)
                    && l.contains(r#"vertex="gen""#)
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let mut first = None;
    let output = interrupt_when(child, "a rising records-out counter on /metrics", || {
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        let Some(address) = log
            .lines()
            .find_map(|l| l.strip_prefix("metrics http://"))
            .map(str::to_owned)
        else {
            return false;
        };
        let Ok(mut r) = ureq::get(format!("http://{address}")).call() else {
            return false;
        };
        let text = r.body_mut().read_to_string().unwrap_or_default();
        match (first, records_out(&text)) {
            (Some(a), Some(b)) => b > a,
            (None, Some(a)) if a > 0.0 => {
                first = Some(a);
                false
            }
            _ => false,
        }
    });
    assert!(
        output.status.success(),
        "{}\n{}",
        crate::util::describe(&output),
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
}

/// Sends `child` (a running `weir run`) SIGINT once `ready` holds, polling
/// it (the process signals nothing else), and returns its output. Fails if
/// it exits first or `ready` does not hold within 120 s; the process never
/// outlives the test.
pub(crate) fn interrupt_when(
    child: std::process::Child,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> std::process::Output {
    let mut child = KillOnDrop(Some(child));
    let pid = child.get().id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready() {
        assert!(Instant::now() < deadline, "no {what} after 120 s");
        assert!(
            child.get().try_wait().unwrap().is_none(),
            "weir exited early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.0.take().unwrap().wait_with_output().unwrap()
}

struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    fn get(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("child still owned")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
