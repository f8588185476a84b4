//! Many large module uploads at once (issue 10): the JobManager reads at
//! most two at a time (`MAX_CONCURRENT_UPLOADS` in
//! `host/jobmanager/src/rest.rs`), so its resident memory grows by about
//! two bodies, not by every body sent, and it keeps answering other
//! requests meanwhile. A real `weir jobmanager` process, its memory read
//! from `/proc/<pid>/status`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::mpsc;

use serde_json::Value;
use weir_tests::artifacts;

use crate::cluster::harness::{Cluster, READY_TIMEOUT};
use crate::rest::artifact;

/// The JobManager's `--max-module-mb` here.
const LIMIT_MB: usize = 16;
const LIMIT: usize = LIMIT_MB << 20;

/// How many uploads the JobManager should hold at once: the test's own
/// expectation, deliberately not read from the server's constant, so that
/// raising the server's cap fails this test instead of loosening it.
const UPLOAD_TURNS: usize = 2;

/// Bodies of garbage at the limit, and over it, sent beside two valid
/// operators padded to the limit.
const AT_LIMIT: usize = 12;
const OVER_LIMIT: usize = 4;

/// What the JobManager's peak resident memory may grow by while the
/// uploads below run. Each upload in its turn holds its body (up to the
/// limit) and, for a valid one, a compilation. glibc's malloc keeps a
/// freed body for reuse in the arena of the thread that allocated it, and
/// bodies are read on either of two runtime threads, so the peak can
/// reach about twice the bodies held at once: counted four times here,
/// plus a fixed allowance for the compiler's working memory, connection
/// buffers and thread stacks (144 MiB in all). Measured on a 2-core
/// machine: 62–78 MiB (78 with both cores kept busy by other work); with
/// the server's cap raised to 64, so that every body is read at once,
/// 197–264 MiB. The margin is wide on purpose: a loaded CI machine must
/// not make this test flaky, and an unbounded server still fails it.
const MAX_GROWTH: usize = UPLOAD_TURNS * LIMIT * 4 + (16 << 20);

/// `/proc/<pid>/status` field `key` (`VmRSS`, `VmHWM`) in bytes.
fn status_bytes(pid: u32, key: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status:\n{status}"));
    kib << 10
}

