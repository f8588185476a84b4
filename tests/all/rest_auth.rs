//! The REST API closed by default (issue 10): a token generated into the
//! JobManager's data dir and required on loopback too, `weir local`
//! included; `--rest-insecure-loopback` as the only way back; empty tokens
//! refused; the `Host` allow-list against DNS rebinding; uploads only as
//! `application/wasm`; and half-sent requests (slow-loris) closed by the
//! server without blocking anyone else. Real daemons over real sockets;
//! each test fails on a JobManager without the feature.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use weir_tests::artifacts;

use crate::cluster::harness::{
    Cluster, Daemon, READY_TIMEOUT, client_command, read_token, word_after,
};
use crate::rest::{Api, Reaped, Reply, artifact, assert_error, read, wait_exit};
use crate::util::{describe, http_status};

/// `host:port` of a REST base URL (`http://host:port`).
fn authority(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

/// Every endpoint of REST.md, called by `api`; returns what each answered.
fn every_endpoint(api: &Api) -> Vec<(String, Reply)> {
    let upper = artifact(artifacts::UPPERCASE);
    vec![
        ("GET /v1/overview".into(), api.get("/v1/overview")),
        ("GET /v1/modules".into(), api.get("/v1/modules")),
        (
            "POST /v1/modules".into(),
            api.upload(Some("upper"), Some("1"), &upper),
        ),
        ("GET /v1/modules/upper".into(), api.get("/v1/modules/upper")),
        (
            "GET /v1/modules/upper/content".into(),
            api.get("/v1/modules/upper/content"),
        ),
        (
            "DELETE /v1/modules/upper".into(),
            api.delete("/v1/modules/upper"),
        ),
        ("GET /v1/jobs".into(), api.get("/v1/jobs")),
        ("POST /v1/jobs".into(), api.submit("[job]\nname = \"x\"\n")),
        ("GET /v1/jobs/x".into(), api.get("/v1/jobs/x")),
        (
            "GET /v1/jobs/x/checkpoints".into(),
            api.get("/v1/jobs/x/checkpoints"),
        ),
        (
            "POST /v1/jobs/x/cancel".into(),
            api.post_empty("/v1/jobs/x/cancel"),
        ),
        ("GET /v1/jobs/x/logs".into(), api.get("/v1/jobs/x/logs")),
        ("GET /v1/taskmanagers".into(), api.get("/v1/taskmanagers")),
        ("GET /metrics".into(), api.get("/metrics")),
        ("GET /v1/nope".into(), api.get("/v1/nope")),
    ]
}

/// Sends `request` as it is on a new connection and reads the answer to
/// its end (`request` should say `Connection: close`): (status, body).
fn raw(addr: &str, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
    s.write_all(request.as_bytes()).expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read the answer to its end");
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = http_status(&text).unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A GET of `/v1/overview` naming `host`, with `token` if given.
fn get_with_host(addr: &str, host: &str, token: Option<&str>) -> (u16, String) {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    raw(
        addr,
        &format!("GET /v1/overview HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"),
    )
}

/// Runs `weir args...` (with `env`) that must exit by itself; returns the
/// exit code and stderr.
fn run_to_exit(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let stderr = dir.join(format!("{name}.stderr"));
    let mut cmd = client_command(dir);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = Reaped(cmd.spawn().expect("weir starts"));
    let status = wait_exit(&mut child.0, Duration::from_secs(60));
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(!text.contains("panicked"), "{name}: no panic:\n{text}");
    (status.code().unwrap_or(-1), text)
}

/// Without the feature the JobManager served loopback without a token:
/// now every endpoint answers 401 without the generated token (or with a
/// wrong one), the token sits in DATA_DIR/rest-token with mode 0600, is
/// never printed, and the CLI finds it through the file.
#[test]
fn rest_requires_the_generated_token_on_loopback() {
    let cluster = Cluster::start(0, 1, &[]);
    let file = cluster
        .token_file
        .clone()
        .expect("the readiness line names a token file");
    assert_eq!(
        file,
        cluster.dir.path().join("jm/rest-token"),
        "in the data dir"
    );
    let token = cluster.token.clone().expect("a token");
    assert_eq!(token.len(), 64, "32 random bytes, hex: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "token file mode {:o}", mode & 0o777);
    }
    assert!(
        !cluster.jm.seen.iter().any(|l| l.contains(&token)),
        "the token is not printed: {:?}",
        cluster.jm.seen
    );
    let log = cluster.jm.stderr_text();
    assert!(!log.contains(&token), "the token is not logged:\n{log}");
    assert!(
        log.contains(&file.display().to_string()),
        "the log says where the token is:\n{log}"
    );

    for (who, api) in [
        ("no token", Api::new(&cluster, None)),
        ("a wrong token", Api::new(&cluster, Some(&"0".repeat(64)))),
        ("an empty token", Api::new(&cluster, Some(""))),
    ] {
        for (endpoint, reply) in every_endpoint(&api) {
            assert_error(&reply, 401, &["token"], &format!("{endpoint} with {who}"));
        }
    }
    let api = Api::of(&cluster);
    let o = api.get("/v1/overview");
    assert_eq!(o.status, 200, "with the token");
    assert_eq!(o.json()["modules"], 0, "the refused upload stored nothing");

    // The CLI: no token → refused (exit 2) with a hint to the file; the
    // file given → served; the file at the default place → found alone.
    let rest = cluster.rest.clone();
    let out = client_command(cluster.dir.path())
        .args(["modules", "--jobmanager", &rest])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WEIR_REST_TOKEN_FILE"), "a hint: {stderr}");
    let out = cluster.weir(&["upload", artifacts::UPPERCASE, "--name", "upper"]);
    assert!(out.status.success(), "{}", describe(&out));
    let default = cluster.dir.path().join("xdg-data/weir/jobmanager");
    std::fs::create_dir_all(&default).unwrap();
    std::fs::copy(&file, default.join("rest-token")).unwrap();
    let out = client_command(cluster.dir.path())
        .args(["modules", "--json", "--jobmanager", &rest])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["name"], "upper", "{listed}");
}

/// `--rest-insecure-loopback` serves loopback without a token, as before;
/// it is refused off loopback and together with a token, and an empty
/// token is refused at start (jobmanager and local, option and env).
#[test]
fn rest_insecure_flag_and_refused_settings() {
    let cluster = Cluster::start(0, 1, &["--rest-insecure-loopback"]);
    assert!(cluster.token.is_none() && cluster.token_file.is_none());
    assert!(
        !cluster.dir.path().join("jm/rest-token").exists(),
        "no token generated"
    );
    let anonymous = Api::new(&cluster, None);
    let o = anonymous.get("/v1/overview");
    assert_eq!(o.status, 200, "served without a token");
    let up = anonymous.upload(Some("upper"), Some("1"), &artifact(artifacts::UPPERCASE));
    assert_eq!(up.status, 201, "uploads too");
    let out = cluster.weir(&["modules"]);
    assert!(
        out.status.success(),
        "the CLI without a token: {}",
        describe(&out)
    );

    let dir = cluster.dir.path();
    let certs = cluster.certs().display().to_string();
    let jobmanager = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["jobmanager", "--rpc", "127.0.0.1:0", "--certs", &certs]
            .map(str::to_owned)
            .to_vec();
        args.push("--data-dir".into());
        args.push(dir.join("refused-jm").display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let local = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["local", "--taskmanagers", "1", "--slots", "1"]
            .map(str::to_owned)
            .to_vec();
        args.push("--data-dir".into());
        args.push(dir.join("refused-local").display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    /// A start that must be refused: its name, arguments, environment and
    /// what its message must contain.
    type Refused<'a> = (&'a str, Vec<String>, Vec<(&'a str, &'a str)>, Vec<&'a str>);
    let cases: Vec<Refused> = vec![
        (
            "jm-empty-token",
            jobmanager(&["--rest", "127.0.0.1:0", "--rest-token", ""]),
            vec![],
            vec!["empty"],
        ),
        (
            "jm-empty-env-token",
            jobmanager(&["--rest", "127.0.0.1:0"]),
            vec![("WEIR_REST_TOKEN", "")],
            vec!["empty"],
        ),
        (
            "jm-insecure-public",
            jobmanager(&["--rest", "0.0.0.0:0", "--rest-insecure-loopback"]),
            vec![],
            vec!["--rest-insecure-loopback", "0.0.0.0"],
        ),
        (
            "jm-insecure-and-token",
            jobmanager(&[
                "--rest",
                "127.0.0.1:0",
                "--rest-insecure-loopback",
                "--rest-token",
                "t",
            ]),
            vec![],
            vec!["--rest-insecure-loopback", "--rest-token"],
        ),
        (
            "local-empty-token",
            local(&["--rest", "127.0.0.1:0", "--rest-token", " "]),
            vec![],
            vec!["empty"],
        ),
        (
            "local-insecure-public",
            local(&["--rest", "0.0.0.0:0", "--rest-insecure-loopback"]),
            vec![],
            vec!["--rest-insecure-loopback", "0.0.0.0"],
        ),
    ];
    for (name, args, env, needles) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = run_to_exit(dir, name, &args, &env);
        assert_eq!(code, 2, "{name}: exit code 2; stderr:\n{stderr}");
        for n in &needles {
            assert!(stderr.contains(n), "{name}: stderr lacks {n:?}:\n{stderr}");
        }
    }
    assert!(
        !dir.join("refused-jm/rest-token").exists(),
        "a refused start writes no token"
    );
}

/// `weir local` (finding 2: it served every interface without a token):
/// on 0.0.0.0 and on loopback it generates a token in its data dir, names
/// the file in its readiness line and answers 401 without it.
#[test]
fn weir_local_requires_a_token() {
    let dir = tempfile::tempdir().unwrap();
    for (name, rest) in [("public", "0.0.0.0:0"), ("loopback", "127.0.0.1:0")] {
        let data = dir.path().join(name);
        let args: Vec<String> = [
            "local",
            "--taskmanagers",
            "1",
            "--slots",
            "1",
            "--rest",
            rest,
            "--data-dir",
            &data.display().to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        let mut local = Daemon::spawn(dir.path(), name, &args);
        let line = local.wait_line("local cluster ready");
        let url = word_after(&line, "rest").expect("rest url");
        let port = url.rsplit(':').next().unwrap().to_owned();
        let base = format!("http://127.0.0.1:{port}");
        let file = word_after(&line, "token-file").expect("token file in the line");
        assert_eq!(
            Path::new(&file),
            data.join("jobmanager/rest-token"),
            "{name}: {line}"
        );
        let token = read_token(Path::new(&file));
        assert!(!line.contains(&token), "{name}: the token is not printed");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{name}: token file mode");
        }
        for (endpoint, reply) in every_endpoint(&Api::at(&base, None)) {
            assert_error(&reply, 401, &["token"], &format!("{name}: {endpoint}"));
        }
        let o = Api::at(&base, Some(&token)).get("/v1/overview");
        assert_eq!(o.status, 200, "{name}: with the token");
        assert_eq!(o.json()["taskmanagers"], 1, "{name}");
        local.terminate();
    }
}

/// DNS rebinding: on a loopback listener a request naming another host is
/// refused (403) even with the token; loopback names with any port are
/// served; the insecure flag does not lift the check.
#[test]
fn rest_refuses_foreign_host_headers() {
    let cluster = Cluster::start(0, 1, &[]);
    let addr = authority(&cluster.rest);
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let token = cluster.token.clone().unwrap();
    for host in [
        addr.clone(),
        format!("localhost:{port}"),
        "localhost".to_owned(),
        format!("127.0.0.1:{port}"),
        "127.0.0.1:9999".to_owned(),
        format!("[::1]:{port}"),
    ] {
        let (status, body) = get_with_host(&addr, &host, Some(&token));
        assert_eq!(status, 200, "Host {host}: {body}");
    }
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_owned(),
        format!("localhost.evil.example:{port}"),
        format!("10.0.0.1:{port}"),
    ] {
        let (status, body) = get_with_host(&addr, &host, Some(&token));
        assert_eq!(status, 403, "Host {host}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        let message = v["error"].as_str().unwrap_or_default();
        assert!(
            message.contains("Host") && message.contains("localhost"),
            "{message}"
        );
    }
    // An absolute URI naming another host is refused the same way.
    let (status, body) = raw(
        &addr,
        &format!(
            "GET http://evil.example:{port}/v1/overview HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 403, "absolute URI: {body}");

    let open = Cluster::start(0, 1, &["--rest-insecure-loopback"]);
    let addr = authority(&open.rest);
    let (status, body) = get_with_host(&addr, "evil.example", None);
    assert_eq!(status, 403, "insecure flag, foreign Host: {body}");
    let (status, body) = get_with_host(&addr, "localhost", None);
    assert_eq!(status, 200, "insecure flag, localhost: {body}");
}

/// A module upload must say `Content-Type: application/wasm` (a browser
/// cannot send that cross-origin without a preflight): other types, or
/// none, are 415 and store nothing; the CLI's upload says it.
#[test]
fn rest_uploads_only_as_application_wasm() {
    let cluster = Cluster::start(0, 1, &[]);
    let api = Api::of(&cluster);
    let upper = artifact(artifacts::UPPERCASE);
    for content_type in [
        "application/octet-stream",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = api.post("/v1/modules?name=upper&version=1", content_type, &upper);
        assert_error(
            &r,
            415,
            &["application/wasm", content_type],
            &format!("upload as {content_type}"),
        );
    }
    let token = cluster.token.clone().unwrap();
    let none = api
        .agent
        .post(api.url("/v1/modules?name=upper&version=1"))
        .header("Authorization", format!("Bearer {token}"))
        .send(&upper[..]);
    let none = read(none, "/v1/modules");
    // ureq may add a default type; either way it is not application/wasm.
    assert_error(&none, 415, &["application/wasm"], "upload without a type");
    assert_eq!(
        api.get("/v1/modules").json(),
        Value::Array(vec![]),
        "nothing stored"
    );
    let r = api.post(
        "/v1/modules?name=upper&version=1",
        "application/wasm; x=y",
        &upper,
    );
    assert_eq!(r.status, 201, "application/wasm with a parameter");
    let out = cluster.weir(&["upload", artifacts::UPPERCASE, "--name", "upper2"]);
    assert!(out.status.success(), "weir upload: {}", describe(&out));
}

/// Slow-loris: connections that send half a request header and stay open
/// do not keep others from being served, and the server closes them (by
/// its read timeout, here 1 s) — eventually, within the test's timeout. A
/// body that stalls is answered 408 and frees its upload turn.
#[test]
fn rest_closes_half_sent_requests() {
    let cluster = Cluster::start(0, 1, &["--rest-read-timeout-ms", "1000"]);
    let addr = authority(&cluster.rest);
    let token = cluster.token.clone().unwrap();
    let mut loris: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).expect("connect");
            s.write_all(b"GET /v1/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .expect("half a header");
            s
        })
        .collect();
    // Served while they hang, on a fresh connection.
    let (status, body) = get_with_host(&addr, &addr, Some(&token));
    assert_eq!(status, 200, "served next to half-sent requests: {body}");
    // Each is closed by the server: EOF (or a reset), not our read timeout.
    for (i, s) in loris.iter_mut().enumerate() {
        s.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
        let mut buf = Vec::new();
        match s.read_to_end(&mut buf) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connection {i} still open after {READY_TIMEOUT:?}: {e}"),
        }
    }

    // A stalled body: 408, naming the timeout; its upload turn comes back
    // (two stalled uploads at once, then a real one).
    let stalled: Vec<std::thread::JoinHandle<(u16, String)>> = (0..2)
        .map(|_| {
            let addr = addr.clone();
            let token = token.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).expect("connect");
                s.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
                let head = format!(
                    "POST /v1/modules?name=slow HTTP/1.1\r\nHost: {addr}\r\n\
                     Authorization: Bearer {token}\r\nContent-Type: application/wasm\r\n\
                     Content-Length: 100000\r\nConnection: close\r\n\r\n\0asm"
                );
                s.write_all(head.as_bytes()).expect("send");
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                let text = String::from_utf8_lossy(&out).into_owned();
                let status = http_status(&text).unwrap_or(0);
                (status, text)
            })
        })
        .collect();
    for t in stalled {
        let (status, text) = t.join().unwrap();
        assert_eq!(status, 408, "{text}");
        assert!(text.contains("stalled"), "{text}");
    }
    let api = Api::of(&cluster);
    let up = api.upload(Some("upper"), Some("1"), &artifact(artifacts::UPPERCASE));
    assert_eq!(up.status, 201, "an upload after the stalled ones");
}

