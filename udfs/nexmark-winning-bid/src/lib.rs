//! `nexmark-winning-bid`: the winning bid of every auction, the inner part
//! of Nexmark q4 (average price per category) and q6 (average selling
//! price by seller):
//!
//! ```sql
//! SELECT A.id, A.category, A.seller, MAX(B.price) AS final
//! FROM auction A, bid B
//! WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
//! GROUP BY A.id, A.category, A.seller
//! ```
//!
//! A keyed co-process function, both inputs keyed by the auction's id
//! (`nexmark-select` with `query = "q4-auctions"` for input 0, `left`, and
//! `"q4-bids"` for input 1, `right`). The auction waits in value state with
//! the highest qualifying price so far; an event-time timer at its
//! `expires` emits the winning bid once no bid at or before `expires` can
//! still come, then clears the key's state:
//! `{"auction":A,"category":C,"seller":S,"price":P,"expires":E}` with
//! timestamp `expires`. An auction without a qualifying bid emits nothing
//! (the inner join drops it).
//!
//! Bids can reach the operator before their auction: the generator lets
//! bids name auctions a little ahead of the newest, and at parallelism > 1
//! auctions and bids come through different channels. Such a bid waits in
//! list state. As an auction is on time (not behind the watermark), a
//! waiting bid at `t` can only still match an auction that arrives before
//! the watermark passes `t`; a timer at `t` drops it then if none did, so
//! bids of auctions that never come do not stay forever.

use serde::Deserialize;
use weir_sdk::{
    DecodeError, Error, KeyedCoProcessFunction, KeyedContext, ListState, OpenContext, Record,
    StateCodec, StateDescriptor, ValueState,
};

/// An auction as `nexmark-select` (`"q4-auctions"`) writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Auction {
    date_time: i64,
    expires: i64,
    seller: u64,
    category: u64,
}

/// A bid as `nexmark-select` (`"q4-bids"`) writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Bid {
    price: u64,
    date_time: i64,
}

impl Auction {
    /// The suite's `B.date_time BETWEEN A.date_time AND A.expires`.
    fn admits(&self, bid: &Bid) -> bool {
        self.date_time <= bid.date_time && bid.date_time <= self.expires
    }
}

fn words<const N: usize>(type_name: &'static str, bytes: &[u8]) -> Result<[u64; N], DecodeError> {
    if bytes.len() != 8 * N {
        return Err(DecodeError::wrong_length(type_name, 8 * N, bytes.len()));
    }
    let mut out = [0; N];
    for (word, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        *word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    }
    Ok(out)
}

impl StateCodec for Auction {
    fn encode(&self, out: &mut Vec<u8>) {
        for word in [
            self.date_time as u64,
            self.expires as u64,
            self.seller,
            self.category,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let [date_time, expires, seller, category] = words("Auction", bytes)?;
        Ok(Auction {
            date_time: date_time as i64,
            expires: expires as i64,
            seller,
            category,
        })
    }
}

impl StateCodec for Bid {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.price.to_le_bytes());
        out.extend_from_slice(&self.date_time.to_le_bytes());
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let [price, date_time] = words("Bid", bytes)?;
        Ok(Bid {
            price,
            date_time: date_time as i64,
        })
    }
}

/// The function.
pub struct WinningBid {
    auction: ValueState<Auction>,
    highest: ValueState<u64>,
    waiting: ListState<Bid>,
}

fn parse<'de, T: Deserialize<'de>>(what: &str, value: &'de [u8]) -> Result<T, Error> {
    serde_json::from_slice(value).map_err(|e| {
        Error::msg(format!(
            "not a q4 {what} (nexmark-select's \"q4-{what}s\"): {e}: {}",
            String::from_utf8_lossy(value)
        ))
    })
}

impl WinningBid {
    /// Raises the highest price to `price`.
    fn offer(&self, price: u64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        match self.highest.get(ctx)? {
            Some(highest) if highest >= price => Ok(()),
            _ => self.highest.set(ctx, &price),
        }
    }
}

