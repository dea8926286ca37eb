{{ config(materialized='table') }}
-- a batch model over a streaming one: rebuilt by each dbt run from the committed tick
select region, revenue, customers, revenue / nullif(customers, 0) as revenue_per_customer
from {{ ref('region_revenue') }}
