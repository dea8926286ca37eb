select tier, count(*) as customers
from {{ source('shop', 'customers') }}
group by tier
