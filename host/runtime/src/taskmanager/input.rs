//! A subtask's input gate: checkpoint barrier alignment and the combined
//! watermark over its input channels, as a pure state machine.
//!
//! [`InputGate`] is fed every [`Message`] the subtask receives, in arrival
//! order, through [`InputGate::offer`], and answers with the [`GateEvent`]s
//! the subtask must carry out, in the order it must carry them out. It plays
//! the part of Flink's `CheckpointedInputGate` with an aligned
//! `SingleCheckpointBarrierHandler`, in the style of
//! [`crate::checkpoint::coordinator`]. The shell, [`super::Subtask`],
//! receives the messages, processes records, advances and forwards
//! watermarks, takes snapshots, and times alignments (from
//! [`GateEvent::AlignmentStarted`] to [`GateEvent::Aligned`]); it asks
//! [`InputGate::is_ended`] when to finish.
//!
//! # Barrier alignment
//!
//! The first barrier of checkpoint `n` starts an alignment. A channel that
//! has delivered it is *blocked*: the gate holds its later messages back, in
//! arrival order, while the other channels flow on. Once every channel has
//! delivered the barrier or ended, `n` is aligned: the subtask snapshots and
//! forwards the barrier, and the held messages are then released as if they
//! had just arrived (a released barrier may start the next alignment, which
//! holds its channel's remaining messages back again). So the snapshot of
//! `n` covers exactly the records that precede barrier `n` on every channel.
//!
//! - A barrier of a newer checkpoint overtakes an alignment in progress (its
//!   channel skipped the older one, whose checkpoint was declined or timed
//!   out upstream): the older checkpoint is abandoned, as it can no longer
//!   align here, every channel is unblocked, and a new alignment starts with
//!   the newer barrier's channel blocked.
//! - A barrier no newer than the last aligned checkpoint, or older than the
//!   one being aligned, is dropped: its checkpoint is already taken or
//!   abandoned.
//! - A channel that ends counts as aligned, so alignment never waits on it.
//!   The `End` of a blocked channel is held like any other message: that
//!   channel has already delivered the barrier.
//!
//! Held messages are bounded by what upstream sends during an alignment
//! (typically a few batches: alignment is short), and by the channels'
//! capacity behind a blocked producer.
//!
//! # Watermarks
//!
//! The gate's watermark is the minimum, over the channels that have not
//! ended, of the highest watermark each delivered. A channel that ended no
//! longer holds it back. When the last channel ends, no watermark is
//! forwarded: the subtask's end of input sends the final one (`i64::MAX`).
//!
//! Idleness is Flink's `StatusWatermarkValve`: a channel that delivered
//! [`Message::Idle`] `{ idle: true }` does not hold the watermark back
//! until it delivers `{ idle: false }`. A channel that becomes active again
//! behind the forwarded watermark is *unaligned*: it rejoins the minimum only
//! once its own watermark catches up, so it never drags event time back or
//! stalls it. When every open channel is idle, the gate is idle and says so
//! downstream ([`GateEvent::Idle`]); the first channel to become active again
//! makes it active.
//!
//! # Invariants
//!
//! - Per channel, messages leave the gate in the order they arrived, each
//!   exactly once (until every channel ended).
//! - Between two offers: an alignment is in progress if and only if some
//!   channel is blocked; every held message belongs to a blocked channel;
//!   and an alignment in progress has a channel that is neither blocked nor
//!   ended (a complete alignment is acted on in the offer that completes it).
//!   Hence the input never ends during an alignment.
//! - Every [`GateEvent::AlignmentStarted`] is followed by exactly one
//!   [`GateEvent::Aligned`] or [`GateEvent::Abandoned`] of that checkpoint;
//!   aligned checkpoint ids strictly increase.
//! - Forwarded watermarks strictly increase; a channel's watermark going
//!   back is ignored.
//! - [`GateEvent::Idle`] alternates: idle, active, idle, … (starting active).
//!
//! # Must not touch
//!
//! No clocks, no channels, no operators, no storage, no async: the gate
//! decides, the shell acts.