/// Two uploads trickling a byte every 100 ms (never stalling as long as
/// the read timeout) hold both upload turns; the upload deadline answers
/// each 408 and the turns come back: a real upload after them is stored.
/// Without the deadline the tricklers would keep their turns for ever.
#[test]
fn rest_uploads_trickled_past_their_deadline_give_their_turn_back() {
    let cluster = Cluster::start(
        0,
        1,
        &[
            "--rest-read-timeout-ms",
            "1000",
            "--rest-upload-timeout-ms",
            "2000",
        ],
    );
    let addr = authority(&cluster.rest);
    let token = cluster.token.clone().unwrap();
    let tricklers: Vec<std::thread::JoinHandle<(u16, String)>> = (0..2)
        .map(|i| {
            let addr = addr.clone();
            let token = token.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).expect("connect");
                s.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                let head = format!(
                    "POST /v1/modules?name=trickle{i} HTTP/1.1\r\nHost: {addr}\r\n\
                     Authorization: Bearer {token}\r\nContent-Type: application/wasm\r\n\
                     Content-Length: 100000\r\nConnection: close\r\n\r\n"
                );
                s.write_all(head.as_bytes()).expect("send the header");
                // A byte per 100 ms (the read timeout above is the pause,
                // not a synchronization) until the server answers.
                let deadline = std::time::Instant::now() + READY_TIMEOUT;
                let mut out = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "trickle{i}: no answer within {READY_TIMEOUT:?}"
                    );
                    if s.write_all(b"x").is_err() {
                        // The server answered and closed its side.
                        let _ = s.set_read_timeout(Some(READY_TIMEOUT));
                        let _ = s.read_to_end(&mut out);
                        break;
                    }
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            out.extend_from_slice(&buf[..n]);
                            let _ = s.set_read_timeout(Some(READY_TIMEOUT));
                            let _ = s.read_to_end(&mut out);
                            break;
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                }
                let text = String::from_utf8_lossy(&out).into_owned();
                let status = http_status(&text).unwrap_or(0);
                (status, text)
            })
        })
        .collect();
    for t in tricklers {
        let (status, text) = t.join().unwrap();
        assert_eq!(status, 408, "{text}");
        assert!(text.contains("--rest-upload-timeout-ms"), "{text}");
    }
    let api = Api::of(&cluster);
    let up = api.upload(Some("upper"), Some("1"), &artifact(artifacts::UPPERCASE));
    assert_eq!(up.status, 201, "an upload after the trickled ones");
}

