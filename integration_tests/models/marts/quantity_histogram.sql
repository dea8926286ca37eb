-- every quantity from 1 to 8 with how many order lines have it, 0 for none: the series is a
-- constant relation (SELECT without FROM, as dbt_utils.generate_series writes it)
with bits as (
    select 0 as b union all select 1
),
quantities as (
    select b0.b + 2 * b1.b + 4 * b2.b + 1 as quantity
    from bits as b0 cross join bits as b1 cross join bits as b2
)
select q.quantity, count(o.order_id) as order_lines
from quantities as q
left join {{ ref('stg_orders') }} as o on o.quantity = q.quantity
group by q.quantity