use std::collections::VecDeque;

use super::Message;
use crate::record::Batch;

/// What the subtask must do, in the order [`InputGate::offer`] returns it.
#[derive(Debug, PartialEq)]
pub enum GateEvent {
    /// Process these records, which arrived on this input channel.
    Records(u32, Batch),
    /// The combined watermark advanced to this: advance the chain and
    /// forward it.
    Watermark(i64),
    /// Every open channel became idle (`true`), or one became active again
    /// (`false`): tell downstream.
    Idle(bool),
    /// A latency marker made by a source at this wall-clock time (ms):
    /// record the latency and pass it on.
    Latency(i64),
    /// The first barrier of `checkpoint` arrived: its alignment starts.
    AlignmentStarted {
        /// The checkpoint id.
        checkpoint: u64,
    },
    /// Every channel delivered the barrier of `checkpoint` or ended: take
    /// the snapshot and forward the barrier now, before carrying out the
    /// events that follow (records released from the alignment).
    Aligned {
        /// The checkpoint id.
        checkpoint: u64,
    },
    /// The barrier of `by` overtook the alignment of `checkpoint`, which
    /// will not be taken here (the coordinator aborts it when a newer one
    /// completes, or when it times out).
    Abandoned {
        /// The abandoned checkpoint id.
        checkpoint: u64,
        /// The newer checkpoint whose alignment replaces it.
        by: u64,
    },
}

/// A message named an input channel the gate does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a message for input channel {channel}, but the subtask has {channels}")]
pub struct BadChannel {
    /// The channel the message named.
    pub channel: u32,
    /// The gate's number of input channels.
    pub channels: u32,
}

/// What the gate knows of one input channel.
#[derive(Debug, Clone)]
struct Channel {
    /// The highest watermark it delivered (`i64::MIN`: none yet).
    watermark: i64,
    /// It delivered its `End`.
    ended: bool,
    /// It delivered the barrier being aligned: its messages are held.
    blocked: bool,
    /// It said it is idle (and has not said otherwise since).
    idle: bool,
    /// Its watermark counts towards the minimum: it has not been idle since
    /// it last caught up with the forwarded watermark.
    aligned: bool,
}

/// Barrier alignment and watermark tracking over a subtask's input channels.
/// See the [module docs](self) for the rules and invariants.
#[derive(Debug)]
pub struct InputGate {
    /// Indexed by the channel number in [`Message::channel`].
    channels: Vec<Channel>,
    /// Channels that have not ended.
    open: usize,
    /// The last watermark forwarded (`i64::MIN`: none yet).
    forwarded: i64,
    /// Told downstream that every open channel is idle.
    idle: bool,
    /// The checkpoint being aligned.
    aligning: Option<u64>,
    /// The last checkpoint aligned (0: none yet).
    last_aligned: u64,
    /// Messages of blocked channels, in arrival order.
    held: VecDeque<Message>,
}

impl InputGate {
    /// A gate over `channels` input channels, none ended, no watermark yet.
    pub fn new(channels: u32) -> InputGate {
        let channel = Channel {
            watermark: i64::MIN,
            ended: false,
            blocked: false,
            idle: false,
            aligned: true,
        };
        InputGate {
            channels: vec![channel; channels as usize],
            open: channels as usize,
            forwarded: i64::MIN,
            idle: false,
            aligning: None,
            last_aligned: 0,
            held: VecDeque::new(),
        }
    }

    /// Every channel has ended (at once for a gate without channels): the
    /// subtask's input is over.
    pub fn is_ended(&self) -> bool {
        self.open == 0
    }

    /// Takes the next message received, and returns what the subtask must
    /// do, in order: for it, and for the held messages it releases.
    pub fn offer(&mut self, message: Message) -> Result<Vec<GateEvent>, BadChannel> {
        let channel = message.channel();
        if channel as usize >= self.channels.len() {
            return Err(BadChannel {
                channel,
                channels: self.channels.len() as u32,
            });
        }
        let mut events = Vec::new();
        self.accept(message, &mut events);
        while !self.is_ended()
            && let Some(message) = self.release()
        {
            self.accept(message, &mut events);
        }
        Ok(events)
    }

