{#
  changelog_table: the append-only change stream of the model's result — its columns plus
  _op ('insert' / 'delete'), _weight (+n / -n copies), _committed_at and _tick. A new model,
  a changed SQL or --full-refresh starts the log over with the full result as inserts.
#}
{% materialization changelog_table, adapter='incremental_stream' -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {{ incremental_stream__drop_other_type(this, 'table') }}
  {{ run_hooks(pre_hooks) }}
  {%- set result = adapter.stream_deploy(target_relation, sql, 'changelog_table', should_full_refresh(),
                                         incremental_stream__models(), incremental_stream__streams(),
                                         config.get('sink')) -%}
  {{ incremental_stream__report(result) }}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
