//! The receiving side: the accept loop, and one reader task per incoming
//! data stream that decodes buffers into messages, delivers them into the
//! registered subtask input, and returns a credit per buffer consumed.
//!
//! Who may send what (see the parent module): the connection's certificate
//! must name a TaskManager, the stream's input must list it among its
//! senders, and every message must name one of the input's channels.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::codec::{self, Decoder};
use super::tls::{self, Role};
use super::{Input, InputKey, Lookup, Shared, wire};
use crate::channel::Message;

/// How long a new stream may take to send its header: the writer sends it
/// at once, so this only frees streams of a peer that hangs.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections until the endpoint closes. Holds the data plane
/// weakly, so that dropping the last handle closes the endpoint and ends it.
pub(super) async fn accept_loop(endpoint: quinn::Endpoint, shared: Weak<Shared>) {
    while let Some(incoming) = endpoint.accept().await {
        if shared.strong_count() == 0 {
            break;
        }
        tokio::spawn(serve_connection(incoming, shared.clone()));
    }
}

async fn serve_connection(incoming: quinn::Incoming, shared: Weak<Shared>) {
    let from = incoming.remote_address();
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(e) => {
            // Most often a peer without a certificate from the cluster CA.
            tracing::warn!("refused a data connection from {from}: {e}");
            return;
        }
    };
    // Only TaskManagers open data streams; the id in the certificate is
    // who the streams are from.
    let sender: Arc<str> = match tls::peer_role(&conn) {
        Some(Role::TaskManager(id)) => id.into(),
        other => {
            let who = other.map_or("no Weir role".to_string(), |r| r.to_string());
            tracing::warn!(
                "refused a data connection from {from}: its certificate names {who}, not a TaskManager"
            );
            conn.close(wire::code::FORBIDDEN.into(), b"not a TaskManager");
            return;
        }
    };
    // Streams of this sender waiting for their registration, counted over
    // all its connections (a certificate's holder may open many).
    let Some(waiting) = shared.upgrade().map(|s| {
        s.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(sender.clone())
            .or_default()
            .clone()
    }) else {
        return;
    };
    while let Ok((send, recv)) = conn.accept_bi().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let stream = serve_stream(shared, from, sender.clone(), waiting.clone(), send, recv);
        tokio::spawn(stream);
    }
}

/// One stream counted in `counter` while the guard lives: an open stream
/// in [`super::NetStats::channels_in`], or one of a connection's streams
/// waiting for its registration.
struct Counted<'a>(&'a AtomicU64);

