"""The Nexmark queries, in Spark SQL over the streams ``person``, ``auction`` and ``bid``.

Written after the nexmark-flink suite's SQL, with the same meaning in plain SQL: a tumbling
window is the event time rounded down to its size, a hopping window (q5) one row per window
a bid falls in (a UNION ALL of the five offsets), q13's side input a table, Flink's UDF
``count_char`` is length arithmetic, ``SPLIT_INDEX(s, '/', i)`` is
``try_element_at(split(s, '/'), i + 1)`` (NULL past the end). Not here, because no SQL
engine that answers "the query over all input so far" can say them: q10 (writes files
partitioned by processing time), q11 (session windows), q12 (processing-time windows).
"""
from __future__ import annotations

import re

TUMBLE_10S = "timestamp_seconds(floor(unix_seconds({t}) / 10) * 10)"

QUERIES: dict[str, str] = {
    # currency-free passthrough
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    # currency conversion
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    # selection
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    # local item suggestion: a join of two streams
    "q3": "SELECT p.name, p.city, p.state, a.id FROM auction a JOIN person p ON a.seller = p.id "
          "WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')",
    # average closing price per category (an aggregate over an aggregate over a join)
    "q4": "SELECT q.category, AVG(q.final) AS avg_final FROM ("
          " SELECT MAX(b.price) AS final, a.category FROM auction a JOIN bid b ON a.id = b.auction"
          " WHERE b.date_time BETWEEN a.date_time AND a.expires GROUP BY a.id, a.category) q GROUP BY q.category",
    # hot items: the auctions with the most bids per 10 s window sliding every 2 s
    "q5": "WITH hop AS (" + " UNION ALL ".join(
        f"SELECT auction, timestamp_seconds(floor(unix_seconds(date_time) / 2) * 2 - {2 * k}) AS starttime FROM bid"
        for k in range(5)) + "), "
          "counts AS (SELECT auction, starttime, COUNT(*) AS num FROM hop GROUP BY auction, starttime) "
          "SELECT c.auction, c.num, c.starttime FROM counts c JOIN "
          "(SELECT starttime, MAX(num) AS maxn FROM counts GROUP BY starttime) m "
          "ON c.starttime = m.starttime AND c.num = m.maxn",
    # average selling price of each seller's last 10 closed auctions
    "q6": "SELECT seller, AVG(final) AS avg_final FROM ("
          " SELECT seller, final, ROW_NUMBER() OVER (PARTITION BY seller ORDER BY date_time DESC, id) AS rn FROM ("
          "  SELECT a.id, a.seller, a.date_time, MAX(b.price) AS final FROM auction a JOIN bid b ON a.id = b.auction"
          "  WHERE b.date_time BETWEEN a.date_time AND a.expires GROUP BY a.id, a.seller, a.date_time) w) r "
          "WHERE rn <= 10 GROUP BY seller",
    # highest bid per 10 s tumbling window
    "q7": f"SELECT b.auction, b.price, b.bidder, b.date_time, b.extra FROM bid b JOIN ("
          f" SELECT {TUMBLE_10S.format(t='date_time')} AS starttime, MAX(price) AS maxprice FROM bid"
          f" GROUP BY 1) m ON {TUMBLE_10S.format(t='b.date_time')} = m.starttime AND b.price = m.maxprice",
    # people who opened an auction in the 10 s window they registered in
    "q8": f"SELECT p.id, p.name, p.starttime FROM ("
          f" SELECT id, name, {TUMBLE_10S.format(t='date_time')} AS starttime FROM person) p JOIN ("
          f" SELECT seller, {TUMBLE_10S.format(t='date_time')} AS starttime FROM auction) a"
          f" ON p.id = a.seller AND p.starttime = a.starttime",
    # winning bid of each auction
    "q9": "SELECT id, item_name, seller, category, auction, bidder, price, bid_time FROM ("
          " SELECT a.id, a.item_name, a.seller, a.category, b.auction, b.bidder, b.price, b.date_time AS bid_time,"
          " ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price DESC, b.date_time, b.bidder) AS rn"
          " FROM auction a JOIN bid b ON a.id = b.auction WHERE b.date_time BETWEEN a.date_time AND a.expires) w"
          " WHERE rn = 1",
    # a bounded side input (a table of 10,000 keys) joined with the bids
    "q13": "SELECT b.auction, b.bidder, b.price, b.date_time, s.value FROM bid b "
           "JOIN side_input s ON b.auction % 10000 = s.key",
    # calculation: day-time bids with the number of 'c' in extra
    "q14": "SELECT auction, bidder, 0.908 * price AS price, CASE WHEN hour(date_time) BETWEEN 8 AND 18 THEN 'dayTime' "
           "WHEN hour(date_time) <= 6 OR hour(date_time) >= 20 THEN 'nightTime' ELSE 'otherTime' END AS bid_time_type, "
           "date_time, extra, length(extra) - length(replace(extra, 'c', '')) AS c_counts FROM bid "
           "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
    # bidding statistics per day
    "q15": "SELECT date_format(date_time, 'yyyy-MM-dd') AS day, COUNT(*) AS total_bids, "
           "COUNT(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids, "
           "COUNT(CASE WHEN price >= 10000 AND price < 1000000 THEN 1 END) AS rank2_bids, "
           "COUNT(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids, COUNT(DISTINCT bidder) AS total_bidders, "
           "COUNT(DISTINCT CASE WHEN price < 10000 THEN bidder END) AS rank1_bidders, "
           "COUNT(DISTINCT CASE WHEN price >= 10000 AND price < 1000000 THEN bidder END) AS rank2_bidders, "
           "COUNT(DISTINCT CASE WHEN price >= 1000000 THEN bidder END) AS rank3_bidders, "
           "COUNT(DISTINCT auction) AS total_auctions FROM bid GROUP BY 1",
    # channel statistics per day
    "q16": "SELECT channel, date_format(date_time, 'yyyy-MM-dd') AS day, "
           "MAX(date_format(date_time, 'HH:mm')) AS minute, "
           "COUNT(*) AS total_bids, COUNT(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids, "
           "COUNT(DISTINCT bidder) AS total_bidders, COUNT(DISTINCT auction) AS total_auctions "
           "FROM bid GROUP BY channel, 2",
    # auction statistics per day
    "q17": "SELECT auction, date_format(date_time, 'yyyy-MM-dd') AS day, COUNT(*) AS total_bids, "
           "COUNT(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids, "
           "COUNT(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids, MIN(price) AS min_price, "
           "MAX(price) AS max_price, AVG(price) AS avg_price, SUM(price) AS sum_price FROM bid GROUP BY auction, 2",
    # each bidder's last bid per auction
    "q18": "SELECT auction, bidder, price, channel, url, date_time FROM ("
           " SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, price DESC) AS rn"
           " FROM bid) WHERE rn = 1",
    # the top 10 bids of each auction
    "q19": "SELECT auction, bidder, price, date_time, rn FROM ("
           " SELECT auction, bidder, price, date_time,"
           " ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, date_time, bidder) AS rn FROM bid)"
           " WHERE rn <= 10",
    # bids with their auction, for one category
    "q20": "SELECT b.auction, b.bidder, b.price, b.channel, b.date_time, a.item_name, a.seller, a.category "
           "FROM bid b JOIN auction a ON b.auction = a.id WHERE a.category = 10",
    # channel id from the channel name or the URL
    "q21": "SELECT auction, bidder, price, channel, CASE WHEN lower(channel) = 'apple' THEN '0' "
           "WHEN lower(channel) = 'google' THEN '1' WHEN lower(channel) = 'facebook' THEN '2' "
           "WHEN lower(channel) = 'baidu' THEN '3' ELSE regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) END "
           "AS channel_id FROM bid WHERE regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL "
           "OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
    # the directories of each bid's URL
    "q22": "SELECT auction, bidder, price, channel, try_element_at(split(url, '/'), 4) AS dir1, "
           "try_element_at(split(url, '/'), 5) AS dir2, try_element_at(split(url, '/'), 6) AS dir3 FROM bid",
}

#: what each query reads
READS = {name: sorted(set(re.findall(r"\b(?:FROM|JOIN)\s+(person|auction|bid|side_input)\b", sql)))
         for name, sql in QUERIES.items()}
