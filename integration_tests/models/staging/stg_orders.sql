{{ config(materialized='ephemeral') }}
-- orders with a positive quantity (the shop sends 0 for a cancelled basket line)
select order_id, customer_id, product_id, quantity, ordered_at
from {{ source('shop', 'orders') }}
where quantity > 0
