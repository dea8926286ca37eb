select category, count(*) as lines, count(distinct customer_id) as customers, sum(amount) as revenue
from {{ ref('order_lines') }}
group by category
