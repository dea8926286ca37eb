-- the category totals add up to the order lines they come from
select c.total as category_total, l.total as line_total
from (select sum(revenue) as total from {{ ref('revenue_by_category') }}) c
cross join (select sum(amount) as total from {{ ref('order_lines') }}) l
where abs(coalesce(c.total, 0) - coalesce(l.total, 0)) > 0.01
