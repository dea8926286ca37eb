-- the three best-selling products of each category, by revenue
select category, product_id, revenue, rnk
from (
    select category, product_id, sum(amount) as revenue,
           rank() over (partition by category order by sum(amount) desc) as rnk
    from {{ ref('order_lines') }}
    group by category, product_id
) ranked
where rnk <= 3
