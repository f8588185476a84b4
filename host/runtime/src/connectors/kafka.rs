//! Kafka protocol: a source that reads topics, a sink that writes a
//! topic, both in checkpoints; the client is librdkafka (`rdkafka`).
//!
//! # Key types
//!
//! - [`KafkaSource`]: reads every partition of its topics that falls to
//!   its subtask — partition `p` of topic `t` goes to subtask
//!   `(xxh3(t) + p) % parallelism`, so a topic's partitions are spread
//!   evenly and every subtask works out its own share without talking to
//!   the others. Partitions are *assigned*, not subscribed through a
//!   consumer group: the offsets in the checkpoint are the truth, as in
//!   Flink's `KafkaSource`. With a `group_id`, the offsets of each
//!   completed checkpoint are also committed to that consumer group (for
//!   monitoring and for `start = "committed"`), as Flink does
//!   ([`commit_group_offsets`]); a failed commit is only logged.
//!   The position is the next offset of each partition
//!   (`{"kafka": [[topic, partition, offset], …]}`). Reads are
//!   `read_committed`: another job's open or aborted transactions are never
//!   seen. Record: key = message key, value = payload, timestamp = the
//!   message's timestamp (ms). `bounded = true` reads each partition until
//!   it reaches the end of its log, then finishes; an unbounded source looks for new
//!   partitions every `partition_discovery_ms` and reads them from their
//!   beginning.
//! - [`KafkaSink`]: `delivery = "exactly-once"` (with checkpoints) keeps
//!   the records of each checkpoint interval and hands them, at the
//!   barrier, to the checkpoint as its *committable* (as the NATS sink
//!   does: a write-ahead log in the checkpoint, so a restore can finish a
//!   commit that a killed TaskManager began). [`commit`] writes them, once
//!   the checkpoint completed, in **one Kafka transaction per subtask and
//!   checkpoint**, with the `transactional.id` `weir.<job>.<sink>.<subtask>`
//!   (a new producer with it fences every older one, in any process), and
//!   in the same transaction records that checkpoint as committed: an
//!   offset commit of the consumer group named like the transactional id,
//!   whose metadata lists the last committed (incarnation, checkpoint)
//!   pairs. A commit repeated after a restore reads that marker first and
//!   skips what it lists, so every record becomes visible to
//!   `read_committed` consumers exactly once. Brokers whose transactions do
//!   not complete are refused when the job is submitted and when the sink
//!   opens ([`check_transactions`]). `at-least-once` (the default) writes
//!   as records come and waits at each barrier until the broker
//!   acknowledged them; `none` does not wait.
//! - [`check`]: what a job's Kafka connectors need before it starts — the
//!   brokers reachable within [`CONNECT_TIMEOUT`], every topic present —
//!   with messages naming the vertex, the brokers and the topic.
//!
//! # Invariants
//!
//! - A source's position moves only past messages it returned in a batch.
//! - A sink's committable lists every checkpoint's records that this
//!   process has not seen committed; the records of one checkpoint are
//!   written in the order they came, in one transaction, together with the
//!   marker that says they were.
//! - Every wait on the network is bounded ([`CONNECT_TIMEOUT`],
//!   [`REQUEST_TIMEOUT`], [`OUTAGE`]): an unreachable broker is an error
//!   naming it, not a hang.
//!
//! # Must not touch
//!
//! librdkafka's calls block (up to their timeout): they run on a
//! connector's thread, or on a thread of their own ([`off_runtime`]) when
//! called from async code (the TaskManager's commit, the JobManager's
//! submit check). The job spec cannot set librdkafka properties: a
//! property can name files (`ssl.*.location`) or native plugins
//! (`plugin.library.paths`) on the TaskManager's host.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, NoCustomPartitioner, Producer, ProducerContext,
};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::wal::{self, Kept};
use super::{ConnectorError, Sink, Source};
use crate::job::{KafkaDelivery, KafkaPartitioning, KafkaSinkSpec, KafkaSourceSpec, KafkaStart};
use crate::record::Batch;

/// Longest wait for the brokers' metadata when a connector opens or a job
/// is checked: brokers that are not there are reported after this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for one request (offsets, a transaction step, a flush).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a running source or sink tolerates losing every broker: the
/// client reconnects by itself meanwhile; a longer outage fails the task,
/// and the restart strategy takes over (the job resumes from its
/// checkpoint).
pub const OUTAGE: Duration = Duration::from_secs(10);

/// How long a source waits for a first message before it returns an empty
/// batch (so the subtask can take checkpoints and notice a stop).
const POLL: Duration = Duration::from_millis(50);

/// Most payload bytes an exactly-once sink subtask keeps for the commits
/// still open: they travel in the checkpoint. Take checkpoints more often,
/// or use at-least-once, if a job writes more between two checkpoints.
pub const MAX_PENDING_BYTES: usize = super::nats::MAX_PENDING_BYTES;

/// How many (incarnation, checkpoint) pairs a commit marker keeps: more
/// than enough for the commits of one incarnation that a restore can
/// repeat (they are always older than the next incarnation's first).
const MARKER_ENTRIES: usize = 8;

fn kafka_error(message: String) -> ConnectorError {
    ConnectorError::Kafka(message)
}

/// Runs `f` on a thread of its own: librdkafka blocks, and the caller may
/// be an async task.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The settings every client of this module shares.
fn client_config(bootstrap_servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap_servers)
        .set("client.id", "weir")
        .set("socket.timeout.ms", "10000")
        .set("allow.auto.create.topics", "false")
        .set_log_level(RDKafkaLogLevel::Error);
    config
}

/// The partitions of `topic` (from the brokers' metadata), or an error
/// naming the vertex, the topic and the brokers.
fn partitions_of<C: ClientContext>(
    who: &str,
    servers: &str,
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, ConnectorError> {
    let metadata = client
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| unreachable(who, servers, timeout, e))?;
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(missing_topic(who, servers, topic));
    };
    match t.error() {
        None => {}
        Some(e) => {
            let code = RDKafkaErrorCode::from(e);
            if code == RDKafkaErrorCode::UnknownTopicOrPartition
                || code == RDKafkaErrorCode::UnknownTopic
            {
                return Err(missing_topic(who, servers, topic));
            }
            return Err(kafka_error(format!(
                "{who}: the Kafka brokers at {servers} refused metadata for topic `{topic}`: {code}"
            )));
        }
    }
    let mut partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Err(missing_topic(who, servers, topic));
    }
    partitions.sort_unstable();
    Ok(partitions)
}

fn unreachable(who: &str, servers: &str, timeout: Duration, e: KafkaError) -> ConnectorError {
    kafka_error(format!(
        "{who}: cannot reach the Kafka brokers at {servers} within {} s: {e}",
        timeout.as_secs()
    ))
}

/// Whether a `topic_pattern` source reads `topic`: its whole name matches,
/// and it is not one of the brokers' internal topics (`__…`).
fn matches_pattern(pattern: &regex::Regex, topic: &str) -> bool {
    !topic.starts_with("__") && pattern.is_match(topic)
}

