//! The writer task of one outgoing data channel: connect, open the stream,
//! then serialize messages into network buffers and send each one when a
//! credit allows (see the flow-control section of [`super`]).
//!
//! The writer owns the stream's send half; a second task reads returned
//! credits from the receive half into the channel's [`CreditLedger`]. Every
//! wait (connect, credit, QUIC write) also watches the job's abort signal
//! and the credit reader, so a failure anywhere ends the writer at once.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::codec::{self, Encoder};
use super::credit::CreditLedger;
use super::{ChannelOptions, InputKey, NetError, Peer, Shared, aborted, wire};
use crate::channel::{Abort, Message};

/// Bytes of a buffer's length prefix on the wire.
const PREFIX: usize = 4;

/// Credits of one channel, shared by the writer and its credit reader.
struct Credits {
    ledger: Mutex<CreditLedger>,
    /// Signalled on every returned credit (one waiter: the writer).
    returned: Notify,
}

/// What ended a wait other than success.
enum Stop {
    Aborted,
    Failed(String),
}

impl Stop {
    fn into_error(self, peer: SocketAddr, key: &InputKey) -> NetError {
        match self {
            Stop::Aborted => NetError::Aborted,
            Stop::Failed(message) => NetError::Channel {
                peer,
                key: key.clone(),
                message,
            },
        }
    }
}

/// Runs one channel to completion. Returns once every sender was dropped
/// and every buffer was credited back, or on the first failure.
pub(super) async fn run(
    shared: &Arc<Shared>,
    to: &Peer,
    key: &InputKey,
    opts: ChannelOptions,
    mut rx: mpsc::Receiver<Message>,
    abort: &Abort,
) -> Result<(), NetError> {
    let peer = to.addr;
    let fail = |message: String| NetError::Channel {
        peer,
        key: key.clone(),
        message,
    };
    if key.job.len() > wire::MAX_JOB_NAME {
        return Err(fail(format!(
            "job name longer than {} bytes",
            wire::MAX_JOB_NAME
        )));
    }
    let conn = tokio::select! {
        biased;
        _ = aborted(abort) => return Err(NetError::Aborted),
        c = shared.connection(to) => c?,
    };
    let (mut send, mut recv) = tokio::select! {
        biased;
        _ = aborted(abort) => return Err(NetError::Aborted),
        s = conn.open_bi() => s.map_err(|e| fail(format!("cannot open a stream: {e}")))?,
    };
    // The stream reaches the receiver with its first bytes: the header.
    let mut grant = [0u8; 8];
    let opened = async {
        send.write_all(&wire::header(key))
            .await
            .map_err(|e| write_error(&e))?;
        recv.read_exact(&mut grant)
            .await
            .map_err(|e| read_error(&e))
    };
    let opened = tokio::select! {
        biased;
        _ = aborted(abort) => Err(Stop::Aborted),
        r = opened => r.map_err(Stop::Failed),
    };
    if let Err(stop) = opened {
        let _ = send.reset(wire::code::ABORTED.into());
        return Err(stop.into_error(peer, key));
    }
    let granted_size = u32::from_le_bytes(grant[..4].try_into().expect("4 bytes")) as usize;
    let initial = u32::from_le_bytes(grant[4..].try_into().expect("4 bytes"));
    if granted_size == 0 || initial == 0 {
        let _ = send.reset(wire::code::CORRUPT.into());
        return Err(fail(format!(
            "receiver granted {initial} credits of {granted_size} bytes"
        )));
    }
    let credits = Arc::new(Credits {
        ledger: Mutex::new(CreditLedger::new(initial)),
        returned: Notify::new(),
    });
    // Taken back by `Writer::release`, which every path below reaches.
    shared.channels_out.fetch_add(1, Ordering::Relaxed);
    shared
        .credits
        .fetch_add(u64::from(initial), Ordering::Relaxed);
    let reader = tokio::spawn(read_credits(recv, credits.clone(), shared.clone()));
    let mut writer = Writer {
        send,
        credits,
        reader,
        shared: shared.clone(),
        abort: abort.clone(),
        buffer_size: opts.buffer_size.clamp(1, granted_size),
        frame: Vec::new(),
        first_byte: None,
    };
    let result = writer.pump(&mut rx, opts).await;
    let result = match result {
        Ok(()) => writer.finish().await,
        Err(stop) => Err(stop),
    };
    if result.is_err() {
        let _ = writer.send.reset(wire::code::ABORTED.into());
        writer.reader.abort();
    }
    writer.release();
    result.map_err(|stop| stop.into_error(peer, key))
}

