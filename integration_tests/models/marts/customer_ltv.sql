with paid as (
    select o.customer_id, sum(pay.amount) as paid
    from {{ source('shop', 'payments') }} pay
    join {{ source('shop', 'orders') }} o on o.order_id = pay.order_id
    group by o.customer_id
)
select c.customer_id, c.name, c.tier,
       coalesce(sum(l.amount), 0) as ordered,
       coalesce(max(paid.paid), 0) as paid,
       count(l.order_id) as lines
from {{ source('shop', 'customers') }} c
left join {{ ref('order_lines') }} l on l.customer_id = c.customer_id
left join paid on paid.customer_id = c.customer_id
group by c.customer_id, c.name, c.tier