    /// The earliest held message of a channel that is not blocked (any, once
    /// an alignment completes or is overtaken).
    fn release(&mut self) -> Option<Message> {
        let channels = &self.channels;
        let i = self
            .held
            .iter()
            .position(|m| !channels[m.channel() as usize].blocked)?;
        self.held.remove(i)
    }

    fn accept(&mut self, message: Message, events: &mut Vec<GateEvent>) {
        let c = message.channel() as usize;
        if self.channels[c].blocked {
            self.held.push_back(message);
            return;
        }
        match message {
            Message::Records { channel, batch } => events.push(GateEvent::Records(channel, batch)),
            Message::Watermark { watermark, .. } => {
                let channel = &mut self.channels[c];
                channel.watermark = channel.watermark.max(watermark);
                if channel.watermark >= self.forwarded {
                    channel.aligned = true;
                }
                self.advance_watermark(events);
            }
            Message::Idle { idle, .. } => self.status(c, idle, events),
            Message::Barrier { checkpoint, .. } => self.barrier(c, checkpoint, events),
            Message::Latency { marked_ms, .. } => events.push(GateEvent::Latency(marked_ms)),
            Message::End { .. } => {
                if !self.channels[c].ended {
                    self.channels[c].ended = true;
                    self.open -= 1;
                }
                if !self.is_ended() {
                    self.advance_watermark(events);
                    self.update_idle(events);
                }
                self.complete_alignment(events);
            }
        }
    }

    fn barrier(&mut self, c: usize, checkpoint: u64, events: &mut Vec<GateEvent>) {
        if checkpoint <= self.last_aligned {
            return;
        }
        match self.aligning {
            Some(current) if checkpoint < current => return,
            Some(current) if checkpoint > current => {
                events.push(GateEvent::Abandoned {
                    checkpoint: current,
                    by: checkpoint,
                });
                self.unblock_all();
                self.aligning = Some(checkpoint);
                events.push(GateEvent::AlignmentStarted { checkpoint });
            }
            Some(_) => {}
            None => {
                self.aligning = Some(checkpoint);
                events.push(GateEvent::AlignmentStarted { checkpoint });
            }
        }
        self.channels[c].blocked = true;
        self.complete_alignment(events);
    }

    /// Ends the alignment in progress if every channel delivered its barrier
    /// or ended.
    fn complete_alignment(&mut self, events: &mut Vec<GateEvent>) {
        let Some(checkpoint) = self.aligning else {
            return;
        };
        if self.channels.iter().all(|c| c.blocked || c.ended) {
            self.aligning = None;
            self.last_aligned = checkpoint;
            self.unblock_all();
            events.push(GateEvent::Aligned { checkpoint });
        }
    }

    fn unblock_all(&mut self) {
        self.channels.iter_mut().for_each(|c| c.blocked = false);
    }

    /// Channel `c` became idle or active.
    fn status(&mut self, c: usize, idle: bool, events: &mut Vec<GateEvent>) {
        let channel = &mut self.channels[c];
        if channel.idle == idle || channel.ended {
            return;
        }
        channel.idle = idle;
        if idle {
            channel.aligned = false;
            // It no longer holds the others back.
            self.advance_watermark(events);
        } else {
            channel.aligned = channel.watermark >= self.forwarded;
        }
        self.update_idle(events);
    }

    /// Tells downstream when every open channel became idle, or one of
    /// them active again.
    fn update_idle(&mut self, events: &mut Vec<GateEvent>) {
        let idle = self.channels.iter().filter(|c| !c.ended).all(|c| c.idle);
        if idle != self.idle {
            self.idle = idle;
            events.push(GateEvent::Idle(idle));
        }
    }

