//! `window-stats`: an aggregate window function (Flink's
//! `AggregateFunction`): count, sum, min and max of the values per key and
//! window. Use it as the `module` of an `[[operator]]` with a `window`.
//!
//! Input values are decimal integers (surrounding whitespace allowed);
//! anything else fails the job with a message naming the value. The result
//! of a window is
//! `{"key":"<key>","start":S,"end":E,"count":C,"sum":X,"min":M,"max":N}`
//! (the key as a JSON string), the same bytes as the Python, JS and C
//! examples of the same name.

use weir_sdk::{AggregateFunction, DecodeError, Error, OpenContext, Record, StateCodec, Window};

/// The accumulator: 32 bytes, four little-endian i64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    count: i64,
    sum: i64,
    min: i64,
    max: i64,
}

impl StateCodec for Stats {
    fn encode(&self, out: &mut Vec<u8>) {
        for x in [self.count, self.sum, self.min, self.max] {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() != 32 {
            return Err(DecodeError::wrong_length("Stats", 32, bytes.len()));
        }
        let word = |i: usize| i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        Ok(Stats {
            count: word(0),
            sum: word(1),
            min: word(2),
            max: word(3),
        })
    }
}

/// The function.
pub struct WindowStats;

/// A record's value as an integer, or an error naming it.
pub fn integer(record: &Record<'_>) -> Result<i64, Error> {
    let text = record.value_str();
    text.trim()
        .parse()
        .map_err(|_| Error::msg(format!("value {text:?} is not a decimal integer")))
}

impl AggregateFunction for WindowStats {
    const NAME: &'static str = "window-stats";
    type Accumulator = Stats;

    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(WindowStats)
    }

    fn create_accumulator(&self) -> Stats {
        Stats {
            count: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
        }
    }

    fn add(&self, acc: &mut Stats, record: Record<'_>) -> Result<(), Error> {
        let x = integer(&record)?;
        acc.count += 1;
        acc.sum = acc.sum.wrapping_add(x);
        acc.min = acc.min.min(x);
        acc.max = acc.max.max(x);
        Ok(())
    }

    fn merge(&self, a: Stats, b: Stats) -> Stats {
        Stats {
            count: a.count + b.count,
            sum: a.sum.wrapping_add(b.sum),
            min: a.min.min(b.min),
            max: a.max.max(b.max),
        }
    }

    fn get_result(&self, key: &[u8], window: Window, acc: &Stats) -> Result<Vec<u8>, Error> {
        let key = serde_json::to_string(&String::from_utf8_lossy(key))
            .map_err(|e| Error::msg(e.to_string()))?;
        Ok(format!(
            r#"{{"key":{key},"start":{},"end":{},"count":{},"sum":{},"min":{},"max":{}}}"#,
            window.start, window.end, acc.count, acc.sum, acc.min, acc.max
        )
        .into_bytes())
    }
}

weir_sdk::export_aggregate!(WindowStats);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::Harness;
    use weir_sdk::{Aggregate, Window};

    const W: Window = Window { start: 0, end: 10 };

    fn expected(values: &[i64]) -> String {
        format!(
            r#"{{"key":"k\"1","start":0,"end":10,"count":{},"sum":{},"min":{},"max":{}}}"#,
            values.len(),
            values.iter().sum::<i64>(),
            values.iter().min().unwrap(),
            values.iter().max().unwrap()
        )
    }

    #[test]
    fn stats_equal_a_direct_computation_however_the_records_are_split() {
        let values = [5i64, -3, 12, 7, 7, 0, 41];
        let texts: Vec<String> = values.iter().map(|v| format!(" {v}\n")).collect();
        let records: Vec<Record<'_>> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Record::keyed("k\"1", t.as_str(), i as i64))
            .collect();
        let mut h = Harness::<Aggregate<WindowStats>>::open(&[]).unwrap();
        for chunk in [1, 3, 7] {
            let out = h.aggregate("k\"1", W, &records, chunk).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), expected(&values));
        }
        let out = h
            .merged_aggregate("k\"1", W, &records[..2], &records[2..])
            .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), expected(&values));
    }

    #[test]
    fn a_value_that_is_not_an_integer_fails_naming_it() {
        let mut h = Harness::<Aggregate<WindowStats>>::open(&[]).unwrap();
        let e = h
            .aggregate("k", W, &[Record::keyed("k", "12x", 0)], 1)
            .unwrap_err();
        assert!(e.to_string().contains("\"12x\""), "{e}");
        // An ordinary record is refused: this is a window function.
        let e = h.process([Record::keyed("k", "1", 0)]).unwrap_err();
        assert!(e.to_string().contains("window function"), "{e}");
    }
}
