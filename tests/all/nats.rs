//! A real `nats-server` with JetStream for tests, and a small client.
//!
//! [`NatsServer::start`] runs Debian's `nats-server` (installed by
//! `tests/setup.sh`) with JetStream (`-js`) and its store in a temporary
//! directory, on a port found free, and waits until its log says it is
//! ready; [`NatsServer::stop`] and [`NatsServer::restart`] (same port, same
//! store) let a test take the broker away mid-job; the process is killed
//! and reaped on drop. [`NatsClient`] creates streams, publishes input and
//! reads a whole stream back, with `async-nats` on a runtime of its own
//! (the tests are synchronous). Other tests reuse both.
//!
//! The tests of the NATS connectors' validation (unreachable server,
//! missing stream, unknown option) are at the bottom; the exactly-once
//! tests on a cluster are in `cluster/nats.rs`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;

use crate::cluster::harness::wait_for;

/// `nats-server` from `PATH`, or where Debian puts it (`/usr/sbin` is not
/// on every user's `PATH`).
fn server_binary() -> PathBuf {
    let in_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file());
    in_path.expect(
        "nats-server is not installed: run tests/setup.sh (it installs Debian's nats-server)",
    )
}

/// A port nobody listens on now (bound to port 0, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A `nats-server -js` process of this test.
pub struct NatsServer {
    child: Option<Child>,
    /// Holds the JetStream store and the logs.
    pub dir: tempfile::TempDir,
    /// The client port.
    pub port: u16,
    starts: u32,
}

impl NatsServer {
    /// Starts a server with JetStream on a free port; returns once it is ready.
    pub fn start() -> NatsServer {
        let mut server = NatsServer {
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            port: free_port(),
            starts: 0,
        };
        server.run();
        server
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn run(&mut self) {
        self.starts += 1;
        let log = self.dir.path().join(format!("nats-{}.log", self.starts));
        let child = Command::new(server_binary())
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string()])
            .arg("-sd")
            .arg(self.store())
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        wait_for("nats-server to be ready", || {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "nats-server exited with {status}; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains("Server is ready").then_some(())
        });
    }

    /// Kills the server (SIGKILL: the broker disappears, no goodbye).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// A client of this server.
    pub fn client(&self) -> NatsClient {
        NatsClient::connect(&self.url())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One message read back: (subject, key header if asked for, payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Its subject.
    pub subject: String,
    /// The value of the header asked for.
    pub key: Option<String>,
    /// Its payload, as text.
    pub payload: String,
}

/// A blocking client for tests.
pub struct NatsClient {
    runtime: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
}

impl NatsClient {
    /// Connects to `url`.
    pub fn connect(url: &str) -> NatsClient {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        // The context spawns a task: it is made on the runtime.
        let js = runtime.block_on(async {
            let client = async_nats::connect(url)
                .await
                .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
            async_nats::jetstream::new(client)
        });
        NatsClient { runtime, js }
    }

    /// Creates stream `name` capturing `subjects`, with the default
    /// duplicate window (2 minutes).
    pub fn create_stream(&self, name: &str, subjects: &[&str]) {
        let config = async_nats::jetstream::stream::Config {
            name: name.to_owned(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        self.runtime
            .block_on(self.js.create_stream(config))
            .unwrap_or_else(|e| panic!("create stream {name}: {e}"));
    }

    /// Publishes `(subject, payload)` pairs, each acknowledged by JetStream.
    pub fn publish(&self, messages: &[(String, String)]) {
        self.runtime.block_on(async {
            let mut acks = Vec::new();
            for (subject, payload) in messages {
                let ack = self
                    .js
                    .publish(subject.clone(), payload.clone().into())
                    .await
                    .expect("publish");
                acks.push(ack);
            }
            for ack in acks {
                ack.await.expect("publish acknowledged");
            }
        });
    }

    /// How many messages stream `name` holds.
    pub fn count(&self, name: &str) -> u64 {
        self.runtime.block_on(async {
            let mut stream = self.js.get_stream(name).await.expect("stream exists");
            stream.info().await.expect("stream info").state.messages
        })
    }

    /// Every message of stream `name`, in order; `key_header`'s value with each.
    pub fn read_all(&self, name: &str, key_header: &str) -> Vec<Received> {
        self.runtime.block_on(async {
            let mut stream = self.js.get_stream(name).await.expect("stream exists");
            let last = stream
                .info()
                .await
                .expect("stream info")
                .state
                .last_sequence;
            let mut out = Vec::new();
            if last == 0 {
                return out;
            }
            let consumer = stream
                .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
                .await
                .expect("consumer");
            let mut messages = consumer.messages().await.expect("messages");
            loop {
                let m = tokio::time::timeout(Duration::from_secs(30), messages.next())
                    .await
                    .expect("the rest of the stream within 30 s")
                    .expect("messages go on")
                    .expect("a message");
                let seq = m.info().expect("JetStream metadata").stream_sequence;
                out.push(Received {
                    subject: m.subject.to_string(),
                    key: m
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(key_header))
                        .map(|v| v.as_str().to_owned()),
                    payload: String::from_utf8_lossy(&m.payload).into_owned(),
                });
                if seq >= last {
                    return out;
                }
            }
        })
    }
}

// ---- validation ------------------------------------------------------------

use crate::util::{describe, run_weir, toml_str};

/// A job from a NATS source to a NATS sink, both at `url`.
pub fn nats_job(source_url: &str, sink_url: &str, extra_source: &str) -> String {
    format!(
        r#"
[job]
name = "nats-check"

[[source]]
id = "orders"
type = "nats"
url = {source_url}
stream = "ORDERS"
{extra_source}

[[sink]]
id = "copies"
type = "nats"
url = {sink_url}
subject = "copies.all"

[[edge]]
from = "orders"
to = "copies"
"#,
        source_url = toml_str(source_url),
        sink_url = toml_str(sink_url),
    )
}

fn run_job(spec: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, spec).unwrap();
    run_weir(&dir.path().join("cache"), &["run", path.to_str().unwrap()])
}

fn assert_failed_naming(out: &std::process::Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", describe(out));
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}\n{}", describe(out));
    }
    assert!(!stderr.contains("panicked"), "{}", describe(out));
}

