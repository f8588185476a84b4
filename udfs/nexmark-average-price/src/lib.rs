//! `nexmark-average-price`: Nexmark q4, "average price for a category": the
//! outer aggregate over the winning bids that `nexmark-winning-bid` emits,
//!
//! ```sql
//! SELECT Q.category, AVG(Q.final) FROM (…winning bids…) Q GROUP BY Q.category
//! ```
//!
//! as a keyed process function (input keyed by `json:category`) keeping the
//! number of auctions and the sum of their winning prices in value state.
//! Like Flink's non-windowed `GROUP BY`, the result is a changelog: every
//! winning bid emits its category's updated row,
//! `{"category":C,"auctions":N,"sum":S,"avg":A}`, where `A` is `S / N`
//! truncated to an integer (Flink's `AVG` of a `BIGINT` is a `BIGINT`) and
//! `N` grows by one with each row of a category, so the last row of a
//! category is the one with the largest `N`. Which auctions of a category
//! close first at parallelism > 1 depends on the channels, so only that
//! last row is deterministic; the sum and count say the exact average.

use serde::Deserialize;
use weir_sdk::{
    Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor, ValueState,
};

/// The fields of a winning bid this reads.
#[derive(Deserialize)]
struct Winning {
    category: u64,
    price: u64,
}

/// The function.
pub struct AveragePrice {
    auctions: ValueState<u64>,
    sum: ValueState<u64>,
}

impl KeyedProcessFunction for AveragePrice {
    const NAME: &'static str = "nexmark-average-price";
    const STATES: &'static [StateDescriptor] = &[
        StateDescriptor::value("auctions"),
        StateDescriptor::value("sum"),
    ];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(AveragePrice {
            auctions: ctx.value_state("auctions")?,
            sum: ctx.value_state("sum")?,
        })
    }

    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let w: Winning = serde_json::from_slice(record.value).map_err(|e| {
            Error::msg(format!(
                "not a winning bid (nexmark-winning-bid's output): {e}: {}",
                String::from_utf8_lossy(record.value)
            ))
        })?;
        let auctions = self.auctions.get(ctx)?.unwrap_or(0) + 1;
        let sum = self
            .sum
            .get(ctx)?
            .unwrap_or(0)
            .checked_add(w.price)
            .ok_or_else(|| {
                Error::msg(format!(
                    "category {}: the sum of prices overflows",
                    w.category
                ))
            })?;
        self.auctions.set(ctx, &auctions)?;
        self.sum.set(ctx, &sum)?;
        let value = format!(
            r#"{{"category":{},"auctions":{auctions},"sum":{sum},"avg":{}}}"#,
            w.category,
            sum / auctions
        );
        ctx.collect(Record::keyed(ctx.key(), &value, record.timestamp));
        Ok(())
    }
}

weir_sdk::export_keyed!(AveragePrice);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Keyed;
    use weir_sdk::testing::Harness;

    fn winning(category: u64, price: u64) -> String {
        format!(r#"{{"auction":1,"category":{category},"seller":2,"price":{price},"expires":9}}"#)
    }

    #[test]
    fn every_winning_bid_updates_its_categorys_average() -> Result<(), Error> {
        let mut h = Harness::<Keyed<AveragePrice>>::open(&[])?;
        let (a, b, c) = (winning(10, 100), winning(11, 7), winning(10, 51));
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
}
