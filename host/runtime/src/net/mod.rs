//! QUIC transport between Weir's daemons: mutual TLS for every connection
//! ([`tls`]) and the data plane that moves records between TaskManagers
//! ([`DataPlane`]) with credit-based flow control, as Flink's network stack.
//!
//! # Layout
//!
//! - [`tls`]: the cluster CA, node identities, `weir cluster init`, and the
//!   quinn endpoint every daemon binds.
//! - [`codec`]: the binary encoding of a [`Message`] (pure).
//! - `credit`: the sender's credit ledger (pure).
//! - `wire`: the per-stream header, credit grant and refusal codes.
//! - `sender`: the writer task behind [`DataPlane::open_channel`].
//! - `receiver`: the accept loop and the per-stream reader that feeds a
//!   subtask's input.
//!
//! # Data channels
//!
//! A channel is one upstream subtask's output towards one downstream subtask
//! on another TaskManager. It is one bidirectional QUIC stream on the single
//! connection between the two TaskManagers; the sender connects with the
//! receiving TaskManager's id ([`Peer`]), so TLS refuses any other node. The sending subtask writes
//! [`Message`]s into an ordinary bounded mpsc sender; a writer task encodes
//! them into one continuous byte stream and cuts it into network buffers of
//! `B` bytes. A buffer goes out when it is full, when a `Watermark` or `End`
//! was written into it, or `buffer_timeout` after its first byte (Flink's
//! buffer timeout: throughput vs latency). On the receiving TaskManager the
//! stream's header names an [`InputKey`]; its messages are delivered, in
//! order, into the mpsc registered for that key with
//! [`DataPlane::register_input`]. Channels between subtasks of the same
//! TaskManager never come here: they stay local mpsc channels.
//!
//! # Who may send what
//!
//! The receiver trusts a stream no more than its sender's certificate:
//!
//! - a connection whose certificate names no TaskManager ([`tls::peer_role`])
//!   is closed;
//! - a stream for an [`Input`] is refused ([`wire::code::FORBIDDEN`]) unless
//!   the sending TaskManager is one of the input's `senders` (the TaskManagers
//!   of the job's placement);
//! - a message naming an input channel the subtask does not have (`channel
//!   ≥ Input::channels`) fails its stream ([`wire::code::CORRUPT`]) before it
//!   reaches the subtask, whose input gate indexes by channel.
//!
//! # Flow control
//!
//! - When a stream opens, the receiver grants `C = credits_per_channel`
//!   credits and announces its `buffer_size`; the writer uses
//!   `B = min(ChannelOptions::buffer_size, receiver's buffer_size)`.
//! - Each buffer sent costs one credit; without a credit the writer waits,
//!   its mpsc fills up, and the sending subtask blocks (backpressure).
//! - The receiver returns one credit (on the stream's back half) each time a
//!   buffer has been fully decoded *and* every message completed in it has
//!   been delivered into the subtask's input mpsc, awaiting while that mpsc
//!   is full. A stalled consumer therefore stops its senders after `C`
//!   buffers, whatever the QUIC windows (which are set far larger, see
//!   [`tls::STREAM_RECEIVE_WINDOW`], so that credits are the only bound).
//! - A message larger than a buffer spans several buffers, each costing one
//!   credit, so a batch of any size moves in bounded memory.
//!
//! **Memory bound.** On the sending side, `buffered_bytes` (serialized
//! bytes not yet credited back: the buffer being filled plus buffers in
//! flight or unconsumed) obeys, per channel and at every instant,
//!
//! ```text
//! buffered_bytes(channel) ≤ (C + 1) × B
//! buffered_bytes(DataPlane) ≤ Σ over open outgoing channels of (C + 1) × B
//! ```
//!
//! (defaults: `(4 + 1) × 32 KiB = 160 KiB` per channel). Besides that, each
//! channel's mpsc holds at most [`SENDER_CAPACITY`] unserialized messages.
//! On the receiving side each stream holds at most `C × B` bytes in QUIC's
//! receive buffer (the one being decoded included), plus the start of one
//! message that spans buffers (at most the largest message), plus the
//! decoded messages of one buffer waiting for room in the input mpsc.
//!
//! # Failures
//!
//! Any failure of a channel (connect, TLS, a stream reset or refused by the
//! receiver, the peer gone) triggers the job's [`Abort`] and ends the
//! writer; the writer stops when the abort is triggered. A stream that
//! arrives before its key is registered waits up to
//! [`REGISTRATION_TIMEOUT`] (60 s) and is then refused (the sender aborts with a
//! message saying so); at most [`MAX_WAITING_STREAMS`] streams of one
//! sending TaskManager wait at once, over all its connections; one past
//! that is refused at once.
//! [`DataPlane::unregister_job`] resets every stream of
//! the job that still carries a channel without its `End`; a stream whose
//! channels all ended only waits for the sender's clean end (the receiving
//! subtasks finished; the sender's last bytes may still be in flight). The receiving side cannot see the job's abort signal (it only
//! has the input mpsc), so a broken incoming stream is logged and the
//! receiving job learns of the failure from the sender's side, through the
//! JobManager.
//!
//! This module must not schedule tasks or interpret records: it moves
//! [`Message`]s and nothing else.