/// The sending end of one channel's stream.
struct Writer {
    send: quinn::SendStream,
    credits: Arc<Credits>,
    /// Reads returned credits; ends `Ok` when the receiver finishes its half.
    /// Never polled again once it completed (every such branch returns).
    reader: JoinHandle<Result<(), String>>,
    shared: Arc<Shared>,
    abort: Abort,
    buffer_size: usize,
    /// The buffer being filled: a length slot, then up to `buffer_size` bytes.
    frame: Vec<u8>,
    /// When the first byte went into `frame` (the buffer timeout's start).
    first_byte: Option<Instant>,
}

impl Writer {
    /// Serializes messages until every sender is dropped, then sends the
    /// last partial buffer.
    async fn pump(
        &mut self,
        rx: &mut mpsc::Receiver<Message>,
        opts: ChannelOptions,
    ) -> Result<(), Stop> {
        self.frame = Vec::with_capacity(PREFIX + self.buffer_size);
        self.frame.extend_from_slice(&[0; PREFIX]);
        let mut scratch = Vec::new();
        loop {
            let deadline = self.first_byte.map(|t| t + opts.buffer_timeout);
            let msg = tokio::select! {
                biased;
                _ = aborted(&self.abort) => return Err(Stop::Aborted),
                r = &mut self.reader => return Err(reader_ended(r)),
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                    if deadline.is_some() =>
                {
                    self.send_buffer().await?;
                    continue;
                }
                m = rx.recv() => m,
            };
            let Some(msg) = msg else { break };
            if let Message::Records { batch, .. } = &msg
                && let Some((i, bytes)) = codec::record_over(batch, opts.max_record_bytes)
            {
                // The receiver would refuse it as corrupt; say what it is.
                return Err(Stop::Failed(format!(
                    "record {i} of a batch has {bytes} bytes of key and value, more than the \
                     {} a record between TaskManagers may have (the job's \
                     limits.max_output_mb, or its sources' largest record if larger)",
                    opts.max_record_bytes
                )));
            }
            let mut encoder = Encoder::splitting(&msg, codec::SPLIT_BYTES);
            while let Some(mut piece) = encoder.next_piece(&mut scratch) {
                while !piece.is_empty() {
                    let filled = self.frame.len() - PREFIX;
                    let n = (self.buffer_size - filled).min(piece.len());
                    if filled == 0 {
                        self.first_byte = Some(Instant::now());
                    }
                    self.frame.extend_from_slice(&piece[..n]);
                    self.shared.add_buffered(n);
                    piece = &piece[n..];
                    if filled + n == self.buffer_size {
                        self.send_buffer().await?;
                    }
                }
            }
            // Control messages are small and someone waits for them.
            if !matches!(msg, Message::Records { .. }) && self.frame.len() > PREFIX {
                self.send_buffer().await?;
            }
        }
        if self.frame.len() > PREFIX {
            self.send_buffer().await?;
        }
        Ok(())
    }