/// Nobody listens at the address: the run fails (it does not hang),
/// naming the source and the address.
#[test]
fn an_unreachable_nats_server_fails_the_run_naming_source_and_address() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let out = run_job(&nats_job(&url, &url, ""));
    assert_failed_naming(
        &out,
        &["source `orders`", &url, "cannot reach the NATS server"],
    );
}

/// The server is there, the streams are not: the source's stream and the
/// sink's subject are named with their vertex.
#[test]
fn a_missing_stream_is_named_with_its_source() {
    let server = NatsServer::start();
    let out = run_job(&nats_job(&server.url(), &server.url(), ""));
    assert_failed_naming(
        &out,
        &[
            "source `orders`",
            "stream `ORDERS` not found",
            "sink `copies`",
            "copies.all",
        ],
    );
}

/// A misspelled option is refused with its line, before anything connects.
#[test]
fn an_unknown_nats_option_is_refused() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let out = run_job(&nats_job(&url, &url, "strem = \"X\""));
    assert_failed_naming(&out, &["unknown field `strem`"]);
    // A file-source field on a NATS source is named too.
    let out = run_job(&nats_job(&url, &url, "path = \"/tmp/x\""));
    assert_failed_naming(
        &out,
        &[
            "source[0] \"orders\".path",
            "not allowed for type = \"nats\"",
        ],
    );
}

/// A NATS source → identity → NATS sink with `weir run` (no checkpoints:
/// the sink publishes as records come): every message arrives once, with
/// its key carried from a subject token to a header.
#[test]
fn weir_run_copies_a_stream_to_another() {
    let server = NatsServer::start();
    let client = server.client();
    client.create_stream("ORDERS", &["orders.>"]);
    client.create_stream("COPIES", &["copies.>"]);
    let input: Vec<(String, String)> = (0..500)
        .map(|i| (format!("orders.k{}", i % 7), format!("order {i}")))
        .collect();
    client.publish(&input);
    let job = nats_job(&server.url(), &server.url(), "key_subject_token = 1").replace(
        "subject = \"copies.all\"",
        "subject = \"copies.all\"\nkey_header = \"Weir-Key\"",
    );
    // An unbounded source: run in the background until the copies are there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, job).unwrap();
    let mut child = crate::util::weir(&dir.path().join("cache"))
        .args(["run", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let guard = Kill(&mut child);
    wait_for("500 copies", || {
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!("weir run exited early with {status}");
        }
        (client.count("COPIES") >= 500).then_some(())
    });
    drop(guard);
    let got = client.read_all("COPIES", "Weir-Key");
    let mut got: Vec<(Option<String>, String)> =
        got.into_iter().map(|r| (r.key, r.payload)).collect();
    let mut expected: Vec<(Option<String>, String)> = input
        .iter()
        .map(|(subject, payload)| (Some(subject["orders.".len()..].to_owned()), payload.clone()))
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}
