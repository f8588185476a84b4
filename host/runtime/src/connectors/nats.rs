//! NATS JetStream: a source that reads a stream, a sink that publishes to
//! a subject, both in checkpoints.
//!
//! # Key types
//!
//! - [`NatsSource`]: reads one stream (optionally one subject filter of
//!   it) through an *ordered consumer* — ephemeral, no acks, the client
//!   recreates it after a gap or a reconnect — from the position in the
//!   checkpoint: the stream sequence of the last message read
//!   (`{"stream": …, "sequence": n}`). Checkpoints are the truth, as in
//!   Flink's Kafka source: after a restore the source asks the server for
//!   `n + 1` onwards, whatever any server-side consumer remembers. Record:
//!   value = payload, key = a header (`key_header`) or a subject token
//!   (`key_subject_token`), timestamp = the time JetStream stored the
//!   message (ms). Parallelism 1: one stream is read in order by one
//!   subtask (a subject filter per subtask would make parallelism depend on
//!   how the user names subjects; spread the records with a `rebalance` or
//!   `hash` edge instead).
//! - [`NatsSink`]: `delivery = "exactly-once"` (with checkpoints) keeps
//!   the records of each checkpoint interval and hands them, at the
//!   barrier, to the checkpoint as its *committable* (a write-ahead log in
//!   the checkpoint, Flink's `GenericWriteAheadSink`); [`commit`] publishes
//!   them once the checkpoint completed, each with the header `Nats-Msg-Id`
//!   = `<prefix>.<checkpoint>.<n>`, where the prefix names the job, the
//!   sink, the subtask and this incarnation of the sink. A commit repeated
//!   after a restore publishes the same ids, which the stream drops as
//!   duplicates within its duplicate window (`duplicate_window`, default 2
//!   minutes). `at-least-once` publishes as records come and waits for the
//!   server's acknowledgements at each barrier.
//! - [`check`]: what a job's NATS connectors need before it starts — the
//!   server reachable within [`CONNECT_TIMEOUT`], the source's stream and a
//!   stream capturing the sink's subject present — with messages naming
//!   the vertex, the address and the stream or subject.
//!
//! # Invariants
//!
//! - A source's position moves only past messages it returned in a batch.
//! - A sink's committable lists every checkpoint's records that this
//!   process has not seen committed (an aborted checkpoint's records are
//!   committed with the next completed one, as the file sink does); the
//!   records of one checkpoint are published in the order written, with
//!   ids that do not depend on when or how often they are published.
//! - Every wait on the network is bounded ([`CONNECT_TIMEOUT`],
//!   [`REQUEST_TIMEOUT`]): an unreachable server is an error, not a hang.
//!
//! # Must not touch
//!
//! The client is async; connectors are blocking code on a subtask's
//! thread. Every call goes through one small runtime of this module
//! ([`block_on`] on connector threads, [`block_on_elsewhere`] from code
//! that may already run inside an async runtime: the TaskManager's commit,
//! the JobManager's submit check). Nothing here knows channels, Wasm or
//! checkpoints beyond the committable it returns.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::DeliverPolicy, consumer::pull::OrderedConfig};
use futures_util::StreamExt;

use super::wal::{self, Kept};
use super::{ConnectorError, Sink, Source};
use crate::job::{NatsDelivery, NatsSinkSpec, NatsSourceSpec, NatsStart};
use crate::record::Batch;

/// Longest wait to connect to a server: a server that is not there is
/// reported after this, not waited for.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest wait for one JetStream request (stream lookup, consumer
/// creation, a publish acknowledgement).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a source waits for a first message before it returns an empty
/// batch (so the subtask can take checkpoints and notice a stop).
const POLL: Duration = Duration::from_millis(50);

/// Most payload bytes an exactly-once sink subtask keeps for the commits
/// still open: they travel in the checkpoint (16 MiB control frames, JSON
/// text). Take checkpoints more often, or use at-least-once, if a job
/// writes more between two checkpoints.
pub const MAX_PENDING_BYTES: usize = 4 << 20;

