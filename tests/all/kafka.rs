//! A real Kafka-protocol broker for tests, and a small client.
//!
//! [`KafkaBroker::start`] runs `tansu` (a broker speaking the Kafka
//! protocol, built from its crate into the tool folder by
//! `tests/setup.sh`), with its in-memory store, on a port found free, and
//! waits until it answers a metadata request; it is killed and reaped on
//! drop. [`KafkaClient`] creates topics, produces input and reads a whole
//! topic back `read_committed` or `read_uncommitted`, with `rdkafka`
//! (librdkafka: an independent client, not Weir's connector code).
//!
//! The tests of the Kafka connectors' validation (unreachable brokers,
//! missing topic, unknown option) and of `weir run` from a topic to a
//! topic are here; the exactly-once test on a cluster under TaskManager
//! kills is in `cluster/kafka.rs`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::cluster::harness::wait_for;
use crate::nats::free_port;
use crate::util::{describe, run_weir, toml_str};

/// The `tansu` binary `tests/setup.sh` installed.
fn broker_binary() -> PathBuf {
    let tools = std::env::var_os("WEIR_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/weir/tools")
        });
    let bin = tools.join("tansu-0.6.0/bin/tansu");
    assert!(
        bin.is_file(),
        "{} is missing: run tests/setup.sh (it builds the tansu broker into the tool folder)",
        bin.display()
    );
    bin
}

/// A `tansu` broker process of this test.
pub struct KafkaBroker {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The client port.
    pub port: u16,
}

impl KafkaBroker {
    /// Starts a broker on a free port; returns once it answers.
    pub fn start() -> KafkaBroker {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("tansu.log")).expect("log file");
        let child = Command::new(broker_binary())
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            // No `.env` of the caller's folder: tansu reads one if present.
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("tansu starts");
        let mut broker = KafkaBroker {
            child: Some(child),
            dir,
            port,
        };
        let servers = broker.servers();
        wait_for("the Kafka broker to answer", || {
            if let Some(status) = broker
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("tansu exited with {status}; its log:\n{}", broker.log());
            }
            let probe: BaseConsumer = client(&servers).create().ok()?;
            probe
                .fetch_metadata(None, Duration::from_secs(2))
                .ok()
                .map(drop)
        });
        broker
    }

    /// `127.0.0.1:<port>`.
    pub fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Freezes the broker (SIGSTOP): it keeps its connections and its
    /// data but answers nothing, as a broker that hangs or is cut off.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen broker go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the broker runs").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }

    /// What the broker printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tansu.log")).unwrap_or_default()
    }

    /// A client of this broker.
    pub fn client(&self) -> KafkaClient {
        KafkaClient {
            servers: self.servers(),
        }
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen broker dies of SIGKILL as well.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn client(servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", servers)
        .set("socket.timeout.ms", "10000");
    config
}

/// One message read back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Received {
    /// Its partition.
    pub partition: i32,
    /// Its key, as text.
    pub key: Option<String>,
    /// Its value, as text.
    pub value: String,
}

/// One message [`KafkaClient::produce_messages`] sends.
pub struct Outgoing<'a> {
    /// Its partition; `None`: the key's (the producer's partitioner).
    pub partition: Option<i32>,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Its timestamp, ms.
    pub timestamp: i64,
    /// Its headers in order; a `None` value is a null header.
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// A blocking client for tests.
pub struct KafkaClient {
    servers: String,
}

impl KafkaClient {
    /// A client of the brokers at `servers`.
    pub fn connect(servers: &str) -> KafkaClient {
        KafkaClient {
            servers: servers.to_owned(),
        }
    }

