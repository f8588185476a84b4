//! Processing-time TTL for keyed state, enforced by the host.
//!
//! Owns the [`Clock`] abstraction ([`SystemClock`] in production,
//! [`ManualClock`] for tests and simulations) and the stored form of a value
//! with TTL: an 8-byte little-endian expiry (milliseconds since the Unix
//! epoch) followed by the value bytes. The prefix is applied per value
//! state value, per list element and per map value, so each ages on its own.
//!
//! Semantics (Flink's `OnCreateAndWrite` / `NeverReturnExpired`): a write sets
//! the entry's expiry to `now + ttl`; reads do not extend it; an entry whose
//! expiry is `<= now` reads as absent and is removed lazily by the read that
//! finds it.
//!
//! Pure byte and clock logic: no storage, no Wasm.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::StateError;

/// Bytes of the expiry prefix on every value of a state with TTL.
pub const EXPIRY_LEN: usize = 8;

/// Processing time for TTL.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        // A clock before 1970 reads as 0: nothing expires early because of it.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to: tests step it instead of sleeping.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `now_millis`.
    pub fn new(now_millis: u64) -> Self {
        Self {
            now: AtomicU64::new(now_millis),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }

    /// Sets the clock to `now_millis`.
    pub fn set(&self, now_millis: u64) {
        self.now.store(now_millis, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

/// Appends the stored form of `value` to `out`: `value` itself without TTL,
/// `[expiry: u64 LE][value]` with one.
#[inline]
pub fn encode(out: &mut Vec<u8>, expiry: Option<u64>, value: &[u8]) {
    if let Some(expiry) = expiry {
        out.reserve(EXPIRY_LEN + value.len());
        out.extend_from_slice(&expiry.to_le_bytes());
    }
    out.extend_from_slice(value);
}

/// The value in `stored` if it is live at `now`, `None` if it has expired.
/// `now` is `None` for a state without TTL (then `stored` is the value).
#[inline]
pub fn decode(stored: &[u8], now: Option<u64>) -> Result<Option<&[u8]>, StateError> {
    let Some(now) = now else {
        return Ok(Some(stored));
    };
    let Some((expiry, value)) = stored.split_first_chunk::<EXPIRY_LEN>() else {
        return Err(StateError::Backend(format!(
            "stored value of {} bytes is too short for its TTL prefix",
            stored.len()
        )));
    };
    Ok((u64::from_le_bytes(*expiry) > now).then_some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_expiry_boundary() {
        let mut out = Vec::new();
        encode(&mut out, Some(1_000), b"v");
        assert_eq!(out.len(), EXPIRY_LEN + 1);
        assert_eq!(decode(&out, Some(999)).unwrap(), Some(&b"v"[..]));
        assert_eq!(decode(&out, Some(1_000)).unwrap(), None);
        out.clear();
        encode(&mut out, None, b"v");
        assert_eq!(decode(&out, None).unwrap(), Some(&b"v"[..]));
        assert!(decode(b"short", Some(0)).is_err());
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5);
        assert_eq!(c.now_millis(), 5);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now_millis(), 1_005);
        c.set(7);
        assert_eq!(c.now_millis(), 7);
        assert!(SystemClock.now_millis() > 1_600_000_000_000);
    }
}
