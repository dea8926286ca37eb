-- each category beside its best product and the lifetime value of the customers who buy it:
-- a model over four upstream streaming models
select r.category, r.revenue, r.customers,
       t.product_id as best_product, t.revenue as best_product_revenue,
       count(distinct l.customer_id) as buying_customers,
       sum(c.ordered) as customers_ordered, sum(c.paid) as customers_paid
from {{ ref('revenue_by_category') }} r
left join {{ ref('top_products') }} t on t.category = r.category and t.rnk = 1
join {{ ref('order_lines') }} l on l.category = r.category
join {{ ref('customer_ltv') }} c on c.customer_id = l.customer_id
group by r.category, r.revenue, r.customers, t.product_id, t.revenue