/// The runtime every NATS client of this process runs on: one worker is
/// plenty for a few connections, and it keeps the client's background
/// tasks off the daemons' own runtimes.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-nats")
            .enable_all()
            .build()
            .expect("the NATS connectors' runtime starts")
    })
}

/// Runs `f` on the NATS runtime from a connector's thread (a plain or a
/// blocking-pool thread, never an async task).
fn block_on<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// Runs `f` on the NATS runtime from a thread of its own: safe to call
/// from inside any async runtime (where [`block_on`] would panic).
fn block_on_elsewhere<F>(f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| runtime().block_on(f))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn nats_error(message: String) -> ConnectorError {
    ConnectorError::Nats(message)
}

/// Connects to `url` within [`CONNECT_TIMEOUT`]; `who` (`source `x``)
/// names the vertex in the error.
async fn connect(who: &str, url: &str) -> Result<async_nats::Client, ConnectorError> {
    let unreachable = |why: String| {
        nats_error(format!(
            "{who}: cannot reach the NATS server at {url} within {} s: {why}",
            CONNECT_TIMEOUT.as_secs()
        ))
    };
    let options = async_nats::ConnectOptions::new()
        // Only the servers the spec names (and `--allow-address` allowed),
        // not others a server advertises for its cluster.
        .ignore_discovered_servers()
        .connection_timeout(CONNECT_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .name("weir");
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect(url)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable("timed out".to_owned())),
    }
}

fn context(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(REQUEST_TIMEOUT)
        .build(client)
}

/// The stream `name`, or an error naming it, the vertex and the server.
async fn get_stream(
    who: &str,
    url: &str,
    js: &jetstream::Context,
    name: &str,
) -> Result<jetstream::stream::Stream, ConnectorError> {
    use async_nats::jetstream::context::GetStreamErrorKind;
    js.get_stream(name).await.map_err(|e| {
        let not_found = matches!(e.kind(), GetStreamErrorKind::JetStream(j)
            if j.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND);
        if not_found {
            nats_error(format!(
                "{who}: stream `{name}` not found on the NATS server at {url} \
                 (create it first, e.g. `nats stream add {name} --subjects …`)"
            ))
        } else {
            nats_error(format!(
                "{who}: cannot look up stream `{name}` on the NATS server at {url}: {e} \
                 (is JetStream enabled? nats-server -js)"
            ))
        }
    })
}

/// The stream that captures `subject`, or an error naming the subject.
async fn stream_for_subject(
    who: &str,
    url: &str,
    js: &jetstream::Context,
    subject: &str,
) -> Result<String, ConnectorError> {
    js.stream_by_subject(subject).await.map_err(|e| {
        nats_error(format!(
            "{who}: no JetStream stream captures subject `{subject}` on the NATS server at {url} \
             ({e}); create one whose subjects include it: the sink publishes to JetStream, \
             which de-duplicates by message id"
        ))
    })
}

