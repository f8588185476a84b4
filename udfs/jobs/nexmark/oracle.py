"""The Nexmark queries in SQL, run by DuckDB: an oracle for Weir's jobs.

    python3 oracle.py EVENTS.jsonl QUERY

reads the events that `generate.toml` writes (the same generator the jobs
read) and prints QUERY's result, one line per result, in the format the
Weir job's sink writes (so a test can compare the sorted lines byte for
byte); for q12, whose windows follow the wall clock, each bidder's total
number of bids instead. The SQL follows the Nexmark suite's definitions (Flink's
nexmark-flink and RisingWave's); README.md says where each differs.
Needs the `duckdb` package (tests/setup.sh installs it into the tool
folder).
"""

import json
import sys

import duckdb

COLUMNS = {
    "type": "VARCHAR",
    "id": "BIGINT",
    "name": "VARCHAR",
    "email_address": "VARCHAR",
    "credit_card": "VARCHAR",
    "city": "VARCHAR",
    "state": "VARCHAR",
    "item_name": "VARCHAR",
    "description": "VARCHAR",
    "initial_bid": "BIGINT",
    "reserve": "BIGINT",
    "expires": "BIGINT",
    "seller": "BIGINT",
    "category": "BIGINT",
    "auction": "BIGINT",
    "bidder": "BIGINT",
    "price": "BIGINT",
    "channel": "VARCHAR",
    "url": "VARCHAR",
    "date_time": "BIGINT",
    "extra": "VARCHAR",
}

# Event times are epoch milliseconds; windows are [start, end).
QUERIES = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    # Local item suggestion: an inner join of auctions and their sellers.
    "q3": """
        SELECT P.name, P.city, P.state, A.id
        FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
        WHERE A.category = 10 AND P.state IN ('or', 'id', 'ca')
    """,
    # Average price for a category: each auction's winning bid (the highest
    # price bid between its start and its expiry, both included), then the
    # average per category, as integer count, sum and truncated average
    # (Flink's AVG of a BIGINT).
    "q4": """
        WITH winning AS (
            SELECT A.id, A.category, max(B.price) AS final
            FROM auction A JOIN bid B
              ON A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
            GROUP BY A.id, A.category
        )
        SELECT category, count(*) AS auctions, sum(final)::BIGINT AS total,
               sum(final)::BIGINT // count(*) AS avg
        FROM winning GROUP BY category
    """,
    # Average selling price by seller: each auction's winning bid as in q4;
    # per seller, in the order its auctions closed (expiry, then id), the
    # count, sum and truncated average of the winning prices of the current
    # and up to 10 preceding auctions.
    "q6": """
        WITH winning AS (
            SELECT A.id, A.seller, A.expires, max(B.price) AS final
            FROM auction A JOIN bid B
              ON A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
            GROUP BY A.id, A.seller, A.expires
        )
        SELECT seller, id, expires, count(*) OVER w AS auctions,
               (sum(final) OVER w)::BIGINT AS total,
               (sum(final) OVER w)::BIGINT // count(*) OVER w AS avg
        FROM winning
        WINDOW w AS (PARTITION BY seller ORDER BY expires, id
                     ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
    """,
    # Hot items: bids per auction in 10 s windows sliding by 2 s, and the
    # auctions whose count is the window's largest.
    "q5": """
        WITH windowed AS (
            SELECT b.auction, s.start
            FROM bid b, LATERAL (
                SELECT unnest(range(b.date_time - b.date_time % 2000 - 8000,
                                    b.date_time - b.date_time % 2000 + 1, 2000)) AS start
            ) s
            WHERE s.start > b.date_time - 10000
        ),
        counts AS (
            SELECT start, auction, count(*) AS num FROM windowed GROUP BY start, auction
        ),
        maxes AS (SELECT start, max(num) AS maxn FROM counts GROUP BY start)
        SELECT c.start, c.start + 10000 AS "end", c.num, c.auction
        FROM counts c JOIN maxes m ON c.start = m.start AND c.num >= m.maxn
    """,
    # Highest bid: the bids at the highest price of each 10 s tumbling window.
    "q7": """
        WITH windowed AS (
            SELECT *, date_time - date_time % 10000 AS start FROM bid
        ),
        maxes AS (SELECT start, max(price) AS maxprice FROM windowed GROUP BY start)
        SELECT w.start, w.start + 10000 AS "end", w.price, w.auction, w.bidder, w.date_time
        FROM windowed w JOIN maxes m ON w.start = m.start AND w.price = m.maxprice
    """,
    # Monitor new users: persons who opened an auction in the 10 s tumbling
    # window in which they registered, one row per person and window.
    "q8": """
        WITH P AS (
            SELECT id, name, date_time - date_time % 10000 AS start FROM person
        ),
        A AS (
            SELECT DISTINCT seller, date_time - date_time % 10000 AS start FROM auction
        )
        SELECT P.id, P.name, P.start FROM P JOIN A ON P.id = A.seller AND P.start = A.start
    """,
    # User sessions: each bidder's bids, cut where two consecutive bids are
    # more than 10 s apart; a session ends 10 s after its last bid.
    "q11": """
        WITH marked AS (
            SELECT bidder, date_time,
                CASE WHEN date_time - lag(date_time) OVER (PARTITION BY bidder ORDER BY date_time) > 10000
                     THEN 1 ELSE 0 END AS cut
            FROM bid
        ),
        numbered AS (
            SELECT bidder, date_time,
                sum(cut) OVER (PARTITION BY bidder ORDER BY date_time
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session
            FROM marked
        )
        SELECT bidder, min(date_time) AS start, max(date_time) + 10000 AS "end", count(*) AS num
        FROM numbered GROUP BY bidder, session
    """,
    # Bids per bidder in processing-time tumbling windows of 10 s: which
    # window a bid falls in depends on the wall clock, so only each
    # bidder's total over its windows is deterministic. This is that
    # total, the sum of a bidder's bid_count over its windows.
    "q12": "SELECT bidder, count(*) AS bids FROM bid GROUP BY bidder",
}