    /// Forwards the minimum over active, aligned open channels if it moved
    /// past the last forwarded watermark.
    fn advance_watermark(&mut self, events: &mut Vec<GateEvent>) {
        let Some(min) = self
            .channels
            .iter()
            .filter(|c| !c.ended && !c.idle && c.aligned)
            .map(|c| c.watermark)
            .min()
        else {
            // Every open channel is idle or catching up: nothing to say.
            return;
        };
        if min > self.forwarded {
            self.forwarded = min;
            events.push(GateEvent::Watermark(min));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(channel: u32, value: &str) -> Message {
        let mut batch = Batch::new();
        batch.push(None, value.as_bytes(), 0);
        Message::Records { channel, batch }
    }

    fn watermark(channel: u32, watermark: i64) -> Message {
        Message::Watermark { channel, watermark }
    }

    fn barrier(channel: u32, checkpoint: u64) -> Message {
        Message::Barrier {
            channel,
            checkpoint,
        }
    }

    fn end(channel: u32) -> Message {
        Message::End { channel }
    }

    /// Expected events, short. The channel is checked by [`offer`], which
    /// knows where each value was sent.
    fn passed(value: &str) -> GateEvent {
        let mut batch = Batch::new();
        batch.push(None, value.as_bytes(), 0);
        GateEvent::Records(0, batch)
    }

    fn started(checkpoint: u64) -> GateEvent {
        GateEvent::AlignmentStarted { checkpoint }
    }

    fn aligned(checkpoint: u64) -> GateEvent {
        GateEvent::Aligned { checkpoint }
    }

    thread_local! {
        /// The channel each record value was sent on.
        static SENT_ON: std::cell::RefCell<std::collections::HashMap<Vec<u8>, u32>> =
            Default::default();
    }

    /// Offers `message`; checks that records come out tagged with the
    /// channel they were sent on, then tags them 0 (as [`passed`] does).
    fn offer(gate: &mut InputGate, message: Message) -> Vec<GateEvent> {
        if let Message::Records { channel, batch } = &message {
            for r in batch.iter() {
                SENT_ON.with(|m| m.borrow_mut().insert(r.value.to_vec(), *channel));
            }
        }
        let events = gate.offer(message).expect("a channel the gate has");
        events
            .into_iter()
            .map(|e| match e {
                GateEvent::Records(channel, batch) => {
                    for r in batch.iter() {
                        let sent = SENT_ON.with(|m| m.borrow().get(r.value).copied());
                        assert_eq!(sent, Some(channel), "record {:?}", r.value);
                    }
                    GateEvent::Records(0, batch)
                }
                other => other,
            })
            .collect::<Vec<_>>()
    }

    #[test]
    fn a_single_input_passes_everything_through_and_aligns_at_its_barrier() {
        let mut gate = InputGate::new(1);
        assert_eq!(offer(&mut gate, records(0, "a")), [passed("a")]);
        assert_eq!(offer(&mut gate, watermark(0, 5)), [GateEvent::Watermark(5)]);
        assert_eq!(offer(&mut gate, barrier(0, 1)), [started(1), aligned(1)]);
        assert_eq!(offer(&mut gate, records(0, "b")), [passed("b")]);
        assert!(gate.held.is_empty());
        assert!(!gate.is_ended());
        // The end forwards no watermark: the subtask's finish sends i64::MAX.
        assert_eq!(offer(&mut gate, end(0)), []);
        assert!(gate.is_ended());
    }

    #[test]
    fn alignment_holds_back_barriered_channels_and_releases_them_in_order_after_the_snapshot() {
        let mut gate = InputGate::new(3);
        for c in 0..3 {
            offer(&mut gate, watermark(c, 20));
        }
        assert_eq!(offer(&mut gate, barrier(0, 1)), [started(1)]);
        assert_eq!(offer(&mut gate, records(0, "a1")), []);
        assert_eq!(offer(&mut gate, records(1, "b0")), [passed("b0")]);
        assert_eq!(offer(&mut gate, barrier(1, 1)), []);
        assert_eq!(offer(&mut gate, records(0, "a2")), []);
        assert_eq!(offer(&mut gate, records(1, "b1")), []);
        // A blocked channel's watermark is held too.
        assert_eq!(offer(&mut gate, watermark(0, 30)), []);
        assert_eq!(gate.held.len(), 4);
        assert_eq!(offer(&mut gate, records(2, "c0")), [passed("c0")]);
        assert_eq!(
            offer(&mut gate, barrier(2, 1)),
            [aligned(1), passed("a1"), passed("a2"), passed("b1")]
        );
        assert!(gate.held.is_empty());
        // The held watermark counted once released: channel 0 is at 30.
        assert_eq!(offer(&mut gate, watermark(1, 40)), []);
        assert_eq!(
            offer(&mut gate, watermark(2, 40)),
            [GateEvent::Watermark(30)]
        );
    }

    #[test]
    fn a_released_barrier_starts_the_next_alignment_and_keeps_the_rest_of_its_channel_held() {
        let mut gate = InputGate::new(2);
        offer(&mut gate, barrier(0, 1));
        offer(&mut gate, records(0, "a1"));
        offer(&mut gate, barrier(0, 2));
        offer(&mut gate, records(0, "a2"));
        assert_eq!(
            offer(&mut gate, barrier(1, 1)),
            [aligned(1), passed("a1"), started(2)]
        );
        assert_eq!(gate.held.len(), 1);
        assert_eq!(offer(&mut gate, records(1, "b1")), [passed("b1")]);
        assert_eq!(offer(&mut gate, barrier(1, 2)), [aligned(2), passed("a2")]);
    }

    #[test]
    fn a_newer_barrier_overtakes_an_alignment_and_the_older_checkpoint_never_aligns() {
        let mut gate = InputGate::new(3);
        assert_eq!(offer(&mut gate, barrier(0, 1)), [started(1)]);
        assert_eq!(offer(&mut gate, records(0, "a1")), []);
        // Channel 1 skipped checkpoint 1: its barrier 2 overtakes, and
        // channel 0, unblocked, releases what it held.
        assert_eq!(
            offer(&mut gate, barrier(1, 2)),
            [
                GateEvent::Abandoned {
                    checkpoint: 1,
                    by: 2
                },
                started(2),
                passed("a1")
            ]
        );
        // The abandoned checkpoint's late barrier blocks nothing.
        assert_eq!(offer(&mut gate, barrier(2, 1)), []);
        assert_eq!(offer(&mut gate, records(2, "c1")), [passed("c1")]);
        assert_eq!(offer(&mut gate, records(1, "b2")), []);
        assert_eq!(offer(&mut gate, barrier(0, 2)), []);
        assert_eq!(offer(&mut gate, barrier(2, 2)), [aligned(2), passed("b2")]);
        // Once 2 is taken, a barrier of 1 or 2 is stale.
        assert_eq!(offer(&mut gate, barrier(1, 1)), []);
        assert_eq!(offer(&mut gate, barrier(1, 2)), []);
        assert_eq!(offer(&mut gate, records(1, "b3")), [passed("b3")]);
    }

    #[test]
    fn a_barrier_older_than_the_alignment_in_progress_is_dropped() {
        let mut gate = InputGate::new(2);
        offer(&mut gate, barrier(0, 3));
        assert_eq!(offer(&mut gate, barrier(1, 2)), []);
        assert_eq!(offer(&mut gate, records(1, "b")), [passed("b")]);
        assert_eq!(offer(&mut gate, barrier(1, 3)), [aligned(3)]);
    }

    #[test]
    fn a_channel_ending_during_alignment_counts_as_aligned() {
        let mut gate = InputGate::new(3);
        offer(&mut gate, barrier(0, 1));
        offer(&mut gate, records(0, "a1"));
        assert_eq!(offer(&mut gate, end(1)), []);
        assert_eq!(offer(&mut gate, barrier(2, 1)), [aligned(1), passed("a1")]);
    }

    #[test]
    fn the_end_of_the_last_unaligned_channel_completes_the_alignment() {
        let mut gate = InputGate::new(3);
        offer(&mut gate, barrier(0, 1));
        offer(&mut gate, barrier(1, 1));
        offer(&mut gate, records(1, "b1"));
        assert_eq!(offer(&mut gate, end(2)), [aligned(1), passed("b1")]);
        assert!(!gate.is_ended());
    }

    #[test]
    fn the_input_ends_only_after_an_alignment_the_last_end_completes() {
        let mut gate = InputGate::new(2);
        offer(&mut gate, barrier(0, 1));
        // Channel 0 already delivered the barrier: its end waits in the gate.
        assert_eq!(offer(&mut gate, end(0)), []);
        assert!(!gate.is_ended());
        assert_eq!(offer(&mut gate, end(1)), [aligned(1)]);
        assert!(gate.is_ended());
        assert!(gate.held.is_empty());
    }

    #[test]
    fn the_watermark_is_the_minimum_over_channels() {
        let mut gate = InputGate::new(3);
        assert_eq!(offer(&mut gate, watermark(0, 10)), []);
        assert_eq!(offer(&mut gate, watermark(1, 5)), []);
        assert_eq!(offer(&mut gate, watermark(2, 7)), [GateEvent::Watermark(5)]);
        assert_eq!(
            offer(&mut gate, watermark(1, 20)),
            [GateEvent::Watermark(7)]
        );
        assert_eq!(
            offer(&mut gate, watermark(2, 30)),
            [GateEvent::Watermark(10)]
        );
    }

    #[test]
    fn an_ended_channel_no_longer_holds_the_watermark_back() {
        let mut gate = InputGate::new(3);
        offer(&mut gate, watermark(0, 10));
        offer(&mut gate, watermark(1, 3));
        // Channel 2 never sent a watermark: ending releases the others.
        assert_eq!(offer(&mut gate, end(2)), [GateEvent::Watermark(3)]);
        assert_eq!(offer(&mut gate, end(1)), [GateEvent::Watermark(10)]);
        assert_eq!(offer(&mut gate, end(0)), []);
        assert!(gate.is_ended());
    }

    #[test]
    fn the_forwarded_watermark_never_regresses_nor_repeats() {
        let mut gate = InputGate::new(2);
        offer(&mut gate, watermark(0, 10));
        assert_eq!(offer(&mut gate, watermark(1, 5)), [GateEvent::Watermark(5)]);
        // Channel 0 going back is ignored: it is still at 10.
        assert_eq!(offer(&mut gate, watermark(0, 4)), []);
        assert_eq!(
            offer(&mut gate, watermark(1, 20)),
            [GateEvent::Watermark(10)]
        );
        // A minimum that did not move is not forwarded again.
        assert_eq!(offer(&mut gate, watermark(1, 30)), []);
        assert_eq!(offer(&mut gate, watermark(0, 10)), []);
    }

    #[test]
    fn a_gate_without_channels_is_ended_at_once() {
        assert!(InputGate::new(0).is_ended());
    }

    #[test]
    fn a_message_for_a_channel_the_gate_lacks_is_refused() {
        let mut gate = InputGate::new(2);
        assert_eq!(
            gate.offer(records(2, "x")),
            Err(BadChannel {
                channel: 2,
                channels: 2
            })
        );
    }

    fn idle(channel: u32, idle: bool) -> Message {
        Message::Idle { channel, idle }
    }

    #[test]
    fn an_idle_channel_stops_holding_the_watermark_back() {
        let mut gate = InputGate::new(2);
        assert_eq!(offer(&mut gate, watermark(0, 10)), []);
        assert_eq!(offer(&mut gate, watermark(1, 5)), [GateEvent::Watermark(5)]);
        assert_eq!(offer(&mut gate, watermark(0, 30)), []);
        // Channel 1 goes quiet: channel 0 alone decides.
        assert_eq!(offer(&mut gate, idle(1, true)), [GateEvent::Watermark(30)]);
        assert_eq!(
            offer(&mut gate, watermark(0, 40)),
            [GateEvent::Watermark(40)]
        );
        // Saying it twice changes nothing.
        assert_eq!(offer(&mut gate, idle(1, true)), []);
    }

    #[test]
    fn a_channel_active_again_behind_the_others_rejoins_once_it_catches_up() {
        let mut gate = InputGate::new(2);
        offer(&mut gate, watermark(1, 5));
        offer(&mut gate, idle(1, true));
        assert_eq!(
            offer(&mut gate, watermark(0, 40)),
            [GateEvent::Watermark(40)]
        );
        // Active again at 5: it does not drag the watermark back or stall it.
        assert_eq!(offer(&mut gate, idle(1, false)), []);
        assert_eq!(
            offer(&mut gate, watermark(0, 50)),
            [GateEvent::Watermark(50)]
        );
        assert_eq!(offer(&mut gate, watermark(1, 45)), []);
        // Caught up (at 60, past 50): it holds the minimum again.
        assert_eq!(offer(&mut gate, watermark(1, 60)), []);
        assert_eq!(
            offer(&mut gate, watermark(0, 70)),
            [GateEvent::Watermark(60)]
        );
    }

    #[test]
    fn the_gate_is_idle_when_every_open_channel_is() {
        let mut gate = InputGate::new(3);
        offer(&mut gate, watermark(0, 1));
        assert_eq!(offer(&mut gate, idle(0, true)), []);
        assert_eq!(offer(&mut gate, idle(1, true)), []);
        // The last active channel ends: the rest are idle.
        assert_eq!(offer(&mut gate, end(2)), [GateEvent::Idle(true)]);
        // One wakes up: active downstream too, before its watermark.
        assert_eq!(offer(&mut gate, idle(1, false)), [GateEvent::Idle(false)]);
        assert_eq!(offer(&mut gate, watermark(1, 9)), [GateEvent::Watermark(9)]);
        // No watermark forwarded while every channel is idle.
        assert_eq!(offer(&mut gate, idle(1, true)), [GateEvent::Idle(true)]);
        assert_eq!(offer(&mut gate, watermark(1, 20)), []);
    }

    mod fuzz {
        //! Random interleavings of per-channel message sequences, checked
        //! against what exactly-once checkpoints need from the gate.

        use std::collections::{BTreeSet, HashMap};

        use proptest::prelude::*;

        use super::*;
        use weir_fuzz::config;

        /// One channel's messages, as (kind, watermark) pairs for
        /// [`messages`]; one to three channels.
        fn inputs() -> impl Strategy<Value = Vec<Vec<(u8, i64)>>> {
            prop::collection::vec(prop::collection::vec((0u8..6, 0i64..100), 0..16), 1..=3)
        }

        /// Channel `c`'s messages: records (the value names the channel and
        /// the position), watermarks, and barriers of increasing ids, some
        /// skipped; then its `End`.
        fn messages(c: u32, ops: &[(u8, i64)]) -> Vec<Message> {
            let mut checkpoint = 0;
            let mut messages = Vec::new();
            for (i, &(op, w)) in ops.iter().enumerate() {
                messages.push(match op {
                    0..=2 => records(c, &format!("{c}/{i}")),
                    3 => watermark(c, w),
                    _ => {
                        checkpoint += u64::from(op) - 3;
                        barrier(c, checkpoint)
                    }
                });
            }
            messages.push(end(c));
            messages
        }

        /// The last barrier before each record on its channel (0: none).
        fn epochs(channels: &[Vec<Message>]) -> HashMap<String, u64> {
            let mut epochs = HashMap::new();
            for messages in channels {
                let mut epoch = 0;
                for m in messages {
                    match m {
                        Message::Barrier { checkpoint, .. } => epoch = *checkpoint,
                        Message::Records { batch, .. } => {
                            epochs.insert(value(batch), epoch);
                        }
                        _ => {}
                    }
                }
            }
            epochs
        }

        /// (channel, index) of a record value `c/i`.
        fn position(value: &str) -> (u32, usize) {
            let (c, i) = value.split_once('/').expect("c/i");
            (c.parse().expect("channel"), i.parse().expect("index"))
        }

        fn value(batch: &Batch) -> String {
            let record = batch.iter().next().expect("one record");
            String::from_utf8(record.value.to_vec()).expect("utf-8")
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn every_snapshot_covers_exactly_the_records_before_its_barriers(
                inputs in inputs(),
                picks in prop::collection::vec(any::<usize>(), 60),
            ) {
                let n = inputs.len() as u32;
                let channels: Vec<Vec<Message>> = (0..n)
                    .map(|c| messages(c, &inputs[c as usize]))
                    .collect();
                let epochs = epochs(&channels);
                let barriers: Vec<BTreeSet<u64>> = channels
                    .iter()
                    .map(|ms| ms.iter().filter_map(|m| match m {
                        Message::Barrier { checkpoint, .. } => Some(*checkpoint),
                        _ => None,
                    }).collect())
                    .collect();
                // Checkpoint k aligns iff some channel delivers it and no
                // channel skips it on its way to a newer one.
                let expected: Vec<u64> = barriers
                    .iter()
                    .flatten()
                    .copied()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|k| barriers.iter().all(|b| b.contains(k) || b.iter().all(|m| m < k)))
                    .collect();

                let mut gate = InputGate::new(n);
                let mut queues: Vec<VecDeque<Message>> =
                    channels.into_iter().map(VecDeque::from).collect();
                let mut events = Vec::new();
                let mut pick = picks.iter().cycle();
                while !gate.is_ended() {
                    let live: Vec<usize> =
                        (0..queues.len()).filter(|c| !queues[*c].is_empty()).collect();
                    prop_assert!(!live.is_empty(), "every message offered, gate not ended");
                    let c = live[pick.next().expect("cycled") % live.len()];
                    let message = queues[c].pop_front().expect("live");
                    events.extend(gate.offer(message).expect("a channel the gate has"));
                }
                prop_assert!(gate.held.is_empty());

                // Each record with the number of snapshots taken before it.
                let mut records = Vec::new();
                let mut aligned = Vec::new();
                let mut in_progress = None;
                let mut forwarded = i64::MIN;
                for event in events {
                    match event {
                        GateEvent::Records(_, batch) => records.push((value(&batch), aligned.len())),
                        GateEvent::Watermark(w) => {
                            prop_assert!(w > forwarded, "watermark {} after {}", w, forwarded);
                            forwarded = w;
                        }
                        GateEvent::Idle(_) | GateEvent::Latency(_) => {}
                        GateEvent::AlignmentStarted { checkpoint } => {
                            prop_assert_eq!(in_progress, None);
                            in_progress = Some(checkpoint);
                        }
                        GateEvent::Aligned { checkpoint } => {
                            prop_assert_eq!(in_progress.take(), Some(checkpoint));
                            aligned.push(checkpoint);
                        }
                        GateEvent::Abandoned { checkpoint, by } => {
                            prop_assert_eq!(in_progress.take(), Some(checkpoint));
                            prop_assert!(by > checkpoint);
                        }
                    }
                }
                prop_assert_eq!(in_progress, None);
                prop_assert_eq!(&aligned, &expected);
                // Exactly the records before barrier k on their channel
                // precede the snapshot of k.
                for (v, taken) in &records {
                    let epoch = epochs[v];
                    prop_assert!(aligned[..*taken].iter().all(|k| *k <= epoch), "{} too late", v);
                    prop_assert!(aligned[*taken..].iter().all(|k| epoch < *k), "{} too early", v);
                }
                // Every record exactly once (as many as sent, none twice),
                // in its channel's order.
                let order: Vec<(u32, usize)> = records.iter().map(|(v, _)| position(v)).collect();
                let mut distinct = order.clone();
                distinct.sort();
                distinct.dedup();
                prop_assert_eq!(distinct.len(), epochs.len());
                prop_assert_eq!(order.len(), epochs.len());
                for c in 0..n {
                    let mine: Vec<usize> =
                        order.iter().filter(|(ch, _)| *ch == c).map(|(_, i)| *i).collect();
                    prop_assert!(mine.windows(2).all(|w| w[0] < w[1]), "channel {} reordered", c);
                }
            }
        }
    }
}