/// `len` bytes that start as a component does (`\0asm`, component
/// version) and continue with pseudo-random bytes: read in full, then
/// refused when compiled.
fn garbage(len: usize) -> Vec<u8> {
    let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// `n` as unsigned LEB128.
fn leb128(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `component` with a custom section appended that brings it to exactly
/// `len` bytes: still a valid operator, as large as the limit allows.
fn padded(component: &[u8], len: usize) -> Vec<u8> {
    let name = b"weir-test-padding";
    let leb_len = |n: usize| {
        let mut v = Vec::new();
        leb128(n, &mut v);
        v.len()
    };
    // Section: id 0, its size (LEB128), then the name (length, bytes) and
    // the payload. The size's own length depends on the size.
    let added = len - component.len();
    let size = (1..=5)
        .map(|k| added - 1 - k)
        .find(|&size| leb_len(size) == added - 1 - size)
        .expect("a size that fits");
    let mut out = component.to_vec();
    out.push(0);
    leb128(size, &mut out);
    leb128(name.len(), &mut out);
    out.extend_from_slice(name);
    out.resize(len, 0x5a);
    out
}

/// One upload over its own connection: everything but the body's last
/// byte, then `sent`, then (after `go`) the last byte; returns the
/// answer's status and body.
fn upload(
    addr: &str,
    token: &str,
    name: &str,
    body: &[u8],
    sent: &mpsc::Sender<String>,
    go: &mpsc::Receiver<()>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(READY_TIMEOUT)).unwrap();
    let head = format!(
        "POST /v1/modules?name={name} HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/wasm\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send the header");
    let (last, rest) = body.split_last().expect("a body");
    s.write_all(rest)
        .unwrap_or_else(|e| panic!("{name}: send the body: {e}"));
    let _ = sent.send(name.to_owned());
    go.recv().expect("the test goes on");
    s.write_all(&[*last]).expect("send the last byte");
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{name}: read the answer: {e}"));
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = crate::util::http_status(&text)
        .unwrap_or_else(|| panic!("{name}: no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Eighteen uploads at once to a JobManager with `--max-module-mb 16`:
/// two valid operators padded to the limit (stored, 201), twelve bodies
/// of garbage at the limit (read, compiled, refused: 400) and four over
/// it (413). Every body is sent but for its last byte, so every upload is
/// still open while `/v1/overview` and `/v1/modules` are asked for: both
/// are answered. Then every upload gets its answer, and the JobManager's
/// peak resident memory grew by less than [`MAX_GROWTH`]. Fails with the
/// upload cap raised to 64 (all bodies read at once).
#[test]
fn concurrent_large_uploads_keep_jobmanager_memory_bounded() {
    let cluster = Cluster::start(0, 1, &["--max-module-mb", &LIMIT_MB.to_string()]);
    let pid = cluster.jm.pid();
    let addr = cluster.rest.trim_start_matches("http://").to_owned();
    let token = cluster.token.clone().expect("a token");

    let valid = Arc::new(padded(&artifact(artifacts::UPPERCASE), LIMIT));
    assert_eq!(valid.len(), LIMIT);
    let over = Arc::new(garbage(LIMIT + (1 << 20)));
    // (name, body, expected status, what the answer says)
    let mut cases: Vec<(String, Arc<Vec<u8>>, u16, &str)> = Vec::new();
    for name in ["padded-a", "padded-b"] {
        cases.push((name.into(), valid.clone(), 201, "sha256:"));
    }
    let at_limit = Arc::new(garbage(LIMIT));
    for i in 0..AT_LIMIT {
        cases.push((
            format!("garbage-{i}"),
            at_limit.clone(),
            400,
            "not a valid component",
        ));
    }
    for i in 0..OVER_LIMIT {
        cases.push((format!("over-{i}"), over.clone(), 413, "--max-module-mb"));
    }

    // From here on the JobManager's peak is measured: reset it to now
    // (`clear_refs` 5 sets VmHWM to VmRSS).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
    let before = status_bytes(pid, "VmRSS");

    let (sent_tx, sent) = mpsc::channel();
    let mut gos = Vec::new();
    let mut clients = Vec::new();
    for (name, body, expected, needle) in cases {
        let (go_tx, go) = mpsc::channel();
        gos.push(go_tx);
        let (addr, token, sent_tx) = (addr.clone(), token.clone(), sent_tx.clone());
        let client = std::thread::spawn(move || {
            let answer = upload(&addr, &token, &name, &body, &sent_tx, &go);
            (name, expected, needle, answer)
        });
        clients.push(client);
    }
    drop(sent_tx);
    // The uploads in their turn have sent all but their last byte; the
    // others wait behind them. None is complete, yet the server answers.
    for _ in 0..UPLOAD_TURNS {
        sent.recv_timeout(READY_TIMEOUT)
            .expect("an upload is read while the others wait");
    }
    let (status, overview) = cluster.get("/v1/overview");
    assert_eq!(status, 200, "overview while uploads are open: {overview}");
    assert_eq!(overview["modules"], 0, "nothing stored yet: {overview}");
    let (status, modules) = cluster.get("/v1/modules");
    assert_eq!(status, 200, "modules while uploads are open: {modules}");
    assert_eq!(modules, Value::Array(vec![]));
    for go in gos {
        // A client that failed already says why when joined.
        let _ = go.send(());
    }

    for client in clients {
        let (name, expected, needle, (status, body)) = client.join().expect("client thread");
        assert_eq!(status, expected, "{name}: {body}");
        assert!(body.contains(needle), "{name}: {body}");
    }
    let peak = status_bytes(pid, "VmHWM");
    let growth = peak.saturating_sub(before);
    eprintln!(
        "jobmanager RSS before {} MiB, peak {} MiB: grew {} MiB (bound {} MiB)",
        before >> 20,
        peak >> 20,
        growth >> 20,
        MAX_GROWTH >> 20
    );
    assert!(
        growth < MAX_GROWTH,
        "the JobManager's peak RSS grew by {} MiB (from {} to {} MiB) for {} uploads of \
         {LIMIT_MB} MiB or more; at most {UPLOAD_TURNS} should be held at once (bound {} MiB)",
        growth >> 20,
        before >> 20,
        peak >> 20,
        2 + AT_LIMIT + OVER_LIMIT,
        MAX_GROWTH >> 20
    );

    // Served after them too, with the two valid ones stored.
    let (status, modules) = cluster.get("/v1/modules");
    assert_eq!(status, 200);
    let mut names: Vec<&str> = modules
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["padded-a", "padded-b"], "{modules}");
}
