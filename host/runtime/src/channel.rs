//! What moves between subtasks, wherever they run: the [`Message`]s on a
//! channel, the job-wide [`Abort`] signal every blocked send or receive
//! wakes up on, and the [`Exchange`] that tells a deployment which subtasks
//! run here and how to reach the others.
//!
//! It sits below the subtask driver ([`crate::taskmanager`]), the data
//! plane ([`crate::net`]) and the deployment ([`crate::local`]), which all
//! speak it; it knows nothing of any of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{mpsc, watch};

use crate::record::Batch;

/// What travels on a channel between tasks.
#[derive(Debug)]
pub enum Message {
    /// A batch of records.
    Records {
        /// The input channel index at the receiver.
        channel: u32,
        /// The records.
        batch: Batch,
    },
    /// The sender's watermark advanced.
    Watermark {
        /// The input channel index at the receiver.
        channel: u32,
        /// The new watermark.
        watermark: i64,
    },
    /// The sender became idle (`idle = true`: it will not hold back the
    /// watermark until it says otherwise) or active again (`false`), as
    /// Flink's `WatermarkStatus`.
    Idle {
        /// The input channel index at the receiver.
        channel: u32,
        /// Idle, or active again.
        idle: bool,
    },
    /// Checkpoint barrier: every record before it on this channel belongs
    /// to checkpoint `checkpoint`, every record after it to the next.
    Barrier {
        /// The input channel index at the receiver.
        channel: u32,
        /// The checkpoint id.
        checkpoint: u64,
    },
    /// A latency marker (Flink's `LatencyMarker`): made by a source every
    /// `latency_tracking_interval_ms`, it queues behind the records before
    /// it on every channel it crosses; each vertex it reaches records
    /// `now - marked_ms` (wall clock, milliseconds since the Unix epoch).
    Latency {
        /// The input channel index at the receiver.
        channel: u32,
        /// When the source made it.
        marked_ms: i64,
    },
    /// The sender has no more records for this channel.
    End {
        /// The input channel index at the receiver.
        channel: u32,
    },
}

impl Message {
    /// The input channel it arrived on, at the receiver.
    pub fn channel(&self) -> u32 {
        match self {
            Message::Records { channel, .. }
            | Message::Watermark { channel, .. }
            | Message::Idle { channel, .. }
            | Message::Barrier { channel, .. }
            | Message::Latency { channel, .. }
            | Message::End { channel } => *channel,
        }
    }
}

/// The job-wide abort signal.
#[derive(Debug, Clone)]
pub struct Abort {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
    /// The same signal for code that cannot await: guest calls poll it at
    /// every epoch tick.
    flag: Arc<AtomicBool>,
    /// Why, as told by the first trigger that said so.
    reason: Arc<std::sync::OnceLock<String>>,
}

impl Abort {
    /// A fresh, unset signal.
    pub fn new() -> Abort {
        let (tx, rx) = watch::channel(false);
        Abort {
            tx: Arc::new(tx),
            rx,
            flag: Arc::default(),
            reason: Arc::default(),
        }
    }
    /// Sets it; wakes every blocked channel operation and interrupts every
    /// running guest call that was given [`Abort::flag`].
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::Relaxed);
        self.tx.send_replace(true);
    }
    /// [`Abort::trigger`], recording why unless an earlier trigger did:
    /// the subtasks it stops report this reason as their own.
    pub fn trigger_because(&self, reason: impl Into<String>) {
        let _ = self.reason.set(reason.into());
        self.trigger();
    }
    /// Why it was set, if the trigger said so.
    pub fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }
    /// The signal as a flag, for [`crate::wasm::InstanceConfig::cancel`].
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }
    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        *self.rx.borrow()
    }
    /// Completes once it is set (at once if it is).
    pub async fn triggered(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|a| *a).await;
    }
}

impl Default for Abort {
    fn default() -> Self {
        Abort::new()
    }
}

/// Where a job's subtasks run, for [`crate::local::LocalCluster::deploy`]: the embedded
/// cluster runs all of them; a TaskManager runs those placed on it and
/// reaches the others over the network.
pub trait Exchange {
    /// Whether subtask `subtask` of task `task` (an index into
    /// [`crate::job::chain`]'s result) runs here.
    fn is_local(&self, task: usize, subtask: u32) -> bool;
    /// A sender into the input gate of a subtask that runs elsewhere.
    /// `abort` is the job's: the channel triggers it when it fails.
    fn remote_sender(&self, task: usize, subtask: u32, abort: &Abort) -> mpsc::Sender<Message>;
    /// Announces the input gate of a local subtask, with its number of
    /// input channels, for producers elsewhere.
    fn register_input(&self, task: usize, subtask: u32, channels: u32, tx: mpsc::Sender<Message>);
}

/// Every subtask runs in this process.
#[derive(Debug, Clone, Copy)]
pub struct AllLocal;

impl Exchange for AllLocal {
    fn is_local(&self, _: usize, _: u32) -> bool {
        true
    }
    fn remote_sender(&self, task: usize, subtask: u32, _: &Abort) -> mpsc::Sender<Message> {
        unreachable!("AllLocal has no remote subtask ({task}, {subtask})")
    }
    fn register_input(&self, _: usize, _: u32, _: u32, _: mpsc::Sender<Message>) {}
}