fn missing_topic(who: &str, servers: &str, topic: &str) -> ConnectorError {
    kafka_error(format!(
        "{who}: topic `{topic}` not found on the Kafka brokers at {servers} (create it first)"
    ))
}

/// A Kafka source or sink, for [`check`].
#[derive(Debug, Clone, Copy)]
pub enum KafkaConnector<'a> {
    /// A `type = "kafka"` source.
    Source(&'a KafkaSourceSpec),
    /// A `type = "kafka"` sink; `transactional`: it writes in transactions
    /// (exactly-once, and the job takes checkpoints).
    Sink {
        /// Its spec.
        spec: &'a KafkaSinkSpec,
        /// Whether it will write in transactions.
        transactional: bool,
    },
}

/// Checks the Kafka sources and sinks among `connectors` (id, spec): the
/// brokers reachable, every topic present, and transactions that complete
/// for a transactional sink ([`check_transactions`]). One message per problem,
/// naming the vertex. Bounded by [`CONNECT_TIMEOUT`] per set of brokers
/// (an unreachable one is waited for once). Callable from inside an async
/// runtime.
pub fn check(connectors: &[(String, KafkaConnector<'_>)]) -> Vec<String> {
    if connectors.is_empty() {
        return Vec::new();
    }
    off_runtime(|| {
        let mut problems = Vec::new();
        let mut clients: HashMap<&str, Option<BaseConsumer>> = HashMap::new();
        for (id, connector) in connectors {
            let (who, servers, topics) = match connector {
                KafkaConnector::Source(s) => (
                    format!("source `{id}`"),
                    s.bootstrap_servers.as_str(),
                    s.topics.clone(),
                ),
                KafkaConnector::Sink { spec, .. } => (
                    format!("sink `{id}`"),
                    spec.bootstrap_servers.as_str(),
                    vec![spec.topic.clone()],
                ),
            };
            let entry = clients
                .entry(servers)
                .or_insert_with(|| client_config(servers).create::<BaseConsumer>().ok());
            let Some(client) = entry.as_ref() else {
                problems.push(format!(
                    "{who}: cannot reach the Kafka brokers at {servers} (see above)"
                ));
                continue;
            };
            let mut unreachable = false;
            if let KafkaConnector::Source(s) = connector
                && s.topic_pattern.is_some()
                && let Err(e) = client.fetch_metadata(None, CONNECT_TIMEOUT)
            {
                // A pattern names no topic that must exist: the brokers
                // must answer.
                problems.push(self::unreachable(&who, servers, CONNECT_TIMEOUT, e).to_string());
                unreachable = true;
            }
            for topic in &topics {
                if let Err(e) =
                    partitions_of(&who, servers, client.client(), topic, CONNECT_TIMEOUT)
                {
                    let text = e.to_string();
                    unreachable = text.contains("cannot reach");
                    problems.push(text);
                    if unreachable {
                        break;
                    }
                }
            }
            if unreachable {
                // Do not wait for the same brokers again.
                clients.insert(servers, None);
                continue;
            }
            if let KafkaConnector::Sink {
                spec,
                transactional: true,
            } = connector
                && let Err(e) = check_transactions(&who, spec)
            {
                problems.push(e.to_string());
            }
        }
        problems
    })
}

/// Runs one probe transaction against the sink's brokers, to its end: it
/// commits an offset of a consumer group of its own (`weir.probe.<topic>`)
/// in a transaction of its own. Brokers without complete transactions
/// (tansu 0.6, for one, has no EndTxn) are refused here, with a message
/// that says what to use instead, rather than failing every checkpoint.
pub fn check_transactions(who: &str, spec: &KafkaSinkSpec) -> Result<(), ConnectorError> {
    let servers = spec.bootstrap_servers.as_str();
    let id = format!("weir.probe.{}", spec.topic);
    let refused = |e: KafkaError| {
        kafka_error(format!(
            "{who}: the Kafka brokers at {servers} cannot complete a transaction ({e}); \
             delivery = \"exactly-once\" needs them: use delivery = \"at-least-once\" \
             with these brokers"
        ))
    };
    off_runtime(|| {
        let producer: BaseProducer = producer_config(servers)
            .set("transactional.id", &id)
            .create()
            .map_err(|e| kafka_error(format!("{who}: cannot create a Kafka producer: {e}")))?;
        let group: BaseConsumer = client_config(servers)
            .set("group.id", &id)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| kafka_error(format!("{who}: cannot create a Kafka consumer: {e}")))?;
        producer
            .init_transactions(CONNECT_TIMEOUT)
            .map_err(refused)?;
        producer.begin_transaction().map_err(refused)?;
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&spec.topic, 0, Offset::Offset(0))
            .map_err(refused)?;
        let metadata = group
            .group_metadata()
            .ok_or_else(|| kafka_error(format!("{who}: no consumer group metadata")))?;
        let outcome = producer
            .send_offsets_to_transaction(&offsets, &metadata, CONNECT_TIMEOUT)
            .and_then(|()| producer.commit_transaction(CONNECT_TIMEOUT));
        if let Err(e) = outcome {
            let _ = producer.abort_transaction(Duration::from_secs(1));
            return Err(refused(e));
        }
        Ok(())
    })
}

/// The subtask (of `parallelism`) that reads partition `partition` of
/// `topic`.
pub fn owner(topic: &str, partition: i32, parallelism: u32) -> u32 {
    let base = xxhash_rust::xxh3::xxh3_64(topic.as_bytes());
    (base.wrapping_add(partition as u64) % u64::from(parallelism.max(1))) as u32
}

// ---- the source -----------------------------------------------------------

/// One partition: (topic, partition).
type Partition = (String, i32);

