"""A compiled dbt project as the engine sees it: reads ``target/manifest.json`` (written by
``dbt compile``, ``run`` or ``build``) without importing dbt, and says of every model whether
it can run as a streaming model and, if not, which construct stands in the way."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify as sqlglot_qualify

from .circuit.operators import Input, Operator
from .errors import StreamError
from .project import KINDS
from .sql.compile import compile
from .sql.relations import DIALECT, engine_name, parse_one, referenced, rename


@dataclass(frozen=True)
class DbtModel:
    name: str
    relation: str  # schema.alias
    materialized: str
    sql: str | None  # compiled; None until the project is compiled
    columns: tuple[str, ...]  # declared in YAML

    @property
    def streaming(self) -> bool:
        return self.materialized in KINDS


@dataclass(frozen=True)
class Verdict:
    model: DbtModel
    plan: Operator | None
    reason: str | None  # why it cannot run incrementally

    @property
    def ok(self) -> bool:
        return self.plan is not None


class DbtProject:
    """Models, seeds and sources of a compiled dbt project, with the columns of each relation
    (declared, from a seed's header, or planned from a model's SQL)."""

    def __init__(self, project_dir: str | Path, target_path: str = "target"):
        self.root = Path(project_dir)
        path = self.root / target_path / "manifest.json"
        if not path.exists():
            raise StreamError(f"no {path}: run `dbt compile` (or `dbt run`) in {self.root} first")
        doc = json.loads(path.read_text())
        compiled_at = path.stat().st_mtime
        #: model and seed files changed since the manifest was written: what it says of them is stale
        self.stale = sorted(f for n in doc["nodes"].values() if n["resource_type"] in ("model", "seed")
                            and (f := self.root / n.get("original_file_path", "")).is_file()
                            and f.stat().st_mtime > compiled_at)
        self.models: dict[str, DbtModel] = {}
        self._columns: dict[str, tuple[str, ...]] = {}
        for node in doc["nodes"].values():
            relation = f"{node['schema']}.{node.get('alias') or node['name']}".lower()
            declared = tuple(c.lower() for c in node.get("columns", {}))
            if node["resource_type"] == "model":
                self.models[node["name"]] = DbtModel(node["name"], relation, node["config"].get("materialized", ""),
                                                     self._compiled(node, target_path), declared)
            elif node["resource_type"] == "seed":
                self._columns[relation] = self._seed_header(node) or declared
        for src in doc.get("sources", {}).values():  # a seed read through source() keeps its header's columns
            relation = f"{src['schema']}.{src.get('identifier') or src['name']}".lower()
            declared = tuple(c.lower() for c in src.get("columns", {}))
            self._columns[relation] = declared or self._columns.get(relation, ())
        self._by_relation = {m.relation: m for m in self.models.values()}
        self._verdicts: dict[str, Verdict] = {}

    def _compiled(self, node: dict[str, Any], target_path: str) -> str | None:
        """A model's compiled SQL: in the manifest after `dbt compile`, else (`dbt run`,
        `show`, ... write the manifest before compiling) the file the last compile left."""
        if node.get("compiled_code"):
            return node["compiled_code"]
        path = self.root / target_path / "compiled" / node["package_name"] / node["original_file_path"]
        return path.read_text() if path.exists() else None

    def _seed_header(self, node: dict[str, Any]) -> tuple[str, ...]:
        path = self.root / node.get("original_file_path", "")
        if not path.is_file():
            return ()
        with path.open(newline="", encoding="utf-8-sig") as f:  # without a byte-order mark, as dbt reads it
            return tuple(c.strip().lower() for c in next(csv.reader(f), []))

    def verdict(self, name: str) -> Verdict:
        """Whether model ``name`` can run incrementally: its plan, or the reason it cannot."""
        if name not in self.models:
            raise StreamError(f"no model named {name!r} in {self.root}")
        if name not in self._verdicts:
            self._verdicts[name] = Verdict(self.models[name], None, "(being checked: models read each other)")
            self._verdicts[name] = self._check(self.models[name])
        return self._verdicts[name]

    def _check(self, model: DbtModel) -> Verdict:
        if model.materialized == "ephemeral":
            return Verdict(model, None, "ephemeral: inlined into the models that read it")
        if model.sql is None:
            return Verdict(model, None, "not compiled: run `dbt compile`")
        try:
            tree = parse_one(model.sql, view=model.name)
            reads = referenced(tree)
            catalog = {engine_name(r): self._relation(r, model) for r in reads}
            # planned from the renamed text, as the pipeline plans it: the same plan, positions in that text
            renamed = rename(model.sql, {r: engine_name(r) for r in reads}, tree=tree)
            return Verdict(model, compile(renamed, catalog, view=model.name), None)
        except StreamError as e:
            return Verdict(model, None, str(e))

    def _selected(self, model: DbtModel) -> tuple[str, ...]:
        """The columns a model's SQL selects, resolved by sqlglot against what it reads: a
        batch model the engine does not plan (its columns come from the warehouse, not from
        a plan) still has them. Empty where they cannot be resolved."""
        if model.sql is None or model.streaming:
            return ()
        try:
            tree = parse_one(model.sql, view=model.name)
            reads = referenced(tree)
            schema: dict[str, object] = {engine_name(r): {c: "string" for c in self._relation(r, model).columns}
                                         for r in reads}
            renamed = rename(model.sql, {r: engine_name(r) for r in reads}, tree=tree)
            query = sqlglot_qualify(parse_one(renamed), schema=schema,
                                    dialect=DIALECT, validate_qualify_columns=False, quote_identifiers=False)
        except (StreamError, SqlglotError):
            return ()
        return tuple(c.lower() for c in query.named_selects) if isinstance(query, exp.Query) else ()

    def _relation(self, relation: str, reader: DbtModel) -> Operator:
        """A relation the model reads, as an input with its columns."""
        if relation in self._by_relation:
            upstream = self._by_relation[relation]
            v = self.verdict(upstream.name)
            columns = v.plan.columns if v.plan is not None else upstream.columns or self._selected(upstream)
            if not columns:
                raise StreamError(f"reads {upstream.name}, whose columns are unknown: {v.reason}")
        else:
            columns = self._columns.get(relation, ())
            if not columns:
                raise StreamError(f"reads {relation}, whose columns are not declared (add them to its YAML)")
        return Input(engine_name(relation), tuple(columns))