impl<'a> Counted<'a> {
    /// Counts one more, unless `max` are counted already.
    fn take(counter: &'a AtomicU64, max: u64) -> Option<Counted<'a>> {
        counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Counted(counter))
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a stream was given up: the code to reset it with, and a message.
struct Refusal(u32, String);

async fn serve_stream(
    shared: Arc<Shared>,
    from: SocketAddr,
    sender: Arc<str>,
    waiting: Arc<AtomicU64>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let served = serve(&shared, &sender, &waiting, &mut send, &mut recv).await;
    if let Err(Refusal(code, message)) = served {
        tracing::warn!("data stream from TaskManager `{sender}` at {from}: {message}");
        let _ = send.reset(code.into());
        let _ = recv.stop(code.into());
    }
}

async fn serve(
    shared: &Shared,
    sender: &str,
    waiting: &AtomicU64,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
) -> Result<(), Refusal> {
    let key = tokio::time::timeout(HEADER_TIMEOUT, read_header(recv))
        .await
        .map_err(|_| Refusal(wire::code::CORRUPT, "no header".into()))??;
    let (lookup, mut alive) = shared.lookup(&key);
    let unregistered = || {
        Refusal(
            wire::code::JOB_UNREGISTERED,
            format!("{key}: the job was unregistered"),
        )
    };
    let Input {
        tx,
        channels,
        senders,
        max_record_bytes,
    } = match lookup {
        Lookup::Ready(input) => input,
        Lookup::Wait(wait) => {
            let max = shared.max_waiting.load(Ordering::Relaxed);
            let Some(_slot) = Counted::take(waiting, max) else {
                drop(wait);
                shared.forget_waiter(&key);
                return Err(Refusal(
                    wire::code::BUSY,
                    format!(
                        "{key}: refused, {} streams of this TaskManager already wait for \
                         their registration",
                        waiting.load(Ordering::Relaxed)
                    ),
                ));
            };
            #[cfg(test)]
            shared.waiter_added.notify_one();
            match tokio::time::timeout(shared.registration_timeout(), wait).await {
                Ok(Ok(input)) => input,
                Ok(Err(_)) => return Err(unregistered()),
                Err(_) => {
                    shared.forget_waiter(&key);
                    return Err(Refusal(
                        wire::code::UNKNOWN_INPUT,
                        format!(
                            "{key} was not registered within {:?}",
                            shared.registration_timeout()
                        ),
                    ));
                }
            }
        }
    };
    if !senders.contains(sender) {
        return Err(Refusal(
            wire::code::FORBIDDEN,
            format!("{key}: TaskManager `{sender}` is not in the job's placement"),
        ));
    }
    let buffer_size = shared.config.buffer_size.clamp(1, u32::MAX as usize);
    let credits = shared.config.credits_per_channel.max(1);
    let mut grant = [0u8; 8];
    grant[..4].copy_from_slice(&(buffer_size as u32).to_le_bytes());
    grant[4..].copy_from_slice(&credits.to_le_bytes());
    tokio::select! {
        _ = alive.changed() => return Err(unregistered()),
        r = send.write_all(&grant) => r.map_err(|e| lost(&key, e))?,
    }
    let open = Counted::take(&shared.channels_in, u64::MAX);
    let mut decoder = Decoder::with_limit(codec::max_message_bytes(max_record_bytes));
    let mut messages = Vec::new();
    let one_credit = 1u32.to_le_bytes();
    // One stream carries the channels of every upstream subtask on the
    // sending TaskManager towards this input. Once each channel it carried
    // delivered its `End`, the subtask needs nothing more from it; the job
    // may then be unregistered here (its subtasks finished) while the
    // sender's clean end is still in flight. That is not a failure: such a
    // stream ignores the unregistration and waits for the end.
    let mut carried = HashSet::new();
    let mut ended = HashSet::new();
    let drained = |carried: &HashSet<u32>, ended: &HashSet<u32>| {
        !carried.is_empty() && carried.len() == ended.len()
    };
    loop {
        let read = tokio::select! {
            _ = unregistered_unless(&mut alive, drained(&carried, &ended)) => return Err(unregistered()),
            r = read_buffer(recv, &mut decoder, &mut messages, buffer_size, &key) => r?,
        };
        let Some(len) = read else { break };
        shared
            .received
            .fetch_add((len + 4) as u64, Ordering::Relaxed);
        // Checked for the whole buffer before any of it is delivered: the
        // subtask's input gate indexes its channels by this number.
        if let Some(bad) = messages.iter().find(|m| m.channel() >= channels) {
            return Err(Refusal(
                wire::code::CORRUPT,
                format!(
                    "{key}: a message for input channel {} (the subtask has {channels})",
                    bad.channel()
                ),
            ));
        }
        for msg in messages.drain(..) {
            carried.insert(msg.channel());
            if let Message::End { channel } = msg {
                ended.insert(channel);
            }
            tokio::select! {
                _ = unregistered_unless(&mut alive, false) => return Err(unregistered()),
                r = tx.send(msg) => r.map_err(|_| input_closed(&key))?,
            }
        }
        tokio::select! {
            _ = unregistered_unless(&mut alive, drained(&carried, &ended)) => return Err(unregistered()),
            r = send.write_all(&one_credit) => r.map_err(|e| lost(&key, e))?,
        }
    }
    if !decoder.is_idle() {
        return Err(Refusal(
            wire::code::CORRUPT,
            format!(
                "{key}: stream ended inside a message ({} bytes of it)",
                decoder.pending_bytes()
            ),
        ));
    }
    // After the last credit: tells the writer everything was delivered
    // (and no longer counts as open by then).
    drop(open);
    let _ = send.finish();
    Ok(())
}

/// Completes when the job is unregistered here, never once the stream is
/// `drained` (every channel it carried ended).
async fn unregistered_unless(alive: &mut watch::Receiver<()>, drained: bool) {
    if drained {
        std::future::pending::<()>().await;
    }
    // Never sent on: this ends when the job's entry is dropped.
    let _ = alive.changed().await;
}

fn input_closed(key: &InputKey) -> Refusal {
    Refusal(
        wire::code::INPUT_CLOSED,
        format!("{key}: the subtask's input is closed"),
    )
}

fn lost(key: &InputKey, e: impl std::fmt::Display) -> Refusal {
    Refusal(wire::code::ABORTED, format!("{key}: {e}"))
}

async fn read_header(recv: &mut quinn::RecvStream) -> Result<InputKey, Refusal> {
    let corrupt = |m: String| Refusal(wire::code::CORRUPT, m);
    let mut start = [0u8; 7];
    recv.read_exact(&mut start)
        .await
        .map_err(|e| corrupt(format!("reading the header: {e}")))?;
    let len = wire::header_start(&start).map_err(corrupt)?;
    let mut rest = vec![0u8; len + 8];
    recv.read_exact(&mut rest)
        .await
        .map_err(|e| corrupt(format!("reading the header: {e}")))?;
    wire::header_rest(&rest).map_err(corrupt)
}

/// Reads the next buffer straight from quinn's chunks into the decoder
/// (completed messages go to `messages`): its length, or `None` at the
/// stream's clean end.
async fn read_buffer(
    recv: &mut quinn::RecvStream,
    decoder: &mut Decoder,
    messages: &mut Vec<Message>,
    max: usize,
    key: &InputKey,
) -> Result<Option<usize>, Refusal> {
    let corrupt = |m: String| Refusal(wire::code::CORRUPT, format!("{key}: {m}"));
    let mut len = [0u8; 4];
    match recv.read_exact(&mut len).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(quinn::ReadExactError::FinishedEarly(_)) => {
            return Err(corrupt("stream ended inside a buffer length".into()));
        }
        Err(e) => return Err(lost(key, describe_read(e))),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > max {
        return Err(corrupt(format!(
            "buffer of {len} bytes (this node's buffers are {max})"
        )));
    }
    let mut left = len;
    while left > 0 {
        let chunk = match recv.read_chunk(left, true).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Err(corrupt("stream ended inside a buffer".into())),
            Err(e) => {
                let e = quinn::ReadExactError::ReadError(e);
                return Err(lost(key, describe_read(e)));
            }
        };
        left -= chunk.bytes.len();
        decoder
            .feed(&chunk.bytes, messages)
            .map_err(|e| corrupt(e.to_string()))?;
    }
    Ok(Some(len))
}

fn describe_read(e: quinn::ReadExactError) -> String {
    match e {
        quinn::ReadExactError::ReadError(quinn::ReadError::Reset(code)) => {
            format!(
                "the sender reset the stream: {}",
                wire::describe(code.into_inner())
            )
        }
        other => other.to_string(),
    }
}