/// Reads the partitions of its topics that fall to its subtask. See the
/// module docs.
pub struct KafkaSource {
    who: String,
    spec: KafkaSourceSpec,
    subtask: u32,
    parallelism: u32,
    consumer: BaseConsumer,
    /// The next offset of each partition read.
    positions: BTreeMap<Partition, i64>,
    /// Bounded: partitions read to the end of their log.
    done: std::collections::BTreeSet<Partition>,
    /// Whether `positions` has been handed to the consumer.
    assigned: bool,
    /// When partitions were last looked for.
    discovered: Instant,
    /// Since when every poll has failed, if it has.
    failing: Option<(Instant, String)>,
    /// `topic_pattern`, compiled.
    pattern: Option<regex::Regex>,
    /// Per-split watermarks: every partition read (not at its end), by
    /// [`split_id`], with its largest timestamp in the last batch.
    split_timestamps: Vec<(u64, Option<i64>)>,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("who", &self.who)
            .field("positions", &self.positions)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// Connects subtask `subtask` (of `parallelism`) of source `id` of job
    /// `job`, finds its partitions and where each begins (by `start`).
    pub fn open(
        job: &str,
        id: &str,
        subtask: u32,
        parallelism: u32,
        spec: &KafkaSourceSpec,
    ) -> Result<KafkaSource, ConnectorError> {
        let who = format!("source `{id}`");
        let servers = spec.bootstrap_servers.as_str();
        let group = spec
            .group_id
            .clone()
            .unwrap_or_else(|| format!("weir.{job}.{id}"));
        let consumer: BaseConsumer = client_config(servers)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .create()
            .map_err(|e| kafka_error(format!("{who}: cannot create a Kafka consumer: {e}")))?;
        let pattern = match &spec.topic_pattern {
            Some(p) => Some(
                crate::job::kafka::topic_pattern(p)
                    .map_err(|why| kafka_error(format!("{who}: topic_pattern {p:?} {why}")))?,
            ),
            None => None,
        };
        let mut source = KafkaSource {
            who,
            spec: spec.clone(),
            subtask,
            parallelism,
            consumer,
            positions: BTreeMap::new(),
            done: Default::default(),
            assigned: false,
            discovered: Instant::now(),
            failing: None,
            pattern,
            split_timestamps: Vec::new(),
        };
        let mine = source.my_partitions(CONNECT_TIMEOUT)?;
        let starts = source.starts(&mine, source.spec.start)?;
        source.positions = starts;
        Ok(source)
    }

    /// Every partition of the source's topics that is this subtask's.
    fn my_partitions(&self, timeout: Duration) -> Result<Vec<Partition>, ConnectorError> {
        let Some(pattern) = &self.pattern else {
            return self.partitions_of_topics(&self.spec.topics, timeout);
        };
        let metadata = self
            .consumer
            .fetch_metadata(None, timeout)
            .map_err(|e| unreachable(&self.who, &self.spec.bootstrap_servers, timeout, e))?;
        let mut mine = Vec::new();
        for t in metadata.topics() {
            if t.error().is_some() || !matches_pattern(pattern, t.name()) {
                continue;
            }
            mine.extend(
                t.partitions()
                    .iter()
                    .map(|p| p.id())
                    .filter(|&p| owner(t.name(), p, self.parallelism) == self.subtask)
                    .map(|p| (t.name().to_owned(), p)),
            );
        }
        mine.sort();
        Ok(mine)
    }

    /// Whether the source reads `topic`.
    fn reads(&self, topic: &str) -> bool {
        match &self.pattern {
            Some(pattern) => matches_pattern(pattern, topic),
            None => self.spec.topics.iter().any(|t| t == topic),
        }
    }

    /// This subtask's partitions of `topics`, each of which must exist.
    fn partitions_of_topics(
        &self,
        topics: &[String],
        timeout: Duration,
    ) -> Result<Vec<Partition>, ConnectorError> {
        let mut mine = Vec::new();
        for topic in topics {
            let partitions = partitions_of(
                &self.who,
                &self.spec.bootstrap_servers,
                self.consumer.client(),
                topic,
                timeout,
            )?;
            mine.extend(
                partitions
                    .into_iter()
                    .filter(|&p| owner(topic, p, self.parallelism) == self.subtask)
                    .map(|p| (topic.clone(), p)),
            );
        }
        Ok(mine)
    }

    fn watermarks(&self, (topic, partition): &Partition) -> Result<(i64, i64), ConnectorError> {
        self.consumer
            .fetch_watermarks(topic, *partition, REQUEST_TIMEOUT)
            .map_err(|e| {
                kafka_error(format!(
                    "{}: cannot read the offsets of {topic}/{partition} at {}: {e}",
                    self.who, self.spec.bootstrap_servers
                ))
            })
    }

    /// Where each of `partitions` begins by `start`, as concrete offsets
    /// (so that a checkpoint records where the source really began).
    fn starts(
        &self,
        partitions: &[Partition],
        start: KafkaStart,
    ) -> Result<BTreeMap<Partition, i64>, ConnectorError> {
        let mut out = BTreeMap::new();
        let failed = |what: &str, e: KafkaError| {
            kafka_error(format!(
                "{}: cannot read the {what} of its partitions at {}: {e}",
                self.who, self.spec.bootstrap_servers
            ))
        };
        match start {
            KafkaStart::Earliest | KafkaStart::Latest => {
                for p in partitions {
                    let (low, high) = self.watermarks(p)?;
                    let at = if start == KafkaStart::Earliest {
                        low
                    } else {
                        high
                    };
                    out.insert(p.clone(), at);
                }
            }
            KafkaStart::Committed | KafkaStart::Timestamp(_) => {
                let mut tpl = TopicPartitionList::new();
                for (topic, partition) in partitions {
                    match start {
                        KafkaStart::Timestamp(ms) => tpl
                            .add_partition_offset(topic, *partition, Offset::Offset(ms))
                            .map_err(|e| failed("offsets", e))?,
                        _ => {
                            tpl.add_partition(topic, *partition);
                        }
                    }
                }
                let found = if let KafkaStart::Timestamp(_) = start {
                    self.consumer
                        .offsets_for_times(tpl, REQUEST_TIMEOUT)
                        .map_err(|e| failed("offsets for the start timestamp", e))?
                } else {
                    self.consumer
                        .committed_offsets(tpl, REQUEST_TIMEOUT)
                        .map_err(|e| failed("committed offsets", e))?
                };
                for e in found.elements() {
                    let p = (e.topic().to_owned(), e.partition());
                    let at = match e.offset() {
                        Offset::Offset(n) if n >= 0 => n,
                        // No committed offset: from the beginning; no record
                        // at or after the timestamp: from the end.
                        _ => {
                            let (low, high) = self.watermarks(&p)?;
                            if let KafkaStart::Timestamp(_) = start {
                                high
                            } else {
                                low
                            }
                        }
                    };
                    out.insert(p, at);
                }
            }
        }
        Ok(out)
    }

