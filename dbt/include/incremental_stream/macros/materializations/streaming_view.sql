{#
  streaming_view: the model's result, maintained incrementally by the project's circuit.
  dbt run deploys the model (building its state from retained input when it is new, its SQL
  changed, or --full-refresh is given), then commits one tick of all streaming models and
  publishes each as a catalog view over its committed state.
#}
{% materialization streaming_view, adapter='incremental_stream' -%}
  {{ return(incremental_stream__materialize('streaming_view', 'view')) }}
{%- endmaterialization %}
