//! `word-count-v2`: version 2 of `word-count`, for upgrading a running job
//! in place (`weir upgrade JOB --module count=word-count@2.0.0`).
//!
//! Counts records per key (the word) and emits exactly what version 1
//! emits (config `emit`: `"final"` or `"updates"`; output key = the word,
//! value = `"{word}\t{count}"`), so the output of an upgraded job goes on
//! as if nothing happened. What changed is the state: value state `count`
//! now holds the count (u64 LE) **and when the word was first seen** (the
//! event time of its first record, i64 LE). Version 1 stored the count
//! alone; `migrate_from_v1` rewrites its values when the job is upgraded,
//! marking the words counted before the upgrade with a first-seen time of
//! [`BEFORE_V2`].

use std::io::Write;

use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateCodec, StateDescriptor,
    ValueState,
};

/// The first-seen time of a word counted by version 1 (unknown).
pub const BEFORE_V2: i64 = -1;

/// One word's state: its count and when it was first seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// How many records had the word.
    pub count: u64,
    /// The event time of its first record, or [`BEFORE_V2`].
    pub first_seen: i64,
}

impl StateCodec for Seen {
    fn encode(&self, out: &mut Vec<u8>) {
        self.count.encode(out);
        self.first_seen.encode(out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, weir_sdk::DecodeError> {
        if bytes.len() != 16 {
            return Err(weir_sdk::DecodeError::wrong_length("Seen", 16, bytes.len()));
        }
        Ok(Seen {
            count: u64::decode(&bytes[..8])?,
            first_seen: i64::decode(&bytes[8..])?,
        })
    }
}

/// Version 1's `count` (a u64) as version 2's [`Seen`].
fn migrate_from_v1(from_version: &str, old: &[u8]) -> Result<Vec<u8>, Error> {
    if !from_version.starts_with("0.1.") {
        weir_sdk::bail!("cannot migrate `count` from version {from_version}: only from 0.1.x");
    }
    let seen = Seen {
        count: u64::decode(old)?,
        first_seen: BEFORE_V2,
    };
    Ok(seen.to_bytes())
}

/// The counter.
pub struct WordCountV2 {
    count: ValueState<Seen>,
    emit_updates: bool,
}

impl KeyedProcessFunction for WordCountV2 {
    const STATES: &'static [StateDescriptor] =
        &[StateDescriptor::value("count").with_migration(migrate_from_v1)];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let emit_updates = match ctx.config().get_str("emit").unwrap_or("final") {
            "final" => false,
            "updates" => true,
            other => weir_sdk::bail!("config `emit`: expected `final` or `updates`, got `{other}`"),
        };
        Ok(WordCountV2 {
            count: ctx.value_state("count")?,
            emit_updates,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let previous = self.count.get(ctx)?;
        let seen = match previous {
            Some(s) => Seen {
                count: s.count + 1,
                ..s
            },
            None => Seen {
                count: 1,
                first_seen: record.timestamp,
            },
        };
        self.count.set(ctx, &seen)?;
        if self.emit_updates {
            emit(ctx, seen.count, record.timestamp);
        } else if previous.is_none() {
            ctx.register_event_time_timer(i64::MAX)?;
        }
        Ok(())
    }

    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        if let Some(seen) = self.count.get(ctx)? {
            emit(ctx, seen.count, time);
        }
        Ok(())
    }
}

/// Emits `"{word}\t{count}"` keyed by the word, as version 1 does.
fn emit(ctx: &mut KeyedContext<'_>, count: u64, timestamp: i64) {
    let word = ctx.key();
    ctx.collect_with(Some(word), timestamp, |value| {
        value.extend_from_slice(word);
        // Writing to a Vec cannot fail.
        let _ = write!(value, "\t{count}");
    });
}

weir_sdk::export_keyed!(WordCountV2);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    type H = Harness<Keyed<WordCountV2>>;

    #[test]
    fn version_1_counts_migrate_with_an_unknown_first_seen_time() -> Result<(), Error> {
        let new = H::migrate_state("count", "0.1.0", &41u64.to_le_bytes())?;
        assert_eq!(
            Seen::decode(&new)?,
            Seen {
                count: 41,
                first_seen: BEFORE_V2
            }
        );
        let err = H::migrate_state("count", "7.0.0", &41u64.to_le_bytes()).unwrap_err();
        assert!(
            err.message().contains("only from 0.1.x"),
            "{}",
            err.message()
        );
        let err = H::migrate_state("count", "0.1.0", b"short").unwrap_err();
        assert!(
            err.message().contains("migrating state `count`"),
            "{}",
            err.message()
        );
        // A state it does not declare keeps its bytes.
        assert_eq!(H::migrate_state("other", "0.1.0", b"x")?, b"x");
        Ok(())
    }

    #[test]
    fn a_migrated_word_counts_on_and_a_new_one_records_when_it_was_first_seen() -> Result<(), Error>
    {
        let mut h = H::open(&[("emit", "updates")])?;
        let migrated = H::migrate_state("count", "0.1.0", &2u64.to_le_bytes())?;
        h.set_value_state_bytes("count", "a", &migrated)?;
        let out = h.process([Record::keyed("a", "a", 5), Record::keyed("b", "b", 9)])?;
        assert_eq!(out.values(), ["a\t3", "b\t1"]);
        assert_eq!(
            h.value_state::<Seen>("count", "a")?,
            Some(Seen {
                count: 3,
                first_seen: BEFORE_V2
            })
        );
        assert_eq!(
            h.value_state::<Seen>("count", "b")?,
            Some(Seen {
                count: 1,
                first_seen: 9
            })
        );
        Ok(())
    }
}