    fn assign(&mut self) -> Result<(), ConnectorError> {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), at) in &self.positions {
            if self.done.contains(&(topic.clone(), *partition)) {
                continue;
            }
            tpl.add_partition_offset(topic, *partition, Offset::Offset(*at))
                .map_err(|e| kafka_error(format!("{}: {e}", self.who)))?;
        }
        self.consumer.assign(&tpl).map_err(|e| {
            kafka_error(format!(
                "{}: cannot assign its partitions at {}: {e}",
                self.who, self.spec.bootstrap_servers
            ))
        })?;
        self.assigned = true;
        Ok(())
    }

    /// Unbounded, every `partition_discovery_ms`: new partitions of this
    /// subtask are read from their beginning. A failed lookup is tried
    /// again at the next interval (the outage check covers brokers gone).
    fn discover(&mut self) -> Result<(), ConnectorError> {
        let every = self.spec.partition_discovery_ms;
        if self.spec.bounded
            || every == 0
            || self.discovered.elapsed() < Duration::from_millis(every)
        {
            return Ok(());
        }
        self.discovered = Instant::now();
        let Ok(mine) = self.my_partitions(Duration::from_secs(2)) else {
            return Ok(());
        };
        let new: Vec<Partition> = mine
            .into_iter()
            .filter(|p| !self.positions.contains_key(p))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        tracing::info!(source = %self.who, partitions = ?new, "new Kafka partitions found");
        let starts = self.starts(&new, KafkaStart::Earliest)?;
        self.positions.extend(starts);
        self.assign()
    }

    /// Bounded: partition number `partition` reached the end of its log
    /// (librdkafka's end-of-partition event, from the fetch's high
    /// watermark: transaction markers at the end, never delivered, do not
    /// hold it up). The event names only the number: where several topics
    /// have it, the ones whose position reached their end offset (by
    /// ListOffsets) are marked. Ends come from the fetch, not from
    /// ListOffsets, because some brokers' ListOffsets is wrong (tansu 0.6
    /// reports the last batch's base offset + 1).
    fn at_end_of(&mut self, partition: i32) {
        let candidates: Vec<Partition> = self
            .positions
            .keys()
            .filter(|p| p.1 == partition && !self.done.contains(*p))
            .cloned()
            .collect();
        if let [only] = candidates.as_slice() {
            self.done.insert(only.clone());
            return;
        }
        for p in candidates {
            if let Ok((_, high)) = self.watermarks(&p)
                && self.positions[&p] >= high
            {
                self.done.insert(p);
            }
        }
    }

    fn all_done(&self) -> bool {
        self.spec.bounded && self.positions.keys().all(|p| self.done.contains(p))
    }

    /// Counts a failed poll; fails once polls have failed for [`OUTAGE`].
    fn failed_poll(&mut self, why: String) -> Result<(), ConnectorError> {
        let since = self
            .failing
            .get_or_insert_with(|| (Instant::now(), why.clone()));
        since.1 = why;
        if since.0.elapsed() >= OUTAGE {
            return Err(kafka_error(format!(
                "{}: lost the Kafka brokers at {} for {} s: {}",
                self.who,
                self.spec.bootstrap_servers,
                OUTAGE.as_secs(),
                since.1
            )));
        }
        Ok(())
    }
}

impl Source for KafkaSource {
    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError> {
        // Bounded: the end comes only after a poll that found nothing more
        // (below): some brokers signal a partition's end early (tansu 0.6
        // under load), and a record after it takes the partition back.
        if !self.assigned {
            self.assign()?;
        }
        self.discover()?;
        let mut batch = Batch::with_capacity(max, max * 64);
        let mut maxima: HashMap<Partition, i64> = HashMap::new();
        let mut wait = POLL;
        let mut failure = None;
        while batch.len() < max {
            let Some(next) = self.consumer.poll(wait) else {
                break;
            };
            // The message borrows the consumer: it is used up inside the
            // match, and what needs all of `self` comes after it.
            let at_end = match next {
                Ok(m) => {
                    let p = (m.topic().to_owned(), m.partition());
                    self.done.remove(&p);
                    let timestamp = m.timestamp().to_millis().unwrap_or_else(super::now_millis);
                    if self.spec.envelope {
                        let headers: Vec<(&str, Option<&[u8]>)> = m
                            .headers()
                            .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
                            .unwrap_or_default();
                        let value = envelope(&Envelope {
                            topic: m.topic(),
                            partition: m.partition(),
                            offset: m.offset(),
                            timestamp: m.timestamp().to_millis(),
                            key: m.key(),
                            value: m.payload(),
                            headers: &headers,
                        });
                        batch.push(m.key(), &value, timestamp);
                    } else {
                        batch.push(m.key(), m.payload().unwrap_or_default(), timestamp);
                    }
                    match maxima.get_mut(&p) {
                        Some(most) => *most = (*most).max(timestamp),
                        None => {
                            maxima.insert(p.clone(), timestamp);
                        }
                    }
                    self.positions.insert(p, m.offset() + 1);
                    self.failing = None;
                    None
                }
                Err(KafkaError::PartitionEOF(partition)) => Some(partition),
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            };
            if let Some(partition) = at_end
                && self.spec.bounded
            {
                self.at_end_of(partition);
            }
            // After the first message, take only what is already there.
            wait = Duration::ZERO;
        }
        match failure {
            Some(why) if batch.is_empty() => self.failed_poll(why)?,
            _ => {}
        }
        self.split_timestamps = self
            .positions
            .keys()
            .filter(|p| !self.done.contains(*p))
            .map(|p| (split_id(p), maxima.get(p).copied()))
            .collect();
        if batch.is_empty() && self.all_done() {
            return Ok(None);
        }
        Ok(Some(batch))
    }

    fn position(&self) -> serde_json::Value {
        let at: Vec<serde_json::Value> = self
            .positions
            .iter()
            .map(|((t, p), o)| serde_json::json!([t, p, o]))
            .collect();
        serde_json::json!({ "kafka": at })
    }

    /// Every partition read (not at its end), for per-partition
    /// watermarks.
    fn split_timestamps(&self) -> Option<&[(u64, Option<i64>)]> {
        Some(&self.split_timestamps)
    }

    /// With a `group_id`: the offsets of [`Source::position`], to commit to
    /// that consumer group once the checkpoint completes
    /// ([`commit_group_offsets`]).
    fn committable(&self) -> Option<serde_json::Value> {
        let group = self.spec.group_id.as_ref()?;
        let offsets = self.position()["kafka"].take();
        Some(serde_json::json!({ "kafka_group_offsets": {
            "who": self.who,
            "servers": self.spec.bootstrap_servers,
            "group": group,
            "offsets": offsets,
        }}))
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        if position.is_null() {
            return Ok(());
        }
        let bad =
            || ConnectorError::Position(format!("{}: not a Kafka position: {position}", self.who));
        let parse =
            |v: Option<&serde_json::Value>| -> Result<Vec<(Partition, i64)>, ConnectorError> {
                let mut out = Vec::new();
                for e in v.and_then(|v| v.as_array()).ok_or_else(bad)? {
                    let (Some(t), Some(p), Some(o)) = (e[0].as_str(), e[1].as_i64(), e[2].as_i64())
                    else {
                        return Err(bad());
                    };
                    out.push(((t.to_owned(), i32::try_from(p).map_err(|_| bad())?), o));
                }
                Ok(out)
            };
        let at = parse(position.get("kafka"))?;
        // A partition the checkpoint does not name appeared after it: it
        // is read from its beginning.
        let unnamed: Vec<Partition> = self
            .positions
            .keys()
            .filter(|p| !at.iter().any(|(q, _)| q == *p))
            .cloned()
            .collect();
        let earliest = self.starts(&unnamed, KafkaStart::Earliest)?;
        self.positions = earliest;
        // Only this subtask's partitions: after a rescale the position is
        // every old subtask's, merged ([`merge_positions`]). A topic the
        // job no longer names is dropped.
        let mine =
            |p: &Partition| self.reads(&p.0) && owner(&p.0, p.1, self.parallelism) == self.subtask;
        let at: Vec<(Partition, i64)> = at.into_iter().filter(|(p, _)| mine(p)).collect();
        for (p, o) in at {
            self.positions.insert(p, o);
        }
        self.done.clear();
        self.assigned = false;
        Ok(())
    }
}

