//! Tests of the client's pure parts: spec rewriting, tables, formats.

use super::*;
use weir_host::jobmanager::JobState;

#[test]
fn module_paths_are_told_from_references() {
    for path in [
        "../target/wasm32-wasip2/release/tokenize.wasm",
        "tokenize.wasm",
        "./op",
        "/abs/op.component",
    ] {
        assert!(is_module_path(path), "{path}");
    }
    for reference in [
        "tokenize@1",
        "tokenize",
        "word_count@1.0.0",
        "sha256:0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        assert!(!is_module_path(reference), "{reference}");
    }
}

#[test]
fn module_names_come_from_the_file_stem() {
    assert_eq!(
        module_name_for(Path::new("a/b/word_count.wasm")),
        "word_count"
    );
    assert_eq!(module_name_for(Path::new("My Op.wasm")), "my-op");
    assert_eq!(module_name_for(Path::new("fraud.v2.wasm")), "fraud-v2");
    assert_eq!(module_name_for(Path::new(".hidden.wasm")), "hidden");
    assert_eq!(module_name_for(Path::new("x/ü.wasm")), "module");
}

const SPEC: &str = r#"
# comment
[job]
name = "word-count"

[[source]]
id = "lines"
type = "file"
path = "../data/kjv.txt"

[[source]]
id = "gen"
type = "generator"
kind = "words"

[[operator]]
id = "tokenize"
module = "../target/tokenize.wasm"
config = { lowercase = true }

[[operator]]
id = "tokenize2"
module = "../target/tokenize.wasm"

[[operator]]
id = "count"
module = "word_count@3"
key_by = "key"

[[sink]]
id = "out"
type = "file"
path = "out/counts.txt"

[[sink]]
id = "abs"
type = "file"
path = "/tmp/abs.txt"

[[edge]]
from = "lines"
to = "tokenize"
"#;

fn fixture() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let jobs = root.path().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::create_dir_all(root.path().join("target")).unwrap();
    std::fs::write(root.path().join("target/tokenize.wasm"), b"\0asm").unwrap();
    (root, jobs)
}

