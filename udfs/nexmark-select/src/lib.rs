//! `nexmark-select`: the stateless Nexmark queries over the JSON events of
//! the `nexmark` generator source (`kind = "nexmark"`), as a flat map.
//!
//! Config `query` (required):
//!
//! - `"q0"` (pass-through): every bid as
//!   `{"auction":A,"bidder":B,"price":P,"date_time":T,"extra":"…"}`.
//! - `"q1"` (currency conversion): the same with the price in euros,
//!   `0.908 * price`, written exactly with three decimals (`"price":1918.604`).
//! - `"q2"` (selection): `{"auction":A,"price":P}` of the bids whose
//!   auction is a multiple of 123.
//! - `"bids"`: every bid unchanged, keyed by config `key` (a constant, for a
//!   window over all bids) or, without it, unkeyed.
//!
//! Persons and auctions are dropped by every query. The query definitions
//! are the Nexmark suite's as Flink and RisingWave publish them; see
//! `udfs/jobs/nexmark/README.md`.

use serde::Deserialize;
use weir_sdk::{Collector, Error, FlatMapFunction, OpenContext, Record};

/// The queries this function answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    Q0,
    Q1,
    Q2,
    Bids,
}

/// The fields of a bid event the queries read.
#[derive(Deserialize)]
struct Bid {
    auction: u64,
    bidder: u64,
    price: u64,
    date_time: i64,
    extra: String,
}

/// The function.
pub struct Select {
    query: Query,
    key: Option<Vec<u8>>,
    out: Vec<u8>,
}

/// Every bid line the generator writes starts with this.
const BID_PREFIX: &[u8] = br#"{"type":"bid","#;

impl FlatMapFunction for Select {
    const NAME: &'static str = "nexmark-select";

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let query = match ctx.config().require_str("query")? {
            "q0" => Query::Q0,
            "q1" => Query::Q1,
            "q2" => Query::Q2,
            "bids" => Query::Bids,
            other => {
                return Err(Error::msg(format!(
                    "config query: {other:?} is not one of \"q0\", \"q1\", \"q2\", \"bids\""
                )));
            }
        };
        let key = ctx.config().get_str("key").map(|k| k.as_bytes().to_vec());
        if key.is_some() && query != Query::Bids {
            return Err(Error::msg("config key: only for query = \"bids\""));
        }
        Ok(Select {
            query,
            key,
            out: Vec::new(),
        })
    }

    fn flat_map(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        // Persons and auctions are not parsed at all.
        if !record.value.starts_with(BID_PREFIX) {
            return Ok(());
        }
        if self.query == Query::Bids {
            out.collect(record.with_key(self.key.as_deref()));
            return Ok(());
        }
        let bid: Bid = serde_json::from_slice(record.value)
            .map_err(|e| Error::msg(format!("not a Nexmark bid: {e}")))?;
        self.out.clear();
        match self.query {
            Query::Q0 | Query::Q1 => {
                use std::io::Write;
                let _ = write!(
                    self.out,
                    r#"{{"auction":{},"bidder":{},"price":"#,
                    bid.auction, bid.bidder
                );
                if self.query == Query::Q0 {
                    let _ = write!(self.out, "{}", bid.price);
                } else {
                    let euro_millis = u128::from(bid.price) * 908;
                    let _ = write!(self.out, "{}.{:03}", euro_millis / 1000, euro_millis % 1000);
                }
                let _ = write!(self.out, r#","date_time":{},"extra":"#, bid.date_time);
                serde_json::to_writer(&mut self.out, &bid.extra)
                    .map_err(|e| Error::msg(e.to_string()))?;
                self.out.push(b'}');
            }
            Query::Q2 => {
                if bid.auction % 123 != 0 {
                    return Ok(());
                }
                use std::io::Write;
                let _ = write!(
                    self.out,
                    r#"{{"auction":{},"price":{}}}"#,
                    bid.auction, bid.price
                );
            }
            Query::Bids => unreachable!("handled above"),
        }
        out.collect(record.with_value(&self.out));
        Ok(())
    }
}

weir_sdk::export_flat_map!(Select);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::FlatMap;
    use weir_sdk::testing::Harness;

    const BID: &str = r#"{"type":"bid","auction":1108,"bidder":1001,"price":2113,"channel":"Google","url":"https://x","date_time":1700000000123,"extra":"a\"b"}"#;
    const BID_246: &str = r#"{"type":"bid","auction":1230,"bidder":1001,"price":7,"channel":"Apple","url":"https://y","date_time":1700000000124,"extra":""}"#;
    const PERSON: &str = r#"{"type":"person","id":1000,"name":"p","email_address":"e","credit_card":"c","city":"x","state":"or","date_time":1700000000000,"extra":""}"#;

    fn run(query: &[(&str, &str)]) -> Vec<String> {
        let mut h = Harness::<FlatMap<Select>>::open(query).unwrap();
        let input = [
            Record::new(PERSON, 1),
            Record::new(BID, 2),
            Record::new(BID_246, 3),
        ];
        h.process(input).unwrap().values()
    }

    #[test]
    fn q0_projects_every_bid_and_drops_the_rest() {
        assert_eq!(
            run(&[("query", "q0")]),
            [
                r#"{"auction":1108,"bidder":1001,"price":2113,"date_time":1700000000123,"extra":"a\"b"}"#,
                r#"{"auction":1230,"bidder":1001,"price":7,"date_time":1700000000124,"extra":""}"#
            ]
        );
    }

    #[test]
    fn q1_converts_prices_exactly() {
        let out = run(&[("query", "q1")]);
        assert!(out[0].contains(r#""price":1918.604,"#), "{}", out[0]);
        assert!(out[1].contains(r#""price":6.356,"#), "{}", out[1]);
    }

    #[test]
    fn q2_keeps_multiples_of_123() {
        assert_eq!(run(&[("query", "q2")]), [r#"{"auction":1230,"price":7}"#]);
    }

    #[test]
    fn bids_are_keyed_by_the_constant() {
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "bids"), ("key", "all")]).unwrap();
        let out = h.process([Record::new(PERSON, 1), Record::new(BID, 2)]).unwrap();
        assert_eq!(out.values(), [BID]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"all"[..]));
    }

    #[test]
    fn an_unknown_query_is_refused() {
        let e = Harness::<FlatMap<Select>>::open(&[("query", "q9")]).err().unwrap();
        assert!(e.to_string().contains("\"q9\""), "{e}");
    }
}
