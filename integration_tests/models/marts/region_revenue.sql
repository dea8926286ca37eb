select coalesce(k.region, 'unknown') as region, sum(l.amount) as revenue, count(distinct l.customer_id) as customers
from {{ ref('order_lines') }} l
left join {{ ref('countries') }} k on k.country = l.country
group by coalesce(k.region, 'unknown')
