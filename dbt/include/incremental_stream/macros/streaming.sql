{# The streaming materializations and their helpers. #}

{% macro incremental_stream__materialize(kind, relation_type) -%}
  {#- deploy the model, advance the project one tick, report what happened to the model -#}
  {%- set target_relation = this.incorporate(type=relation_type) -%}
  {%- if flags.EMPTY -%}
    {{ return(incremental_stream__empty(target_relation)) }}
  {%- endif -%}
  {{ incremental_stream__drop_other_type(this, relation_type) }}
  {{ run_hooks(pre_hooks) }}
  {%- set result = adapter.stream_deploy(target_relation, sql, kind, should_full_refresh(),
                                         incremental_stream__models(), incremental_stream__streams(),
                                         config.get('sink'),
                                         {'path': model.original_file_path, 'raw': model.raw_code,
                                          'compiled': model.compiled_path}) -%}
  {{ incremental_stream__report(result) }}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target_relation]}) }}
{%- endmacro %}

{% macro incremental_stream__empty(relation) -%}
  {#- dbt run --empty: nothing is deployed; a relation that does not exist yet is created
      with the model's columns and no rows, so the models after it can run -#}
  {%- if load_cached_relation(this) is none -%}
    {% call statement('main') -%}
      {%- if relation.type == 'view' -%}
        {{ get_create_view_as_sql(relation, sql) }}
      {%- else -%}
        {{ get_create_table_as_sql(False, relation, sql) }}
      {%- endif -%}
    {%- endcall %}
  {%- else -%}
    {% call noop_statement('main', 'SKIPPED (--empty)', 'SKIPPED') -%} {{ sql }} {%- endcall %}
  {%- endif -%}
  {{ return({'relations': [relation]}) }}
{%- endmacro %}

{% macro incremental_stream__models() -%}
  {#- schema.alias of every streaming model in the project: the others leave the state -#}
  {%- set names = [] -%}
  {%- for node in graph.nodes.values()
        if node.resource_type == 'model' and node.config.materialized in ('streaming_view', 'changelog_table') -%}
    {%- do names.append((node.schema ~ '.' ~ node.alias) | lower) -%}
  {%- endfor -%}
  {{ return(names) }}
{%- endmacro %}

{% macro incremental_stream__streams() -%}
  {#- every source declared as a Kafka topic: meta.kafka of the table over that of its source -#}
  {%- set streams = [] -%}
  {%- for src in graph.sources.values() -%}
    {%- set kafka = {} -%}
    {%- do kafka.update(src.source_meta.get('kafka', {})) -%}
    {%- do kafka.update(src.meta.get('kafka', {})) -%}
    {%- if kafka -%}
      {%- set columns = {} -%}
      {%- for column in src.columns.values() -%}
        {%- do columns.update({column.name: column.data_type}) -%}
      {%- endfor -%}
      {%- do streams.append({'relation': (src.schema ~ '.' ~ src.identifier) | lower, 'kafka': kafka,
                             'columns': columns}) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(streams) }}
{%- endmacro %}

{% macro incremental_stream__drop_other_type(relation, type) -%}
  {#- a batch table where a view goes (or the reverse): dropped, as dbt does -#}
  {%- set existing = load_cached_relation(relation) -%}
  {%- if existing is not none and existing.type != type -%}
    {{ adapter.drop_relation(existing) }}
  {%- endif -%}
{%- endmacro %}

{% macro incremental_stream__report(result) -%}
  {%- for model, reason in result['dropped'].items() -%}
    {{ exceptions.warn('streaming model ' ~ model ~ ' was removed from the running circuit: ' ~ reason
                       ~ '. Run it again (dbt run -s ' ~ model.split('.')[-1] ~ ') once it compiles.') }}
  {%- endfor -%}
  {% call noop_statement('main', result['message'], result['action'] | upper) -%}
    {{ sql }}
  {%- endcall %}
{%- endmacro %}
