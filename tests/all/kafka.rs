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
    let spec = kafka_job(
        &broker.servers(),
        "bounded = true",
        "partitioning = \"round-robin\"",
    )
    .replace(
        "[job]\nname = \"kafka-copy\"",
        "[job]\nname = \"kafka-copy\"\n\n[job.checkpoints]\ninterval_ms = 100",
    );
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
    let spec = kafka_job(
        &broker.servers(),
        "bounded = true",
        "delivery = \"exactly-once\"",
    )
    .replace(
        "[job]\nname = \"kafka-copy\"",
        "[job]\nname = \"kafka-copy\"\n\n[job.checkpoints]\ninterval_ms = 100",
    );
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