#[test]
fn rewrite_uploads_path_modules_once_and_anchors_relative_paths() {
    let (_root, jobs) = fixture();
    let mut uploads = Vec::new();
    let out = rewrite_spec(SPEC, &jobs, |p| {
        uploads.push(p.to_owned());
        Ok("tokenize@7".into())
    })
    .unwrap_or_else(|f| panic!("{:#}", f.error));
    assert_eq!(uploads, [jobs.join("../target/tokenize.wasm")]);
    let doc: toml::Table = toml::from_str(&out).unwrap();
    let get = |kind: &str, i: usize, field: &str| {
        doc[kind].as_array().unwrap()[i].as_table().unwrap()[field]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(get("operator", 0, "module"), "tokenize@7");
    assert_eq!(get("operator", 1, "module"), "tokenize@7");
    assert_eq!(get("operator", 2, "module"), "word_count@3");
    assert_eq!(
        get("source", 0, "path"),
        jobs.join("../data/kjv.txt").to_str().unwrap()
    );
    assert_eq!(
        get("sink", 0, "path"),
        jobs.join("out/counts.txt").to_str().unwrap()
    );
    assert_eq!(get("sink", 1, "path"), "/tmp/abs.txt");
}

#[test]
fn rewrite_keeps_the_rest_of_the_spec() {
    let (_root, jobs) = fixture();
    let out = rewrite_spec(SPEC, &jobs, |_| Ok("tokenize@1".into()))
        .unwrap_or_else(|f| panic!("{:#}", f.error));
    let doc: toml::Table = toml::from_str(&out).unwrap();
    assert_eq!(doc["job"]["name"].as_str(), Some("word-count"));
    let ops = doc["operator"].as_array().unwrap();
    assert_eq!(ops[0]["config"]["lowercase"].as_bool(), Some(true));
    assert_eq!(ops[2]["key_by"].as_str(), Some("key"));
    assert_eq!(doc["source"][1]["kind"].as_str(), Some("words"));
    assert!(doc["source"][1].get("path").is_none());
    assert_eq!(doc["edge"][0]["to"].as_str(), Some("tokenize"));
}

#[test]
fn rewrite_reports_a_missing_module_and_upload_failures() {
    let (_root, jobs) = fixture();
    let spec = "[[operator]]\nid = \"x\"\nmodule = \"nope.wasm\"\n";
    let f = rewrite_spec(spec, &jobs, |_| unreachable!()).unwrap_err();
    assert_eq!(f.code, 2);
    let msg = format!("{:#}", f.error);
    assert!(
        msg.contains("operator `x`") && msg.contains("nope.wasm"),
        "{msg}"
    );

    let f = rewrite_spec(SPEC, &jobs, |_| {
        Err(Failure::failed(anyhow!("server on fire")))
    })
    .unwrap_err();
    assert_eq!(f.code, 1);
    let msg = format!("{:#}", f.error);
    assert!(
        msg.contains("operator `tokenize`") && msg.contains("server on fire"),
        "{msg}"
    );

    let f = rewrite_spec("not [toml", &jobs, |_| unreachable!()).unwrap_err();
    assert_eq!(f.code, 2);
    let f = rewrite_spec("operator = 3", &jobs, |_| unreachable!()).unwrap_err();
    assert_eq!(f.code, 2);
}

#[test]
fn error_messages_come_from_the_body() {
    assert_eq!(
        error_message(409, r#"{"error":"module op@1 already exists"}"#),
        "module op@1 already exists"
    );
    assert_eq!(
        error_message(502, "bad gateway"),
        "the JobManager answered HTTP 502: bad gateway"
    );
    assert_eq!(error_message(500, ""), "the JobManager answered HTTP 500");
}

#[test]
fn path_segments_are_encoded() {
    assert_eq!(path_segment("op@1"), "op@1");
    assert_eq!(path_segment("sha256:ab"), "sha256:ab");
    assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
}

#[test]
fn tables_align_columns() {
    let t = table(
        &["NAME", "SIZE"],
        &[Align::Left, Align::Right],
        vec![
            vec!["a".into(), "1 B".into()],
            vec!["longer".into(), "12.0 MiB".into()],
        ],
    );
    assert_eq!(t, "NAME        SIZE\na            1 B\nlonger  12.0 MiB\n");
}

#[test]
fn job_report_shows_vertices_and_placement() {
    let job: JobDetail = serde_json::from_value(serde_json::json!({
        "id": "j1",
        "name": "wc",
        "state": "failed",
        "submitted_at_ms": 1_000,
        "ended_at_ms": 66_000,
        "failure": "operator `count` trapped",
        "vertices": [{
            "id": "count",
            "role": "operator",
            "parallelism": 2,
            "state": "failed",
            "records_in": 10,
            "records_out": 3,
            "busy_ms": 750,
            "backpressured_ms": 250,
            "idle_ms": 0,
            "watermark": 1_700_000_000_999i64,
            "subtasks": [
                { "index": 0, "taskmanager": "tm-a", "state": "failed" },
                { "index": 1, "taskmanager": "tm-b", "state": "canceled" },
            ],
        }],
    }))
    .unwrap();
    let r = job_report(&job, 0);
    assert!(
        r.starts_with("job j1 `wc`: failed (submitted 1970-01-01 00:00:01 UTC, ran 1m05s)\n"),
        "{r}"
    );
    assert!(r.contains("failure: operator `count` trapped\n"), "{r}");
    assert!(
        r.contains(
            "count   operator    2  failed  10    3     75              25  1700000000999\n"
        ),
        "{r}"
    );
    assert!(r.contains("count[1]  tm-b         canceled\n"), "{r}");
}

#[test]
fn job_report_says_why_the_job_is_slow_and_lists_earlier_failures() {
    let job: JobDetail = serde_json::from_value(serde_json::json!({
        "id": "j1", "name": "wc", "state": "running", "submitted_at_ms": 1_000,
        "ended_at_ms": null, "failure": null,
        "vertices": [{
            "id": "count", "role": "operator", "parallelism": 1, "state": "running",
            "busy_ms": 100, "backpressured_ms": 900, "idle_ms": 0,
            "busy_ratio": 0.97, "backpressured_ratio": 0.0,
        }],
        "bottleneck": {
            "vertex": "count", "chain": ["count"], "busy_ratio": 0.97,
            "upstream": [{ "vertex": "tokenize", "backpressured_ratio": 0.85 }],
            "message": "`count` is the bottleneck: busy 97 %; `tokenize` upstream is backpressured 85 % of the time"
        },
        "exceptions": [
            { "time_ms": 2_000, "attempt": 0, "root_cause": "TaskManager tm-2 (127.0.0.1:1) lost: no heartbeat", "taskmanager": "tm-2" }
        ],
    }))
    .unwrap();
    let r = job_report(&job, 5_000);
    assert!(
        r.contains("why this speed: `count` is the bottleneck: busy 97 %; `tokenize` upstream is backpressured 85 % of the time\n"),
        "{r}"
    );
    assert!(
        r.contains("exceptions (1 in all, newest first):\n  1970-01-01 00:00:02 UTC attempt 0: TaskManager tm-2"),
        "{r}"
    );
    // The table shows the same recent shares the diagnosis judged.
    assert!(r.contains(" 97 "), "{r}");
}

#[test]
fn lenient_json_ignores_unknown_fields_and_fills_missing_lists_and_counters() {
    let j: JobDetail = serde_json::from_value(serde_json::json!({
        "id": "x", "name": "n", "state": "running", "submitted_at_ms": 1,
        "extra": 1, "ended_at_ms": null
    }))
    .unwrap();
    assert_eq!(j.summary.id, "x");
    assert_eq!(j.summary.state, JobState::Running);
    assert!(j.vertices.is_empty() && j.summary.ended_at_ms.is_none() && j.attempt == 0);
    let tm: TaskManagerInfo = serde_json::from_value(serde_json::json!({
        "id": "tm", "data_address": "127.0.0.1:1", "slots_total": 2, "slots_free": 1,
        "state": "active", "new_field": [1, 2]
    }))
    .unwrap();
    assert_eq!(tm.slots_free, 1);
}

/// The requests a fake server saw: (head, body) each.
type Seen = Vec<(String, Vec<u8>)>;

/// A one-connection-at-a-time HTTP server answering each request with
/// the next canned `(status, body)`; returns its URL and, when done, the
/// requests it saw (head, body).
fn fake_server(answers: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<Seen>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (status, body) in answers {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            let mut request_body = vec![0; len];
            reader.read_exact(&mut request_body).unwrap();
            let mut stream = reader.into_inner();
            write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            seen.push((head, request_body));
        }
        seen
    });
    (url, handle)
}

