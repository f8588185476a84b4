//! `nexmark-highest-bid`: Nexmark q7, "highest bid": in each tumbling
//! window, the bids at the window's highest price. An aggregate window
//! function: the accumulator keeps the highest price seen and the bids
//! that offered it, so a window's state stays small however many bids it
//! gets.
//!
//! Input: Nexmark bid events, all under one key (`nexmark-select` with
//! `query = "bids"` and a constant `key`). Each fired window emits
//! `{"start":S,"end":E,"price":P,"bids":[[auction,bidder,date_time],…]}`,
//! the bids sorted.

use serde::Deserialize;
use weir_sdk::{AggregateFunction, DecodeError, Error, OpenContext, Record, StateCodec, Window};

/// The highest price and its bids as (auction, bidder, date_time), sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Highest {
    price: u64,
    bids: Vec<(u64, u64, i64)>,
}

impl Highest {
    fn offer(&mut self, price: u64, bid: (u64, u64, i64)) {
        if price > self.price || self.bids.is_empty() {
            self.price = price;
            self.bids.clear();
        }
        if price == self.price {
            let at = self.bids.partition_point(|b| *b < bid);
            self.bids.insert(at, bid);
        }
    }
}

impl StateCodec for Highest {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.price.to_le_bytes());
        for (auction, bidder, time) in &self.bids {
            out.extend_from_slice(&auction.to_le_bytes());
            out.extend_from_slice(&bidder.to_le_bytes());
            out.extend_from_slice(&time.to_le_bytes());
        }
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() < 8 || !(bytes.len() - 8).is_multiple_of(24) {
            return Err(DecodeError::new("Highest", "length not 8 + 24n"));
        }
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        Ok(Highest {
            price: word(&bytes[..8]),
            bids: bytes[8..]
                .chunks_exact(24)
                .map(|c| (word(&c[..8]), word(&c[8..16]), word(&c[16..]) as i64))
                .collect(),
        })
    }
}

#[derive(Deserialize)]
struct Bid {
    auction: u64,
    bidder: u64,
    price: u64,
    date_time: i64,
}

/// The function.
pub struct HighestBid;

impl AggregateFunction for HighestBid {
    const NAME: &'static str = "nexmark-highest-bid";
    type Accumulator = Highest;

    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(HighestBid)
    }

    fn create_accumulator(&self) -> Highest {
        Highest::default()
    }

    fn add(&self, acc: &mut Highest, record: Record<'_>) -> Result<(), Error> {
        let bid: Bid = serde_json::from_slice(record.value)
            .map_err(|e| Error::msg(format!("not a Nexmark bid: {e}")))?;
        acc.offer(bid.price, (bid.auction, bid.bidder, bid.date_time));
        Ok(())
    }

    fn merge(&self, mut a: Highest, b: Highest) -> Highest {
        for bid in b.bids {
            a.offer(b.price, bid);
        }
        a
    }

    fn get_result(&self, _key: &[u8], window: Window, acc: &Highest) -> Result<Vec<u8>, Error> {
        let bids: Vec<String> = acc
            .bids
            .iter()
            .map(|(a, b, t)| format!("[{a},{b},{t}]"))
            .collect();
        Ok(format!(
            r#"{{"start":{},"end":{},"price":{},"bids":[{}]}}"#,
            window.start,
            window.end,
            acc.price,
            bids.join(",")
        )
        .into_bytes())
    }
}

weir_sdk::export_aggregate!(HighestBid);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Aggregate;
    use weir_sdk::testing::Harness;

    fn bid(auction: u64, price: u64, t: i64) -> String {
        format!(
            r#"{{"type":"bid","auction":{auction},"bidder":5,"price":{price},"date_time":{t}}}"#
        )
    }

    #[test]
    fn every_bid_at_the_highest_price_sorted() {
        let mut h = Harness::<Aggregate<HighestBid>>::open(&[]).unwrap();
        let bids = [bid(2, 10, 3), bid(1, 30, 4), bid(3, 30, 2), bid(4, 20, 1)];
        let records: Vec<Record<'_>> = bids.iter().map(|b| Record::keyed("all", b, 1)).collect();
        let w = Window { start: 0, end: 10 };
        let out = h.aggregate("all", w, &records, 1).unwrap();
        assert_eq!(
            out,
            br#"{"start":0,"end":10,"price":30,"bids":[[1,5,4],[3,5,2]]}"#
        );
    }

    #[test]
    fn merging_keeps_the_higher_side() {
        let f = HighestBid;
        let mut a = Highest::default();
        a.offer(5, (1, 1, 1));
        let mut b = Highest::default();
        b.offer(7, (2, 2, 2));
        assert_eq!(f.merge(a.clone(), b.clone()), b);
        assert_eq!(f.merge(b.clone(), a), b);
        assert_eq!(Highest::decode(&b.to_bytes()).unwrap(), b);
    }
}
