select o.order_id, o.customer_id, c.country, p.category, p.product_id,
       o.quantity * p.price as amount, o.ordered_at
from {{ ref('stg_orders') }} o
join {{ source('shop', 'products') }} p on p.product_id = o.product_id
join {{ source('shop', 'customers') }} c on c.customer_id = o.customer_id
