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
//! - `"q3-persons"`, `"q3-auctions"`: q3's (local item suggestion) two
//!   inputs for `nexmark-local-item`: the persons of Oregon, Idaho and
//!   California as `{"name":…,"city":…,"state":…}` keyed by their id, and
//!   the ids of the auctions in category 10 keyed by their seller.
//! - `"q4-auctions"`, `"q4-bids"`: the two inputs of `nexmark-winning-bid`
//!   (q4's and q6's winning bids): every auction as
//!   `{"date_time":T,"expires":E,"seller":S,"category":C}` and every bid as
//!   `{"price":P,"date_time":T}`, both keyed by the auction's id.
//! - `"q8-persons"`, `"q8-auctions"`: q8's (monitor new users) inputs:
//!   every person as `{"id":I,"name":…}` keyed by their id, and every
//!   auction's id keyed by its seller.
//! - `"q8"`: q8's result from the window join of those (its output
//!   `{"key":…,"left":{"id":I,"name":…},"right":…,"start":S,"end":E}`):
//!   `{"id":I,"name":…,"start":S}`, the suite's `id, name, starttime`.
//!
//! Every other event is dropped. The query definitions
//! are the Nexmark suite's as Flink and RisingWave publish them; see
//! `udfs/jobs/nexmark/README.md`.

use std::borrow::Cow;

use serde::Deserialize;
use weir_sdk::{Collector, Error, FlatMapFunction, OpenContext, Record};

/// The queries this function answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    Q0,
    Q1,
    Q2,
    Bids,
    Q3Persons,
    Q3Auctions,
    Q4Auctions,
    Q4Bids,
    Q8Persons,
    Q8Auctions,
    Q8,
}

/// The fields of a bid event the queries read (`extra` borrowed from the
/// record unless it has escapes).
#[derive(Deserialize)]
struct Bid<'a> {
    auction: u64,
    bidder: u64,
    price: u64,
    date_time: i64,
    #[serde(borrow)]
    extra: Cow<'a, str>,
}

/// The fields of a person event q3 and q8 read.
#[derive(Deserialize)]
struct Person {
    id: u64,
    name: String,
    city: String,
    state: String,
}

/// The fields of an auction event q3, q4 and q8 read.
#[derive(Deserialize)]
struct Auction {
    id: u64,
    seller: u64,
    category: u64,
    date_time: i64,
    expires: i64,
}

/// The fields of a bid q2 and q4 read.
#[derive(Deserialize)]
struct PricedBid {
    auction: u64,
    price: u64,
    date_time: i64,
}

/// The window join's output row that q8 reshapes (its other fields are
/// ignored).
#[derive(Deserialize)]
struct Q8Match {
    left: Q8Person,
    start: i64,
}

/// q8's person, as `"q8-persons"` wrote it.
#[derive(Deserialize)]
struct Q8Person {
    id: u64,
    name: String,
}

/// The function.
pub struct Select {
    query: Query,
    key: Option<Vec<u8>>,
    out: Vec<u8>,
}

/// Every bid line the generator writes starts with this.
const BID_PREFIX: &[u8] = br#"{"type":"bid","#;
const PERSON_PREFIX: &[u8] = br#"{"type":"person","#;
const AUCTION_PREFIX: &[u8] = br#"{"type":"auction","#;

/// Appends `n` in decimal (with `itoa`: `write!` and its `fmt` machinery
/// were an eighth of q0's time).
fn push_int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `text` as a JSON string. A string serde_json could borrow from
/// the input had no escape in it, and valid JSON holds no raw `"`, `\` or
/// control character in a string: it is copied as it is, not escaped
/// character by character again.
// The `Cow` itself is the argument: whether it borrows is what matters.
#[allow(clippy::ptr_arg)]
fn push_json_str(out: &mut Vec<u8>, text: &Cow<'_, str>) -> Result<(), Error> {
    match text {
        Cow::Borrowed(raw) => {
            out.push(b'"');
            out.extend_from_slice(raw.as_bytes());
            out.push(b'"');
            Ok(())
        }
        Cow::Owned(text) => {
            serde_json::to_writer(&mut *out, text).map_err(|e| Error::msg(e.to_string()))
        }
    }
}

