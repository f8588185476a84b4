//! `nexmark-hot-items`: Nexmark q5, "hot items": in each sliding window,
//! the auctions with the most bids. An aggregate window function (Flink's
//! `AggregateFunction`): the accumulator counts bids per auction, so the
//! host keeps one small map per window instead of the window's records.
//!
//! Input: Nexmark bid events (JSON with an `auction` field), all under one
//! key (`nexmark-select` with `query = "bids"` and a constant `key`). Each
//! fired window emits
//! `{"start":S,"end":E,"num":N,"auctions":[A1,A2,…]}`: the largest number
//! of bids `N` any auction got in the window and every auction that got
//! that many, ascending (the Nexmark query's `num >= maxn` join).

use serde::Deserialize;
use weir_sdk::{AggregateFunction, DecodeError, Error, OpenContext, Record, StateCodec, Window};

/// Bids per auction, sorted by auction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts(Vec<(u64, u64)>);

impl Counts {
    fn add(&mut self, auction: u64, n: u64) {
        match self.0.binary_search_by_key(&auction, |&(a, _)| a) {
            Ok(i) => self.0[i].1 += n,
            Err(i) => self.0.insert(i, (auction, n)),
        }
    }
}

impl StateCodec for Counts {
    fn encode(&self, out: &mut Vec<u8>) {
        for (auction, n) in &self.0 {
            out.extend_from_slice(&auction.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if !bytes.len().is_multiple_of(16) {
            return Err(DecodeError::new("Counts", "length not a multiple of 16"));
        }
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        Ok(Counts(
            bytes
                .chunks_exact(16)
                .map(|c| (word(&c[..8]), word(&c[8..])))
                .collect(),
        ))
    }
}

#[derive(Deserialize)]
struct Bid {
    auction: u64,
}

/// The function.
pub struct HotItems;

impl AggregateFunction for HotItems {
    const NAME: &'static str = "nexmark-hot-items";
    type Accumulator = Counts;

    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(HotItems)
    }

    fn create_accumulator(&self) -> Counts {
        Counts::default()
    }

    fn add(&self, acc: &mut Counts, record: Record<'_>) -> Result<(), Error> {
        let bid: Bid = serde_json::from_slice(record.value)
            .map_err(|e| Error::msg(format!("not a Nexmark bid: {e}")))?;
        acc.add(bid.auction, 1);
        Ok(())
    }

    fn merge(&self, mut a: Counts, b: Counts) -> Counts {
        for (auction, n) in b.0 {
            a.add(auction, n);
        }
        a
    }

    fn get_result(&self, _key: &[u8], window: Window, acc: &Counts) -> Result<Vec<u8>, Error> {
        let num = acc.0.iter().map(|&(_, n)| n).max().unwrap_or(0);
        let hot: Vec<String> = acc
            .0
            .iter()
            .filter(|&&(_, n)| n == num)
            .map(|(a, _)| a.to_string())
            .collect();
        Ok(format!(
            r#"{{"start":{},"end":{},"num":{num},"auctions":[{}]}}"#,
            window.start,
            window.end,
            hot.join(",")
        )
        .into_bytes())
    }
}

weir_sdk::export_aggregate!(HotItems);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Aggregate;
    use weir_sdk::testing::Harness;

    fn bid(auction: u64) -> String {
        format!(r#"{{"type":"bid","auction":{auction},"bidder":1,"price":2}}"#)
    }

    #[test]
    fn the_auctions_with_the_most_bids_ascending() {
        let mut h = Harness::<Aggregate<HotItems>>::open(&[]).unwrap();
        let bids: Vec<String> = [7, 3, 7, 3, 5].iter().map(|&a| bid(a)).collect();
        let records: Vec<Record<'_>> = bids.iter().map(|b| Record::keyed("all", b, 1)).collect();
        let w = Window { start: 0, end: 10 };
        let out = h.aggregate("all", w, &records, 1).unwrap();
        assert_eq!(out, br#"{"start":0,"end":10,"num":2,"auctions":[3,7]}"#);
    }

    #[test]
    fn counts_survive_their_encoding() {
        let mut c = Counts::default();
        c.add(9, 2);
        c.add(1, 1);
        assert_eq!(Counts::decode(&c.to_bytes()).unwrap(), c);
        assert!(Counts::decode(&[1, 2, 3]).is_err());
    }
}
