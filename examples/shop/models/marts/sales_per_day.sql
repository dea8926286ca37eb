-- a tumbling window: one row per day of orders
select date_trunc('day', ordered_at) as day, count(*) as lines, sum(amount) as revenue
from {{ ref('sales') }}
group by date_trunc('day', ordered_at)