/// Parses an event: the line's UTF-8 is checked once, not string by string
/// as `serde_json::from_slice` does (a sixteenth of q0's time).
fn parse<'a, T: Deserialize<'a>>(value: &'a [u8], what: &str) -> Result<T, Error> {
    let text =
        std::str::from_utf8(value).map_err(|e| Error::msg(format!("not a Nexmark {what}: {e}")))?;
    serde_json::from_str(text).map_err(|e| Error::msg(format!("not a Nexmark {what}: {e}")))
}

impl FlatMapFunction for Select {
    const NAME: &'static str = "nexmark-select";

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let query = match ctx.config().require_str("query")? {
            "q0" => Query::Q0,
            "q1" => Query::Q1,
            "q2" => Query::Q2,
            "bids" => Query::Bids,
            "q3-persons" => Query::Q3Persons,
            "q3-auctions" => Query::Q3Auctions,
            "q4-auctions" => Query::Q4Auctions,
            "q4-bids" => Query::Q4Bids,
            "q8-persons" => Query::Q8Persons,
            "q8-auctions" => Query::Q8Auctions,
            "q8" => Query::Q8,
            other => {
                return Err(Error::msg(format!(
                    "config query: {other:?} is not one of \"q0\", \"q1\", \"q2\", \"bids\", \"q3-persons\", \"q3-auctions\", \"q4-auctions\", \"q4-bids\", \"q8-persons\", \"q8-auctions\", \"q8\""
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
        match self.query {
            Query::Q3Persons => return self.q3_person(record, out),
            Query::Q3Auctions => return self.q3_auction(record, out),
            Query::Q4Auctions => return self.q4_auction(record, out),
            Query::Q4Bids => return self.q4_bid(record, out),
            Query::Q8Persons => return self.q8_person(record, out),
            Query::Q8Auctions => return self.q8_auction(record, out),
            Query::Q8 => return self.q8(record, out),
            _ => {}
        }
        // Persons and auctions are not parsed at all.
        if !record.value.starts_with(BID_PREFIX) {
            return Ok(());
        }
        if self.query == Query::Bids {
            out.collect(record.with_key(self.key.as_deref()));
            return Ok(());
        }
        self.out.clear();
        match self.query {
            Query::Q0 | Query::Q1 => {
                let bid: Bid = parse(record.value, "bid")?;
                let out = &mut self.out;
                out.extend_from_slice(br#"{"auction":"#);
                push_int(out, bid.auction);
                out.extend_from_slice(br#","bidder":"#);
                push_int(out, bid.bidder);
                out.extend_from_slice(br#","price":"#);
                if self.query == Query::Q0 {
                    push_int(out, bid.price);
                } else {
                    let euro_millis = u128::from(bid.price) * 908;
                    push_int(out, euro_millis / 1000);
                    let millis = (euro_millis % 1000) as u16;
                    let digit = |d: u16| b'0' + d as u8;
                    out.extend_from_slice(&[
                        b'.',
                        digit(millis / 100),
                        digit(millis / 10 % 10),
                        digit(millis % 10),
                    ]);
                }
                out.extend_from_slice(br#","date_time":"#);
                push_int(out, bid.date_time);
                out.extend_from_slice(br#","extra":"#);
                push_json_str(out, &bid.extra)?;
                out.push(b'}');
            }
            Query::Q2 => {
                let bid: PricedBid = parse(record.value, "bid")?;
                if !bid.auction.is_multiple_of(123) {
                    return Ok(());
                }
                self.out.extend_from_slice(br#"{"auction":"#);
                push_int(&mut self.out, bid.auction);
                self.out.extend_from_slice(br#","price":"#);
                push_int(&mut self.out, bid.price);
                self.out.push(b'}');
            }
            Query::Bids
            | Query::Q3Persons
            | Query::Q3Auctions
            | Query::Q4Auctions
            | Query::Q4Bids
            | Query::Q8Persons
            | Query::Q8Auctions
            | Query::Q8 => unreachable!("handled above"),
        }
        out.collect(record.with_value(&self.out));
        Ok(())
    }
}

impl Select {
    fn q3_person(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        if !record.value.starts_with(PERSON_PREFIX) {
            return Ok(());
        }
        let p: Person = parse(record.value, "person")?;
        if !matches!(p.state.as_str(), "or" | "id" | "ca") {
            return Ok(());
        }
        self.out.clear();
        self.out.extend_from_slice(br#"{"name":"#);
        let mut field = |name: &[u8], text: &str| -> Result<(), Error> {
            self.out.extend_from_slice(name);
            serde_json::to_writer(&mut self.out, text).map_err(|e| Error::msg(e.to_string()))
        };
        field(b"", &p.name)?;
        field(br#","city":"#, &p.city)?;
        field(br#","state":"#, &p.state)?;
        self.out.push(b'}');
        let key = p.id.to_string();
        out.collect(Record::keyed(&key, &self.out, record.timestamp));
        Ok(())
    }

    fn q3_auction(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        if !record.value.starts_with(AUCTION_PREFIX) {
            return Ok(());
        }
        let a: Auction = parse(record.value, "auction")?;
        if a.category != 10 {
            return Ok(());
        }
        let (key, id) = (a.seller.to_string(), a.id.to_string());
        out.collect(Record::keyed(&key, &id, record.timestamp));
        Ok(())
    }

    fn q4_auction(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        if !record.value.starts_with(AUCTION_PREFIX) {
            return Ok(());
        }
        let a: Auction = parse(record.value, "auction")?;
        self.out.clear();
        use std::io::Write;
        let _ = write!(
            self.out,
            r#"{{"date_time":{},"expires":{},"seller":{},"category":{}}}"#,
            a.date_time, a.expires, a.seller, a.category
        );
        let key = a.id.to_string();
        out.collect(Record::keyed(&key, &self.out, record.timestamp));
        Ok(())
    }

    fn q4_bid(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        if !record.value.starts_with(BID_PREFIX) {
            return Ok(());
        }
        let b: PricedBid = parse(record.value, "bid")?;
        self.out.clear();
        use std::io::Write;
        let _ = write!(
            self.out,
            r#"{{"price":{},"date_time":{}}}"#,
            b.price, b.date_time
        );
        let key = b.auction.to_string();
        out.collect(Record::keyed(&key, &self.out, record.timestamp));
        Ok(())
    }

    fn q8_person(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        if !record.value.starts_with(PERSON_PREFIX) {
            return Ok(());
        }
        let p: Person = parse(record.value, "person")?;
        self.write_q8(p.id, &p.name, None)?;
        let key = p.id.to_string();
        out.collect(Record::keyed(&key, &self.out, record.timestamp));
        Ok(())
    }

    fn q8_auction(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        if !record.value.starts_with(AUCTION_PREFIX) {
            return Ok(());
        }
        let a: Auction = parse(record.value, "auction")?;
        let (key, id) = (a.seller.to_string(), a.id.to_string());
        out.collect(Record::keyed(&key, &id, record.timestamp));
        Ok(())
    }

    fn q8(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        let m: Q8Match = serde_json::from_slice(record.value)
            .map_err(|e| Error::msg(format!("not a q8 window-join row: {e}")))?;
        self.write_q8(m.left.id, &m.left.name, Some(m.start))?;
        out.collect(record.with_value(&self.out));
        Ok(())
    }

    /// `{"id":I,"name":…}`, with `,"start":S` when given, into `self.out`.
    fn write_q8(&mut self, id: u64, name: &str, start: Option<i64>) -> Result<(), Error> {
        use std::io::Write;
        self.out.clear();
        let _ = write!(self.out, r#"{{"id":{id},"name":"#);
        serde_json::to_writer(&mut self.out, name).map_err(|e| Error::msg(e.to_string()))?;
        if let Some(start) = start {
            let _ = write!(self.out, r#","start":{start}"#);
        }
        self.out.push(b'}');
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
        // Whole euros keep their three decimals.
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q1")]).unwrap();
        let bid = BID_246.replace(r#""price":7"#, r#""price":250"#);
        let out = h.process([Record::new(bid.as_str(), 1)]).unwrap().values();
        assert!(out[0].contains(r#""price":227.000,"#), "{}", out[0]);
    }

    #[test]
    fn q0_writes_extra_as_serde_json_would_escaped_or_not() {
        let extras = [
            r#""""#,
            r#""plain é""#,
            r#""a\"b\\c\n\u0001""#,
            r#""\u00e9""#,
        ];
        for extra in extras {
            let bid = BID_246.replace(r#""extra":"""#, &format!(r#""extra":{extra}"#));
            let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q0")]).unwrap();
            let out = h.process([Record::new(bid.as_str(), 1)]).unwrap().values();
            let text: String = serde_json::from_str(extra).unwrap();
            let expected = serde_json::to_string(&text).unwrap();
            assert!(
                out[0].ends_with(&format!(r#""extra":{expected}}}"#)),
                "{}",
                out[0]
            );
        }
    }

    #[test]
    fn q2_keeps_multiples_of_123() {
        assert_eq!(run(&[("query", "q2")]), [r#"{"auction":1230,"price":7}"#]);
    }

    #[test]
    fn bids_are_keyed_by_the_constant() {
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "bids"), ("key", "all")]).unwrap();
        let out = h
            .process([Record::new(PERSON, 1), Record::new(BID, 2)])
            .unwrap();
        assert_eq!(out.values(), [BID]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"all"[..]));
    }

    #[test]
    fn q3_inputs_are_the_local_persons_and_category_10_auctions_keyed_for_the_join() {
        let ca = PERSON.replace(r#""state":"or""#, r#""state":"ca""#);
        let az = PERSON.replace(r#""state":"or""#, r#""state":"az""#);
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q3-persons")]).unwrap();
        let out = h
            .process([
                Record::new(PERSON, 1),
                Record::new(&ca, 2),
                Record::new(&az, 3),
                Record::new(BID, 4),
            ])
            .unwrap();
        assert_eq!(
            out.values(),
            [
                r#"{"name":"p","city":"x","state":"or"}"#,
                r#"{"name":"p","city":"x","state":"ca"}"#
            ]
        );
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1000"[..]));
        let auction = |category: u64| {
            format!(
                r#"{{"type":"auction","id":1005,"item_name":"i","description":"d","initial_bid":1,"reserve":2,"date_time":5,"expires":9,"seller":1003,"category":{category},"extra":""}}"#
            )
        };
        let (ten, eleven) = (auction(10), auction(11));
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q3-auctions")]).unwrap();
        let out = h
            .process([
                Record::new(&ten, 1),
                Record::new(&eleven, 2),
                Record::new(PERSON, 3),
            ])
            .unwrap();
        assert_eq!(out.values(), ["1005"]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1003"[..]));
    }

    const AUCTION: &str = r#"{"type":"auction","id":1005,"item_name":"i","description":"d","initial_bid":1,"reserve":2,"date_time":5,"expires":9,"seller":1003,"category":12,"extra":""}"#;

    #[test]
    fn q4_inputs_are_auctions_and_bids_keyed_by_the_auction() {
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q4-auctions")]).unwrap();
        let out = h
            .process([
                Record::new(AUCTION, 1),
                Record::new(PERSON, 2),
                Record::new(BID, 3),
            ])
            .unwrap();
        assert_eq!(
            out.values(),
            [r#"{"date_time":5,"expires":9,"seller":1003,"category":12}"#]
        );
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1005"[..]));
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q4-bids")]).unwrap();
        let out = h
            .process([Record::new(AUCTION, 1), Record::new(BID, 2)])
            .unwrap();
        assert_eq!(
            out.values(),
            [r#"{"price":2113,"date_time":1700000000123}"#]
        );
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1108"[..]));
    }

    #[test]
    fn q8_inputs_are_persons_by_id_and_auctions_by_seller() {
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q8-persons")]).unwrap();
        let out = h
            .process([
                Record::new(PERSON, 1),
                Record::new(AUCTION, 2),
                Record::new(BID, 3),
            ])
            .unwrap();
        assert_eq!(out.values(), [r#"{"id":1000,"name":"p"}"#]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1000"[..]));
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q8-auctions")]).unwrap();
        let out = h
            .process([Record::new(PERSON, 1), Record::new(AUCTION, 2)])
            .unwrap();
        assert_eq!(out.values(), ["1005"]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1003"[..]));
    }

    #[test]
    fn q8_reshapes_the_window_join_row() {
        let row = r#"{"key":"1000","left":{"id":1000,"name":"kate \"k\" white"},"right":{"key":"1000","start":10000,"end":20000,"count":2},"start":10000,"end":20000}"#;
        let mut h = Harness::<FlatMap<Select>>::open(&[("query", "q8")]).unwrap();
        let out = h.process([Record::keyed("1000", row, 19999)]).unwrap();
        assert_eq!(
            out.values(),
            [r#"{"id":1000,"name":"kate \"k\" white","start":10000}"#]
        );
        assert_eq!(out.main[0].key.as_deref(), Some(&b"1000"[..]));
        assert!(h.process([Record::new("{}", 1)]).is_err());
    }

    #[test]
    fn an_unknown_query_is_refused() {
        let e = Harness::<FlatMap<Select>>::open(&[("query", "q9")])
            .err()
            .unwrap();
        assert!(e.to_string().contains("\"q9\""), "{e}");
    }
}