    /// Creates topic `name` with `partitions` partitions.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            client(&self.servers).create().expect("admin client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let results = runtime
            .block_on(admin.create_topics(
                &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .unwrap_or_else(|e| panic!("create topic {name}: {e}"));
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
        wait_for(
            &format!("topic {name} to have {partitions} partitions"),
            || {
                let probe: BaseConsumer = client(&self.servers).create().ok()?;
                let m = probe
                    .fetch_metadata(Some(name), Duration::from_secs(2))
                    .ok()?;
                let t = m.topics().iter().find(|t| t.name() == name)?;
                (t.error().is_none() && t.partitions().len() == partitions as usize).then_some(())
            },
        );
    }

    /// Produces `(key, value)` records to `topic` (partitioned by key hash,
    /// as Kafka's Java client does), each acknowledged.
    pub fn produce(&self, topic: &str, records: &[(String, String)]) {
        let producer: BaseProducer = client(&self.servers)
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        for (key, value) in records {
            let mut record = BaseRecord::to(topic)
                .key(key.as_str())
                .payload(value.as_str());
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, r)) => {
                        assert!(
                            matches!(
                                e,
                                rdkafka::error::KafkaError::MessageProduction(
                                    rdkafka::types::RDKafkaErrorCode::QueueFull
                                )
                            ),
                            "produce to {topic}: {e}"
                        );
                        producer.poll(Duration::from_millis(10));
                        record = r;
                    }
                }
            }
            producer.poll(Duration::ZERO);
        }
        producer
            .flush(Duration::from_secs(60))
            .expect("every record acknowledged");
    }

    /// The offset consumer group `group` committed for each partition of
    /// `topic` (-1: none).
    pub fn group_offsets(&self, group: &str, topic: &str) -> std::collections::BTreeMap<i32, i64> {
        let consumer: BaseConsumer = client(&self.servers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let m = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in m.topics()[0].partitions() {
            tpl.add_partition(topic, p.id());
        }
        let committed = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("committed offsets");
        committed
            .elements()
            .iter()
            .map(|e| match e.offset() {
                rdkafka::Offset::Offset(n) => (e.partition(), n),
                _ => (e.partition(), -1),
            })
            .collect()
    }

    /// Produces `messages` to `topic`, in order, with one producer, each
    /// acknowledged.
    pub fn produce_messages(&self, topic: &str, messages: &[Outgoing<'_>]) {
        use rdkafka::message::{Header, OwnedHeaders};
        let producer: BaseProducer = client(&self.servers)
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        for m in messages {
            let mut headers = OwnedHeaders::new();
            for (name, value) in m.headers {
                headers = headers.insert(Header {
                    key: name,
                    value: *value,
                });
            }
            let mut record = BaseRecord::to(topic)
                .key(m.key)
                .payload(m.value)
                .timestamp(m.timestamp)
                .headers(headers);
            if let Some(p) = m.partition {
                record = record.partition(p);
            }
            producer
                .send(record)
                .map_err(|(e, _)| e)
                .unwrap_or_else(|e| panic!("produce to {topic}: {e}"));
            producer.poll(Duration::ZERO);
        }
        producer
            .flush(Duration::from_secs(60))
            .expect("every message acknowledged");
    }

    /// Every record of `topic` a consumer sees from the beginning with
    /// `isolation.level` `isolation` (`read_committed` or
    /// `read_uncommitted`), read until every partition is at its end and
    /// at least `at_least` records came.
    pub fn read_all(&self, topic: &str, isolation: &str, at_least: usize) -> Vec<Received> {
        self.read_until(topic, isolation, |got| got.len() >= at_least)
    }

    /// Reads `topic` from the beginning until every partition is at its
    /// end and `enough` holds for what came, or 120 s passed: then it
    /// returns what it has, and the caller's assertion says what is
    /// missing. (A partition's end alone is no proof: tansu 0.6 under load
    /// signals ends before records already acknowledged.)
    pub fn read_until(
        &self,
        topic: &str,
        isolation: &str,
        enough: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let consumer: BaseConsumer = client(&self.servers)
            .set("group.id", "weir-tests-reader")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", isolation)
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("consumer");
        let m = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        let partitions: Vec<i32> = m
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .expect("topic")
            .partitions()
            .iter()
            .map(|p| p.id())
            .collect();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in &partitions {
            tpl.add_partition_offset(topic, *p, rdkafka::Offset::Beginning)
                .expect("partition");
        }
        consumer.assign(&tpl).expect("assign");
        let mut at_end = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        // `enough` is asked only when every partition said it is at its end
        // and then nothing came for a poll (or another end was signalled):
        // not after each record, so a costly check stays cheap in all.
        let mut idle = false;
        while !(idle && at_end.len() == partitions.len() && enough(&out)) {
            if std::time::Instant::now() >= deadline {
                break;
            }
            idle = false;
            match consumer.poll(Duration::from_millis(200)) {
                None => idle = true,
                Some(Ok(m)) => {
                    at_end.remove(&m.partition());
                    out.push(Received {
                        partition: m.partition(),
                        key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                        value: String::from_utf8_lossy(m.payload().unwrap_or_default())
                            .into_owned(),
                    });
                }
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    at_end.insert(p);
                    idle = true;
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
            }
        }
        out
    }
}

// ---- validation and weir run -----------------------------------------------

/// A job from Kafka topic `in` through the identity operator to topic
/// `out`, both at `servers`; `extra_source` and `extra_sink` add fields.
pub fn kafka_job(servers: &str, extra_source: &str, extra_sink: &str) -> String {
    format!(
        r#"
[job]
name = "kafka-copy"

[[source]]
id = "orders"
type = "kafka"
bootstrap_servers = {servers}
topic = "in"
{extra_source}

[[operator]]
id = "copy"
module = {identity}

[[sink]]
id = "copies"
type = "kafka"
bootstrap_servers = {servers}
topic = "out"
{extra_sink}

[[edge]]
from = "orders"
to = "copy"

[[edge]]
from = "copy"
to = "copies"
"#,
        servers = toml_str(servers),
        identity = crate::util::toml_path(std::path::Path::new(weir_tests::artifacts::IDENTITY)),
    )
}

/// `spec` (from [`kafka_job`]) with a checkpoint every 100 ms.
fn with_checkpoints(spec: String) -> String {
    let with = spec.replace(
        "[job]\nname = \"kafka-copy\"",
        "[job]\nname = \"kafka-copy\"\n\n[job.checkpoints]\ninterval_ms = 100",
    );
    assert_ne!(with, spec, "not a kafka_job spec");
    with
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

/// Nobody listens at the address: the run fails within the connect
/// timeout (it does not hang), naming the source and the address.
#[test]
fn unreachable_kafka_brokers_fail_the_run_naming_source_and_address() {
    let servers = format!("127.0.0.1:{}", free_port());
    let out = run_job(&kafka_job(&servers, "bounded = true", ""));
    assert_failed_naming(
        &out,
        &[
            "source `orders`",
            &servers,
            "cannot reach the Kafka brokers",
        ],
    );
}

/// The broker is there, the topics are not: each is named with its vertex.
#[test]
fn a_missing_topic_is_named_with_its_vertex() {
    let broker = KafkaBroker::start();
    let out = run_job(&kafka_job(&broker.servers(), "bounded = true", ""));
    assert_failed_naming(
        &out,
        &[
            "source `orders`",
            "topic `in` not found",
            "sink `copies`",
            "topic `out` not found",
        ],
    );
}

/// A misspelled option, a field of another type, a bad address or topic
/// name: refused with the field, before anything connects.
#[test]
fn bad_kafka_options_are_refused_naming_the_field() {
    let servers = format!("127.0.0.1:{}", free_port());
    let out = run_job(&kafka_job(&servers, "topicz = \"x\"", ""));
    assert_failed_naming(&out, &["unknown field `topicz`"]);
    let out = run_job(&kafka_job(&servers, "stream = \"X\"", ""));
    assert_failed_naming(
        &out,
        &[
            "source[0] \"orders\".stream",
            "not allowed for type = \"kafka\"",
        ],
    );
    let out = run_job(&kafka_job("localhost", "", "delivery = \"maybe\""));
    assert_failed_naming(&out, &["delivery"]);
    let out = run_job(&kafka_job("localhost", "", ""));
    assert_failed_naming(&out, &["bootstrap_servers", "expected host:port"]);
    let out = run_job(&kafka_job(&servers, "start = \"committed\"", ""));
    assert_failed_naming(&out, &["group_id", "start = \"committed\""]);
    let out = run_job(&kafka_job(&servers, "", "").replace("topic = \"out\"", "topic = \"a b\""));
    assert_failed_naming(&out, &["sink[0] \"copies\".topic", "expected a topic name"]);
}

/// `weir run` of a bounded Kafka source (8 partitions, parallelism 2)
/// through identity to a Kafka sink (no checkpoints: written as records
/// come): every record arrives once, with its key, in the partition its
/// key hashes to (the producer above and the sink partition alike), and
/// the job ends by itself.
#[test]
fn weir_run_copies_a_topic_to_another() {
    let broker = KafkaBroker::start();
    let client = broker.client();
    client.create_topic("in", 8);
    client.create_topic("out", 3);
    let input: Vec<(String, String)> = (0..2000)
        .map(|i| (format!("k{}", i % 37), format!("order {i}")))
        .collect();
    client.produce("in", &input);
    let out = run_job(&kafka_job(
        &broker.servers(),
        "bounded = true\nparallelism = 2",
        "",
    ));
    assert!(out.status.success(), "{}", describe(&out));
    let got = client.read_all("out", "read_committed", input.len());
    let mut pairs: Vec<(Option<String>, String)> = got
        .iter()
        .map(|r| (r.key.clone(), r.value.clone()))
        .collect();
    let mut expected: Vec<(Option<String>, String)> = input
        .iter()
        .map(|(k, v)| (Some(k.clone()), v.clone()))
        .collect();
    pairs.sort();
    expected.sort();
    assert_eq!(pairs.len(), expected.len());
    assert_eq!(pairs, expected);
    // One key, one partition.
    let mut partition_of = std::collections::HashMap::new();
    for r in &got {
        let p = partition_of.entry(r.key.clone()).or_insert(r.partition);
        assert_eq!(*p, r.partition, "key {:?} in two partitions", r.key);
    }
}

/// With checkpoints and `delivery = "at-least-once"` (the default) under
/// `weir run`: every record arrives (each barrier waited for the broker's
/// acknowledgements), round-robin over both partitions.
#[test]
fn weir_run_with_checkpoints_copies_every_record_round_robin() {
    let broker = KafkaBroker::start();
    let client = broker.client();
    client.create_topic("in", 4);
    client.create_topic("out", 2);
    let input: Vec<(String, String)> = (0..3000)
        .map(|i| (format!("k{}", i % 11), format!("v{i}")))
        .collect();
    client.produce("in", &input);
    let spec = with_checkpoints(kafka_job(
        &broker.servers(),
        "bounded = true",
        "partitioning = \"round-robin\"",
    ));
    let out = run_job(&spec);
    assert!(out.status.success(), "{}", describe(&out));
    let written = client.read_all("out", "read_committed", input.len());
    let mut got: Vec<String> = written.iter().map(|r| r.value.clone()).collect();
    let mut expected: Vec<String> = input.iter().map(|(_, v)| v.clone()).collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    for p in 0..2 {
        assert!(
            written.iter().any(|r| r.partition == p),
            "partition {p} empty"
        );
    }
}

/// `delivery = "exactly-once"` needs transactions that complete; tansu
/// 0.6 has no EndTxn. The job is refused before it reads anything, naming
/// the sink and what to use instead — not failed at its first checkpoint,
/// and not left with transactions that never end.
#[test]
fn exactly_once_is_refused_where_transactions_cannot_complete() {
    let broker = KafkaBroker::start();
    let client = broker.client();
    client.create_topic("in", 1);
    client.create_topic("out", 1);
    let spec = with_checkpoints(kafka_job(
        &broker.servers(),
        "bounded = true",
        "delivery = \"exactly-once\"",
    ));
    let out = run_job(&spec);
    assert_failed_naming(
        &out,
        &[
            "sink `copies`",
            "cannot complete a transaction",
            "delivery = \"at-least-once\"",
        ],
    );
    // Without checkpoints there are no transactions: the same sink runs.
    let out = run_job(&kafka_job(
        &broker.servers(),
        "bounded = true",
        "delivery = \"exactly-once\"",
    ));
    assert!(out.status.success(), "{}", describe(&out));
}

/// A source with a `group_id` commits its checkpointed offsets to that
/// consumer group (as Flink's does): after a bounded `weir run` with
/// checkpoints the group stands at the end of every partition, and a
/// second job with `start = "committed"` in that group reads only what
/// was produced since. Without the commits the group has no offsets and
/// the second job reads everything again.
#[test]
fn a_source_commits_its_offsets_to_its_consumer_group() {
    let broker = KafkaBroker::start();
    let client = broker.client();
    client.create_topic("in", 4);
    client.create_topic("out", 1);
    let first: Vec<(String, String)> = (0..1500)
        .map(|i| (format!("k{}", i % 13), format!("first {i}")))
        .collect();
    client.produce("in", &first);
    let spec = |start: &str| {
        with_checkpoints(kafka_job(
            &broker.servers(),
            &format!("bounded = true\nparallelism = 2\ngroup_id = \"monitor\"\n{start}"),
            "",
        ))
    };
    // Where each partition ends: the number of records read from it (no
    // transactions, so offsets run 0, 1, … without gaps). tansu 0.6's
    // high watermarks are not reliable enough to compare with.
    let ends = |total: usize| {
        let mut ends: std::collections::BTreeMap<i32, i64> = (0..4).map(|p| (p, 0)).collect();
        for r in client.read_all("in", "read_uncommitted", total) {
            *ends.entry(r.partition).or_default() += 1;
        }
        ends
    };
    let out = run_job(&spec(""));
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        client.group_offsets("monitor", "in"),
        ends(first.len()),
        "the group's offsets are not the end of each partition"
    );

    let second: Vec<(String, String)> = (0..700)
        .map(|i| (format!("k{}", i % 13), format!("second {i}")))
        .collect();
    client.produce("in", &second);
    let out = run_job(&spec("start = \"committed\""));
    assert!(out.status.success(), "{}", describe(&out));
    let all = first.len() + second.len();
    let written = client.read_all("out", "read_committed", all);
    let mut got: Vec<String> = written.iter().map(|r| r.value.clone()).collect();
    let mut expected: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|(_, v)| v.clone())
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), expected.len(), "records lost or copied twice");
    assert_eq!(got, expected);
    assert_eq!(
        client.group_offsets("monitor", "in"),
        ends(all),
        "the group's offsets after the second run"
    );
}

