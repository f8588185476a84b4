//! `nexmark-bid-count`: Nexmark q12, the number of bids each bidder makes
//! in processing-time tumbling windows, as a keyed process function:
//!
//! ```sql
//! SELECT bidder, count(*) AS bid_count, window_start, window_end
//! FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
//! GROUP BY bidder, window_start, window_end      -- p_time = PROCTIME()
//! ```
//!
//! Input: bids keyed by their bidder (`key_by = "json:bidder"`, so the key
//! is the bidder's id in decimal). Config `size_ms` (optional, default
//! 10000, at least 1): the window's length.
//!
//! A bid belongs to the window `[start, start + size_ms)` of the wall clock
//! when it reaches this function (`start` a multiple of `size_ms`, as
//! Flink's `TUMBLE` over `PROCTIME()`). The bidder's open window, its start
//! and count, waits in value state; a processing-time timer at its end
//! emits it, one record per bidder and window:
//! `{"bidder":B,"bid_count":N,"window_start":S,"window_end":E}` (key = the
//! bidder, timestamp `E - 1`). A bid that finds its bidder's window already
//! over (its timer due but not yet fired: timers fire between batches)
//! emits that window first, so a bidder's windows never overlap and each is
//! emitted once.
//!
//! **The end of a bounded input.** Pending processing-time timers do not
//! fire when the input ends (Weir drops them as Flink does: Flink quiesces
//! the processing-time service at end of input, FLINK-14231), so the last
//! window of every bidder would be lost. The function therefore also
//! registers, while a window is open, an event-time timer at `i64::MAX`:
//! only the final watermark that every operator sees at the end of input
//! reaches it, and it emits the open window then. On an unbounded input it
//! never fires.

use weir_sdk::{
    DecodeError, Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateCodec,
    StateDescriptor, ValueState,
};

/// The suite's window: 10 s.
pub const DEFAULT_SIZE_MS: i64 = 10_000;

/// The event time only the final watermark of a bounded input reaches.
const END_OF_INPUT: i64 = i64::MAX;

/// A bidder's open window: its start and how many bids it counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    start: i64,
    count: u64,
}

impl StateCodec for Window {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() != 16 {
            return Err(DecodeError::wrong_length("Window", 16, bytes.len()));
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Ok(Window {
            start: word(0) as i64,
            count: word(8),
        })
    }
}

/// The function.
pub struct BidCount {
    size: i64,
    window: ValueState<Window>,
}

impl BidCount {
    /// The start of the window holding wall-clock time `now`.
    fn start_of(&self, now: i64) -> i64 {
        now - now.rem_euclid(self.size)
    }

    /// Emits the current key's window `w`, forgets it and deletes its
    /// timers.
    fn emit(&self, w: Window, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let key = ctx.key();
        let bidder: u64 = std::str::from_utf8(key)
            .ok()
            .and_then(|k| k.parse().ok())
            .ok_or_else(|| {
                Error::msg(format!(
                    "the key {:?} is not a bidder's id: key the bids by json:bidder",
                    String::from_utf8_lossy(key)
                ))
            })?;
        let end = w.start + self.size;
        ctx.delete_processing_time_timer(end)?;
        ctx.delete_event_time_timer(END_OF_INPUT)?;
        self.window.clear(ctx)?;
        let value = format!(
            r#"{{"bidder":{bidder},"bid_count":{},"window_start":{},"window_end":{end}}}"#,
            w.count, w.start
        );
        ctx.collect(Record::keyed(key, &value, end - 1));
        Ok(())
    }
}

impl KeyedProcessFunction for BidCount {
    const NAME: &'static str = "nexmark-bid-count";
    const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("window")];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let size = match ctx.config().get_i64("size_ms")? {
            None => DEFAULT_SIZE_MS,
            Some(size) if size >= 1 => size,
            Some(size) => {
                return Err(Error::msg(format!(
                    "config size_ms: {size} is not at least 1"
                )));
            }
        };
        Ok(BidCount {
            size,
            window: ctx.value_state("window")?,
        })
    }

    fn process_element(
        &mut self,
        _record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let start = self.start_of(ctx.current_processing_time());
        let window = match self.window.get(ctx)? {
            Some(w) if w.start == start => Window {
                start,
                count: w.count + 1,
            },
            open => {
                if let Some(w) = open {
                    // Over, its timer not yet fired.
                    self.emit(w, ctx)?;
                }
                ctx.register_processing_time_timer(start + self.size)?;
                ctx.register_event_time_timer(END_OF_INPUT)?;
                Window { start, count: 1 }
            }
        };
        self.window.set(ctx, &window)
    }

    fn on_processing_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        match self.window.get(ctx)? {
            Some(w) if w.start + self.size == time => self.emit(w, ctx),
            _ => Ok(()),
        }
    }

    /// Only the end of input's final watermark reaches [`END_OF_INPUT`].
    fn on_timer(&mut self, _time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        match self.window.get(ctx)? {
            Some(w) => self.emit(w, ctx),
            None => Ok(()),
        }
    }
}

