//! The generator source: a deterministic, seeded stream of records.
//!
//! Record `n` of the sequence is a pure function of `(seed, n)` (SplitMix64),
//! so parallel instances split the sequence (instance `i` of `p` makes
//! `n ≡ i (mod p)`) and every run produces the same records. Event time is
//! `BASE_TIME + n * interval_ms`, ascending within an instance.
//!
//! The `nexmark` kind is the Nexmark benchmark's generator (the `nexmark`
//! crate, as RisingWave and Arroyo use it): event `n` is a person, an
//! auction or a bid, a pure function of `n`, written as one JSON object
//! (see [`GeneratorKind::Nexmark`]); its event time comes from the
//! generator's own clock at `event_rate` events per second from
//! [`BASE_TIME`].

use super::{ConnectorError, Source, Throttle};
use crate::record::Batch;

/// Event time of record 0: 2023-11-14T22:13:20Z.
pub const BASE_TIME: i64 = 1_700_000_000_000;

/// What the generator makes.
#[derive(Debug, Clone, PartialEq)]
pub enum GeneratorKind {
    /// Value: the sequence number in decimal, padded with `.` to
    /// `record_bytes` if set. Key: `n % keys` in decimal when `keys` is set.
    Sequence {
        /// Pad each value to this many bytes.
        record_bytes: Option<usize>,
        /// Number of distinct keys, if keyed.
        keys: Option<u64>,
    },
    /// Card transactions as JSON `{"account":"acct-17","amount":12.34}`,
    /// keyed by account. 10% are under 1.00, 10% over 500.00.
    Transactions {
        /// Number of accounts.
        accounts: u64,
    },
    /// Lines of `words_per_record` words `w<k>` drawn from a vocabulary of
    /// `vocabulary` words.
    Words {
        /// Distinct words.
        vocabulary: u64,
        /// Words per line.
        words_per_record: usize,
    },
    /// Nexmark events, unkeyed, one JSON object each with a `"type"` of
    /// `"person"`, `"auction"` or `"bid"` and the event's fields under the
    /// `nexmark` crate's names (`{"type":"bid","auction":1007,"bidder":1012,
    /// "price":2113,"channel":"Google","url":"…","date_time":…,"extra":"…"}`).
    /// The record's timestamp is `date_time`.
    Nexmark {
        /// Events per second of event time.
        event_rate: u64,
    },
}

/// Settings of one generator.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    /// What to make.
    pub kind: GeneratorKind,
    /// Total records over all instances; `None` for an unbounded stream.
    pub count: Option<u64>,
    /// Seed of the sequence.
    pub seed: u64,
    /// Records per second over all instances; `None` for as fast as possible.
    pub rate: Option<f64>,
    /// Event-time distance between consecutive records.
    pub interval_ms: i64,
}

/// A generator instance.
#[derive(Debug)]
pub struct GeneratorSource {
    config: GeneratorConfig,
    next: u64,
    step: u64,
    throttle: Option<Throttle>,
    scratch: String,
    /// The nexmark generator, positioned at `next` (made on first use and
    /// after a seek).
    nexmark: Option<nexmark::EventGenerator>,
    bytes: Vec<u8>,
}