/// A token given in `WEIR_REST_TOKEN` is the one required; it is neither
/// written to the data dir nor printed.
#[test]
fn rest_token_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["cluster", "init"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let stderr = dir.path().join("jm.stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "jobmanager",
            "--rpc",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("jm"))
        .arg("--certs")
        .arg(&certs)
        .env("WEIR_REST_TOKEN", "from-env")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut child = Reaped(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    assert!(line.contains("token from --rest-token"), "{line}");
    assert!(!line.contains("from-env"), "{line}");
    assert!(
        !dir.path().join("jm/rest-token").exists(),
        "a given token is not written"
    );
    let base = word_after(&line, "rest").expect("rest url");
    assert_eq!(Api::at(&base, None).get("/v1/overview").status, 401);
    assert_eq!(
        Api::at(&base, Some("from-env")).get("/v1/overview").status,
        200
    );
    let _ = child.0.kill();
}

/// A client that asks for a large answer and reads none of it does not
/// hold its connection: once nothing was read for the read timeout, the
/// server gives up writing and closes it (it would otherwise hold the
/// answer, and the connection, forever).
#[test]
fn rest_closes_a_connection_whose_client_reads_nothing_of_its_answer() {
    let cluster = Cluster::start(0, 1, &["--rest-read-timeout-ms", "500"]);
    let addr = authority(&cluster.rest);
    let token = cluster.token.clone().unwrap();
    // A valid component made 32 MiB large by a custom section (id 0:
    // name, then payload): more than the sockets buffer between the two.
    let mut big = artifact(artifacts::WORD_COUNT);
    let leb = |mut n: usize, out: &mut Vec<u8>| loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    };
    let mut section = Vec::new();
    leb(7, &mut section);
    section.extend_from_slice(b"padding");
    section.resize(section.len() + (32 << 20), 0);
    big.push(0);
    leb(section.len(), &mut big);
    big.extend_from_slice(&section);
    let up = Api::of(&cluster).upload(Some("big"), Some("1"), &big);
    assert_eq!(up.status, 201, "a padded component is still one");

    let mut s = TcpStream::connect(&addr).expect("connect");
    let request = format!(
        "GET /v1/modules/big@1/content HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes()).expect("send");
    // Read nothing for six times the server's timeout: there is no signal
    // of its giving up to wait for instead.
    std::thread::sleep(Duration::from_secs(3));
    s.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the connection is still open after {READY_TIMEOUT:?}: {e}"),
    }
    assert!(
        got.len() < big.len(),
        "the whole answer ({} of {} bytes) was still being sent",
        got.len(),
        big.len()
    );
    // The server goes on serving.
    let (status, body) = get_with_host(&addr, &addr, Some(&token));
    assert_eq!(status, 200, "{body}");
}