pub mod codec;
mod credit;
mod receiver;
mod sender;
pub mod tls;
mod wire;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use crate::channel::{Abort, Message};

pub use codec::DecodeError;

/// Capacity of the mpsc sender returned by [`DataPlane::open_channel`]:
/// the writer task serializes messages as they come, so one message
/// waiting behind the one being encoded keeps it busy; more would only add
/// unserialized memory outside the credit bound.
pub const SENDER_CAPACITY: usize = 1;

/// How long an incoming stream waits for its input to be registered, by
/// default: the receiving TaskManager deploys its subtasks concurrently
/// with the senders, so a stream may arrive first; after this it is refused
/// ([`DataPlane::set_registration_timeout`] changes it).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Streams of one sending TaskManager (over all its connections: it may
/// open several) that may wait for their input's registration at once. A
/// job's early streams from one TaskManager are one per input it feeds
/// here, far fewer; the bound stops a peer from parking QUIC's whole stream
/// limit ([`tls::MAX_STREAMS`]), or many connections' worth, here for
/// [`REGISTRATION_TIMEOUT`] each.
pub const MAX_WAITING_STREAMS: u64 = 1024;

/// The data plane's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetConfig {
    /// Bytes per network buffer: the largest buffer this TaskManager
    /// accepts, and what its channels use unless told otherwise.
    pub buffer_size: usize,
    /// Buffers this TaskManager grants each incoming channel (its credits).
    pub credits_per_channel: u32,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            buffer_size: 32 * 1024,
            credits_per_channel: 4,
        }
    }
}

/// One subtask's input gate on the receiving TaskManager.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InputKey {
    /// The job.
    pub job: String,
    /// The task (chain) index in the job.
    pub task: u32,
    /// The subtask index.
    pub subtask: u32,
}

impl fmt::Display for InputKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job `{}` task {} subtask {}",
            self.job, self.task, self.subtask
        )
    }
}

/// The receiving end of a channel: a TaskManager's id (the identity its
/// certificate must carry) and its data-plane address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The TaskManager's id.
    pub id: String,
    /// Its data-plane address.
    pub addr: SocketAddr,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskManager `{}` at {}", self.id, self.addr)
    }
}

