//! `chatty`: passes every record through unchanged, and tells about it
//! through the host's `log` and `metrics` interfaces: one info line per
//! record (`saw <value>`, or `burst` lines of it), the counter
//! `records_seen` and the gauge `last_value_bytes`.
//!
//! Config `burst` (integer, default 1): lines logged per record, in a
//! tight loop (a chatty guest, for the host's log rate limit).

use weir_sdk::{Error, MapFunction, OpenContext, Record, log, metrics};

/// The pass-through.
pub struct Chatty {
    burst: u64,
}

impl MapFunction for Chatty {
    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let burst = ctx.config().get_u64("burst")?.unwrap_or(1);
        log::info!(
            "chatty opened: subtask {} of {}, {burst} line(s) per record",
            ctx.subtask_index(),
            ctx.parallelism()
        );
        Ok(Chatty { burst })
    }

    fn map<'a>(&'a mut self, record: Record<'a>) -> Result<Record<'a>, Error> {
        for _ in 0..self.burst {
            log::info!("saw {}", record.value_str());
        }
        metrics::counter_add("records_seen", 1);
        metrics::gauge_set("last_value_bytes", record.value.len() as f64);
        Ok(record)
    }
}

weir_sdk::export_map!(Chatty);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Map;
    use weir_sdk::testing::Harness;

    #[test]
    fn logs_and_counts_every_record_and_passes_it_on() -> Result<(), Error> {
        let mut h = Harness::<Map<Chatty>>::open(&[("burst", "2")])?;
        let out = h.process([Record::new("a", 1), Record::new("bcd", 2)])?;
        assert_eq!(out.values(), ["a", "bcd"]);
        assert_eq!(h.counter("records_seen"), 2);
        assert_eq!(h.gauge("last_value_bytes"), Some(3.0));
        let lines: Vec<String> = h.logs().into_iter().map(|(_, m)| m).collect();
        assert_eq!(lines[1..], ["saw a", "saw a", "saw bcd", "saw bcd"]);
        Ok(())
    }
}