def text(s):
    return json.dumps(s, ensure_ascii=False)


def lines(query, rows):
    """The rows as the Weir job's sink writes them."""
    if query in ("q0", "q1"):
        for auction, bidder, price, date_time, extra in rows:
            price = f"{price:.3f}" if query == "q1" else str(price)
            yield (f'{{"auction":{auction},"bidder":{bidder},"price":{price},'
                   f'"date_time":{date_time},"extra":{text(extra)}}}')
    elif query == "q2":
        for auction, price in rows:
            yield f'{{"auction":{auction},"price":{price}}}'
    elif query == "q3":
        for name, city, state, auction in rows:
            yield (f'{{"name":{text(name)},"city":{text(city)},"state":{text(state)},'
                   f'"id":{auction}}}')
    elif query == "q4":
        for category, auctions, total, avg in rows:
            yield f'{{"category":{category},"auctions":{auctions},"sum":{total},"avg":{avg}}}'
    elif query == "q6":
        for seller, auction, expires, auctions, total, avg in rows:
            yield (f'{{"seller":{seller},"auction":{auction},"expires":{expires},'
                   f'"auctions":{auctions},"sum":{total},"avg":{avg}}}')
    elif query == "q8":
        for person, name, start in rows:
            yield f'{{"id":{person},"name":{text(name)},"start":{start}}}'
    elif query == "q5":
        windows = {}
        for start, end, num, auction in rows:
            windows.setdefault((start, end, num), []).append(auction)
        for (start, end, num), auctions in windows.items():
            hot = ",".join(str(a) for a in sorted(auctions))
            yield f'{{"start":{start},"end":{end},"num":{num},"auctions":[{hot}]}}'
    elif query == "q7":
        windows = {}
        for start, end, price, auction, bidder, date_time in rows:
            windows.setdefault((start, end, price), []).append((auction, bidder, date_time))
        for (start, end, price), bids in windows.items():
            listed = ",".join(f"[{a},{b},{t}]" for a, b, t in sorted(bids))
            yield f'{{"start":{start},"end":{end},"price":{price},"bids":[{listed}]}}'
    elif query == "q11":
        for bidder, start, end, num in rows:
            yield f'{{"key":{text(str(bidder))},"start":{start},"end":{end},"count":{num}}}'
    elif query == "q12":
        # Not a line of the job's output: a bidder's total, which the test
        # computes from the job's windows.
        for bidder, bids in rows:
            yield f'{{"bidder":{bidder},"bids":{bids}}}'


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in QUERIES:
        sys.exit(f"usage: oracle.py EVENTS.jsonl QUERY (one of {', '.join(QUERIES)})")
    events, query = sys.argv[1], sys.argv[2]
    db = duckdb.connect()
    columns = "{" + ", ".join(f"{k}: '{v}'" for k, v in COLUMNS.items()) + "}"
    path = events.replace("'", "''")
    db.execute(
        f"CREATE VIEW events AS SELECT * FROM read_json('{path}', "
        f"format = 'newline_delimited', columns = {columns})"
    )
    for kind in ("person", "auction", "bid"):
        db.execute(f"CREATE VIEW {kind} AS SELECT * FROM events WHERE type = '{kind}'")
    out = sys.stdout
    for line in lines(query, db.execute(QUERIES[query]).fetchall()):
        out.write(line)
        out.write("\n")


if __name__ == "__main__":
    main()
