//! Operators are untrusted: each adversarial operator in `udfs/` fails its
//! own job with the right typed error, while a healthy job running beside it
//! in the same process (same engine, same cluster) finishes with the right
//! output. The `weir` process itself exits cleanly with the error.

use std::path::Path;
use std::sync::Arc;

use weir_host::job::JobGraph;
use weir_host::jobmanager::JobState;
use weir_host::wasm::{FailureKind, Runtime, RuntimeConfig};
use weir_tests::artifacts;

use crate::util::{assert_fails_with, run_weir, toml_path};

/// gen(sequence) → op → sink, with tight limits so the test is quick.
fn adversarial_spec(module: &str, config: &str, sink: &str) -> String {
    format!(
        r#"
[job]
name = "adversarial"

[job.limits]
memory_mb = 32
call_timeout_ms = 500

[[source]]
id = "gen"
type = "generator"
kind = "sequence"
count = 100

[[operator]]
id = "evil"
module = {module}
config = {{ {config} }}

[[sink]]
{sink}

[[edge]]
from = "gen"
to = "evil"

[[edge]]
from = "evil"
to = "out"
"#,
        module = toml_path(Path::new(module)),
    )
}

fn graph(dir: &Path, name: &str, spec: &str) -> JobGraph {
    let path = dir.join(name);
    std::fs::write(&path, spec).unwrap();
    JobGraph::from_file(&path, &[]).unwrap()
}

struct Case {
    module: &'static str,
    config: String,
    kind: FailureKind,
    needle: String,
}

/// Every adversarial operator; `open-socket` aims at `listener`, a port
/// that is really listening, so a refused connection proves the sandbox.
fn cases(listener: std::net::SocketAddr) -> Vec<Case> {
    vec![
        Case {
            module: artifacts::SLEEP,
            config: "".into(),
            kind: FailureKind::Forbidden,
            needle: "tried to sleep".into(),
        },
        Case {
            module: artifacts::SPIN,
            config: "".into(),
            kind: FailureKind::OutOfTime,
            needle: "deadline of 500 ms".into(),
        },
        Case {
            module: artifacts::MEMORY_BOMB,
            config: "".into(),
            kind: FailureKind::OutOfMemory,
            needle: "over the limit of 33554432 bytes".into(),
        },
        Case {
            module: artifacts::DEEP_RECURSION,
            config: "".into(),
            kind: FailureKind::StackOverflow,
            needle: "stack".into(),
        },
        Case {
            module: artifacts::PANIC,
            config: "".into(),
            kind: FailureKind::Panic,
            needle: "weir-test-panic: boom".into(),
        },
        Case {
            module: artifacts::READ_FILE,
            config: "".into(),
            kind: FailureKind::Guest,
            needle: "cannot read /etc/passwd".into(),
        },
        Case {
            module: artifacts::OPEN_SOCKET,
            config: format!("addr = \"{listener}\""),
            kind: FailureKind::Guest,
            needle: format!("cannot connect to {listener}"),
        },
        Case {
            module: artifacts::BIG_OUTPUT,
            config: "bytes = 20000000".into(),
            kind: FailureKind::BadOutput,
            needle: "over the limit".into(),
        },
    ]
}

