//! Kafka → identity → Kafka through Weir, beside a plain Rust
//! consumer → producer loop (librdkafka, the same client Weir uses)
//! against the same broker, in one run.
//!
//! ```text
//! cargo run --release -p weir-benches --bin kafka -- --records 200000
//! ```
//!
//! Starts the tansu broker of the tool folder (`tests/setup.sh` builds it)
//! on a free port with its in-memory store, fills topic `in` with
//! `--records` records of `--value-bytes` bytes over `--partitions`
//! partitions, then copies `in` to a fresh topic per case and prints
//! records/s for each, with the ratio to the plain loop: the broker, not
//! Weir, should be the limit. (No exactly-once case: tansu 0.6 cannot
//! complete a transaction, so such a sink is refused.) Every case's output is counted (by offsets)
//! and must hold every record.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

#[derive(Parser)]
#[command(about = "Kafka → identity → Kafka: Weir beside a plain consumer/producer loop")]
struct Args {
    /// Records in the input topic.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Partitions of every topic.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Parallelism of the Weir job.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
    /// Checkpoint interval of the case with checkpoints, in ms.
    #[arg(long, default_value_t = 1000)]
    checkpoint_ms: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let broker = Broker::start()?;
    let servers = broker.servers.clone();
    create_topic(&servers, "in", args.partitions)?;
    let started = Instant::now();
    produce_input(&servers, args.records, args.value_bytes)?;
    let produce = started.elapsed();
    let mut rows = vec![("plain producer (fills `in`)".to_owned(), produce)];

    create_topic(&servers, "out-plain", args.partitions)?;
    let started = Instant::now();
    plain_copy(&servers, args.partitions, args.records)?;
    let plain = started.elapsed();
    check_count(&servers, "out-plain", args.records)?;
    rows.push(("plain consumer → producer loop".to_owned(), plain));

    for (name, topic, sink, checkpoints) in [
        (
            "weir: kafka → identity → kafka, delivery none",
            "out-none",
            "delivery = \"none\"",
            String::new(),
        ),
        (
            "weir: kafka → identity → kafka, at-least-once",
            "out-alo",
            "delivery = \"at-least-once\"",
            String::new(),
        ),
        (
            "weir: kafka → identity → kafka, at-least-once, checkpoints",
            "out-alo-chk",
            "delivery = \"at-least-once\"",
            format!("[job.checkpoints]\ninterval_ms = {}\n", args.checkpoint_ms),
        ),
    ] {
        create_topic(&servers, topic, args.partitions)?;
        let spec = format!(
            r#"
[job]
name = "kafka-bench"
parallelism = {p}
{checkpoints}
[[source]]
id = "in"
type = "kafka"
bootstrap_servers = "{servers}"
topic = "in"
bounded = true

[[operator]]
id = "copy"
module = "{identity}"

[[sink]]
id = "out"
type = "kafka"
bootstrap_servers = "{servers}"
topic = "{topic}"
{sink}

[[edge]]
from = "in"
to = "copy"

[[edge]]
from = "copy"
to = "out"
"#,
            p = args.parallelism,
            identity = weir_tests::artifacts::IDENTITY,
        );
        match weir_benches::embedded::run_spec(&spec) {
            Ok((_, elapsed)) => {
                check_count(&servers, topic, args.records)?;
                rows.push((format!("{name}, p={}", args.parallelism), elapsed));
            }
            Err(e) => println!("{name}: failed: {e:#}"),
        }
    }

    println!(
        "\nKafka copy: {} records of {} bytes, {} partitions, tansu in memory, one machine",
        args.records, args.value_bytes, args.partitions
    );
    println!("| case | seconds | records/s | vs plain loop |");
    println!("|---|---:|---:|---:|");
    let plain_rate = args.records as f64 / plain.as_secs_f64();
    for (name, d) in &rows {
        let rate = args.records as f64 / d.as_secs_f64();
        println!(
            "| {name} | {:.2} | {:.0} | {:.2} |",
            d.as_secs_f64(),
            rate,
            rate / plain_rate
        );
    }
    Ok(())
}