/// SplitMix64: a well-known, tiny, high-quality mixing function.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl GeneratorSource {
    /// Instance `subtask` of `parallelism`.
    pub fn new(config: GeneratorConfig, subtask: u32, parallelism: u32) -> GeneratorSource {
        let throttle = config
            .rate
            .map(|r| Throttle::new(r / f64::from(parallelism.max(1))));
        GeneratorSource {
            config,
            next: u64::from(subtask),
            step: u64::from(parallelism.max(1)),
            throttle,
            scratch: String::new(),
            nexmark: None,
            bytes: Vec::new(),
        }
    }

    /// Event `n` of the Nexmark stream, as JSON, into `batch`.
    fn push_nexmark(&mut self, n: u64, event_rate: u64, batch: &mut Batch) {
        let step = self.step;
        let generator = match &mut self.nexmark {
            Some(g) if g.offset() == n => g,
            slot => slot.insert(
                nexmark::EventGenerator::new(nexmark::config::NexmarkConfig {
                    base_time: BASE_TIME as u64,
                    first_rate: event_rate as usize,
                    next_rate: event_rate as usize,
                    ..Default::default()
                })
                .with_offset(n)
                .with_step(step),
            ),
        };
        let Some(event) = generator.next() else {
            return;
        };
        let ts = event.timestamp() as i64;
        self.bytes.clear();
        write_nexmark_json(&event, &mut self.bytes);
        batch.push(None, &self.bytes, ts);
    }

    fn push_record(&mut self, n: u64, batch: &mut Batch) {
        use std::fmt::Write;
        if let GeneratorKind::Nexmark { event_rate } = self.config.kind {
            return self.push_nexmark(n, event_rate, batch);
        }
        let r = || splitmix64(self.config.seed ^ splitmix64(n));
        let ts = BASE_TIME + (n as i64).wrapping_mul(self.config.interval_ms);
        self.scratch.clear();
        match &self.config.kind {
            GeneratorKind::Sequence { record_bytes, keys } => {
                let _ = write!(self.scratch, "{n}");
                if let Some(len) = record_bytes {
                    let pad = len.saturating_sub(self.scratch.len());
                    self.scratch.extend(std::iter::repeat_n('.', pad));
                }
                match keys {
                    Some(k) => {
                        let key = (n % k.max(&1)).to_string();
                        batch.push(Some(key.as_bytes()), self.scratch.as_bytes(), ts);
                    }
                    None => batch.push(None, self.scratch.as_bytes(), ts),
                }
            }
            GeneratorKind::Transactions { accounts } => {
                let r = r();
                let account = format!("acct-{}", r % accounts.max(&1));
                let class = (r >> 20) % 100;
                let cents = (r >> 40) % 1_000_000;
                let cents = match class {
                    0..10 => cents % 100,              // 0.00 ..= 0.99
                    10..20 => 50_001 + cents % 50_000, // 500.01 ..= 1000.00
                    _ => 100 + cents % 49_901,         // 1.00 ..= 500.00
                };
                let _ = write!(
                    self.scratch,
                    "{{\"account\":\"{account}\",\"amount\":{}.{:02}}}",
                    cents / 100,
                    cents % 100
                );
                batch.push(Some(account.as_bytes()), self.scratch.as_bytes(), ts);
            }
            GeneratorKind::Words {
                vocabulary,
                words_per_record,
            } => {
                let mut x = r();
                for i in 0..*words_per_record {
                    if i > 0 {
                        self.scratch.push(' ');
                    }
                    x = splitmix64(x);
                    let _ = write!(self.scratch, "w{}", x % vocabulary.max(&1));
                }
                batch.push(None, self.scratch.as_bytes(), ts);
            }
            GeneratorKind::Nexmark { .. } => unreachable!("handled above"),
        }
    }
}