#[test]
fn adversarial_operators_fail_alone_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            cache_dir: Some(dir.path().join("cache")),
        })
        .unwrap(),
    );
    // Slots for the healthy job and one adversarial job at a time.
    let mut cluster = rt
        .block_on(async { crate::embedded::cluster(dir.path(), runtime, Some(8)) })
        .unwrap();

    // The healthy job: word count over the bundled text, running throughout.
    let healthy_out = dir.path().join("healthy.txt");
    let healthy = graph(
        dir.path(),
        "healthy.toml",
        &crate::word_count::word_count_spec(&crate::util::kjv(), &healthy_out),
    );
    let healthy = rt.block_on(cluster.submit(healthy, None)).unwrap();

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    for (i, case) in cases(listener.local_addr().unwrap())
        .into_iter()
        .enumerate()
    {
        let sink = format!(
            "id = \"out\"\ntype = \"file\"\npath = {}",
            toml_path(&dir.path().join(format!("evil-{i}.txt")))
        );
        let g = graph(
            dir.path(),
            &format!("evil-{i}.toml"),
            &adversarial_spec(case.module, &case.config, &sink),
        );
        let job = rt.block_on(cluster.submit(g, None)).unwrap();
        let ended = rt.block_on(cluster.wait(&job)).unwrap();
        assert_eq!(ended.summary.state, JobState::Failed, "{}", case.module);
        let failure = ended.summary.failure.unwrap_or_default();
        // The root cause, typed: `operator `evil`: <kind>: <message>`.
        let typed = format!("operator `evil`: {}:", case.kind);
        assert!(
            failure.contains(&typed) && failure.contains(&case.needle),
            "{}: wanted {typed:?} and {:?} in {failure:?}",
            case.module,
            case.needle
        );
        // Nothing escaped the sandbox into the output.
        let written =
            std::fs::read_to_string(dir.path().join(format!("evil-{i}.txt"))).unwrap_or_default();
        assert!(
            !written.contains("root:"),
            "{}: read the host's /etc/passwd",
            case.module
        );
        assert!(
            !written.contains("connected"),
            "{}: opened a socket",
            case.module
        );
    }
    // Nobody reached the listening port.
    assert_eq!(
        listener
            .accept()
            .map(|(_, peer)| peer)
            .map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "an operator connected to a listening port"
    );

    let text = std::fs::read_to_string(crate::util::kjv()).unwrap();
    let text_lines = || text.lines().count() as u64;
    let summary = rt.block_on(cluster.wait(&healthy)).unwrap();
    assert_eq!(
        summary.summary.state,
        JobState::Finished,
        "the healthy job is unaffected: {summary:?}"
    );
    let source_records: u64 = summary
        .vertices
        .iter()
        .filter(|v| v.role == "source")
        .map(|v| v.records_out)
        .sum();
    assert_eq!(source_records, text_lines());
    let lines = crate::util::read_sink(&healthy_out);
    let the = lines
        .iter()
        .find(|l| l.starts_with("the\t"))
        .expect("`the` counted");
    let expected = text
        .lines()
        .flat_map(|l| l.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| w.to_lowercase() == "the")
        .count();
    assert_eq!(the, &format!("the\t{expected}"));
}

#[test]
fn weir_run_reports_a_runaway_operator_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spin.toml");
    std::fs::write(
        &path,
        adversarial_spec(artifacts::SPIN, "", "id = \"out\"\ntype = \"blackhole\""),
    )
    .unwrap();
    let out = run_weir(&dir.path().join("cache"), &["run", path.to_str().unwrap()]);
    assert_fails_with(&out, 1, &["operator `evil`", "out of time"]);
}

/// An operator whose instantiation alone takes more memory than its job
/// allows (identity plus 15 memories of 4 MiB, filled, under a 32 MiB cap;
/// the default cap of 64 MiB would let it through) is refused when the job
/// is checked, before any subtask is deployed: it is described under the
/// job's cap.
#[test]
fn an_operator_over_its_jobs_memory_cap_is_refused_before_deployment() {
    let dir = tempfile::tempdir().unwrap();
    let identity = std::fs::read(artifacts::IDENTITY).unwrap();
    let hostile = weir_tests::adversarial::with_memories(&identity, 15, 4).unwrap();
    let module = dir.path().join("hostile.wasm");
    std::fs::write(&module, hostile).unwrap();
    let path = dir.path().join("hostile.toml");
    std::fs::write(
        &path,
        adversarial_spec(
            module.to_str().unwrap(),
            "",
            "id = \"out\"\ntype = \"blackhole\"",
        ),
    )
    .unwrap();
    let out = run_weir(&dir.path().join("cache"), &["run", path.to_str().unwrap()]);
    // Exit 2: refused as bad input while the job is checked (a task
    // failing at run time would be exit 1).
    assert_fails_with(
        &out,
        2,
        &[
            "operator `evil",
            "out of memory",
            "over the limit of 33554432 bytes",
        ],
    );
}
