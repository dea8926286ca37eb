{#
  streaming_view: the model's result, maintained incrementally by the project's circuit.
  dbt run deploys the model (building its state from retained input when it is new, its SQL
  changed, or --full-refresh is given), then commits one tick of all streaming models and
  publishes each as a catalog view over its committed state.
#}
{% materialization streaming_view, adapter='incremental_stream' -%}
  {%- set target_relation = this.incorporate(type='view') -%}
  {{ incremental_stream__drop_other_type(this, 'view') }}
  {{ run_hooks(pre_hooks) }}
  {%- set result = adapter.stream_deploy(target_relation, sql, 'streaming_view', should_full_refresh(),
                                         incremental_stream__models(), incremental_stream__streams(),
                                         config.get('sink')) -%}
  {{ incremental_stream__report(result) }}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