/// `envelope = true`: each record's value is a JSON object with the
/// message's topic, partition, offset, timestamp, key, value and headers
/// (bytes that are not UTF-8 as base64, null headers as null, repeated
/// names kept in order). Checked against what the test produced.
#[test]
fn an_envelope_source_maps_headers_and_metadata_onto_the_record() {
    use base64::Engine as _;
    let broker = KafkaBroker::start();
    let client = broker.client();
    client.create_topic("in", 1);
    client.create_topic("out", 1);
    let binary: &[u8] = &[0xff, 0x00, 0x41];
    /// Key, value, timestamp and headers of one message.
    type Sent<'a> = (String, String, i64, Vec<(&'a str, Option<&'a [u8]>)>);
    let sent: Vec<Sent> = (0..5)
        .map(|i| {
            let headers: Vec<(&str, Option<&[u8]>)> = match i {
                0 => vec![],
                1 => vec![("trace", Some(b"t-1".as_slice()))],
                2 => vec![("raw", Some(binary)), ("empty", None)],
                _ => vec![
                    ("trace", Some(b"a".as_slice())),
                    ("trace", Some(b"b".as_slice())),
                ],
            };
            (
                format!("k{i}"),
                format!("{{\"n\":{i}}}"),
                1_700_000_000_000 + i,
                headers,
            )
        })
        .collect();
    let messages: Vec<Outgoing> = sent
        .iter()
        .map(|(key, value, ts, headers)| Outgoing {
            partition: None,
            key: key.as_bytes(),
            value: value.as_bytes(),
            timestamp: *ts,
            headers,
        })
        .collect();
    client.produce_messages("in", &messages);
    let out = run_job(&kafka_job(
        &broker.servers(),
        "bounded = true\nenvelope = true",
        "",
    ));
    assert!(out.status.success(), "{}", describe(&out));
    let got = client.read_all("out", "read_committed", sent.len());
    let mut values: Vec<serde_json::Value> = got
        .iter()
        .map(|r| serde_json::from_str(&r.value).expect("an envelope is JSON"))
        .collect();
    values.sort_by_key(|v| v["offset"].as_i64());
    let expected: Vec<serde_json::Value> = sent
        .iter()
        .enumerate()
        .map(|(offset, (key, value, ts, headers))| {
            let headers: Vec<serde_json::Value> = headers
                .iter()
                .map(|(name, v)| {
                    let v = match v {
                        None => serde_json::Value::Null,
                        Some(b) => match std::str::from_utf8(b) {
                            Ok(s) => s.into(),
                            Err(_) => serde_json::json!({
                                "base64": base64::engine::general_purpose::STANDARD.encode(b)
                            }),
                        },
                    };
                    serde_json::json!([name, v])
                })
                .collect();
            serde_json::json!({
                "topic": "in", "partition": 0, "offset": offset, "timestamp": ts,
                "key": key, "value": value, "headers": headers,
            })
        })
        .collect();
    assert_eq!(values, expected);
    // The record's key is still the message's.
    let mut keys: Vec<Option<String>> = got.iter().map(|r| r.key.clone()).collect();
    keys.sort();
    let mut sent_keys: Vec<Option<String>> = sent.iter().map(|(k, ..)| Some(k.clone())).collect();
    sent_keys.sort();
    assert_eq!(keys, sent_keys);
}