/// A message as an `envelope` source shows it.
struct Envelope<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    /// Its timestamp (ms), if it has one.
    timestamp: Option<i64>,
    key: Option<&'a [u8]>,
    /// Its payload; `None` for a tombstone.
    value: Option<&'a [u8]>,
    /// Its headers in order (names may repeat), each value `None` when null.
    headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// The JSON object an `envelope = true` source makes a message's value:
/// `{"topic", "partition", "offset", "timestamp", "key", "value",
/// "headers": [[name, value], …]}`. Keys, values and header values are
/// strings when they are UTF-8, `{"base64": "…"}` when not, and `null`
/// when absent; headers keep their order and repeated names.
fn envelope(m: &Envelope<'_>) -> Vec<u8> {
    fn bytes(b: Option<&[u8]>) -> serde_json::Value {
        use base64::Engine as _;
        match b {
            None => serde_json::Value::Null,
            Some(b) => match std::str::from_utf8(b) {
                Ok(s) => s.into(),
                Err(_) => serde_json::json!({
                    "base64": base64::engine::general_purpose::STANDARD.encode(b)
                }),
            },
        }
    }
    let headers: Vec<serde_json::Value> = m
        .headers
        .iter()
        .map(|(name, value)| serde_json::json!([name, bytes(*value)]))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "timestamp": m.timestamp,
        "key": bytes(m.key),
        "value": bytes(m.value),
        "headers": headers,
    }))
    .expect("a JSON value serializes")
}

/// A partition's id among a source's splits (per-split watermarks).
fn split_id((topic, partition): &Partition) -> u64 {
    xxhash_rust::xxh3::xxh3_64(topic.as_bytes()).wrapping_add(*partition as u64)
}

/// Whether `position` is a Kafka source's.
pub fn is_position(position: &serde_json::Value) -> bool {
    position.get("kafka").is_some()
}

/// The positions of every subtask of a Kafka source, merged into one: for
/// a restore at another parallelism, every new subtask seeks to it and
/// keeps the partitions it owns ([`owner`]). Each partition is in at most
/// one old subtask's position; were it in several, the furthest offset
/// wins.
pub fn merge_positions<'a>(
    positions: impl IntoIterator<Item = &'a serde_json::Value>,
) -> serde_json::Value {
    let mut at: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for position in positions {
        for e in position
            .get("kafka")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            if let (Some(t), Some(p), Some(o)) = (e[0].as_str(), e[1].as_i64(), e[2].as_i64()) {
                let slot = at.entry((t.to_owned(), p)).or_insert(o);
                *slot = (*slot).max(o);
            }
        }
    }
    let list: Vec<serde_json::Value> = at
        .into_iter()
        .map(|((t, p), o)| serde_json::json!([t, p, o]))
        .collect();
    serde_json::json!({ "kafka": list })
}

// ---- consumer-group offsets ------------------------------------------------

/// Whether `committable` is a source's offsets for its consumer group
/// ([`Source::committable`]).
pub fn is_group_offsets(committable: &serde_json::Value) -> bool {
    committable.get("kafka_group_offsets").is_some()
}

/// The consumers that commit sources' offsets, by (brokers, group), with
/// when each was last used: one connection per group, not one per
/// checkpoint.
type GroupCommitters = HashMap<(String, String), (Instant, Arc<BaseConsumer>)>;

fn group_committers() -> &'static Mutex<GroupCommitters> {
    static GROUPS: OnceLock<Mutex<GroupCommitters>> = OnceLock::new();
    GROUPS.get_or_init(Default::default)
}

/// Commits a source's offsets to its consumer group (`group_id`), as
/// Flink's `KafkaSource` does when a checkpoint completes: for monitoring
/// (consumer lag) and for `start = "committed"` of another job. The
/// checkpoint stays the truth, so a failure is logged, never fatal, and an
/// unreadable committable is ignored. Callable from inside an async
/// runtime.
pub fn commit_group_offsets(committable: &serde_json::Value) {
    let c = &committable["kafka_group_offsets"];
    let (Some(who), Some(servers), Some(group), Some(offsets)) = (
        c["who"].as_str(),
        c["servers"].as_str(),
        c["group"].as_str(),
        c["offsets"].as_array(),
    ) else {
        tracing::warn!("ignoring unreadable Kafka group offsets: {committable}");
        return;
    };
    let mut tpl = TopicPartitionList::new();
    for e in offsets {
        if let (Some(t), Some(p), Some(o)) = (e[0].as_str(), e[1].as_i64(), e[2].as_i64())
            && let Ok(p) = i32::try_from(p)
        {
            let _ = tpl.add_partition_offset(t, p, Offset::Offset(o));
        }
    }
    if tpl.count() == 0 {
        return;
    }
    let result = off_runtime(|| {
        let key = (servers.to_owned(), group.to_owned());
        let consumer = {
            let mut all = group_committers().lock().unwrap_or_else(|p| p.into_inner());
            all.retain(|_, (used, _)| used.elapsed() < COMMITTER_IDLE);
            match all.get_mut(&key) {
                Some((used, consumer)) => {
                    *used = Instant::now();
                    consumer.clone()
                }
                None => {
                    let consumer: BaseConsumer = client_config(servers)
                        .set("group.id", group)
                        .set("enable.auto.commit", "false")
                        .create()
                        .map_err(|e| e.to_string())?;
                    let consumer = Arc::new(consumer);
                    all.insert(key.clone(), (Instant::now(), consumer.clone()));
                    consumer
                }
            }
        };
        let committed = consumer.commit(&tpl, CommitMode::Sync);
        if committed.is_err() {
            // The next commit starts from a new connection.
            group_committers()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
        }
        committed.map_err(|e| e.to_string())
    });
    if let Err(e) = result {
        tracing::warn!(
            "{who}: cannot commit its offsets to consumer group `{group}` at {servers}: {e} \
             (the checkpoint keeps them; the group's offsets lag behind)"
        );
    }
}

// ---- the sink -------------------------------------------------------------

/// Remembers the first failed delivery of a producer's records.
#[derive(Default, Clone)]
struct Deliveries {
    failed: Arc<Mutex<Option<String>>>,
}

impl Deliveries {
    /// The first failed delivery since the last call, if any.
    fn take_failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| e.to_string());
        }
    }
}

type Writer = BaseProducer<Deliveries, NoCustomPartitioner>;

/// Chooses partitions for round-robin; key hash is librdkafka's murmur2.
#[derive(Debug, Clone)]
struct Partitioner {
    how: KafkaPartitioning,
    partitions: i32,
    next: i32,
}