/// A subtask's input gate as the data plane sees it.
#[derive(Clone, Debug)]
pub struct Input {
    /// Where its messages go.
    pub tx: mpsc::Sender<Message>,
    /// Its number of input channels: a message naming channel `c ≥
    /// channels` fails the stream it came on.
    pub channels: u32,
    /// The TaskManagers that may open streams to it (the job's placement).
    pub senders: Arc<BTreeSet<String>>,
    /// The longest record its senders send ([`ChannelOptions::max_record_bytes`]):
    /// a stream announcing a longer message fails before any of it is
    /// buffered, so one stream never holds more than
    /// [`codec::max_message_bytes`] of this.
    pub max_record_bytes: u64,
}

/// How one outgoing channel batches its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelOptions {
    /// Bytes per network buffer (capped by the receiver's `buffer_size`).
    pub buffer_size: usize,
    /// A buffer that is not full goes out this long after its first byte.
    pub buffer_timeout: Duration,
    /// The longest record (key and value) the channel carries: a longer
    /// one fails the channel at the sender, with its size, since the
    /// receiver refuses a message longer than [`codec::max_message_bytes`]
    /// of this (the job's [`JobGraph::max_record_bytes`](crate::job::JobGraph::max_record_bytes)).
    pub max_record_bytes: u64,
}

impl Default for ChannelOptions {
    /// 32 KiB buffers, Flink's default buffer timeout of 100 ms, and
    /// records up to the default `max_output_mb`.
    fn default() -> Self {
        ChannelOptions {
            buffer_size: NetConfig::default().buffer_size,
            buffer_timeout: Duration::from_millis(100),
            max_record_bytes: u64::from(crate::job::DEFAULT_MAX_OUTPUT_MB) << 20,
        }
    }
}

/// Counters of a [`DataPlane`]. Every field defaults to 0 when absent, so
/// a heartbeat from an older TaskManager still parses.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NetStats {
    /// Bytes serialized by this node's writers and not yet credited back,
    /// over all its outgoing channels.
    pub buffered_bytes: u64,
    /// High-water mark of `buffered_bytes`.
    pub max_buffered_bytes: u64,
    /// Bytes written to data streams (buffers with their length prefix).
    pub bytes_sent: u64,
    /// Bytes read from data streams (buffers with their length prefix).
    pub bytes_received: u64,
    /// Outgoing channels open now (past the receiver's credit grant).
    pub channels_out: u64,
    /// Incoming streams open now (granted credits, not ended).
    pub channels_in: u64,
    /// Network buffers sent and not yet credited back, over all outgoing
    /// channels (each at most its receiver's credits).
    pub buffers_in_flight: u64,
    /// Credits the outgoing channels hold now: buffers they may send
    /// before they must wait. 0 on every channel: the receivers are the
    /// bottleneck.
    pub credits_available: u64,
    /// Nanoseconds writers spent waiting for a credit (a buffer full and no
    /// credit left: the receiving side applies backpressure), summed over
    /// channels.
    pub credit_wait_ns: u64,
}

/// Why a transport operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file holds no usable certificate or key.
    #[error("{}: {message}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `weir cluster init` would overwrite a CA.
    #[error("{} already exists: refusing to overwrite the cluster CA", .0.display())]
    Exists(PathBuf),
    /// A node name that cannot be a file name.
    #[error("bad node name `{0}`: use letters, digits, `-`, `_` and `.`, not `ca`")]
    BadNodeName(String),
    /// A TaskManager id that cannot be put in a certificate.
    #[error(
        "bad TaskManager id `{0}` for a certificate: use lowercase letters, digits and `-` \
         (not first or last), at most 63"
    )]
    BadTaskManagerId(String),
    /// Certificate generation failed.
    #[error("certificate: {0}")]
    Certificate(String),
    /// The TLS configuration was refused.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The UDP socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The connection to a peer failed (unreachable, TLS refused, closed).
    #[error("connection to {peer}: {message}")]
    Connect {
        /// The peer.
        peer: SocketAddr,
        /// What happened.
        message: String,
    },
    /// A data channel failed.
    #[error("channel to {peer} for {key}: {message}")]
    Channel {
        /// The receiving TaskManager.
        peer: SocketAddr,
        /// The input it feeds.
        key: InputKey,
        /// What happened.
        message: String,
    },
    /// Corrupt bytes on a data channel.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The job's abort signal was triggered.
    #[error("aborted")]
    Aborted,
}