/// Checks the NATS sources and sinks among `vertices` (id, role, spec):
/// each server reachable, each source's stream present, a stream capturing
/// each sink's subject. One message per problem, naming the vertex.
/// Bounded: [`CONNECT_TIMEOUT`] and [`REQUEST_TIMEOUT`] per server and
/// lookup. Callable from inside an async runtime.
pub fn check(connectors: &[(String, NatsConnector<'_>)]) -> Vec<String> {
    if connectors.is_empty() {
        return Vec::new();
    }
    block_on_elsewhere(async {
        let mut problems = Vec::new();
        let mut clients: HashMap<String, Option<jetstream::Context>> = HashMap::new();
        for (id, connector) in connectors {
            let (who, url) = match connector {
                NatsConnector::Source(s) => (format!("source `{id}`"), &s.url),
                NatsConnector::Sink(s) => (format!("sink `{id}`"), &s.url),
            };
            let js = match clients.get(url.as_str()) {
                Some(Some(js)) => js.clone(),
                // Already reported for an earlier vertex: report again,
                // naming this one, without waiting again.
                Some(None) => {
                    problems.push(format!(
                        "{who}: cannot reach the NATS server at {url} (see above)"
                    ));
                    continue;
                }
                None => match connect(&who, url).await {
                    Ok(client) => {
                        let js = context(client);
                        clients.insert(url.clone(), Some(js.clone()));
                        js
                    }
                    Err(e) => {
                        clients.insert(url.clone(), None);
                        problems.push(e.to_string());
                        continue;
                    }
                },
            };
            let found = match connector {
                NatsConnector::Source(s) => get_stream(&who, url, &js, &s.stream).await.map(drop),
                NatsConnector::Sink(s) => stream_for_subject(&who, url, &js, &s.subject)
                    .await
                    .map(drop),
            };
            if let Err(e) = found {
                problems.push(e.to_string());
            }
        }
        problems
    })
}

/// A NATS source or sink, for [`check`].
#[derive(Debug, Clone, Copy)]
pub enum NatsConnector<'a> {
    /// A `type = "nats"` source.
    Source(&'a NatsSourceSpec),
    /// A `type = "nats"` sink.
    Sink(&'a NatsSinkSpec),
}

// ---- the source -----------------------------------------------------------

/// Reads a JetStream stream through an ordered consumer. See the module docs.
pub struct NatsSource {
    who: String,
    spec: NatsSourceSpec,
    stream: jetstream::stream::Stream,
    client: async_nats::Client,
    /// Since when the client has been disconnected, if it is.
    disconnected: Option<std::time::Instant>,
    /// The messages, from the position on; created at the first read
    /// (after a [`Source::seek`]).
    messages: Option<jetstream::consumer::pull::Ordered>,
    /// Stream sequence of the last message returned; `None`: nothing yet
    /// (start where `start` says).
    sequence: Option<u64>,
}

impl std::fmt::Debug for NatsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSource")
            .field("who", &self.who)
            .field("spec", &self.spec)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl NatsSource {
    /// Connects to the source's server and finds its stream; `id` names the
    /// source in errors. With `start = "latest"` the position is the
    /// stream's last message now.
    pub fn open(id: &str, spec: &NatsSourceSpec) -> Result<NatsSource, ConnectorError> {
        let who = format!("source `{id}`");
        block_on_elsewhere(async {
            let client = connect(&who, &spec.url).await?;
            let js = context(client.clone());
            let mut stream = get_stream(&who, &spec.url, &js, &spec.stream).await?;
            let sequence = match spec.start {
                NatsStart::Earliest => None,
                NatsStart::Latest => {
                    let info = stream.info().await.map_err(|e| {
                        nats_error(format!(
                            "{who}: cannot read the state of stream `{}` at {}: {e}",
                            spec.stream, spec.url
                        ))
                    })?;
                    Some(info.state.last_sequence)
                }
            };
            Ok(NatsSource {
                who: who.clone(),
                spec: spec.clone(),
                stream,
                client,
                disconnected: None,
                messages: None,
                sequence,
            })
        })
    }

    async fn subscribe(&mut self) -> Result<(), ConnectorError> {
        let deliver_policy = match self.sequence {
            Some(n) => DeliverPolicy::ByStartSequence {
                start_sequence: n + 1,
            },
            None => DeliverPolicy::All,
        };
        let config = OrderedConfig {
            filter_subject: self.spec.subject.clone().unwrap_or_default(),
            deliver_policy,
            ..Default::default()
        };
        let failed = |e: String| {
            nats_error(format!(
                "{}: cannot read stream `{}` at {}: {e}",
                self.who, self.spec.stream, self.spec.url
            ))
        };
        let consumer = self
            .stream
            .create_consumer(config)
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.messages = Some(
            consumer
                .messages()
                .await
                .map_err(|e| failed(e.to_string()))?,
        );
        Ok(())
    }

    /// Fails once the server has been gone for [`CONNECT_TIMEOUT`]: the
    /// client reconnects by itself meanwhile, but a longer outage is the
    /// restart strategy's to handle (the job restarts from its checkpoint).
    fn check_connected(&mut self) -> Result<(), ConnectorError> {
        if self.client.connection_state() == async_nats::connection::State::Connected {
            self.disconnected = None;
            return Ok(());
        }
        let since = *self
            .disconnected
            .get_or_insert_with(std::time::Instant::now);
        if since.elapsed() >= CONNECT_TIMEOUT {
            return Err(nats_error(format!(
                "{}: lost the NATS server at {} for {} s",
                self.who,
                self.spec.url,
                CONNECT_TIMEOUT.as_secs()
            )));
        }
        Ok(())
    }

    fn key_of<'m>(&self, message: &'m async_nats::Message) -> Option<&'m [u8]> {
        if let Some(header) = &self.spec.key_header {
            return message
                .headers
                .as_ref()?
                .get(header.as_str())
                .map(|v| v.as_str().as_bytes());
        }
        let token = self.spec.key_subject_token?;
        message
            .subject
            .as_str()
            .split('.')
            .nth(token as usize)
            .map(str::as_bytes)
    }
}

impl Source for NatsSource {
    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError> {
        block_on(async {
            if self.messages.is_none() {
                self.subscribe().await?;
            }
            let mut batch = Batch::with_capacity(max, max * 64);
            let mut wait = POLL;
            while batch.len() < max {
                let messages = self.messages.as_mut().expect("subscribed above");
                let next = match tokio::time::timeout(wait, messages.next()).await {
                    Err(_) => break,
                    Ok(next) => next,
                };
                let message = match next {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        return Err(nats_error(format!(
                            "{}: reading stream `{}` at {}: {e}",
                            self.who, self.spec.stream, self.spec.url
                        )));
                    }
                    None => {
                        return Err(nats_error(format!(
                            "{}: the consumer of stream `{}` at {} ended",
                            self.who, self.spec.stream, self.spec.url
                        )));
                    }
                };
                let info = message.info().map_err(|e| {
                    nats_error(format!(
                        "{}: a message without JetStream metadata: {e}",
                        self.who
                    ))
                })?;
                let (sequence, published) = (
                    info.stream_sequence,
                    (info.published.unix_timestamp_nanos() / 1_000_000) as i64,
                );
                let key = self.key_of(&message.message);
                batch.push(key, &message.message.payload, published);
                self.sequence = Some(sequence);
                // After the first message, take only what is already there.
                wait = Duration::ZERO;
            }
            if batch.is_empty() {
                self.check_connected()?;
            }
            Ok(Some(batch))
        })
    }

    fn position(&self) -> serde_json::Value {
        match self.sequence {
            Some(n) => serde_json::json!({ "stream": self.spec.stream, "sequence": n }),
            None => serde_json::Value::Null,
        }
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        if position.is_null() {
            return Ok(());
        }
        let Some(n) = position.get("sequence").and_then(serde_json::Value::as_u64) else {
            return Err(ConnectorError::Position(format!(
                "{}: not a NATS position: {position}",
                self.who
            )));
        };
        if let Some(stream) = position.get("stream").and_then(|s| s.as_str())
            && stream != self.spec.stream
        {
            return Err(ConnectorError::Position(format!(
                "{}: the checkpoint read stream `{stream}`, the job now names `{}`",
                self.who, self.spec.stream
            )));
        }
        self.sequence = Some(n);
        self.messages = None;
        Ok(())
    }
}

