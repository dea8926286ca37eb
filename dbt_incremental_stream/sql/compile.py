"""SQL text → logical plan, the front end's one entry: :func:`parse` (the text parsed once,
checked against the supported set), :func:`~.rewrites.rewrite` (the passes of
:data:`~.rewrites.RULES`), then :func:`~.planner.plan`."""
from __future__ import annotations

from typing import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from ..circuit.operators import Input, Operator
from ..errors import CompileError, UnsupportedSqlError
from .planner import RECURSION_LEVELS, Analyzed, plan
from .relations import DIALECT, syntax_error
from .rewrites import rewrite
from .rewrites.constant import ONE, ONE_COLUMN
from .temporal import CLOCK, CLOCK_COLUMN
from .validate import validate

#: the relations rewrites introduce, which a pipeline adds as inputs it fills itself
BUILT_IN: dict[str, Operator] = {CLOCK: Input(CLOCK, (CLOCK_COLUMN,)), ONE: Input(ONE, (ONE_COLUMN,))}


def parse(sql: str, view: str | None = None) -> exp.Query:
    """One query statement, validated against the supported set."""
    _check_tokens(sql, view)
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as e:
        raise syntax_error(e, view) from e
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise CompileError("a view is exactly one SELECT query", view=view)
    validate(statements[0], view)
    return statements[0]


def _check_tokens(sql: str, view: str | None) -> None:
    """Constructs the parser does not know, named before it fails on them."""
    try:
        tokens = sqlglot.tokenize(sql, read=DIALECT)
    except TokenError:
        return  # the parser reports it
    for token, after in zip(tokens, tokens[1:]):
        if token.token_type == TokenType.WINDOW and after.token_type == TokenType.L_PAREN:
            raise UnsupportedSqlError("time-window function window(); group by date_trunc(...) for tumbling windows",
                                      view=view, line=token.line, col=token.col)


def compile(sql: str | exp.Query, catalog: Mapping[str, Operator], view: str | None = None,
            analyzed: Analyzed | None = None, recursion: int = RECURSION_LEVELS) -> Operator:
    """The logical plan of ``sql``; ``catalog`` maps relation names to their operators. A
    tree is taken as :func:`parse` returned it (a caller that parsed the SQL already does not
    parse it again) and is left unchanged. The relations the rewrites read (the time, the
    one row of a SELECT without FROM) are known whatever the catalog says: a pipeline adds
    them as inputs it fills (:data:`BUILT_IN`). ``analyzed``: Spark's columns of an
    expression (:data:`~.planner.Analyzed`); ``recursion``: a recursive CTE's level limit."""
    tree = parse(sql, view) if isinstance(sql, str) else sql
    catalog = {**BUILT_IN, **catalog}
    columns = {name: op.columns for name, op in catalog.items()}
    return plan(rewrite(tree, columns=columns, view=view), catalog, view, analyzed, recursion)
