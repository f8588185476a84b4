//! `nexmark-average-price`: the outer aggregates over the winning bids that
//! `nexmark-winning-bid` emits (`{"auction","category","seller","price",
//! "expires"}`, timestamp `expires`), as a keyed process function. Config
//! `query` (required):
//!
//! - `"q4"`, "average price for a category", input keyed by
//!   `json:category`:
//!
//!   ```sql
//!   SELECT Q.category, AVG(Q.final) FROM (…winning bids…) Q GROUP BY Q.category
//!   ```
//!
//!   The number of auctions and the sum of their winning prices wait in
//!   value state. Like Flink's non-windowed `GROUP BY`, the result is a
//!   changelog: every winning bid emits its category's updated row,
//!   `{"category":C,"auctions":N,"sum":S,"avg":A}`, where `A` is `S / N`
//!   truncated to an integer (Flink's `AVG` of a `BIGINT` is a `BIGINT`) and
//!   `N` grows by one with each row of a category, so the last row of a
//!   category is the one with the largest `N`. Which auctions of a category
//!   close first at parallelism > 1 depends on the channels, so only that
//!   last row is deterministic; the sum and count say the exact average.
//!
//! - `"q6"`, "average selling price by seller", input keyed by
//!   `json:seller`:
//!
//!   ```sql
//!   SELECT Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller
//!       ORDER BY Q.expires, Q.auction ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
//!   FROM (…winning bids…) Q
//!   ```
//!
//!   A seller's winning bids are put in the order their auctions closed
//!   (expiry, then auction id) whatever channel they came by: each waits in
//!   list state until an event-time timer at its `expires` says every
//!   winning bid closing at or before it has arrived. Then, in that order,
//!   each joins the seller's last [`Q6_ROWS`] winning prices (list state)
//!   and emits
//!   `{"seller":S,"auction":A,"expires":E,"auctions":N,"sum":S,"avg":A}`
//!   over those `N <= 11` prices, with timestamp `expires`. Every row is
//!   deterministic.

use serde::Deserialize;
use weir_sdk::{
    DecodeError, Error, KeyedContext, KeyedProcessFunction, ListState, OpenContext, Record,
    StateCodec, StateDescriptor, ValueState,
};

/// How many winning prices q6 averages: the suite's `ROWS BETWEEN 10
/// PRECEDING AND CURRENT ROW`, so eleven (the prose says "the last 10").
pub const Q6_ROWS: usize = 11;

/// The fields of a winning bid this reads.
#[derive(Deserialize)]
struct Winning {
    auction: u64,
    category: u64,
    price: u64,
    expires: i64,
}

/// A q6 winning bid waiting for its place in the seller's order:
/// (expires, auction, price), which sorts in closing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Closing(i64, u64, u64);

impl StateCodec for Closing {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
        out.extend_from_slice(&self.1.to_le_bytes());
        out.extend_from_slice(&self.2.to_le_bytes());
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() != 24 {
            return Err(DecodeError::wrong_length("Closing", 24, bytes.len()));
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Ok(Closing(word(0) as i64, word(8), word(16)))
    }
}

/// The queries this function answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    Q4,
    Q6,
}

/// The function.
pub struct AveragePrice {
    query: Query,
    /// q4: the category's auctions so far and the sum of their prices.
    auctions: ValueState<u64>,
    sum: ValueState<u64>,
    /// q6: winning bids not yet in order, and the seller's last prices.
    closing: ListState<Closing>,
    last: ListState<u64>,
}

fn parse(value: &[u8]) -> Result<Winning, Error> {
    serde_json::from_slice(value).map_err(|e| {
        Error::msg(format!(
            "not a winning bid (nexmark-winning-bid's output): {e}: {}",
            String::from_utf8_lossy(value)
        ))
    })
}

fn overflow(what: &str) -> Error {
    Error::msg(format!("{what}: the sum of prices overflows"))
}

impl AveragePrice {
    fn q4(&mut self, w: Winning, timestamp: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let auctions = self.auctions.get(ctx)?.unwrap_or(0) + 1;
        let sum = self
            .sum
            .get(ctx)?
            .unwrap_or(0)
            .checked_add(w.price)
            .ok_or_else(|| overflow(&format!("category {}", w.category)))?;
        self.auctions.set(ctx, &auctions)?;
        self.sum.set(ctx, &sum)?;
        let value = format!(
            r#"{{"category":{},"auctions":{auctions},"sum":{sum},"avg":{}}}"#,
            w.category,
            sum / auctions
        );
        ctx.collect(Record::keyed(ctx.key(), &value, timestamp));
        Ok(())
    }
}