/// Per-partition watermarks: partition 0 holds event times a minute ahead
/// of partition 1's, each partition in order, read by one subtask into a
/// 1 s tumbling count with no allowed disorder and a watermark after every
/// batch of 16. A watermark over the subtask's records would pass
/// partition 1's windows as soon as a batch of partition 0 came, and its
/// later records would be late; per partition it is the smaller of the
/// two, so nothing is late and every window holds exactly its records.
#[test]
fn per_partition_watermarks_keep_a_lagging_partition_on_time() {
    let broker = KafkaBroker::start();
    let client = broker.client();
    client.create_topic("in", 2);
    const AHEAD: i64 = 60_000;
    let records = |partition: i32, base: i64| -> Vec<(String, String, i64)> {
        (0..2_000)
            .map(|i| {
                let ts = base + i * 7;
                (format!("p{partition}"), format!("{{\"ts\":{ts}}}"), ts)
            })
            .collect()
    };
    let (ahead, behind) = (
        records(0, 1_700_000_000_000 + AHEAD),
        records(1, 1_700_000_000_000),
    );
    for (partition, records) in [(0, &ahead), (1, &behind)] {
        let messages: Vec<Outgoing> = records
            .iter()
            .map(|(key, value, ts)| Outgoing {
                partition: Some(partition),
                key: key.as_bytes(),
                value: value.as_bytes(),
                timestamp: *ts,
                headers: &[],
            })
            .collect();
        client.produce_messages("in", &messages);
    }
    // The windows tests' job, its file source swapped for the topic.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("input.jsonl");
    let (spec, windows, late) = crate::windows::window_job(
        dir.path(),
        &data,
        "window = { type = \"tumbling\", size_ms = 1000 }\naggregate = \"count\"",
        1,
        "rocksdb",
        0,
    );
    crate::windows::per_batch_watermarks(&spec, 16);
    let file_source = format!(
        "type = \"file\"\npath = {}\nformat = \"json-lines\"\nkey_field = \"k\"\ntimestamp_field = \"ts\"\n",
        crate::util::toml_path(&data)
    );
    let kafka_source = format!(
        "type = \"kafka\"\nbootstrap_servers = {}\ntopic = \"in\"\nbounded = true\n",
        toml_str(&broker.servers())
    );
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.contains(&file_source), "{text}");
    std::fs::write(&spec, text.replace(&file_source, &kafka_source)).unwrap();
    let out = run_weir(&dir.path().join("cache"), &["run", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let late = crate::util::read_sink(&late);
    assert!(
        late.is_empty(),
        "{} records late, e.g. {:?}",
        late.len(),
        late.first()
    );
    let mut expected = crate::windows::Windows::new();
    for (key, _, ts) in ahead.iter().chain(&behind) {
        let start = ts.div_euclid(1000) * 1000;
        *expected
            .entry((key.clone(), start, start + 1000))
            .or_default() += 1.0;
    }
    let got = crate::windows::parse_windows(&crate::util::read_sink(&windows), "count");
    assert_eq!(got, expected);
}

/// `topic_pattern`: a bounded source at parallelism 2 reads every topic
/// whose whole name matches (`orders-eu`, `orders-us`), and nothing of a
/// topic that merely contains the pattern (`old-orders-eu`) or does not
/// match (`refunds`).
#[test]
fn a_topic_pattern_reads_every_matching_topic_and_no_other() {
    let broker = KafkaBroker::start();
    let client = broker.client();
    let topics = [
        ("orders-eu", 3),
        ("orders-us", 2),
        ("old-orders-eu", 1),
        ("refunds", 1),
    ];
    for (topic, partitions) in topics {
        client.create_topic(topic, partitions);
    }
    client.create_topic("out", 2);
    let mut expected = Vec::new();
    for (topic, _) in topics {
        let records: Vec<(String, String)> = (0..300)
            .map(|i| (format!("k{}", i % 7), format!("{topic} {i}")))
            .collect();
        client.produce(topic, &records);
        if topic.starts_with("orders-") {
            expected.extend(records.into_iter().map(|(_, v)| v));
        }
    }
    let spec = kafka_job(&broker.servers(), "bounded = true\nparallelism = 2", "")
        .replace("topic = \"in\"\n", "topic_pattern = \"orders-.*\"\n");
    assert!(spec.contains("topic_pattern"), "{spec}");
    let out = run_job(&spec);
    assert!(out.status.success(), "{}", describe(&out));
    let mut got: Vec<String> = client
        .read_all("out", "read_committed", expected.len())
        .into_iter()
        .map(|r| r.value)
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}