/// The data plane of one TaskManager: its incoming channels (by
/// [`InputKey`]) and its outgoing ones. Cheap to clone.
///
/// Dropping the last clone (and every task it spawned) closes the endpoint.
#[derive(Clone)]
pub struct DataPlane {
    shared: Arc<Shared>,
}

impl fmt::Debug for DataPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataPlane")
            .field("local_addr", &self.local_addr())
            .finish_non_exhaustive()
    }
}

/// State shared by the handle, the accept loop and the channel tasks.
struct Shared {
    endpoint: quinn::Endpoint,
    config: NetConfig,
    runtime: tokio::runtime::Handle,
    inputs: Mutex<HashMap<String, JobInputs>>,
    /// One connection per peer, shared by all channels to it; the async
    /// mutex makes concurrent first channels wait for one handshake.
    peers: Mutex<HashMap<Peer, Arc<tokio::sync::Mutex<Option<quinn::Connection>>>>>,
    /// How long an early stream waits for its registration, in ms.
    registration_timeout_ms: AtomicU64,
    /// Streams of one sending TaskManager that may wait for their
    /// registration at once ([`MAX_WAITING_STREAMS`], but in tests).
    max_waiting: AtomicU64,
    /// Streams waiting for their registration, per sending TaskManager (the
    /// id its certificate names): one count over all its connections.
    waiting: Mutex<HashMap<Arc<str>, Arc<AtomicU64>>>,
    buffered: AtomicU64,
    max_buffered: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    /// See the fields of [`NetStats`] with these names.
    channels_out: AtomicU64,
    channels_in: AtomicU64,
    in_flight: AtomicU64,
    credits: AtomicU64,
    credit_wait_ns: AtomicU64,
    /// Signalled when a stream starts waiting for its registration (once
    /// it holds its place among the sender's waiting streams).
    #[cfg(test)]
    waiter_added: tokio::sync::Notify,
}

/// The registered inputs of one job on this TaskManager.
struct JobInputs {
    gates: HashMap<(u32, u32), Input>,
    waiting: HashMap<(u32, u32), Vec<oneshot::Sender<Input>>>,
    /// Never sent on: dropping it (unregister) wakes every stream of the job.
    alive: watch::Sender<()>,
}

impl JobInputs {
    fn new() -> JobInputs {
        JobInputs {
            gates: HashMap::new(),
            waiting: HashMap::new(),
            alive: watch::channel(()).0,
        }
    }
}

/// Where an incoming stream's messages go, or when they will.
enum Lookup {
    Ready(Input),
    Wait(oneshot::Receiver<Input>),
}

impl DataPlane {
    /// The data plane on `endpoint` (from [`tls::endpoint`]): spawns its
    /// accept loop on the current tokio runtime. Every connection accepted
    /// on this endpoint is a data connection from another TaskManager.
    pub fn new(endpoint: quinn::Endpoint, config: NetConfig) -> DataPlane {
        let runtime = tokio::runtime::Handle::current();
        let shared = Arc::new(Shared {
            endpoint: endpoint.clone(),
            config,
            runtime: runtime.clone(),
            inputs: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            registration_timeout_ms: AtomicU64::new(REGISTRATION_TIMEOUT.as_millis() as u64),
            max_waiting: AtomicU64::new(MAX_WAITING_STREAMS),
            waiting: Mutex::new(HashMap::new()),
            buffered: AtomicU64::new(0),
            max_buffered: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            channels_out: AtomicU64::new(0),
            channels_in: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            credits: AtomicU64::new(0),
            credit_wait_ns: AtomicU64::new(0),
            #[cfg(test)]
            waiter_added: tokio::sync::Notify::new(),
        });
        runtime.spawn(receiver::accept_loop(endpoint, Arc::downgrade(&shared)));
        DataPlane { shared }
    }