#[test]
fn upload_streams_the_file_with_name_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("op.wasm");
    let bytes: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    std::fs::write(&file, &bytes).unwrap();
    let (url, server) = fake_server(vec![(
        201,
        r#"{"name":"op","version":"2","hash":"sha256:ab","size":200000,"uploaded_at_ms":1}"#,
    )]);
    let (status, v) = Rest::new(&url)
        .with_token(Some("s3cret".into()))
        .upload(&file, "op", Some("2"), true)
        .unwrap_or_else(|f| panic!("{:#}", f.error));
    assert_eq!(status, 201);
    assert_eq!(v["version"], "2");
    let seen = server.join().unwrap();
    let (head, body) = &seen[0];
    assert!(
        head.starts_with("POST /v1/modules?name=op&version=2 HTTP/1.1"),
        "{head}"
    );
    assert!(
        head.to_lowercase()
            .contains("content-type: application/wasm"),
        "{head}"
    );
    assert!(
        head.to_lowercase().contains("authorization: bearer s3cret"),
        "{head}"
    );
    assert!(body == &bytes, "the body is the file");
}

#[test]
fn http_errors_carry_the_server_message_and_exit_code() {
    let (url, server) = fake_server(vec![
        (
            409,
            r#"{"error":"module op@1 already exists with other content"}"#,
        ),
        (404, r#"{"error":"job `nope` not found"}"#),
        (
            503,
            r#"{"error":"not enough free slots: 4 needed, 2 free"}"#,
        ),
    ]);
    let rest = Rest::new(&url);
    let f = rest.post_empty("/v1/jobs/x/cancel").unwrap_err();
    assert_eq!(f.code, 2);
    assert_eq!(
        f.error.to_string(),
        "module op@1 already exists with other content"
    );
    let f = rest
        .get(&format!("/v1/jobs/{}", path_segment("nope")))
        .unwrap_err();
    assert_eq!(f.code, 2);
    assert_eq!(f.error.to_string(), "job `nope` not found");
    let f = rest
        .post_json("/v1/jobs", &serde_json::json!({ "spec": "" }))
        .unwrap_err();
    assert_eq!(f.code, 1);
    assert!(f.error.to_string().contains("free slots"));
    let seen = server.join().unwrap();
    assert!(seen[2].0.starts_with("POST /v1/jobs HTTP/1.1"));
    let sent: Value = serde_json::from_slice(&seen[2].1).unwrap();
    assert_eq!(sent, serde_json::json!({ "spec": "" }));
}

#[test]
fn an_unreachable_jobmanager_is_named_with_a_hint() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let f = Rest::new(&format!("127.0.0.1:{port}/"))
        .get("/v1/jobs")
        .unwrap_err();
    assert_eq!(f.code, 1);
    let msg = f.error.to_string();
    assert!(
        msg.contains(&format!(
            "cannot reach the JobManager at http://127.0.0.1:{port}:"
        )),
        "{msg}"
    );
    assert!(msg.contains("weir jobmanager"), "{msg}");
}