impl Partitioner {
    fn next(&mut self) -> Option<i32> {
        match self.how {
            KafkaPartitioning::KeyHash => None,
            KafkaPartitioning::RoundRobin => {
                let p = self.next;
                self.next = (self.next + 1) % self.partitions.max(1);
                Some(p)
            }
        }
    }
}

/// Writes `value` (with `key`) through `producer`, waiting for room in its
/// queue (bounded by [`REQUEST_TIMEOUT`]).
fn send(
    who: &str,
    servers: &str,
    producer: &Writer,
    topic: &str,
    partition: Option<i32>,
    key: Option<&[u8]>,
    value: &[u8],
) -> Result<(), ConnectorError> {
    let mut record = BaseRecord::<[u8], [u8]>::to(topic).payload(value);
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(p) = partition {
        record = record.partition(p);
    }
    let started = Instant::now();
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                if started.elapsed() > REQUEST_TIMEOUT {
                    return Err(kafka_error(format!(
                        "{who}: the Kafka brokers at {servers} took no records for {} s",
                        REQUEST_TIMEOUT.as_secs()
                    )));
                }
                producer.poll(Duration::from_millis(10));
                record = r;
            }
            Err((e, _)) => {
                return Err(kafka_error(format!(
                    "{who}: writing to topic `{topic}` at {servers}: {e}"
                )));
            }
        }
    }
}

fn producer_config(servers: &str) -> ClientConfig {
    let mut config = client_config(servers);
    config
        // Kafka's Java partitioner: one key, one partition, from any client.
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .set(
            "message.timeout.ms",
            OUTAGE.as_millis().max(5000).to_string(),
        )
        .set("queue.buffering.max.messages", "100000");
    config
}

/// Writes to a topic. See the module docs.
pub struct KafkaSink {
    who: String,
    spec: KafkaSinkSpec,
    /// Exactly-once: records are kept for the commit (needs checkpoints).
    exactly_once: bool,
    /// `weir.<job>.<sink>.<subtask>`.
    transactional_id: String,
    /// Tells this sink's commits from an earlier incarnation's.
    incarnation: String,
    /// At-least-once and none: writes as records come.
    producer: Option<Writer>,
    deliveries: Deliveries,
    partitioner: Partitioner,
    /// Exactly-once: records since the last barrier.
    current: Vec<Kept>,
    current_bytes: usize,
    /// Exactly-once: pre-committed checkpoints not yet seen committed.
    pending: Vec<(u64, Vec<Kept>)>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("who", &self.who)
            .field("transactional_id", &self.transactional_id)
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Connects subtask `subtask` of sink `id` of job `job` and checks that
    /// its topic exists. `checkpoints`: the job takes them (exactly-once
    /// needs them; without, records are written as they come).
    /// `restored`: the committable of the checkpoint the job restarts
    /// from, committed now (what was committed before is skipped).
    pub fn open(
        job: &str,
        id: &str,
        subtask: u32,
        spec: &KafkaSinkSpec,
        checkpoints: bool,
        restored: Option<&serde_json::Value>,
    ) -> Result<KafkaSink, ConnectorError> {
        let who = format!("sink `{id}`");
        if let Some(c) = restored {
            commit(c)?;
        }
        let servers = spec.bootstrap_servers.as_str();
        let deliveries = Deliveries::default();
        let producer: Writer = producer_config(servers)
            .create_with_context(deliveries.clone())
            .map_err(|e| kafka_error(format!("{who}: cannot create a Kafka producer: {e}")))?;
        let partitions = partitions_of(
            &who,
            servers,
            producer.client(),
            &spec.topic,
            CONNECT_TIMEOUT,
        )?;
        let exactly_once = checkpoints && spec.delivery == KafkaDelivery::ExactlyOnce;
        if exactly_once {
            check_transactions(&who, spec)?;
        }
        Ok(KafkaSink {
            who,
            spec: spec.clone(),
            exactly_once,
            transactional_id: format!("weir.{job}.{id}.{subtask}"),
            incarnation: super::nats::incarnation(),
            producer: (!exactly_once).then_some(producer),
            deliveries,
            partitioner: Partitioner {
                how: spec.partitioning,
                partitions: partitions.len() as i32,
                next: subtask as i32 % partitions.len().max(1) as i32,
            },
            current: Vec::new(),
            current_bytes: 0,
            pending: Vec::new(),
        })
    }

    /// Waits until the broker acknowledged every record written so far;
    /// an error if one was refused.
    fn flush(&mut self) -> Result<(), ConnectorError> {
        let Some(producer) = &self.producer else {
            return Ok(());
        };
        producer.flush(REQUEST_TIMEOUT).map_err(|e| {
            kafka_error(format!(
                "{}: the Kafka brokers at {} did not acknowledge its records within {} s: {e}",
                self.who,
                self.spec.bootstrap_servers,
                REQUEST_TIMEOUT.as_secs()
            ))
        })?;
        self.delivery_failure()
    }

    fn delivery_failure(&self) -> Result<(), ConnectorError> {
        match self.deliveries.take_failure() {
            Some(e) => Err(kafka_error(format!(
                "{}: writing to topic `{}` at {}: {e}",
                self.who, self.spec.topic, self.spec.bootstrap_servers
            ))),
            None => Ok(()),
        }
    }
}

impl Sink for KafkaSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        if self.exactly_once {
            for r in batch.iter() {
                self.current_bytes += r.key.map_or(0, <[u8]>::len) + r.value.len();
                self.current
                    .push((r.key.map(<[u8]>::to_vec), r.value.to_vec()));
            }
            if self.current_bytes > MAX_PENDING_BYTES {
                return Err(too_much_pending(&self.who, self.current_bytes));
            }
            return Ok(());
        }
        let producer = self.producer.as_ref().expect("not exactly-once");
        for r in batch.iter() {
            send(
                &self.who,
                &self.spec.bootstrap_servers,
                producer,
                &self.spec.topic,
                self.partitioner.next(),
                r.key,
                r.value,
            )?;
        }
        producer.poll(Duration::ZERO);
        self.delivery_failure()
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        self.flush()
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<serde_json::Value>, ConnectorError> {
        if !self.exactly_once {
            if self.spec.delivery == KafkaDelivery::AtLeastOnce {
                self.flush()?;
            }
            return Ok(None);
        }
        let current = std::mem::take(&mut self.current);
        self.current_bytes = 0;
        if !current.is_empty() {
            self.pending.push((checkpoint, current));
        }
        let committed = committed_up_to(&self.transactional_id, &self.incarnation);
        self.pending.retain(|(c, _)| Some(*c) > committed);
        if self.pending.is_empty() {
            return Ok(None);
        }
        let bytes = wal::pending_bytes(&self.pending);
        if bytes > MAX_PENDING_BYTES {
            return Err(too_much_pending(&self.who, bytes));
        }
        let epochs = wal::encode_epochs(&self.pending);
        Ok(Some(serde_json::json!({ "kafka": {
            "who": self.who,
            "bootstrap_servers": self.spec.bootstrap_servers,
            "topic": self.spec.topic,
            "partitioning": self.spec.partitioning,
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.spec.transaction_timeout_ms,
            "incarnation": self.incarnation,
            "epochs": epochs,
        }})))
    }
}

