//! Credit accounting of one data channel, on the sending side (pure: no
//! I/O, no clock).
//!
//! The receiver grants credits; each network buffer sent takes one; the
//! receiver returns one per buffer it has consumed. The ledger remembers the
//! size of every buffer in flight, so that a returned credit frees exactly
//! the bytes of the oldest buffer (buffers are consumed in order).

use std::collections::VecDeque;

/// Credits and buffers in flight of one channel.
#[derive(Debug)]
pub struct CreditLedger {
    available: u32,
    in_flight: VecDeque<usize>,
}

impl CreditLedger {
    /// A ledger holding the receiver's initial grant.
    pub fn new(initial: u32) -> CreditLedger {
        CreditLedger {
            available: initial,
            in_flight: VecDeque::with_capacity(initial as usize),
        }
    }

    /// Takes a credit for a buffer of `bytes` bytes, if one is available.
    pub fn try_send(&mut self, bytes: usize) -> bool {
        if self.available == 0 {
            return false;
        }
        self.available -= 1;
        self.in_flight.push_back(bytes);
        true
    }

    /// The receiver returned `n` credits: frees the `n` oldest buffers and
    /// returns their bytes. More credits than buffers in flight is a
    /// protocol violation.
    pub fn credited(&mut self, n: u32) -> Result<usize, String> {
        if n as usize > self.in_flight.len() {
            return Err(format!(
                "receiver returned {n} credits with {} buffers in flight",
                self.in_flight.len()
            ));
        }
        self.available += n;
        Ok(self.in_flight.drain(..n as usize).sum())
    }

    /// Credits available now.
    pub fn available(&self) -> u32 {
        self.available
    }

    /// Buffers sent and not yet credited back.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Bytes of the buffers in flight.
    pub fn in_flight_bytes(&self) -> usize {
        self.in_flight.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_more_buffers_in_flight_than_credits() {
        let mut ledger = CreditLedger::new(2);
        assert!(ledger.try_send(10));
        assert!(ledger.try_send(20));
        assert!(!ledger.try_send(30));
        assert_eq!(ledger.in_flight_bytes(), 30);
        assert_eq!(ledger.credited(1), Ok(10));
        assert!(ledger.try_send(30));
        assert_eq!(ledger.credited(2), Ok(50));
        assert_eq!((ledger.available(), ledger.in_flight()), (2, 0));
    }

    #[test]
    fn surplus_credit_is_a_protocol_error() {
        let mut ledger = CreditLedger::new(4);
        assert!(ledger.try_send(1));
        assert!(ledger.credited(2).unwrap_err().contains("2 credits"));
    }
}