#[test]
fn the_token_comes_from_the_option_else_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rest-token");
    std::fs::write(&file, "from-file\nignored\n").unwrap();
    let args = |token: Option<&str>, file: Option<&Path>| ConnectArgs {
        jobmanager: DEFAULT_JOBMANAGER.into(),
        rest_token: token.map(str::to_owned),
        rest_token_file: file.map(Path::to_path_buf),
        ca: None,
        json: false,
    };
    assert_eq!(
        args(Some("given"), Some(&file)).token().unwrap().as_deref(),
        Some("given")
    );
    assert_eq!(
        args(None, Some(&file)).token().unwrap().as_deref(),
        Some("from-file")
    );
    let f = args(Some(" "), None).token().unwrap_err();
    assert_eq!(f.code, 2);
    assert!(f.error.to_string().contains("empty"), "{}", f.error);
    let missing = dir.path().join("missing");
    let f = args(None, Some(&missing)).token().unwrap_err();
    assert_eq!(f.code, 2);
    assert!(f.error.to_string().contains("missing"), "{}", f.error);
    std::fs::write(&file, "\n").unwrap();
    let f = args(None, Some(&file)).token().unwrap_err();
    assert!(f.error.to_string().contains("empty"), "{}", f.error);
}

#[test]
fn human_units() {
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(12 * 1024 * 1024), "12.0 MiB");
    assert_eq!(human_duration(850), "850ms");
    assert_eq!(human_duration(12_345), "12.3s");
    assert_eq!(human_duration(245_000), "4m05s");
    assert_eq!(human_duration(7_380_000), "2h03m");
    assert_eq!(utc_time(0), "-");
    assert_eq!(utc_time(1_700_000_000_000), "2023-11-14 22:13:20");
    assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00");
}