impl KeyedCoProcessFunction for WinningBid {
    const NAME: &'static str = "nexmark-winning-bid";
    const STATES: &'static [StateDescriptor] = &[
        StateDescriptor::value("auction"),
        StateDescriptor::value("highest"),
        StateDescriptor::list("waiting"),
    ];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(WinningBid {
            auction: ctx.value_state("auction")?,
            highest: ctx.value_state("highest")?,
            waiting: ctx.list_state("waiting")?,
        })
    }

    /// An auction: it takes the bids that came before it and closes at
    /// `expires`.
    fn process_element1(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let auction: Auction = parse("auction", record.value)?;
        for bid in self.waiting.get(ctx)? {
            if auction.admits(&bid) {
                self.offer(bid.price, ctx)?;
            }
        }
        self.waiting.clear(ctx)?;
        self.auction.set(ctx, &auction)?;
        ctx.register_event_time_timer(auction.expires)
    }

    /// A bid: counts if its auction is here and admits it, waits if the
    /// auction is not here yet.
    fn process_element2(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let bid: Bid = parse("bid", record.value)?;
        match self.auction.get(ctx)? {
            Some(auction) if auction.admits(&bid) => self.offer(bid.price, ctx),
            Some(_) => Ok(()),
            None => {
                self.waiting.add(ctx, &bid)?;
                ctx.register_event_time_timer(bid.date_time)
            }
        }
    }

    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        match self.auction.get(ctx)? {
            // The auction closed: every bid at or before `expires` is in.
            Some(auction) if time >= auction.expires => {
                if let Some(price) = self.highest.get(ctx)? {
                    let value = format!(
                        r#"{{"auction":{},"category":{},"seller":{},"price":{price},"expires":{}}}"#,
                        String::from_utf8_lossy(ctx.key()),
                        auction.category,
                        auction.seller,
                        auction.expires
                    );
                    ctx.collect(Record::keyed(ctx.key(), &value, auction.expires));
                }
                self.auction.clear(ctx)?;
                self.highest.clear(ctx)
            }
            // A waiting bid's own timer, after its auction came.
            Some(_) => Ok(()),
            // No auction came in time for the waiting bids at or before
            // `time`: none can match any more.
            None => {
                let waiting = self.waiting.get(ctx)?;
                let keep: Vec<Bid> = waiting
                    .iter()
                    .copied()
                    .filter(|b| b.date_time > time)
                    .collect();
                if keep.is_empty() {
                    self.waiting.clear(ctx)
                } else if keep.len() != waiting.len() {
                    self.waiting.update(ctx, &keep)
                } else {
                    Ok(())
                }
            }
        }
    }
}

weir_sdk::export_keyed_co!(WinningBid);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::KeyedCo;
    use weir_sdk::testing::Harness;

    const AUCTION: &str = r#"{"date_time":100,"expires":200,"seller":7,"category":3}"#;

    fn bid(price: u64, date_time: i64) -> String {
        format!(r#"{{"price":{price},"date_time":{date_time}}}"#)
    }

    #[test]
    fn the_highest_bid_between_start_and_expiry_wins_when_the_auction_closes() -> Result<(), Error>
    {
        let mut h = Harness::<KeyedCo<WinningBid>>::open(&[])?;
        // Before the auction came: one in its span, one before it started.
        let (early, before) = (bid(50, 150), bid(900, 90));
        h.process_input(
            1,
            [
                Record::keyed("1", &early, 150),
                Record::keyed("1", &before, 90),
            ],
        )?;
        assert!(
            h.process_input(0, [Record::keyed("1", AUCTION, 100)])?
                .is_empty()
        );
        let (at_expiry, too_late, lower) = (bid(60, 200), bid(1000, 201), bid(55, 160));
        h.process_input(
            1,
            [
                Record::keyed("1", &at_expiry, 200),
                Record::keyed("1", &too_late, 201),
                Record::keyed("1", &lower, 160),
            ],
        )?;
        assert!(h.advance_watermark(199)?.is_empty());
        let out = h.advance_watermark(200)?;
        assert_eq!(
            out.values(),
            [r#"{"auction":1,"category":3,"seller":7,"price":60,"expires":200}"#]
        );
        assert_eq!(out.main[0].timestamp, 200);
        assert_eq!(h.value_state::<Auction>("auction", "1")?, None);
        assert!(h.finish()?.is_empty());
        Ok(())
    }

    #[test]
    fn an_auction_without_a_bid_in_its_span_emits_nothing() -> Result<(), Error> {
        let mut h = Harness::<KeyedCo<WinningBid>>::open(&[])?;
        h.process_input(0, [Record::keyed("2", AUCTION, 100)])?;
        let late = bid(10, 300);
        h.process_input(1, [Record::keyed("2", &late, 300)])?;
        assert!(h.finish()?.is_empty());
        Ok(())
    }

    #[test]
    fn waiting_bids_of_an_auction_that_never_comes_are_dropped_by_the_watermark()
    -> Result<(), Error> {
        let mut h = Harness::<KeyedCo<WinningBid>>::open(&[])?;
        let (a, b) = (bid(1, 10), bid(2, 20));
        h.process_input(1, [Record::keyed("9", &a, 10), Record::keyed("9", &b, 20)])?;
        h.advance_watermark(15)?;
        assert_eq!(h.state_keys("waiting"), [b"9".to_vec()]);
        h.advance_watermark(20)?;
        assert!(h.state_keys("waiting").is_empty());
        assert!(h.finish()?.is_empty());
        Ok(())
    }

    #[test]
    fn state_round_trips() {
        let a = Auction {
            date_time: -1,
            expires: 2,
            seller: 3,
            category: 4,
        };
        let mut bytes = Vec::new();
        a.encode(&mut bytes);
        assert_eq!(Auction::decode(&bytes).unwrap(), a);
        assert!(Bid::decode(&bytes).is_err());
    }
}
