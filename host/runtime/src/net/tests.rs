//! The data plane over real QUIC on 127.0.0.1 (port 0), two DataPlanes per
//! test. No sleeps synchronize anything: tests wait on channels and tasks,
//! with generous timeouts only to fail instead of hanging.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::timeout;

use super::tls::{ClusterCa, NodeIdentity, endpoint};
use super::*;
use crate::record::Batch;

/// Fails a test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(20);

fn plane(id: &NodeIdentity, config: NetConfig) -> DataPlane {
    let ep = endpoint("127.0.0.1:0".parse().unwrap(), id).unwrap();
    DataPlane::new(ep, config)
}

fn pair(config: NetConfig) -> (DataPlane, DataPlane) {
    let ca = ClusterCa::generate().unwrap();
    (
        plane(&ca.issue_taskmanager("tm-a").unwrap(), config),
        plane(&ca.issue_taskmanager("tm-b").unwrap(), config),
    )
}

/// An input gate of 8 channels that accepts streams from `tm-a`.
fn gate(tx: mpsc::Sender<Message>) -> Input {
    Input {
        tx,
        channels: 8,
        senders: Arc::new(["tm-a".to_string()].into()),
        max_record_bytes: ChannelOptions::default().max_record_bytes,
    }
}

/// Where `b` of [`pair`] (TaskManager `tm-b`) listens.
fn to(b: &DataPlane) -> Peer {
    Peer {
        id: "tm-b".into(),
        addr: b.local_addr(),
    }
}

fn key(job: &str, subtask: u32) -> InputKey {
    InputKey {
        job: job.into(),
        task: 1,
        subtask,
    }
}

fn batch(first: u64, records: usize, value_len: usize) -> Batch {
    let mut b = Batch::new();
    for i in first..first + records as u64 {
        let mut value = i.to_le_bytes().to_vec();
        value.resize(value_len.max(8), (i % 251) as u8);
        let key = (i % 2 == 0).then(|| i.to_string());
        b.push(key.as_deref().map(str::as_bytes), &value, i as i64);
    }
    b
}

fn opts(buffer_timeout: Duration) -> ChannelOptions {
    ChannelOptions {
        buffer_size: 32 * 1024,
        buffer_timeout,
        ..ChannelOptions::default()
    }
}

async fn recv(rx: &mut mpsc::Receiver<Message>) -> Message {
    timeout(PATIENCE, rx.recv())
        .await
        .expect("message in time")
        .expect("input open")
}

/// What a channel carries, comparable.
#[derive(Debug, PartialEq)]
enum Seen {
    Records(Batch),
    Watermark(u32, i64),
    Idle(u32, bool),
    End(u32),
}

