-- every basket line with its price and customer, as of now: a product's price change or a
-- customer's move re-prices and re-attributes their lines
select o.order_id, o.ordered_at, c.customer_id, c.tier, p.category, o.quantity * p.price as amount
from {{ source('shop', 'orders') }} o
join {{ source('shop', 'products') }} p on p.product_id = o.product_id
join {{ source('shop', 'customers') }} c on c.customer_id = o.customer_id
where o.quantity > 0