// ---- the sink -------------------------------------------------------------

/// Publishes records to a JetStream subject. See the module docs.
pub struct NatsSink {
    who: String,
    spec: NatsSinkSpec,
    js: jetstream::Context,
    /// Exactly-once: records are kept for the commit (needs checkpoints).
    exactly_once: bool,
    /// `<job>.<sink>.<subtask>.<incarnation>`: the start of every message id.
    prefix: String,
    /// Exactly-once: records since the last barrier.
    current: Vec<Kept>,
    /// Exactly-once: pre-committed checkpoints not yet seen committed.
    pending: Vec<(u64, Vec<Kept>)>,
    /// At-least-once: publications not yet acknowledged.
    acks: Vec<jetstream::context::PublishAckFuture>,
}

impl std::fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSink")
            .field("who", &self.who)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Most acknowledgements an at-least-once sink leaves outstanding before it
/// waits for them.
const MAX_UNACKED: usize = 4096;

impl NatsSink {
    /// Connects subtask `subtask` of sink `id` of job `job` and checks that
    /// a stream captures its subject. `checkpoints`: the job takes them
    /// (exactly-once needs them; without, records are published as they
    /// come). `restored`: the committable of the checkpoint the job
    /// restarts from, published now (again: the stream drops what it
    /// already has).
    pub fn open(
        job: &str,
        id: &str,
        subtask: u32,
        spec: &NatsSinkSpec,
        checkpoints: bool,
        restored: Option<&serde_json::Value>,
    ) -> Result<NatsSink, ConnectorError> {
        let who = format!("sink `{id}`");
        if let Some(c) = restored {
            commit(c)?;
        }
        let js = block_on_elsewhere(async {
            let client = connect(&who, &spec.url).await?;
            let js = context(client);
            stream_for_subject(&who, &spec.url, &js, &spec.subject).await?;
            Ok::<_, ConnectorError>(js)
        })?;
        Ok(NatsSink {
            who,
            spec: spec.clone(),
            js,
            exactly_once: checkpoints && spec.delivery == NatsDelivery::ExactlyOnce,
            prefix: format!("{job}.{id}.{subtask}.{}", incarnation()),
            current: Vec::new(),
            pending: Vec::new(),
            acks: Vec::new(),
        })
    }