/// Writes `event` as one JSON object (see [`GeneratorKind::Nexmark`]).
fn write_nexmark_json(event: &nexmark::event::Event, out: &mut Vec<u8>) {
    use nexmark::event::Event;
    use std::io::Write;
    // Writing into a Vec cannot fail; a string is escaped by serde_json.
    let s = |out: &mut Vec<u8>, text: &str| {
        let _ = serde_json::to_writer(&mut *out, text);
    };
    match event {
        Event::Person(p) => {
            let _ = write!(out, r#"{{"type":"person","id":{},"name":"#, p.id);
            s(out, &p.name);
            out.extend_from_slice(br#","email_address":"#);
            s(out, &p.email_address);
            out.extend_from_slice(br#","credit_card":"#);
            s(out, &p.credit_card);
            out.extend_from_slice(br#","city":"#);
            s(out, &p.city);
            out.extend_from_slice(br#","state":"#);
            s(out, &p.state);
            let _ = write!(out, r#","date_time":{},"extra":"#, p.date_time);
            s(out, &p.extra);
        }
        Event::Auction(a) => {
            let _ = write!(out, r#"{{"type":"auction","id":{},"item_name":"#, a.id);
            s(out, &a.item_name);
            out.extend_from_slice(br#","description":"#);
            s(out, &a.description);
            let _ = write!(
                out,
                r#","initial_bid":{},"reserve":{},"date_time":{},"expires":{},"seller":{},"category":{},"extra":"#,
                a.initial_bid, a.reserve, a.date_time, a.expires, a.seller, a.category
            );
            s(out, &a.extra);
        }
        Event::Bid(b) => {
            let _ = write!(
                out,
                r#"{{"type":"bid","auction":{},"bidder":{},"price":{},"channel":"#,
                b.auction, b.bidder, b.price
            );
            s(out, &b.channel);
            out.extend_from_slice(br#","url":"#);
            s(out, &b.url);
            let _ = write!(out, r#","date_time":{},"extra":"#, b.date_time);
            s(out, &b.extra);
        }
    }
    out.push(b'}');
}

impl Source for GeneratorSource {
    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "next": self.next })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let next = position
            .get("next")
            .and_then(serde_json::Value::as_u64)
            .filter(|n| n % self.step == self.next % self.step)
            .ok_or_else(|| {
                ConnectorError::Position(format!(
                    "not a position of this generator subtask: {position}"
                ))
            })?;
        self.next = next;
        self.nexmark = None;
        // The rate applies from now on.
        if let Some(t) = &mut self.throttle {
            t.restart();
        }
        Ok(())
    }

    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError> {
        let mut max = max.max(1);
        if let Some(t) = &self.throttle {
            // About 10 ms worth of records per batch keeps a throttled
            // stream smooth.
            max = t.batch_limit(max);
            t.wait();
        }
        let record_bytes = match &self.config.kind {
            GeneratorKind::Sequence {
                record_bytes: Some(b),
                ..
            } => *b + 8,
            GeneratorKind::Nexmark { .. } => 200,
            _ => 48,
        };
        let mut batch = Batch::with_capacity(max, max * record_bytes);
        while batch.len() < max {
            if self.config.count.is_some_and(|c| self.next >= c) {
                break;
            }
            let n = self.next;
            self.push_record(n, &mut batch);
            self.next += self.step;
        }
        if let Some(t) = &mut self.throttle {
            t.released(batch.len());
        }
        Ok(if batch.is_empty() { None } else { Some(batch) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(config: &GeneratorConfig, p: u32) -> Vec<(Option<Vec<u8>>, Vec<u8>, i64)> {
        let mut out = Vec::new();
        for i in 0..p {
            let mut g = GeneratorSource::new(config.clone(), i, p);
            while let Some(b) = g.next_batch(7).unwrap() {
                out.extend(
                    b.iter()
                        .map(|r| (r.key.map(<[u8]>::to_vec), r.value.to_vec(), r.timestamp)),
                );
            }
        }
        // In time order; records of one timestamp (nexmark events share
        // milliseconds) by value, whatever instance made them.
        out.sort_by(|a, b| (a.2, &a.1).cmp(&(b.2, &b.1)));
        out
    }

    #[test]
    fn bounded_and_deterministic_and_split_across_instances() {
        let config = GeneratorConfig {
            kind: GeneratorKind::Transactions { accounts: 10 },
            count: Some(100),
            seed: 3,
            rate: None,
            interval_ms: 10,
        };
        let one = all(&config, 1);
        assert_eq!(one.len(), 100);
        assert_eq!(one, all(&config, 3));
        let v: serde_json::Value = serde_json::from_slice(&one[0].1).unwrap();
        assert_eq!(
            v["account"].as_str().unwrap().as_bytes(),
            one[0].0.as_deref().unwrap()
        );
        assert!(v["amount"].as_f64().is_some());
    }

    #[test]
    fn nexmark_events_are_json_split_across_instances_and_the_same_after_a_seek() {
        let config = GeneratorConfig {
            kind: GeneratorKind::Nexmark { event_rate: 1000 },
            count: Some(500),
            seed: 0,
            rate: None,
            interval_ms: 10,
        };
        let one = all(&config, 1);
        assert_eq!(one.len(), 500);
        assert_eq!(one, all(&config, 3));
        let mut types = std::collections::BTreeMap::new();
        for (key, value, ts) in &one {
            assert!(key.is_none());
            let v: serde_json::Value = serde_json::from_slice(value).unwrap();
            assert_eq!(v["date_time"].as_i64(), Some(*ts), "{v}");
            *types
                .entry(v["type"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
        // The Nexmark proportions: 1 person, 3 auctions, 46 bids in 50.
        assert_eq!(types["person"], 10);
        assert_eq!(types["auction"], 30);
        assert_eq!(types["bid"], 460);
        // 1000 events per second of event time: 500 events span ~0.5 s.
        assert!(
            (one[499].2 - one[0].2 - 499).abs() <= 1,
            "{:?}",
            (one[0].2, one[499].2)
        );
        // A restored instance continues with the very same events.
        let mut g = GeneratorSource::new(config.clone(), 1, 2);
        let first = g.next_batch(10).unwrap().unwrap();
        let position = g.position();
        let rest: Vec<_> = g
            .next_batch(5)
            .unwrap()
            .unwrap()
            .iter()
            .map(|r| r.value.to_vec())
            .collect();
        let mut h = GeneratorSource::new(config, 1, 2);
        h.seek(&position).unwrap();
        let again: Vec<_> = h
            .next_batch(5)
            .unwrap()
            .unwrap()
            .iter()
            .map(|r| r.value.to_vec())
            .collect();
        assert_eq!(first.len(), 10);
        assert_eq!(rest, again);
    }

    #[test]
    fn sequence_pads_values() {
        let config = GeneratorConfig {
            kind: GeneratorKind::Sequence {
                record_bytes: Some(100),
                keys: Some(4),
            },
            count: Some(5),
            seed: 0,
            rate: None,
            interval_ms: 1,
        };
        let recs = all(&config, 1);
        assert!(recs.iter().all(|r| r.1.len() == 100));
        assert_eq!(recs[3].0.as_deref(), Some(&b"3"[..]));
    }
}
