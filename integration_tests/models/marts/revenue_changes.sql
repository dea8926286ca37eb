{{ config(materialized='changelog_table') }}
select category, revenue from {{ ref('revenue_by_category') }}
