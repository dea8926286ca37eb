{# dispatched: found as spark__ through the adapter's parent #}
{% macro day_of(col) %}{{ return(adapter.dispatch('day_of', 'branching')(col)) }}{% endmacro %}
{% macro default__day_of(col) %}'not spark: ' || {{ col }}{% endmacro %}
{% macro spark__day_of(col) %}to_date({{ col }}){% endmacro %}

{# dispatched, but its default branches on target.type (as Fivetran's packages do) #}
{% macro week_of(col) %}{{ return(adapter.dispatch('week_of', 'branching')(col)) }}{% endmacro %}
{% macro default__week_of(col) -%}
  {%- if target.type in ('spark', 'databricks') -%} date_trunc('WEEK', {{ col }})
  {%- else -%} 'not spark: ' || {{ col }} {%- endif -%}
{%- endmacro %}