fn too_much_pending(who: &str, bytes: usize) -> ConnectorError {
    kafka_error(format!(
        "{who}: {bytes} bytes of records wait for their checkpoint to complete, over the \
         limit of {MAX_PENDING_BYTES}; take checkpoints more often (job.checkpoints.interval_ms) \
         or use delivery = \"at-least-once\""
    ))
}

// ---- commits --------------------------------------------------------------

/// The newest checkpoint committed in this process per (transactional id,
/// incarnation): a sink drops what is committed from its next committables.
fn committed() -> &'static Mutex<HashMap<(String, String), u64>> {
    static COMMITTED: OnceLock<Mutex<HashMap<(String, String), u64>>> = OnceLock::new();
    COMMITTED.get_or_init(Default::default)
}

fn committed_up_to(transactional_id: &str, incarnation: &str) -> Option<u64> {
    committed()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(transactional_id.to_owned(), incarnation.to_owned()))
        .copied()
}

/// A transactional producer and the consumer that reads its commit marker.
struct Committer {
    /// When it last committed: idle ones are dropped (a job that ended
    /// leaves its committers behind, each with librdkafka's threads).
    used: Instant,
    producer: Writer,
    deliveries: Deliveries,
    marker: BaseConsumer,
    partitioner: Partitioner,
}

/// The committers of this process, by transactional id: one producer per
/// sink subtask, initialised once (a second initialisation would fence the
/// first).
fn committers() -> &'static Mutex<HashMap<String, Arc<Mutex<Committer>>>> {
    static COMMITTERS: OnceLock<Mutex<HashMap<String, Arc<Mutex<Committer>>>>> = OnceLock::new();
    COMMITTERS.get_or_init(Default::default)
}

/// Whether `committable` is a Kafka sink's.
pub fn is_committable(committable: &serde_json::Value) -> bool {
    committable.get("kafka").is_some()
}

/// The parts of a committable.
struct Commit {
    who: String,
    servers: String,
    topic: String,
    partitioning: KafkaPartitioning,
    transactional_id: String,
    transaction_timeout_ms: u64,
    incarnation: String,
    epochs: wal::Epochs,
}

fn parse_commit(committable: &serde_json::Value) -> Result<Commit, ConnectorError> {
    let bad = || ConnectorError::Position(format!("not a Kafka committable: {committable}"));
    let c = committable.get("kafka").ok_or_else(bad)?;
    let text = |field: &str| {
        c.get(field)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(bad)
    };
    let epochs = wal::decode_epochs(c.get("epochs")).ok_or_else(bad)?;
    Ok(Commit {
        who: text("who")?,
        servers: text("bootstrap_servers")?,
        topic: text("topic")?,
        partitioning: serde_json::from_value(c["partitioning"].clone()).map_err(|_| bad())?,
        transactional_id: text("transactional_id")?,
        transaction_timeout_ms: c["transaction_timeout_ms"].as_u64().ok_or_else(bad)?,
        incarnation: text("incarnation")?,
        epochs,
    })
}

/// The (incarnation, checkpoint) pairs a marker's metadata lists.
fn marker_entries(metadata: &str) -> Vec<(String, u64)> {
    serde_json::from_str(metadata).unwrap_or_default()
}

/// Writes the records of a Kafka sink's committable, each checkpoint's in
/// one transaction together with its commit marker, skipping checkpoints
/// the marker lists as committed. Idempotent. Callable from inside an
/// async runtime.
pub fn commit(committable: &serde_json::Value) -> Result<(), ConnectorError> {
    let c = parse_commit(committable)?;
    off_runtime(|| {
        let result = commit_epochs(&c);
        if result.is_err() {
            // A failed transaction may leave the producer fenced or in
            // error: the next commit starts from a new one.
            committers()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&c.transactional_id);
        }
        result
    })
}

/// How long a committer may go unused before it is dropped: longer than
/// any checkpoint interval, so a running sink keeps its producer.
const COMMITTER_IDLE: Duration = Duration::from_secs(600);

fn committer(c: &Commit) -> Result<Arc<Mutex<Committer>>, ConnectorError> {
    let mut all = committers().lock().unwrap_or_else(|p| p.into_inner());
    // A committer in use (locked) is not idle.
    all.retain(|_, k| {
        k.try_lock()
            .map_or(true, |k| k.used.elapsed() < COMMITTER_IDLE)
    });
    if let Some(existing) = all.get(&c.transactional_id) {
        return Ok(existing.clone());
    }
    let (who, servers) = (&c.who, &c.servers);
    let failed = |what: &str, e: KafkaError| {
        kafka_error(format!(
            "{who}: {what} at the Kafka brokers at {servers}: {e}"
        ))
    };
    let deliveries = Deliveries::default();
    let producer: Writer = producer_config(servers)
        .set("transactional.id", &c.transactional_id)
        .set(
            "transaction.timeout.ms",
            c.transaction_timeout_ms.to_string(),
        )
        .create_with_context(deliveries.clone())
        .map_err(|e| failed("cannot create a transactional producer", e))?;
    producer
        .init_transactions(REQUEST_TIMEOUT)
        .map_err(|e| failed("cannot initialise transactions", e))?;
    let marker: BaseConsumer = client_config(servers)
        .set("group.id", &c.transactional_id)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| failed("cannot create a consumer for the commit marker", e))?;
    let partitions = partitions_of(who, servers, producer.client(), &c.topic, CONNECT_TIMEOUT)?;
    let committer = Arc::new(Mutex::new(Committer {
        used: Instant::now(),
        producer,
        deliveries,
        marker,
        partitioner: Partitioner {
            how: c.partitioning,
            partitions: partitions.len() as i32,
            next: 0,
        },
    }));
    all.insert(c.transactional_id.clone(), committer.clone());
    Ok(committer)
}