    /// The endpoint, also usable as a client (e.g. to reach the JobManager).
    pub fn endpoint(&self) -> &quinn::Endpoint {
        &self.shared.endpoint
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared
            .endpoint
            .local_addr()
            .expect("a bound quinn endpoint has a local address")
    }

    /// Incoming channels for `key` deliver their messages into `input`, the
    /// subtask's input gate, if they come from one of its `senders`.
    /// Streams already waiting for `key` start now.
    pub fn register_input(&self, key: InputKey, input: Input) {
        let mut inputs = self.shared.inputs.lock().expect("inputs lock");
        let job = inputs.entry(key.job).or_insert_with(JobInputs::new);
        let gate = (key.task, key.subtask);
        for waiter in job.waiting.remove(&gate).unwrap_or_default() {
            let _ = waiter.send(input.clone());
        }
        job.gates.insert(gate, input);
    }

    /// How many streams of one connection may wait for their registration
    /// at once (default [`MAX_WAITING_STREAMS`]).
    #[cfg(test)]
    fn set_max_waiting_streams(&self, n: u64) {
        self.shared.max_waiting.store(n, Ordering::Relaxed);
    }

    /// How long a stream that arrives before its input is registered waits
    /// before it is refused (default [`REGISTRATION_TIMEOUT`]).
    pub fn set_registration_timeout(&self, timeout: Duration) {
        self.shared
            .registration_timeout_ms
            .store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    /// Drops every registration and waiting stream of `job`; its incoming
    /// streams are reset (their senders abort), except those whose every
    /// channel already delivered its `End`.
    pub fn unregister_job(&self, job: &str) {
        let removed = self.shared.inputs.lock().expect("inputs lock").remove(job);
        drop(removed);
    }

    /// A sender that a subtask uses like a local channel (capacity
    /// [`SENDER_CAPACITY`]); see the module docs for what the writer task
    /// behind it does. Failures trigger `abort`; `abort` stops the writer.
    pub fn open_channel(
        &self,
        peer: Peer,
        key: InputKey,
        opts: ChannelOptions,
        abort: Abort,
    ) -> mpsc::Sender<Message> {
        self.open_channel_with_handle(peer, key, opts, abort).0
    }

    /// [`DataPlane::open_channel`], also returning the writer task. It ends
    /// `Ok` once every sender was dropped and everything sent has been
    /// delivered into the receiver's input, or with the error that triggered
    /// the abort ([`NetError::Aborted`] if the abort came from elsewhere).
    pub fn open_channel_with_handle(
        &self,
        peer: Peer,
        key: InputKey,
        opts: ChannelOptions,
        abort: Abort,
    ) -> (
        mpsc::Sender<Message>,
        tokio::task::JoinHandle<Result<(), NetError>>,
    ) {
        let (tx, rx) = mpsc::channel(SENDER_CAPACITY);
        let shared = self.shared.clone();
        let task = self.shared.runtime.spawn(async move {
            let result = sender::run(&shared, &peer, &key, opts, rx, &abort).await;
            match &result {
                Err(NetError::Aborted) => abort.trigger(),
                Err(e) => {
                    tracing::warn!("{e}");
                    abort.trigger_because(format!("a network channel failed: {e}"));
                }
                Ok(()) => {}
            }
            result
        });
        (tx, task)
    }

    /// The counters.
    pub fn stats(&self) -> NetStats {
        let s = &self.shared;
        NetStats {
            buffered_bytes: s.buffered.load(Ordering::Relaxed),
            max_buffered_bytes: s.max_buffered.load(Ordering::Relaxed),
            bytes_sent: s.sent.load(Ordering::Relaxed),
            bytes_received: s.received.load(Ordering::Relaxed),
            channels_out: s.channels_out.load(Ordering::Relaxed),
            channels_in: s.channels_in.load(Ordering::Relaxed),
            buffers_in_flight: s.in_flight.load(Ordering::Relaxed),
            credits_available: s.credits.load(Ordering::Relaxed),
            credit_wait_ns: s.credit_wait_ns.load(Ordering::Relaxed),
        }
    }

    /// Closes the endpoint: every connection and channel fails now.
    pub fn close(&self) {
        self.shared
            .endpoint
            .close(wire::code::SHUTDOWN.into(), b"shutdown");
    }
}

impl Shared {
    fn registration_timeout(&self) -> Duration {
        Duration::from_millis(self.registration_timeout_ms.load(Ordering::Relaxed))
    }

