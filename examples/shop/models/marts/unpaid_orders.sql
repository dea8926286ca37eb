-- orders no payment has arrived for yet
select count(*) as orders, coalesce(sum(o.quantity), 0) as items
from {{ source('shop', 'orders') }} o
left join {{ source('shop', 'payments') }} p on p.order_id = o.order_id
where p.order_id is null
