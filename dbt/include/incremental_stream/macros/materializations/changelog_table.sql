{#
  changelog_table: the append-only change stream of the model's result — its columns plus
  _op ('insert' / 'delete'), _weight (+n / -n copies), _committed_at and _tick. A new model,
  a changed SQL or --full-refresh starts the log over with the full result as inserts.
#}
{% materialization changelog_table, adapter='incremental_stream' -%}
  {{ return(incremental_stream__materialize('changelog_table', 'table')) }}
{%- endmaterialization %}