    fn wait_for_acks(&mut self) -> Result<(), ConnectorError> {
        let acks = std::mem::take(&mut self.acks);
        let (who, url) = (&self.who, &self.spec.url);
        block_on(async {
            for ack in acks {
                ack.await.map_err(|e| {
                    nats_error(format!(
                        "{who}: publishing to the NATS server at {url}: {e}"
                    ))
                })?;
            }
            Ok(())
        })
    }
}

/// A token that differs between two sinks opened with the same job, id and
/// subtask (in one process or another, now or later): message ids of one
/// incarnation never match another's.
pub(super) fn incarnation() -> String {
    use std::hash::{BuildHasher, Hasher};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:016x}", h.finish())
}

fn headers(key_header: Option<&str>, key: Option<&[u8]>) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    if let (Some(name), Some(key)) = (key_header, key) {
        headers.insert(name, String::from_utf8_lossy(key).into_owned());
    }
    headers
}

impl Sink for NatsSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        if self.exactly_once {
            self.current.extend(
                batch
                    .iter()
                    .map(|r| (r.key.map(<[u8]>::to_vec), r.value.to_vec())),
            );
            return Ok(());
        }
        let (js, spec, who) = (&self.js, &self.spec, &self.who);
        let acks = block_on(async {
            let mut acks = Vec::with_capacity(batch.len());
            for r in batch.iter() {
                let ack = js
                    .publish_with_headers(
                        spec.subject.clone(),
                        headers(spec.key_header.as_deref(), r.key),
                        r.value.to_vec().into(),
                    )
                    .await
                    .map_err(|e| {
                        nats_error(format!(
                            "{who}: publishing to the NATS server at {}: {e}",
                            spec.url
                        ))
                    })?;
                acks.push(ack);
            }
            Ok::<_, ConnectorError>(acks)
        })?;
        self.acks.extend(acks);
        if self.acks.len() > MAX_UNACKED {
            self.wait_for_acks()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        self.wait_for_acks()
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<serde_json::Value>, ConnectorError> {
        if !self.exactly_once {
            self.wait_for_acks()?;
            return Ok(None);
        }
        let current = std::mem::take(&mut self.current);
        if !current.is_empty() {
            self.pending.push((checkpoint, current));
        }
        let committed = committed_up_to(&self.prefix);
        self.pending.retain(|(c, _)| Some(*c) > committed);
        if self.pending.is_empty() {
            return Ok(None);
        }
        let bytes = wal::pending_bytes(&self.pending);
        if bytes > MAX_PENDING_BYTES {
            return Err(nats_error(format!(
                "{}: {bytes} bytes of records wait for their checkpoint to complete, over the \
                 limit of {MAX_PENDING_BYTES}; take checkpoints more often (job.checkpoints.interval_ms) \
                 or use delivery = \"at-least-once\"",
                self.who
            )));
        }
        let epochs = wal::encode_epochs(&self.pending);
        Ok(Some(serde_json::json!({ "nats": {
            "url": self.spec.url,
            "subject": self.spec.subject,
            "key_header": self.spec.key_header,
            "prefix": self.prefix,
            "epochs": epochs,
        }})))
    }
}

