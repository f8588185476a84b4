//! `count-aggregate`: the smallest aggregate window function, counting the
//! records of each key and window. Its output is byte for byte the
//! built-in `aggregate = "count"`'s,
//! `{"key":"<key>","start":S,"end":E,"count":C}`, so a test can compare
//! the two and the benchmark can measure what a Wasm aggregate costs over
//! the built-in one.

use weir_sdk::{AggregateFunction, Error, OpenContext, Record, Window};

/// The function.
pub struct CountAggregate;

impl AggregateFunction for CountAggregate {
    const NAME: &'static str = "count-aggregate";
    type Accumulator = u64;

    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(CountAggregate)
    }

    fn create_accumulator(&self) -> u64 {
        0
    }

    fn add(&self, acc: &mut u64, _record: Record<'_>) -> Result<(), Error> {
        *acc += 1;
        Ok(())
    }

    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }

    fn get_result(&self, key: &[u8], window: Window, acc: &u64) -> Result<Vec<u8>, Error> {
        let key = serde_json::to_string(&String::from_utf8_lossy(key))
            .map_err(|e| Error::msg(e.to_string()))?;
        Ok(if window.is_global() {
            format!(r#"{{"key":{key},"count":{acc}}}"#)
        } else {
            format!(
                r#"{{"key":{key},"start":{},"end":{},"count":{acc}}}"#,
                window.start, window.end
            )
        }
        .into_bytes())
    }
}

weir_sdk::export_aggregate!(CountAggregate);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Aggregate;
    use weir_sdk::testing::Harness;

    #[test]
    fn counts_like_the_built_in_count() {
        let mut h = Harness::<Aggregate<CountAggregate>>::open(&[]).unwrap();
        let records = [Record::keyed("a", "x", 1), Record::keyed("a", "y", 2)];
        let w = Window { start: 0, end: 10 };
        let out = h.aggregate("a", w, &records, 1).unwrap();
        assert_eq!(out, br#"{"key":"a","start":0,"end":10,"count":2}"#);
        let out = h
            .merged_aggregate("a", Window::GLOBAL, &records, &records[..1])
            .unwrap();
        assert_eq!(out, br#"{"key":"a","count":3}"#);
    }
}