fn seen(m: Message) -> Seen {
    match m {
        Message::Records { batch: b, .. } => Seen::Records(b),
        Message::Watermark { channel, watermark } => Seen::Watermark(channel, watermark),
        Message::End { channel } => Seen::End(channel),
        Message::Idle { channel, idle } => Seen::Idle(channel, idle),
        Message::Barrier { .. } | Message::Latency { .. } => {
            unreachable!("these tests send no barriers or latency markers")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundtrip_keeps_every_message_in_order_per_channel() {
    let (a, b) = pair(NetConfig::default());
    // Two inputs on b; three channels into input 0 (channel indexes 0..3),
    // one into input 1. Input 1 registers only after its sender started,
    // so its stream waits for the registration.
    let (in0, mut rx0) = mpsc::channel(4);
    b.register_input(key("j", 0), gate(in0));
    let abort = Abort::new();
    let mut plans = Vec::new();
    for channel in 0..4u32 {
        let subtask = u32::from(channel == 3);
        let mut msgs = Vec::new();
        let mut next = u64::from(channel) * 1_000_000;
        for round in 0..20 {
            let size = if round == 7 { 5000 } else { 1 + round * 13 };
            msgs.push(Seen::Records(batch(next, size, 16 + round)));
            next += size as u64;
            if round % 5 == 4 {
                msgs.push(Seen::Watermark(channel % 3, round as i64));
            }
            if round % 7 == 6 {
                msgs.push(Seen::Idle(channel % 3, round % 2 == 0));
            }
        }
        // Larger than a 32 KiB buffer several times over.
        msgs.push(Seen::Records(batch(next, 2000, 100)));
        msgs.push(Seen::End(channel % 3));
        plans.push((subtask, msgs));
    }
    let mut writers = Vec::new();
    let mut tasks = Vec::new();
    for (subtask, msgs) in &plans {
        let (tx, task) = a.open_channel_with_handle(
            to(&b),
            key("j", *subtask),
            opts(Duration::from_millis(5)),
            abort.clone(),
        );
        let msgs: Vec<Message> = msgs
            .iter()
            .map(|m| match m {
                Seen::Records(b) => Message::Records {
                    channel: 0,
                    batch: b.clone(),
                },
                Seen::Watermark(c, w) => Message::Watermark {
                    channel: *c,
                    watermark: *w,
                },
                Seen::End(c) => Message::End { channel: *c },
                Seen::Idle(c, idle) => Message::Idle {
                    channel: *c,
                    idle: *idle,
                },
            })
            .collect();
        writers.push(tokio::spawn(async move {
            for m in msgs {
                tx.send(m).await.expect("writer alive");
            }
        }));
        tasks.push(task);
    }
    let (in1, mut rx1) = mpsc::channel(4);
    b.register_input(key("j", 1), gate(in1));

    // Input 0 interleaves channels 0..3 (told apart by the first value's
    // prefix); each channel's own order must hold.
    let mut got: Vec<Vec<Seen>> = (0..4).map(|_| Vec::new()).collect();
    let mut ended = 0;
    while ended < 3 {
        let m = seen(recv(&mut rx0).await);
        let channel = match &m {
            Seen::Records(b) => {
                let first =
                    u64::from_le_bytes(b.iter().next().unwrap().value[..8].try_into().unwrap());
                (first / 1_000_000) as usize
            }
            Seen::Watermark(c, _) | Seen::Idle(c, _) | Seen::End(c) => *c as usize,
        };
        if matches!(m, Seen::End(_)) {
            ended += 1;
        }
        got[channel].push(m);
    }
    loop {
        let m = seen(recv(&mut rx1).await);
        let end = matches!(m, Seen::End(_));
        got[3].push(m);
        if end {
            break;
        }
    }
    for (channel, (_, sent)) in plans.iter().enumerate() {
        assert_eq!(&got[channel], sent, "channel {channel}");
    }
    for w in writers {
        w.await.unwrap();
    }
    for t in tasks {
        timeout(PATIENCE, t).await.unwrap().unwrap().unwrap();
    }
    assert!(!abort.is_set());
    let stats = a.stats();
    assert!(stats.bytes_sent > 4 * 2000 * 100, "{stats:?}");
    assert_eq!(stats.bytes_sent, b.stats().bytes_received);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_ends_ok_once_everything_is_delivered() {
    let (a, b) = pair(NetConfig::default());
    let (input, mut rx) = mpsc::channel(64);
    b.register_input(key("done", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("done", 0),
        opts(Duration::from_secs(60)),
        abort.clone(),
    );
    for i in 0..10 {
        tx.send(Message::Records {
            channel: 0,
            batch: batch(i * 100, 100, 50),
        })
        .await
        .unwrap();
    }
    tx.send(Message::End { channel: 0 }).await.unwrap();
    drop(tx);
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
    // Delivered means already in the input mpsc.
    let mut records = 0;
    while let Ok(m) = rx.try_recv() {
        if let Message::Records { batch: b, .. } = m {
            records += b.len();
        }
    }
    assert_eq!(records, 1000);
    assert_eq!(a.stats().buffered_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_consumer_bounds_buffered_bytes_and_blocks_the_sender() {
    let config = NetConfig {
        buffer_size: 8 * 1024,
        credits_per_channel: 3,
    };
    let (a, b) = pair(config);
    let (input, mut rx) = mpsc::channel(2);
    b.register_input(key("slow", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("slow", 0),
        ChannelOptions {
            buffer_size: 64 * 1024, // capped to the receiver's 8 KiB
            buffer_timeout: Duration::from_millis(1),
            ..ChannelOptions::default()
        },
        abort.clone(),
    );
    // ~5 KiB batches; 400 of them is 2 MiB, far more than can be in flight.
    let total = 400u64;
    let mut sent = 0u64;
    // Until a send has been blocked for half a second: backpressure reached
    // the sender.
    while let Ok(r) = timeout(
        Duration::from_millis(500),
        tx.send(Message::Records {
            channel: 0,
            batch: batch(sent * 50, 50, 100),
        }),
    )
    .await
    {
        r.unwrap();
        sent += 1;
        assert!(sent < total, "the sender never blocked");
    }
    let bound = (u64::from(config.credits_per_channel) + 1) * config.buffer_size as u64;
    let stats = a.stats();
    assert!(
        stats.max_buffered_bytes <= bound,
        "{stats:?} exceeds (C + 1) × B = {bound}"
    );
    // Everything not yet delivered fits in: the input mpsc (2 messages),
    // one buffer's messages waiting to enter it, C buffers, the one being
    // filled and the writer's mpsc (1 message): a few dozen batches, not 400.
    assert!(
        sent < 40,
        "{sent} batches got in while the consumer stalled"
    );
    // The writer spent every credit and waits for one.
    let stats = a.stats();
    assert_eq!(
        (
            stats.channels_out,
            stats.buffers_in_flight,
            stats.credits_available
        ),
        (1, u64::from(config.credits_per_channel), 0),
        "{stats:?}"
    );
    assert_eq!(b.stats().channels_in, 1);

    // Drain: the rest (including what the blocked sender now sends) arrives.
    let consumer = tokio::spawn(async move {
        let mut next = 0u64;
        loop {
            match recv(&mut rx).await {
                Message::Records { batch: b, .. } => {
                    for r in &b {
                        assert_eq!(r.timestamp as u64, next);
                        next += 1;
                    }
                }
                Message::End { .. } => return next,
                Message::Watermark { .. }
                | Message::Idle { .. }
                | Message::Barrier { .. }
                | Message::Latency { .. } => {}
            }
        }
    });
    // The message that timed out above was dropped; resend from `sent`.
    for i in sent..total {
        tx.send(Message::Records {
            channel: 0,
            batch: batch(i * 50, 50, 100),
        })
        .await
        .unwrap();
    }
    tx.send(Message::End { channel: 0 }).await.unwrap();
    drop(tx);
    assert_eq!(
        timeout(PATIENCE, consumer).await.unwrap().unwrap(),
        total * 50
    );
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
    let stats = a.stats();
    assert!(stats.max_buffered_bytes <= bound, "{stats:?}");
    assert_eq!(stats.buffered_bytes, 0);
    // The channel is gone, and so are its credits; its waits are counted.
    assert_eq!(
        (
            stats.channels_out,
            stats.buffers_in_flight,
            stats.credits_available
        ),
        (0, 0, 0),
        "{stats:?}"
    );
    assert!(stats.credit_wait_ns > 0, "{stats:?}");
    assert_eq!(b.stats().channels_in, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_timeout_flushes_a_lone_record() {
    let (a, b) = pair(NetConfig::default());
    let (input, mut rx) = mpsc::channel(4);
    b.register_input(key("lone", 0), gate(input));
    let abort = Abort::new();
    let tx = a.open_channel(
        to(&b),
        key("lone", 0),
        opts(Duration::from_millis(10)),
        abort.clone(),
    );
    let mut one = Batch::new();
    one.push(None, b"just me", 42);
    tx.send(Message::Records {
        channel: 0,
        batch: one.clone(),
    })
    .await
    .unwrap();
    // `tx` stays open and nothing else is sent: only the timeout can flush.
    match recv(&mut rx).await {
        Message::Records { batch: b, .. } => assert_eq!(b, one),
        other => panic!("{other:?}"),
    }
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_from_another_ca_cannot_open_a_channel() {
    let ours = ClusterCa::generate().unwrap();
    let theirs = ClusterCa::generate().unwrap();
    let b = plane(
        &ours.issue_taskmanager("tm-b").unwrap(),
        NetConfig::default(),
    );
    let (input, mut rx) = mpsc::channel(4);
    b.register_input(key("j", 0), gate(input));

    // A stranger: certificate and trust from another CA.
    let stranger = plane(
        &theirs.issue_taskmanager("tm-x").unwrap(),
        NetConfig::default(),
    );
    // A sneak: trusts our CA (so it accepts b's certificate) but presents a
    // certificate from another CA, which b must reject.
    let sneak = plane(
        &theirs.issue_taskmanager("tm-y").unwrap().trusting(&ours),
        NetConfig::default(),
    );
    for (who, node) in [("stranger", &stranger), ("sneak", &sneak)] {
        let abort = Abort::new();
        let (tx, task) = node.open_channel_with_handle(
            to(&b),
            key("j", 0),
            opts(Duration::from_millis(1)),
            abort.clone(),
        );
        let _ = tx.send(Message::End { channel: 0 }).await;
        let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
        assert!(abort.is_set(), "{who}");
        let msg = err.to_string();
        assert!(
            matches!(err, NetError::Connect { .. } | NetError::Channel { .. }),
            "{who}: {msg}"
        );
        assert!(msg.contains("UnknownIssuer"), "{who}: {msg}");
    }
    assert!(rx.try_recv().is_err());
    assert_eq!(b.stats().bytes_received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_a_job_aborts_its_senders() {
    let (a, b) = pair(NetConfig::default());
    let (input, mut rx) = mpsc::channel(1);
    b.register_input(key("gone", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("gone", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    tx.send(Message::Watermark {
        channel: 0,
        watermark: 1,
    })
    .await
    .unwrap();
    assert!(matches!(recv(&mut rx).await, Message::Watermark { .. }));
    b.unregister_job("gone");
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("dropped the job"), "{err}");
    assert!(abort.is_set());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_a_blocked_writer() {
    let (a, b) = pair(NetConfig {
        buffer_size: 1024,
        credits_per_channel: 1,
    });
    let (input, _rx) = mpsc::channel(1);
    b.register_input(key("stuck", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("stuck", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    let filler = tokio::spawn(async move {
        let mut i = 0;
        while tx
            .send(Message::Records {
                channel: 0,
                batch: batch(i, 10, 100),
            })
            .await
            .is_ok()
        {
            i += 10;
        }
    });
    // The writer gets stuck waiting for credits sooner or later; abort it
    // whatever it is waiting on.
    abort.trigger();
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(matches!(err, NetError::Aborted), "{err}");
    timeout(PATIENCE, filler).await.unwrap().unwrap();
    assert_eq!(a.stats().buffered_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_is_gone_aborts_the_channel() {
    let (a, b) = pair(NetConfig::default());
    let (input, mut rx) = mpsc::channel(1);
    b.register_input(key("j", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("j", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    tx.send(Message::Watermark {
        channel: 0,
        watermark: 1,
    })
    .await
    .unwrap();
    assert!(matches!(recv(&mut rx).await, Message::Watermark { .. }));
    // The writer is idle, waiting for its next message, when the peer goes.
    b.close();
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(abort.is_set(), "{err}");
    assert!(
        err.to_string().contains("shutting down") || err.to_string().contains("closed"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_waits_for_its_late_registration() {
    let (a, b) = pair(NetConfig::default());
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("late", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    tx.send(Message::End { channel: 5 }).await.unwrap();
    drop(tx);
    // The stream has reached b and waits; only now does its input appear.
    timeout(PATIENCE, b.shared.waiter_added.notified())
        .await
        .unwrap();
    let (input, mut rx) = mpsc::channel(1);
    b.register_input(key("late", 0), gate(input));
    assert!(matches!(recv(&mut rx).await, Message::End { channel: 5 }));
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
}

/// With room for two waiting streams on `b`: streams from `senders[0]`
/// and `senders[1]` wait, the one from `senders[2]` is refused at once,
/// saying why, and the two waiting still get their inputs.
async fn two_wait_and_the_third_is_refused(b: &DataPlane, senders: [&DataPlane; 3]) {
    b.set_max_waiting_streams(2);
    let abort = Abort::new();
    let mut waiting = Vec::new();
    for (subtask, from) in senders[..2].iter().enumerate() {
        let (tx, task) = from.open_channel_with_handle(
            to(b),
            key("early", subtask as u32),
            opts(Duration::from_millis(1)),
            abort.clone(),
        );
        tx.send(Message::End { channel: 0 }).await.unwrap();
        timeout(PATIENCE, b.shared.waiter_added.notified())
            .await
            .unwrap();
        waiting.push((tx, task));
    }
    let third = Abort::new();
    let (tx, task) = senders[2].open_channel_with_handle(
        to(b),
        key("early", 2),
        opts(Duration::from_millis(1)),
        third.clone(),
    );
    tx.send(Message::End { channel: 0 }).await.unwrap();
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("too many"), "{err}");
    assert!(third.is_set());
    // The two waiting streams were not disturbed: their inputs come.
    for (subtask, (tx, task)) in waiting.into_iter().enumerate() {
        let (input, mut rx) = mpsc::channel(1);
        b.register_input(key("early", subtask as u32), gate(input));
        assert!(matches!(recv(&mut rx).await, Message::End { channel: 0 }));
        drop(tx);
        timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
    }
    assert!(!abort.is_set());
}

/// Issue 10: streams waiting for their registration are bounded per
/// connection: past the bound a stream is refused at once, saying why,
/// and the ones waiting still get their inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_waiting_for_their_registration_are_bounded_per_connection() {
    let (a, b) = pair(NetConfig::default());
    two_wait_and_the_third_is_refused(&b, [&a, &a, &a]).await;
}

/// Issue 10: the bound holds per sending TaskManager, not per connection:
/// a second process holding the same certificate (its own connection)
/// shares the first one's allowance of waiting streams (the second
/// connection's second stream is the sender's third).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_waiting_for_their_registration_are_bounded_per_sender_over_its_connections() {
    let ca = ClusterCa::generate().unwrap();
    let a = plane(&ca.issue_taskmanager("tm-a").unwrap(), NetConfig::default());
    let again = plane(&ca.issue_taskmanager("tm-a").unwrap(), NetConfig::default());
    let b = plane(&ca.issue_taskmanager("tm-b").unwrap(), NetConfig::default());
    two_wait_and_the_third_is_refused(&b, [&a, &again, &again]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_for_an_input_never_registered_is_refused() {
    let (a, b) = pair(NetConfig::default());
    b.set_registration_timeout(Duration::from_millis(50));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("nobody", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    tx.send(Message::End { channel: 0 }).await.unwrap();
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("no such input"), "{err}");
    assert!(abort.is_set());
    // The refused waiter left nothing behind.
    assert!(b.shared.inputs.lock().unwrap().is_empty());
}

/// Issue 10, finding 8: a message naming an input channel the subtask does
/// not have used to reach the subtask's input gate, which indexes its
/// channels by that number, and panicked it. Now the stream fails and the
/// input stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_channel_index_fails_the_stream_not_the_subtask() {
    let (a, b) = pair(NetConfig::default());
    let (tx, mut rx) = mpsc::channel(4);
    b.register_input(
        key("j", 0),
        Input {
            channels: 2,
            ..gate(tx)
        },
    );
    let abort = Abort::new();
    let (bad, task) =
        a.open_channel_with_handle(to(&b), key("j", 0), opts(Duration::ZERO), abort.clone());
    bad.send(Message::Watermark {
        channel: 1,
        watermark: 7,
    })
    .await
    .unwrap();
    assert!(matches!(
        recv(&mut rx).await,
        Message::Watermark {
            channel: 1,
            watermark: 7
        }
    ));
    let _ = bad
        .send(Message::Watermark {
            channel: 2,
            watermark: 8,
        })
        .await;
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("corrupt data"), "{err}");
    assert!(abort.is_set());
    // Nothing of the bad stream reached the input, which is still open and
    // served: a good channel to it delivers.
    assert!(rx.try_recv().is_err(), "the bad message was not delivered");
    let (good, task) =
        a.open_channel_with_handle(to(&b), key("j", 0), opts(Duration::ZERO), Abort::new());
    good.send(Message::End { channel: 0 }).await.unwrap();
    drop(good);
    assert!(matches!(recv(&mut rx).await, Message::End { channel: 0 }));
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
}

/// A batch far longer than [`codec::SPLIT_BYTES`] crosses as several
/// messages, none longer than what the receiver accepts for the job's
/// record size, and arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_longer_than_a_receiver_accepts_in_one_message_arrives_split() {
    let (a, b) = pair(NetConfig::default());
    let (tx, mut rx) = mpsc::channel(64);
    let max_record_bytes = 64 * 1024;
    b.register_input(
        key("j", 0),
        Input {
            max_record_bytes,
            ..gate(tx)
        },
    );
    let options = ChannelOptions {
        max_record_bytes,
        ..opts(Duration::ZERO)
    };
    let (out, task) = a.open_channel_with_handle(to(&b), key("j", 0), options, Abort::new());
    // Over 3 × 4 MiB in 40 KiB records, then one record of the largest size.
    let mut big = batch(0, 320, 40 * 1024);
    big.push(None, &vec![9; max_record_bytes as usize], 320);
    assert!(big.byte_size() > 3 * codec::SPLIT_BYTES);
    out.send(Message::Records {
        channel: 0,
        batch: big.clone(),
    })
    .await
    .unwrap();
    out.send(Message::End { channel: 0 }).await.unwrap();
    drop(out);
    let mut got = Batch::new();
    let mut messages = 0;
    loop {
        match recv(&mut rx).await {
            Message::Records { channel: 0, batch } => {
                messages += 1;
                assert!(
                    batch.byte_size() + 13 <= codec::max_message_bytes(max_record_bytes) as usize
                );
                for r in batch.iter() {
                    got.push(r.key, r.value, r.timestamp);
                }
            }
            Message::End { channel: 0 } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, big);
    assert!(messages >= 4, "{messages} messages");
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
}

/// A record longer than the job allows fails its channel at the sender,
/// saying how long it is, instead of reaching the receiver as "corrupt".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_longer_than_the_job_allows_fails_the_sender_saying_so() {
    let (a, b) = pair(NetConfig::default());
    let (tx, mut rx) = mpsc::channel(4);
    b.register_input(key("j", 0), gate(tx));
    let options = ChannelOptions {
        max_record_bytes: 1000,
        ..opts(Duration::ZERO)
    };
    let abort = Abort::new();
    let (out, task) = a.open_channel_with_handle(to(&b), key("j", 0), options, abort.clone());
    let mut b2 = Batch::new();
    b2.push(Some(b"k"), &[1; 999], 1);
    b2.push(Some(b"k"), &[1; 1000], 2);
    let _ = out
        .send(Message::Records {
            channel: 0,
            batch: b2,
        })
        .await;
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("record 1 of a batch has 1001 bytes of key and value, more than the 1000"),
        "{err}"
    );
    assert!(abort.is_set());
    assert!(rx.try_recv().is_err(), "nothing of the batch was delivered");
}

/// Issue 10: a peer in the placement could announce a batch of up to
/// 1 GiB and send it slowly, and the receiver buffered all of it. Now a
/// message longer than the job's records allow fails the stream as soon
/// as its header arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_announced_longer_than_the_job_allows_fails_the_stream_at_its_header() {
    let (a, b) = pair(NetConfig::default());
    let (tx, mut rx) = mpsc::channel(4);
    b.register_input(key("j", 0), gate(tx));
    // What a modified sender does: a valid stream header, then a buffer
    // holding only the header of a 100 MiB batch.
    let conn = a.shared.connection(&to(&b)).await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&wire::header(&key("j", 0))).await.unwrap();
    let mut grant = [0u8; 8];
    timeout(PATIENCE, recv.read_exact(&mut grant))
        .await
        .unwrap()
        .unwrap();
    let mut records = vec![0u8]; // the tag of `Records`
    records.extend_from_slice(&0u32.to_le_bytes());
    records.extend_from_slice(&0u32.to_le_bytes());
    records.extend_from_slice(&(100u32 << 20).to_le_bytes());
    let mut frame = (records.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&records);
    send.write_all(&frame).await.unwrap();
    // The receiver resets the stream rather than wait for the rest.
    let mut rest = [0u8; 4];
    let refused = timeout(PATIENCE, recv.read_exact(&mut rest))
        .await
        .expect("the receiver refuses the stream instead of waiting for 100 MiB");
    assert!(refused.is_err(), "{refused:?}");
    assert!(rx.try_recv().is_err());
}

/// Issue 10, finding 8: any node with a cluster certificate could feed any
/// job's subtasks. Now an input accepts streams only from the TaskManagers
/// of its job's placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_from_a_taskmanager_outside_the_placement_is_refused() {
    let ca = ClusterCa::generate().unwrap();
    let a = plane(&ca.issue_taskmanager("tm-a").unwrap(), NetConfig::default());
    let b = plane(&ca.issue_taskmanager("tm-b").unwrap(), NetConfig::default());
    let outsider = plane(&ca.issue_taskmanager("tm-c").unwrap(), NetConfig::default());
    let (tx, mut rx) = mpsc::channel(4);
    b.register_input(key("j", 0), gate(tx));

    let abort = Abort::new();
    let (tx, task) =
        outsider.open_channel_with_handle(to(&b), key("j", 0), opts(Duration::ZERO), abort.clone());
    let _ = tx.send(Message::End { channel: 0 }).await;
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("does not accept this job's data from this TaskManager"),
        "{err}"
    );
    assert!(abort.is_set());
    assert!(rx.try_recv().is_err());

    // The placement's own TaskManager still gets through.
    let (tx, task) =
        a.open_channel_with_handle(to(&b), key("j", 0), opts(Duration::ZERO), Abort::new());
    tx.send(Message::End { channel: 3 }).await.unwrap();
    drop(tx);
    assert!(matches!(recv(&mut rx).await, Message::End { channel: 3 }));
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
}

/// A channel is opened to the TaskManager the placement names: a node at
/// that address with another TaskManager's certificate fails the
/// handshake, and so does a certificate that is no TaskManager's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_connect_only_to_the_named_taskmanager() {
    let ca = ClusterCa::generate().unwrap();
    let a = plane(&ca.issue_taskmanager("tm-a").unwrap(), NetConfig::default());
    let b = plane(&ca.issue_taskmanager("tm-b").unwrap(), NetConfig::default());
    let (tx, mut rx) = mpsc::channel(4);
    b.register_input(key("j", 0), gate(tx));
    let impostor = Peer {
        id: "tm-z".into(),
        addr: b.local_addr(),
    };
    let abort = Abort::new();
    let (tx, task) =
        a.open_channel_with_handle(impostor, key("j", 0), opts(Duration::ZERO), abort.clone());
    let _ = tx.send(Message::End { channel: 0 }).await;
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(matches!(err, NetError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("not valid for name"), "{err}");

    // The JobManager's certificate is a server certificate only: it cannot
    // open data channels.
    let jm = plane(&ca.issue_jobmanager().unwrap(), NetConfig::default());
    let abort = Abort::new();
    let (tx, task) = jm.open_channel_with_handle(to(&b), key("j", 0), opts(Duration::ZERO), abort);
    let _ = tx.send(Message::End { channel: 0 }).await;
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(rx.try_recv().is_err());
    assert_eq!(b.stats().bytes_received, 0);
}

/// `weir cluster revoke`: with the cluster's `crl.pem` loaded, a revoked
/// TaskManager certificate opens no channel; the one issued after it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_opens_no_channel_and_its_reissue_does() {
    use super::tls::{init_cluster_dir, issue_in_cluster_dir, revoke_in_cluster_dir};
    let dir = tempfile::tempdir().unwrap();
    let names = ["tm-b".to_string(), "tm-x".to_string()];
    init_cluster_dir(dir.path(), &names, 1, &[]).unwrap();
    // The key that leaks, as it was before the revocation.
    let stolen = NodeIdentity::load(dir.path(), "taskmanager-tm-x").unwrap();
    revoke_in_cluster_dir(dir.path(), &["tm-x".into()]).unwrap();
    let b = plane(
        &NodeIdentity::load(dir.path(), "taskmanager-tm-b").unwrap(),
        NetConfig::default(),
    );
    let (input, mut rx) = mpsc::channel(4);
    let from_x = Input {
        senders: Arc::new(["tm-x".to_string()].into()),
        ..gate(input)
    };
    b.register_input(key("j", 0), from_x);

    let thief = plane(&stolen, NetConfig::default());
    let abort = Abort::new();
    let (tx, task) = thief.open_channel_with_handle(
        to(&b),
        key("j", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    let _ = tx.send(Message::End { channel: 0 }).await;
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("Revoked"), "{err}");
    assert!(rx.try_recv().is_err());

    issue_in_cluster_dir(dir.path(), false, &["tm-x".into()], 1, &[]).unwrap();
    let reissued = plane(
        &NodeIdentity::load(dir.path(), "taskmanager-tm-x").unwrap(),
        NetConfig::default(),
    );
    let (tx, _task) = reissued.open_channel_with_handle(
        to(&b),
        key("j", 0),
        opts(Duration::from_millis(1)),
        Abort::new(),
    );
    tx.send(Message::End { channel: 0 }).await.unwrap();
    assert!(matches!(recv(&mut rx).await, Message::End { .. }));
}

/// The race CI hit: the receiving TaskManager's subtasks finish (every
/// channel delivered its `End`) and it unregisters the job while the
/// sender's clean end is still in flight. The sender must end `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_after_every_end_lets_the_sender_finish() {
    let (a, b) = pair(NetConfig::default());
    let (input, mut rx) = mpsc::channel(4);
    b.register_input(key("done", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("done", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    // Two upstream subtasks share the stream; both end.
    for channel in [0, 1] {
        tx.send(Message::Records {
            channel,
            batch: batch(0, 3, 8),
        })
        .await
        .unwrap();
        tx.send(Message::End { channel }).await.unwrap();
    }
    let mut ends = 0;
    while ends < 2 {
        if let Message::End { .. } = recv(&mut rx).await {
            ends += 1;
        }
    }
    // Its credit for the last buffer may still be on the way: the stream
    // must outlive the unregistration either way.
    b.unregister_job("done");
    drop(rx);
    drop(tx);
    timeout(PATIENCE, task).await.unwrap().unwrap().unwrap();
    assert!(!abort.is_set());
}

/// Until every channel of a stream ended, unregistering still fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_with_one_channel_open_aborts_the_sender() {
    let (a, b) = pair(NetConfig::default());
    let (input, mut rx) = mpsc::channel(4);
    b.register_input(key("half", 0), gate(input));
    let abort = Abort::new();
    let (tx, task) = a.open_channel_with_handle(
        to(&b),
        key("half", 0),
        opts(Duration::from_millis(1)),
        abort.clone(),
    );
    tx.send(Message::End { channel: 0 }).await.unwrap();
    tx.send(Message::Watermark {
        channel: 1,
        watermark: 5,
    })
    .await
    .unwrap();
    assert!(matches!(recv(&mut rx).await, Message::End { .. }));
    assert!(matches!(recv(&mut rx).await, Message::Watermark { .. }));
    b.unregister_job("half");
    let err = timeout(PATIENCE, task).await.unwrap().unwrap().unwrap_err();
    assert!(err.to_string().contains("dropped the job"), "{err}");
    // The subtasks this stops report the channel's error as their reason.
    let reason = abort.reason().expect("a reason");
    assert!(reason.contains("dropped the job"), "{reason}");
    drop(tx);
}
