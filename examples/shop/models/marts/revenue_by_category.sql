{{ config(sink={'topic': 'shop.revenue_by_category', 'envelope': 'upsert', 'key': ['category']}) }}
select category, count(*) as lines, count(distinct customer_id) as customers, sum(amount) as revenue
from {{ ref('sales') }}
group by category