/// The tansu broker, killed on drop.
struct Broker {
    child: Child,
    servers: String,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> anyhow::Result<Broker> {
        let tools = std::env::var_os("WEIR_TOOLS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/weir/tools")
            });
        let bin = tools.join("tansu-0.6.0/bin/tansu");
        if !bin.is_file() {
            bail!("{} is missing: run tests/setup.sh first", bin.display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let dir = tempfile::tempdir()?;
        let child = Command::new(bin)
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start tansu")?;
        let servers = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let probe: BaseConsumer = config(&servers).create()?;
            if probe.fetch_metadata(None, Duration::from_secs(2)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!("tansu did not answer within 60 s");
            }
        }
        Ok(Broker {
            child,
            servers,
            _dir: dir,
        })
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(servers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", servers);
    c
}

fn create_topic(servers: &str, name: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config(servers).create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for r in rt.block_on(admin.create_topics(
        &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))? {
        r.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    Ok(())
}

fn producer(servers: &str) -> anyhow::Result<BaseProducer> {
    Ok(config(servers)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "100000")
        .create()?)
}

fn send(producer: &BaseProducer, topic: &str, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
    let mut record = BaseRecord::to(topic).key(key).payload(value);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                producer.poll(Duration::from_millis(5));
                record = r;
            }
            Err((e, _)) => bail!("produce to {topic}: {e}"),
        }
    }
}

fn produce_input(servers: &str, records: u64, value_bytes: usize) -> anyhow::Result<()> {
    let producer = producer(servers)?;
    let mut value = vec![b'x'; value_bytes];
    for i in 0..records {
        let key = format!("k{}", i % 1000);
        let digits = i.to_string();
        let n = digits.len().min(value.len());
        value[..n].copy_from_slice(&digits.as_bytes()[..n]);
        send(&producer, "in", key.as_bytes(), &value)?;
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(120))?;
    Ok(())
}

/// The floor: read `in` from the beginning, write each record to
/// `out-plain`, until `records` were copied and acknowledged.
fn plain_copy(servers: &str, partitions: i32, records: u64) -> anyhow::Result<()> {
    let consumer: BaseConsumer = config(servers)
        .set("group.id", "bench-plain")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset("in", p, rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let producer = producer(servers)?;
    let mut copied = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while copied < records {
        if Instant::now() > deadline {
            bail!("plain copy: {copied} of {records} in 600 s");
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                send(
                    &producer,
                    "out-plain",
                    m.key().unwrap_or_default(),
                    m.payload().unwrap_or_default(),
                )?;
                producer.poll(Duration::ZERO);
                copied += 1;
            }
            Some(Err(e)) => bail!("plain copy: {e}"),
        }
    }
    producer.flush(Duration::from_secs(120))?;
    Ok(())
}

/// Checks that a `read_committed` reader of `topic` sees exactly
/// `records` records (untimed).
fn check_count(servers: &str, topic: &str, records: u64) -> anyhow::Result<()> {
    let consumer: BaseConsumer = config(servers)
        .set("group.id", "bench-check")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()?;
    let m = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let t = m
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .context("topic")?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in t.partitions() {
        tpl.add_partition_offset(topic, p.id(), rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut at_end = std::collections::BTreeSet::new();
    let mut seen = 0u64;
    let deadline = Instant::now() + Duration::from_secs(300);
    while at_end.len() < t.partitions().len() {
        if Instant::now() > deadline {
            bail!("reading {topic} back took over 300 s");
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                seen += 1;
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => bail!("reading {topic}: {e}"),
        }
    }
    if seen != records {
        bail!("{topic}: a read_committed reader sees {seen} records, expected {records}");
    }
    Ok(())
}