fn commit_epochs(c: &Commit) -> Result<(), ConnectorError> {
    let (who, servers, topic) = (&c.who, &c.servers, &c.topic);
    let failed = |checkpoint: u64, what: &str, e: String| {
        kafka_error(format!(
            "{who}: committing checkpoint {checkpoint} to topic `{topic}` at {servers}: {what}: {e}"
        ))
    };
    let committer = committer(c)?;
    let mut guard = committer.lock().unwrap_or_else(|p| p.into_inner());
    let committer = &mut *guard;
    committer.used = Instant::now();
    // The marker: group `transactional_id`, partition 0 of the topic.
    let mut marker_tpl = TopicPartitionList::new();
    marker_tpl.add_partition(topic, 0);
    let found = committer
        .marker
        .committed_offsets(marker_tpl, REQUEST_TIMEOUT)
        .map_err(|e| failed(0, "reading the commit marker", e.to_string()))?;
    let mut entries = found
        .elements()
        .first()
        .map(|e| marker_entries(e.metadata()))
        .unwrap_or_default();
    for (checkpoint, records) in &c.epochs {
        let done = entries
            .iter()
            .any(|(inc, cp)| *inc == c.incarnation && cp >= checkpoint);
        if !done {
            let producer = &committer.producer;
            producer
                .begin_transaction()
                .map_err(|e| failed(*checkpoint, "begin", e.to_string()))?;
            for (key, value) in records {
                let partition = committer.partitioner.next();
                send(
                    who,
                    servers,
                    producer,
                    topic,
                    partition,
                    key.as_deref(),
                    value,
                )?;
            }
            entries.retain(|(inc, _)| *inc != c.incarnation);
            entries.push((c.incarnation.clone(), *checkpoint));
            if entries.len() > MARKER_ENTRIES {
                entries.drain(..entries.len() - MARKER_ENTRIES);
            }
            let mut offsets = TopicPartitionList::new();
            offsets
                .add_partition_offset(topic, 0, Offset::Offset(*checkpoint as i64))
                .map_err(|e| failed(*checkpoint, "marker", e.to_string()))?;
            if let Some(mut e) = offsets.find_partition(topic, 0) {
                e.set_metadata(serde_json::to_string(&entries).unwrap_or_default());
            }
            let group = committer
                .marker
                .group_metadata()
                .ok_or_else(|| failed(*checkpoint, "marker", "no group metadata".into()))?;
            let outcome = producer
                .send_offsets_to_transaction(&offsets, &group, REQUEST_TIMEOUT)
                .and_then(|()| producer.commit_transaction(REQUEST_TIMEOUT));
            if let Err(e) = outcome {
                let _ = producer.abort_transaction(REQUEST_TIMEOUT);
                return Err(failed(*checkpoint, "commit", e.to_string()));
            }
            if let Some(e) = committer.deliveries.take_failure() {
                // Committed without that record would be a loss: the
                // broker aborts a transaction whose records failed, and
                // commit_transaction reports it; this is the backstop.
                return Err(failed(*checkpoint, "a record was refused", e));
            }
        }
        let mut done = committed().lock().unwrap_or_else(|p| p.into_inner());
        let newest = done
            .entry((c.transactional_id.clone(), c.incarnation.clone()))
            .or_insert(*checkpoint);
        *newest = (*newest).max(*checkpoint);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_has_one_owner_and_a_topic_is_spread_evenly() {
        for parallelism in 1..=5u32 {
            let mut per_subtask = vec![0; parallelism as usize];
            for p in 0..20 {
                let o = owner("orders", p, parallelism);
                assert!(o < parallelism);
                per_subtask[o as usize] += 1;
            }
            // 20 consecutive partitions: each subtask gets 20/p, rounded.
            for n in per_subtask {
                assert!(n == 20 / parallelism || n == 20 / parallelism + 1, "{n}");
            }
        }
    }

    #[test]
    fn merged_positions_keep_every_partition_once() {
        let a = serde_json::json!({ "kafka": [["t", 0, 5], ["t", 2, 7]] });
        let b = serde_json::json!({ "kafka": [["t", 1, 3], ["u", 0, 1], ["t", 0, 4]] });
        let merged = merge_positions([&a, &b]);
        assert!(is_position(&merged));
        assert_eq!(
            merged,
            serde_json::json!({
                "kafka": [["t", 0, 5], ["t", 1, 3], ["t", 2, 7], ["u", 0, 1]],
            })
        );
        assert!(!is_position(
            &serde_json::json!({ "stream": "S", "sequence": 3 })
        ));
    }

    #[test]
    fn a_marker_keeps_its_entries_and_ignores_what_it_cannot_read() {
        let entries = vec![("a".to_owned(), 3u64), ("b".to_owned(), 7)];
        let text = serde_json::to_string(&entries).unwrap();
        assert_eq!(marker_entries(&text), entries);
        assert!(marker_entries("").is_empty());
        assert!(marker_entries("not json").is_empty());
    }

    #[test]
    fn a_committable_round_trips() {
        let c = serde_json::json!({ "kafka": {
            "who": "sink `out`",
            "bootstrap_servers": "127.0.0.1:9092",
            "topic": "out",
            "partitioning": "round-robin",
            "transactional_id": "weir.j.out.0",
            "transaction_timeout_ms": 60000,
            "incarnation": "x",
            "epochs": [{ "checkpoint": 4, "records": [[null, "v"], ["k", {"hex": "ff00"}]] }],
        }});
        assert!(is_committable(&c));
        let parsed = parse_commit(&c).unwrap();
        assert_eq!(parsed.partitioning, KafkaPartitioning::RoundRobin);
        assert_eq!(
            parsed.epochs,
            vec![(
                4,
                vec![
                    (None, b"v".to_vec()),
                    (Some(b"k".to_vec()), vec![0xff, 0x00])
                ]
            )]
        );
        assert!(parse_commit(&serde_json::json!({ "kafka": {} })).is_err());
    }

    #[test]
    fn an_envelope_keeps_every_part_of_a_message_and_bytes_that_are_not_text() {
        let headers = [
            ("trace", Some(&b"abc"[..])),
            ("bin", Some(&[0xff, 0x00, 0x41][..])),
            ("trace", None),
        ];
        let json = envelope(&Envelope {
            topic: "orders",
            partition: 3,
            offset: 41,
            timestamp: Some(1_700_000_000_123),
            key: Some(b"k\"1"),
            value: Some(b"{\"amount\": 5}"),
            headers: &headers,
        });
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "topic": "orders", "partition": 3, "offset": 41,
                "timestamp": 1_700_000_000_123i64,
                "key": "k\"1", "value": "{\"amount\": 5}",
                "headers": [["trace", "abc"], ["bin", {"base64": "/wBB"}], ["trace", null]],
            })
        );
        let tombstone = envelope(&Envelope {
            topic: "t",
            partition: 0,
            offset: 0,
            timestamp: None,
            key: None,
            value: None,
            headers: &[],
        });
        let v: serde_json::Value = serde_json::from_slice(&tombstone).unwrap();
        assert_eq!(v["key"], serde_json::Value::Null);
        assert_eq!(v["value"], serde_json::Value::Null);
        assert_eq!(v["timestamp"], serde_json::Value::Null);
        assert_eq!(v["headers"], serde_json::json!([]));
    }

    #[test]
    fn unreachable_brokers_are_an_error_naming_the_vertex_and_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let spec = KafkaSourceSpec {
            bootstrap_servers: format!("127.0.0.1:{port}"),
            topics: vec!["orders".into()],
            group_id: None,
            start: KafkaStart::Earliest,
            bounded: true,
            partition_discovery_ms: 0,
            envelope: false,
            topic_pattern: None,
        };
        let err = KafkaSource::open("j", "orders", 0, 1, &spec)
            .unwrap_err()
            .to_string();
        assert!(err.contains("source `orders`"), "{err}");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(err.contains("cannot reach"), "{err}");
    }
}