/// The newest checkpoint committed in this process for each message-id
/// prefix: a sink drops what is committed from its next committables.
fn committed() -> &'static Mutex<HashMap<String, u64>> {
    static COMMITTED: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    COMMITTED.get_or_init(Default::default)
}

fn committed_up_to(prefix: &str) -> Option<u64> {
    committed()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(prefix)
        .copied()
}

/// The clients [`commit`] publishes with, by server URL (a commit follows
/// every checkpoint: one connection per server, not one per commit).
fn commit_clients() -> &'static Mutex<HashMap<String, jetstream::Context>> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, jetstream::Context>>> = OnceLock::new();
    CLIENTS.get_or_init(Default::default)
}

/// Whether `committable` is a NATS sink's.
pub fn is_committable(committable: &serde_json::Value) -> bool {
    committable.get("nats").is_some()
}

/// Publishes the records of a NATS sink's committable, each checkpoint's
/// in order, with their message ids, and waits for the server's
/// acknowledgements (a duplicate is acknowledged too: it was published
/// before). Idempotent within the stream's duplicate window. Callable from
/// inside an async runtime.
pub fn commit(committable: &serde_json::Value) -> Result<(), ConnectorError> {
    let bad = || ConnectorError::Position(format!("not a NATS committable: {committable}"));
    let c = committable.get("nats").ok_or_else(bad)?;
    let text = |field: &str| c.get(field).and_then(serde_json::Value::as_str);
    let (Some(url), Some(subject), Some(prefix)) = (text("url"), text("subject"), text("prefix"))
    else {
        return Err(bad());
    };
    let key_header = text("key_header");
    let epochs = wal::decode_epochs(c.get("epochs")).ok_or_else(bad)?;
    let sink = prefix.split('.').nth(1).unwrap_or(prefix);
    let who = format!("sink `{sink}`");
    block_on_elsewhere(async {
        let cached = commit_clients()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(url)
            .cloned();
        let js = match cached {
            Some(js) => js,
            None => {
                let js = context(connect(&who, url).await?);
                commit_clients()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(url.to_owned(), js.clone());
                js
            }
        };
        for (checkpoint, records) in &epochs {
            let mut acks = Vec::with_capacity(records.len());
            for (n, (key, value)) in records.iter().enumerate() {
                let mut headers = headers(key_header, key.as_deref());
                headers.insert(
                    async_nats::header::NATS_MESSAGE_ID,
                    format!("{prefix}.{checkpoint}.{n}"),
                );
                let ack = js
                    .publish_with_headers(subject.to_owned(), headers, value.clone().into())
                    .await
                    .map_err(|e| {
                        nats_error(format!(
                            "{who}: committing checkpoint {checkpoint} to the NATS server at {url}: {e}"
                        ))
                    })?;
                acks.push(ack);
            }
            for ack in acks {
                ack.await.map_err(|e| {
                    nats_error(format!(
                        "{who}: committing checkpoint {checkpoint} to the NATS server at {url}: {e}"
                    ))
                })?;
            }
            let mut done = committed().lock().unwrap_or_else(|p| p.into_inner());
            let newest = done.entry(prefix.to_owned()).or_insert(*checkpoint);
            *newest = (*newest).max(*checkpoint);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_server_is_an_error_naming_the_vertex_and_address() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let spec = NatsSourceSpec {
            url: format!("nats://127.0.0.1:{port}"),
            stream: "ORDERS".into(),
            subject: None,
            start: NatsStart::Earliest,
            key_header: None,
            key_subject_token: None,
        };
        let err = NatsSource::open("orders", &spec).unwrap_err().to_string();
        assert!(err.contains("source `orders`"), "{err}");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    }
}