    fn add_buffered(&self, bytes: usize) {
        let now = self.buffered.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        self.max_buffered.fetch_max(now, Ordering::Relaxed);
    }

    fn sub_buffered(&self, bytes: usize) {
        self.buffered.fetch_sub(bytes as u64, Ordering::Relaxed);
    }

    /// Where `key`'s messages go, and the job's liveness signal (closed
    /// when the job is unregistered).
    fn lookup(&self, key: &InputKey) -> (Lookup, watch::Receiver<()>) {
        let mut inputs = self.inputs.lock().expect("inputs lock");
        let job = inputs.entry(key.job.clone()).or_insert_with(JobInputs::new);
        let gate = (key.task, key.subtask);
        let alive = job.alive.subscribe();
        if let Some(input) = job.gates.get(&gate) {
            return (Lookup::Ready(input.clone()), alive);
        }
        let (waiter, wait) = oneshot::channel();
        job.waiting.entry(gate).or_default().push(waiter);
        (Lookup::Wait(wait), alive)
    }

    /// Forgets a waiter that gave up, and the job's entry if that was all
    /// it held (a stream for a job that never registers here).
    fn forget_waiter(&self, key: &InputKey) {
        let mut inputs = self.inputs.lock().expect("inputs lock");
        let Some(job) = inputs.get_mut(&key.job) else {
            return;
        };
        let gate = (key.task, key.subtask);
        if let Some(waiters) = job.waiting.get_mut(&gate) {
            waiters.retain(|w| !w.is_closed());
            if waiters.is_empty() {
                job.waiting.remove(&gate);
            }
        }
        if job.gates.is_empty() && job.waiting.is_empty() {
            inputs.remove(&key.job);
        }
    }

    /// The connection to `to`, connecting if there is none or it closed.
    /// The handshake fails unless `to` presents TaskManager `to.id`'s
    /// certificate.
    async fn connection(&self, to: &Peer) -> Result<quinn::Connection, NetError> {
        let peer = to.addr;
        let slot = self
            .peers
            .lock()
            .expect("peers lock")
            .entry(to.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref()
            && conn.close_reason().is_none()
        {
            return Ok(conn.clone());
        }
        let connect_error = |e: &dyn fmt::Display| NetError::Connect {
            peer,
            message: e.to_string(),
        };
        let conn = self
            .endpoint
            .connect(peer, &tls::taskmanager_name(&to.id))
            .map_err(|e| connect_error(&e))?
            .await
            .map_err(|e| connect_error(&e))?;
        *slot = Some(conn.clone());
        Ok(conn)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.endpoint
            .close(wire::code::SHUTDOWN.into(), b"shutdown");
    }
}

/// Polling interval of [`aborted`]: how long a blocked channel task takes
/// to notice the job's abort. `Abort` offers no awaitable signal outside
/// the task manager, so the data plane polls it.
const ABORT_POLL: Duration = Duration::from_millis(20);

/// Completes once `abort` is triggered.
async fn aborted(abort: &Abort) {
    while !abort.is_set() {
        tokio::time::sleep(ABORT_POLL).await;
    }
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