weir_sdk::export_keyed!(BidCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    fn bid(bidder: &str) -> Record<'static> {
        let value: &'static str = Box::leak(format!(r#"{{"bidder":{bidder}}}"#).into_boxed_str());
        let key: &'static str = Box::leak(bidder.to_owned().into_boxed_str());
        Record::keyed(key, value, 0)
    }

    fn row(bidder: u64, count: u64, start: i64, end: i64) -> String {
        format!(
            r#"{{"bidder":{bidder},"bid_count":{count},"window_start":{start},"window_end":{end}}}"#
        )
    }

    #[test]
    fn each_bidder_counts_per_window_of_the_wall_clock() -> Result<(), Error> {
        let mut h = Harness::<Keyed<BidCount>>::open(&[("size_ms", "1000")])?;
        h.advance_processing_time(200)?;
        h.process([bid("7"), bid("8"), bid("7")])?;
        assert!(h.advance_processing_time(700)?.is_empty(), "at 900");
        h.process([bid("7")])?;
        // At 1000 both windows [0, 1000) close.
        let out = h.advance_processing_time(100)?;
        let mut got = out.values();
        got.sort();
        assert_eq!(got, [row(7, 3, 0, 1000), row(8, 1, 0, 1000)]);
        assert_eq!(out.main[0].timestamp, 999);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"7"[..]));
        // Nothing is left: no state, no timers of either kind.
        assert!(h.state_keys("window").is_empty());
        assert!(h.processing_timers().is_empty());
        assert!(h.timers().is_empty());
        // A quiet stretch emits nothing; the next bid opens [3000, 4000).
        assert!(h.advance_processing_time(2500)?.is_empty());
        h.process([bid("8")])?;
        assert_eq!(h.processing_timers(), [(4000, b"8".to_vec())]);
        assert_eq!(
            h.advance_processing_time(500)?.values(),
            [row(8, 1, 3000, 4000)]
        );
        Ok(())
    }

    #[test]
    fn a_bid_after_its_bidders_window_ended_emits_that_window_first() -> Result<(), Error> {
        let mut h = Harness::<Keyed<BidCount>>::open(&[])?;
        // Bidder 5's window [0, 10 s) is still open at 12 s: its timer was
        // due, but the bid came first (timers fire between batches). The
        // harness fires due timers at once, so the state is put in place.
        h.advance_processing_time(12_000)?;
        let mut open = Vec::new();
        Window { start: 0, count: 2 }.encode(&mut open);
        h.set_value_state_bytes("window", "5", &open)?;
        let out = h.process([bid("5")])?;
        assert_eq!(out.values(), [row(5, 2, 0, 10_000)]);
        assert_eq!(h.processing_timers(), [(20_000, b"5".to_vec())]);
        assert_eq!(
            h.advance_processing_time(8_000)?.values(),
            [row(5, 1, 10_000, 20_000)]
        );
        Ok(())
    }

    #[test]
    fn the_end_of_input_emits_the_open_windows() -> Result<(), Error> {
        let mut h = Harness::<Keyed<BidCount>>::open(&[])?;
        h.advance_processing_time(1_700_000_003_000)?;
        h.process([bid("1"), bid("2"), bid("2")])?;
        // An ordinary watermark does not flush.
        assert!(h.advance_watermark(1_700_000_000_000)?.is_empty());
        let out = h.finish()?;
        let mut got = out.values();
        got.sort();
        let (s, e) = (1_700_000_000_000, 1_700_000_010_000);
        assert_eq!(got, [row(1, 1, s, e), row(2, 2, s, e)]);
        assert!(h.state_keys("window").is_empty());
        assert!(h.processing_timers().is_empty());
        Ok(())
    }

    #[test]
    fn a_key_that_is_not_a_bidder_and_a_bad_size_are_errors() {
        assert!(Harness::<Keyed<BidCount>>::open(&[("size_ms", "0")]).is_err());
        let mut h = Harness::<Keyed<BidCount>>::open(&[]).unwrap();
        h.process([Record::keyed("all", "{}", 0)]).unwrap();
        let err = h.finish().unwrap_err();
        assert!(format!("{err}").contains("json:bidder"), "{err}");
    }
}