impl KeyedProcessFunction for AveragePrice {
    const NAME: &'static str = "nexmark-average-price";
    const STATES: &'static [StateDescriptor] = &[
        StateDescriptor::value("auctions"),
        StateDescriptor::value("sum"),
        StateDescriptor::list("closing"),
        StateDescriptor::list("last"),
    ];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let query = match ctx.config().require_str("query")? {
            "q4" => Query::Q4,
            "q6" => Query::Q6,
            other => {
                return Err(Error::msg(format!(
                    "config query: {other:?} is not one of \"q4\", \"q6\""
                )));
            }
        };
        Ok(AveragePrice {
            query,
            auctions: ctx.value_state("auctions")?,
            sum: ctx.value_state("sum")?,
            closing: ctx.list_state("closing")?,
            last: ctx.list_state("last")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let w = parse(record.value)?;
        match self.query {
            Query::Q4 => self.q4(w, record.timestamp, ctx),
            Query::Q6 => {
                self.closing
                    .add(ctx, &Closing(w.expires, w.auction, w.price))?;
                ctx.register_event_time_timer(w.expires)
            }
        }
    }

    /// q6: the winning bids closing at or before `time`, in closing order.
    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let (mut due, rest): (Vec<Closing>, Vec<Closing>) = self
            .closing
            .get(ctx)?
            .into_iter()
            .partition(|c| c.0 <= time);
        if due.is_empty() {
            return Ok(());
        }
        due.sort_unstable();
        let mut last = self.last.get(ctx)?;
        let seller = String::from_utf8_lossy(ctx.key()).into_owned();
        for Closing(expires, auction, price) in due {
            if last.len() == Q6_ROWS {
                last.remove(0);
            }
            last.push(price);
            let sum = last
                .iter()
                .try_fold(0u64, |sum, p| sum.checked_add(*p))
                .ok_or_else(|| overflow(&format!("seller {seller}")))?;
            let n = last.len() as u64;
            let value = format!(
                r#"{{"seller":{seller},"auction":{auction},"expires":{expires},"auctions":{n},"sum":{sum},"avg":{}}}"#,
                sum / n
            );
            ctx.collect(Record::keyed(ctx.key(), &value, expires));
        }
        self.last.update(ctx, &last)?;
        if rest.is_empty() {
            self.closing.clear(ctx)
        } else {
            self.closing.update(ctx, &rest)
        }
    }
}

weir_sdk::export_keyed!(AveragePrice);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    fn winning(auction: u64, category: u64, price: u64, expires: i64) -> String {
        format!(
            r#"{{"auction":{auction},"category":{category},"seller":2,"price":{price},"expires":{expires}}}"#
        )
    }

    #[test]
    fn q4_every_winning_bid_updates_its_categorys_average() -> Result<(), Error> {
        let mut h = Harness::<Keyed<AveragePrice>>::open(&[("query", "q4")])?;
        let (a, b, c) = (
            winning(1, 10, 100, 1),
            winning(2, 11, 7, 2),
            winning(3, 10, 51, 3),
        );
        let out = h.process([
            Record::keyed("10", &a, 1),
            Record::keyed("11", &b, 2),
            Record::keyed("10", &c, 3),
        ])?;
        assert_eq!(
            out.values(),
            [
                r#"{"category":10,"auctions":1,"sum":100,"avg":100}"#,
                r#"{"category":11,"auctions":1,"sum":7,"avg":7}"#,
                r#"{"category":10,"auctions":2,"sum":151,"avg":75}"#,
            ]
        );
        assert!(h.process([Record::keyed("10", "{}", 4)]).is_err());
        Ok(())
    }

    #[test]
    fn q6_averages_the_last_eleven_in_closing_order_whatever_the_arrival_order() -> Result<(), Error>
    {
        let mut h = Harness::<Keyed<AveragePrice>>::open(&[("query", "q6")])?;
        // Twelve auctions of seller 2, prices 1..=12, closing at 10..=120;
        // auctions 5 and 6 close at the same time and arrive reversed.
        let mut bids: Vec<(String, i64)> = (1..=12)
            .map(|i: u64| {
                let expires = if i == 6 { 50 } else { i as i64 * 10 };
                (winning(i, 0, i, expires), expires)
            })
            .collect();
        bids.swap(4, 5);
        bids.swap(0, 2);
        let out = h.process(bids.iter().map(|(v, t)| Record::keyed("2", v, *t)))?;
        assert!(out.is_empty(), "nothing before the watermark");
        let out = h.advance_watermark(50)?;
        assert_eq!(
            out.values(),
            [
                r#"{"seller":2,"auction":1,"expires":10,"auctions":1,"sum":1,"avg":1}"#,
                r#"{"seller":2,"auction":2,"expires":20,"auctions":2,"sum":3,"avg":1}"#,
                r#"{"seller":2,"auction":3,"expires":30,"auctions":3,"sum":6,"avg":2}"#,
                r#"{"seller":2,"auction":4,"expires":40,"auctions":4,"sum":10,"avg":2}"#,
                r#"{"seller":2,"auction":5,"expires":50,"auctions":5,"sum":15,"avg":3}"#,
                r#"{"seller":2,"auction":6,"expires":50,"auctions":6,"sum":21,"avg":3}"#,
            ]
        );
        let out = h.finish()?;
        let values = out.values();
        assert_eq!(values.len(), 6);
        // The twelfth drops the first: 2 + … + 12 over 11.
        assert_eq!(
            values[5],
            r#"{"seller":2,"auction":12,"expires":120,"auctions":11,"sum":77,"avg":7}"#
        );
        Ok(())
    }

    #[test]
    fn an_unknown_query_is_refused() {
        let e = Harness::<Keyed<AveragePrice>>::open(&[("query", "q5")])
            .err()
            .unwrap();
        assert!(e.to_string().contains("\"q5\""), "{e}");
    }

    #[test]
    fn closing_round_trips() {
        let c = Closing(-5, 7, 9);
        let mut bytes = Vec::new();
        c.encode(&mut bytes);
        assert_eq!(Closing::decode(&bytes).unwrap(), c);
    }
}