    /// Sends the buffer being filled once a credit is available.
    async fn send_buffer(&mut self) -> Result<(), Stop> {
        let len = self.frame.len() - PREFIX;
        // Set at the first wait for a credit (the clock is read only then).
        let mut waiting: Option<Instant> = None;
        loop {
            // `Notify` keeps a permit for a notification that finds no
            // waiter, so a credit returned between the check and the wait
            // is not lost.
            if self
                .credits
                .ledger
                .lock()
                .expect("ledger lock")
                .try_send(len)
            {
                self.shared.credits.fetch_sub(1, Ordering::Relaxed);
                self.shared.in_flight.fetch_add(1, Ordering::Relaxed);
                break;
            }
            waiting.get_or_insert_with(Instant::now);
            tokio::select! {
                biased;
                _ = aborted(&self.abort) => return Err(Stop::Aborted),
                r = &mut self.reader => return Err(reader_ended(r)),
                _ = self.credits.returned.notified() => {}
            }
        }
        if let Some(since) = waiting {
            self.shared
                .credit_wait_ns
                .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        // The full buffer moves into quinn without a copy; a fresh one is
        // filled next.
        let mut frame = std::mem::replace(
            &mut self.frame,
            Vec::with_capacity(PREFIX + self.buffer_size),
        );
        self.frame.extend_from_slice(&[0; PREFIX]);
        self.first_byte = None;
        frame[..PREFIX].copy_from_slice(&(len as u32).to_le_bytes());
        let wire_len = frame.len() as u64;
        tokio::select! {
            biased;
            _ = aborted(&self.abort) => return Err(Stop::Aborted),
            r = &mut self.reader => return Err(reader_ended(r)),
            r = self.send.write_chunk(frame.into()) => r.map_err(|e| Stop::Failed(write_error(&e)))?,
        }
        self.shared.sent.fetch_add(wire_len, Ordering::Relaxed);
        Ok(())
    }

    /// Ends the stream and waits until the receiver consumed every buffer
    /// (it finishes its half after the last credit).
    async fn finish(&mut self) -> Result<(), Stop> {
        self.send
            .finish()
            .map_err(|e| Stop::Failed(format!("cannot finish the stream: {e}")))?;
        let ended = tokio::select! {
            biased;
            _ = aborted(&self.abort) => return Err(Stop::Aborted),
            r = &mut self.reader => r,
        };
        match ended {
            Ok(Ok(())) => {
                let in_flight = self.credits.ledger.lock().expect("ledger lock").in_flight();
                if in_flight > 0 {
                    return Err(Stop::Failed(format!(
                        "receiver closed with {in_flight} buffers unconsumed"
                    )));
                }
                Ok(())
            }
            other => Err(reader_ended(other)),
        }
    }

    /// Takes this channel's bytes out of the data plane's `buffered_bytes`.
    fn release(&mut self) {
        // One lock: a credit reader still running cannot free the same
        // in-flight bytes again (the emptied ledger refuses its credits).
        let ledger = {
            let mut ledger = self.credits.ledger.lock().expect("ledger lock");
            std::mem::replace(&mut *ledger, CreditLedger::new(0))
        };
        let filling = self.frame.len().saturating_sub(PREFIX);
        self.shared.sub_buffered(ledger.in_flight_bytes() + filling);
        self.shared
            .in_flight
            .fetch_sub(ledger.in_flight() as u64, Ordering::Relaxed);
        self.shared
            .credits
            .fetch_sub(u64::from(ledger.available()), Ordering::Relaxed);
        self.shared.channels_out.fetch_sub(1, Ordering::Relaxed);
        self.frame = Vec::new();
    }
}

/// Reads returned credits until the receiver finishes its half.
async fn read_credits(
    mut recv: quinn::RecvStream,
    credits: Arc<Credits>,
    shared: Arc<Shared>,
) -> Result<(), String> {
    let mut count = [0u8; 4];
    loop {
        match recv.read_exact(&mut count).await {
            Ok(()) => {}
            Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(()),
            Err(e) => return Err(read_error(&e)),
        }
        let n = u32::from_le_bytes(count);
        {
            // Under the lock: the writer cannot use the credit (and count
            // a new buffer) before the freed bytes are subtracted, so
            // `buffered_bytes` never overshoots the bound, even briefly.
            let mut ledger = credits.ledger.lock().expect("ledger lock");
            shared.sub_buffered(ledger.credited(n)?);
            shared.in_flight.fetch_sub(u64::from(n), Ordering::Relaxed);
            shared.credits.fetch_add(u64::from(n), Ordering::Relaxed);
        }
        credits.returned.notify_one();
    }
}

/// The credit reader ended while the writer was still sending.
fn reader_ended(r: Result<Result<(), String>, tokio::task::JoinError>) -> Stop {
    match r {
        Ok(Ok(())) => Stop::Failed("the receiver closed the channel early".into()),
        Ok(Err(message)) => Stop::Failed(message),
        Err(e) => Stop::Failed(format!("credit reader failed: {e}")),
    }
}

fn write_error(e: &quinn::WriteError) -> String {
    match e {
        quinn::WriteError::Stopped(code) => {
            format!(
                "the receiver refused it: {}",
                wire::describe(code.into_inner())
            )
        }
        quinn::WriteError::ConnectionLost(c) => format!("connection lost: {c}"),
        other => other.to_string(),
    }
}

fn read_error(e: &quinn::ReadExactError) -> String {
    match e {
        quinn::ReadExactError::FinishedEarly(_) => "the receiver closed the channel early".into(),
        quinn::ReadExactError::ReadError(quinn::ReadError::Reset(code)) => {
            format!(
                "the receiver refused it: {}",
                wire::describe(code.into_inner())
            )
        }
        quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(c)) => {
            format!("connection lost: {c}")
        }
        quinn::ReadExactError::ReadError(other) => other.to_string(),
    }
}
