"""Spark SQL expressions that Arrow evaluates exactly as Spark does, so a filter or a
computed column on a small delta needs no Spark pass.

Only a subset compiles, the one whose meaning is the same in both engines:

- predicates: AND, OR, NOT (three-valued), IS [NOT] NULL, comparisons, BETWEEN, IN over
  literals and LIKE, between values of one kind — integers, decimals (any scales),
  strings (compared byte-wise, as Spark's default collation does), dates, booleans;
- values: columns, literals, ``+ - *`` and unary minus over integers and decimals,
  ``%`` of integers, ``/`` of integers (a double), ``FLOOR``, ``CASE WHEN``, ``COALESCE``,
  ``CAST`` between integers and decimals (or to the type a value has),
  ``EXTRACT(YEAR|MONTH|DAY FROM date)``, ``SUBSTRING(s, pos, len)`` with literal
  positions, ``LENGTH``, ``REPLACE`` of a literal, ``LOWER``/``UPPER`` of ASCII strings,
  ``UNIX_SECONDS``, ``TIMESTAMP_SECONDS``, ``REGEXP_EXTRACT`` of a pattern RE2 reads as
  Java does, ``TRY_ELEMENT_AT(SPLIT(s, c), n)`` for one plain character; and, when the session time zone is UTC (Spark
  reads a timestamp's wall clock in the session's zone), ``DATE_TRUNC``, ``HOUR``,
  ``MINUTE``, ``SECOND`` and ``DATE_FORMAT`` with a numeric pattern. Every intermediate result is
  cast to the type Spark gives that subexpression (its analyzer is asked once, when the
  circuit is planned): decimals are computed exactly in 256 bits and the cast is safe,
  so where Spark would round (precision loss) or overflow the cast raises
  ``ArrowInvalid`` and the caller hands the expression to Spark instead; integer
  arithmetic is checked, as ANSI mode is.

Floating-point comparisons follow Spark's order (NaN above every number, NaN = NaN true);
other floating-point operations, timestamp literals and comparisons (read in the session
time zone), division of decimals, other functions and casts stay with Spark: the
compilers return None for them.
"""
from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, cast

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from ...sql.relations import DIALECT
from . import kernels

Compiled = Callable[[pa.Table], pa.ChunkedArray | pa.Array | pa.Scalar]
Types = Callable[[list[str]], list[pa.DataType]]  # Spark's types (in Arrow) of expressions over the input


class _Untranslatable(Exception):
    pass


_ERRORS = (_Untranslatable, sqlglot.errors.ParseError, pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError)


def predicate(sql: str, schema: pa.Schema, types: Types | None = None, zone: str = "UTC",
              midnights: Calendar | None = None) -> Compiled | None:
    """A function from a table with ``schema`` to the mask of rows where ``sql`` is true
    (NULL where it is NULL), or None. Without ``types`` its operands are columns and
    literals only. ``zone``: Spark's session time zone; ``midnights`` gives the instant
    each day starts there (asked for, once, only by a cast between DATE and TIMESTAMP in
    a zone other than UTC; without it such a cast is Spark's)."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
        return _Compiler(schema, _typed(tree, types), zone, midnights).boolean(tree)
    except _ERRORS:
        return None


def value(sql: str, schema: pa.Schema, types: Types, zone: str = "UTC",
          midnights: Calendar | None = None) -> Compiled | None:
    """A function from a table with ``schema`` to the column ``sql`` computes, typed as
    Spark types it, or None (``zone``, ``midnights``: as :func:`predicate`'s)."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
        return _Compiler(schema, _typed(tree, types), zone, midnights).value(tree)
    except _ERRORS:
        return None


def _typed(tree: exp.Expr, types: Types | None) -> dict[str, pa.DataType]:
    """Spark's type of every subexpression of ``tree`` that a value is computed for."""
    if types is None:
        return {}
    if tree.find(exp.Lambda) is not None:  # Arrow has no form of a higher-order function, nor its body types
        raise _Untranslatable("a lambda")
    texts = list(dict.fromkeys(n.sql(DIALECT) for n in tree.walk() if isinstance(n, _TYPED)))
    try:
        return dict(zip(texts, types(texts)))
    except Exception as e:  # Spark's analyzer rejects a piece on its own: Spark evaluates the whole
        raise _Untranslatable(str(e)) from None


_TYPED = (exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Literal, exp.Case, exp.Extract, exp.Null, exp.Column, exp.Paren,
          exp.Substring, exp.Cast, exp.Coalesce, exp.TimestampTrunc, exp.Mod, exp.Div, exp.Floor, exp.Hour,
          exp.Minute, exp.Second, exp.Length, exp.Replace, exp.Lower, exp.Upper, exp.UnixSeconds, exp.Anonymous,
          exp.TimeToStr, exp.RegexpExtract, exp.Bracket, exp.TsOrDsAdd, exp.TsOrDsToDate)
_COMPARE: dict[type[exp.Expr], str] = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.LT: "less", exp.LTE: "less_equal",
                                       exp.GT: "greater", exp.GTE: "greater_equal"}
_ARITHMETIC: dict[type[exp.Expr], Callable[..., Any]] = {
    exp.Add: pc.add_checked, exp.Sub: pc.subtract_checked, exp.Mul: pc.multiply_checked}
_PARTS = {"YEAR": pc.year, "MONTH": pc.month, "DAY": pc.day}
#: DATE_TRUNC's units (Spark's spellings) as Arrow's floor_temporal units; weeks start on Monday in both
_TRUNC = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter", "MONTH": "month", "MM": "month",
          "MON": "month", "WEEK": "week", "DAY": "day", "DD": "day", "HOUR": "hour", "MINUTE": "minute",
          "SECOND": "second", "MILLISECOND": "millisecond", "MICROSECOND": "microsecond"}
#: hour, minute and second of a timestamp, which Spark reads in the session's time zone
_CLOCK_PARTS: dict[type[exp.Expr], Callable[..., Any]] = {
    exp.Hour: pc.hour, exp.Minute: pc.minute, exp.Second: pc.second}
#: DATE_FORMAT pattern letters (Java's) as strftime's; other letters stay with Spark
_FORMAT = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_FORMAT_TOKENS = re.compile(r"yyyy|MM|dd|HH|mm|ss|[-:/ .,_]")
_MICROS = 1_000_000
_INTERVAL_MICROS = {u: n * _MICROS for n, us in ((86_400, ("DAY", "DAYS")), (3_600, ("HOUR", "HOURS")),
                                                  (60, ("MINUTE", "MINUTES")), (1, ("SECOND", "SECONDS")))
                    for u in us}
_REGEX_OPERATORS = set(".$|()[]{}^?*+\\")
#: names of a session time zone that is UTC
UTC_ZONES = {"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "Zulu", "Universal"}
#: the instant each day starts in the session's time zone, asked for when needed
Calendar = Callable[[], "kernels.Midnights"]
#: the casts :meth:`_Compiler._day_cast` computes
_DAY_CASTS = [{pa.date32(), kernels.INSTANT}, {pa.date32(), pa.timestamp("us")}]


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_decimal(t):
        return "dec"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_floating(t):  # compared as Spark compares them (:func:`_float_compare`)
        return "float"
    if pa.types.is_timestamp(t):  # instants compare as Spark compares them; TIMESTAMP and TIMESTAMP_NTZ do not mix
        return f"ts:{t.tz}"
    raise _Untranslatable(str(t))


def _wide(t: pa.DataType) -> pa.DataType:
    """The exact 256-bit decimal holding a value of integer or decimal type ``t``."""
    return pa.decimal256(t.precision, t.scale) if pa.types.is_decimal(t) else pa.decimal256(19, 0)


class _Compiler:
    """Builds closures over a table; raises :class:`_Untranslatable` for what Arrow
    must not decide."""

    def __init__(self, schema: pa.Schema, types: Mapping[str, pa.DataType], zone: str = "UTC",
                 midnights: Calendar | None = None):
        self.schema = schema
        self.types = types
        self.utc = zone in UTC_ZONES
        self.midnights = midnights

    def _type(self, e: exp.Expr) -> pa.DataType:
        return self.types[e.sql(DIALECT)]

    # --- values ----------------------------------------------------------------------

    def operand(self, e: exp.Expr) -> tuple[Compiled, str]:
        """A value for a comparison: a column, a literal, or (with types) arithmetic."""
        if isinstance(e, exp.Paren):
            return self.operand(e.this)
        if isinstance(e, exp.Column) and not e.table and e.name in self.schema.names:
            name = e.name
            return (lambda t: t.column(name)), _kind(self.schema.field(name).type)
        if isinstance(e, exp.Literal) and e.is_string:
            s = pa.scalar(e.this)
            return (lambda t: s), "str"
        if isinstance(e, exp.Literal):
            s = _number(e.this)
            return (lambda t: s), _kind(s.type)
        if isinstance(e, exp.Boolean):
            b = pa.scalar(bool(e.this))
            return (lambda t: b), "bool"
        if isinstance(e, exp.Cast) and e.to.is_type("date") and isinstance(e.this, exp.Literal) and e.this.is_string:
            try:
                d = pa.scalar(dt.date.fromisoformat(e.this.this), pa.date32())
            except ValueError:
                raise _Untranslatable(e.this.this) from None
            return (lambda t: d), "date"
        if self.types:
            f = self.value(e)
            return f, _kind(self._type(e))
        raise _Untranslatable(type(e).__name__)

    def value(self, e: exp.Expr) -> Compiled:
        """``e`` computed, cast to the type Spark gives it."""
        if isinstance(e, exp.Paren):
            return self.value(e.this)
        if isinstance(e, (exp.Column, exp.Literal)) and not isinstance(e, exp.Null):
            return self._leaf(e)
        if isinstance(e, (exp.Predicate, exp.Not, exp.And, exp.Or, exp.Boolean)):
            return self.boolean(e)
        out = self._type(e)
        if isinstance(e, exp.Null):
            return lambda t: pa.nulls(t.num_rows, out)
        if isinstance(e, (exp.Add, exp.Sub)) and isinstance(e.expression, exp.Interval):
            return self._shifted(e, out)
        if isinstance(e, exp.Neg) and _kind(out) == "float" and _kind(self._type(e.this)) == "float":
            f = self.value(e.this)  # the sign flipped, in both engines IEEE's: -0.0 of 0.0, NaN of NaN
            return lambda t: pc.negate(f(t)).cast(out)
        if isinstance(e, (exp.Add, exp.Sub)) and pa.types.is_date32(out):
            date, days = (e.left, e.right) if pa.types.is_date32(self._type(e.left)) else (e.right, e.left)
            if isinstance(e, exp.Sub) and date is e.right:
                raise _Untranslatable("date arithmetic")
            return self._days_added(date, days, _ARITHMETIC[type(e)])
        if isinstance(e, exp.TsOrDsAdd) and pa.types.is_date32(out) and e.text("unit").upper() in ("", "DAY"):
            return self._days_added(e.this, e.expression, pc.add_checked)  # date_add, date_sub
        if type(e) in _ARITHMETIC or isinstance(e, exp.Neg):
            if _kind(out) not in ("int", "dec"):
                raise _Untranslatable("arithmetic on " + str(out))
            args: list[Any] = ([e.this] if isinstance(e, exp.Neg)
                               else [cast(exp.Binary, e).left, cast(exp.Binary, e).right])
            fs = [self.value(a) for a in args]
            kinds = [_kind(self._type(a)) for a in args]
            if any(k not in ("int", "dec") for k in kinds):
                raise _Untranslatable("arithmetic")
            arith = pc.negate_checked if isinstance(e, exp.Neg) else _ARITHMETIC[type(e)]
            if _kind(out) == "int":
                return lambda t: arith(*(f(t) for f in fs)).cast(out)
            wide = [_wide(self._type(a)) for a in args]
            return lambda t: arith(*(f(t).cast(w) for f, w in zip(fs, wide))).cast(out)
        if isinstance(e, exp.Case) and not e.this:
            conds = [self.boolean(i.this) for i in e.args["ifs"]]
            values = [self._cast(self.value(i.args["true"]), out) for i in e.args["ifs"]]
            default = e.args.get("default")
            otherwise = self._cast(self.value(default), out) if default else (lambda t: pa.scalar(None, out))

            def case(t: pa.Table) -> pa.Array:
                n = t.num_rows
                masks = [as_column(c(t), n).fill_null(False) for c in conds]
                return pc.case_when(pc.make_struct(*masks, field_names=[str(i) for i in range(len(masks))]),
                                    *(as_column(v(t), n) for v in values), as_column(otherwise(t), n))
            return case
        if isinstance(e, exp.Substring):  # SUBSTRING(s, pos, len), 1-based on characters, pos and len literals
            start, length = (_count(e.args.get(a)) for a in ("start", "length"))
            f = self.value(e.this)
            if start < 1 or _kind(self._type(e.this)) != "str":
                raise _Untranslatable("SUBSTRING")
            return lambda t: pc.utf8_slice_codeunits(f(t), start - 1, start - 1 + length)  # code points, as Spark
        if (isinstance(e, exp.Cast) or isinstance(e, exp.TsOrDsToDate) and not e.args.get("format")) \
                and {self._type(e.this), out} in _DAY_CASTS:
            return self._day_cast(e.this, out)  # CAST, to_date of a time
        if isinstance(e, exp.Cast):  # a safe cast: exactly Spark's value, or ArrowInvalid
            f = self.value(e.this)
            _exact_cast(self._type(e.this), out)
            return self._cast(f, out)
        if isinstance(e, exp.Coalesce):
            args = [e.this, *e.expressions]
            for a in args:
                _exact_cast(self._type(a), out)
            fs = [self._cast(self.value(a), out) for a in args]
            return lambda t: pc.coalesce(*(as_column(f(t), t.num_rows) for f in fs))
        if isinstance(e, exp.TimestampTrunc):
            unit = _TRUNC.get(e.args["unit"].name.upper())
            if unit is None or not self.utc or not pa.types.is_timestamp(self._type(e.this)) \
                    or not pa.types.is_timestamp(out):
                raise _Untranslatable("DATE_TRUNC")
            f = self.value(e.this)
            return lambda t: pc.floor_temporal(f(t), unit=unit, week_starts_monday=True).cast(out)
        if isinstance(e, exp.Mod):  # Java's remainder (the dividend's sign): a - trunc(a / b) * b
            a, b = self._ints(e.left, e.right)
            return lambda t: pc.subtract_checked(a(t), pc.multiply_checked(pc.divide_checked(a(t), b(t)), b(t))
                                                 ).cast(out)
        if isinstance(e, exp.Div):  # integers divided as doubles (IEEE in both engines); ANSI raises on zero
            if not pa.types.is_float64(out):
                raise _Untranslatable("a division that is not of doubles")
            a, b = self._ints(e.left, e.right)
            return lambda t: pc.divide(a(t).cast(pa.float64()), _nonzero(b(t)).cast(pa.float64()))
        if isinstance(e, exp.Floor) and not e.args.get("decimals"):
            f, inner = self.value(e.this), self._type(e.this)
            if not (pa.types.is_float64(inner) or pa.types.is_integer(inner)) or not pa.types.is_integer(out):
                raise _Untranslatable("FLOOR")
            return lambda t: pc.floor(f(t)).cast(out) if pa.types.is_float64(inner) else f(t).cast(out)
        if type(e) in _CLOCK_PARTS or (isinstance(e, exp.Extract) and e.this.name.upper() in ("HOUR", "MINUTE")):
            part = _CLOCK_PARTS[type(e)] if type(e) in _CLOCK_PARTS else getattr(pc, e.this.name.lower())
            arg = e.expression if isinstance(e, exp.Extract) else e.this
            f = self._timestamp(arg)
            return lambda t: part(f(t)).cast(out)
        if isinstance(e, exp.UnixSeconds):  # seconds since the epoch, rounded down (Spark's floorDiv)
            f = self.value(e.this)
            if not pa.types.is_timestamp(self._type(e.this)):
                raise _Untranslatable("UNIX_SECONDS")
            return lambda t: _floor_div(f(t).cast(pa.int64()), _MICROS).cast(out)
        if isinstance(e, exp.Anonymous) and e.name.upper() == "TIMESTAMP_SECONDS" and len(e.expressions) == 1:
            (f,) = self._ints(e.expressions[0])
            return lambda t: pc.multiply_checked(f(t).cast(pa.int64()), _MICROS).cast(out)
        if isinstance(e, exp.TimeToStr):  # DATE_FORMAT(timestamp, literal pattern)
            return self._date_format(e, out)
        if isinstance(e, exp.Length):  # characters (code points), as Spark counts them
            f = self._string(e.this)
            return lambda t: pc.utf8_length(f(t)).cast(out)
        if isinstance(e, exp.Replace):
            f = self._string(e.this)
            search, replacement = e.expression, e.args.get("replacement")
            if not (isinstance(search, exp.Literal) and search.is_string and search.this) or not (
                    replacement is None or isinstance(replacement, exp.Literal) and replacement.is_string):
                raise _Untranslatable("REPLACE")
            pattern, with_ = search.this, "" if replacement is None else replacement.this
            return lambda t: pc.replace_substring(f(t), pattern=pattern, replacement=with_)
        if isinstance(e, exp.RegexpExtract):  # the group of the first match, '' where none
            f, pattern, group = self._string(e.this), e.expression, e.args.get("group")
            if not (isinstance(pattern, exp.Literal) and pattern.is_string):
                raise _Untranslatable("REGEXP_EXTRACT of a pattern that is not a literal")
            named, groups = _named_groups(pattern.this)
            index = 1 if group is None else _count(group)
            if not 1 <= index <= groups:
                raise _Untranslatable("REGEXP_EXTRACT of a group the pattern does not have")

            def extract(t: pa.Table) -> pa.Array:
                v = as_column(f(t), t.num_rows)
                found = pc.struct_field(pc.extract_regex(v, pattern=named), [index - 1])
                return pc.if_else(pc.is_valid(v), pc.fill_null(found, ""), pa.scalar(None, pa.string()))
            return extract
        if isinstance(e, exp.Bracket):  # TRY_ELEMENT_AT(SPLIT(s, one plain character), n > 0)
            return self._split_element(e)
        if isinstance(e, (exp.Lower, exp.Upper)):  # Unicode case rules differ by library: ASCII only
            f = self._string(e.this)
            case = pc.ascii_lower if isinstance(e, exp.Lower) else pc.ascii_upper
            return lambda t: case(_ascii(f(t)))
        if isinstance(e, exp.Extract) and e.this.name.upper() in _PARTS:
            part, f = _PARTS[e.this.name.upper()], self.value(e.expression)
            if not pa.types.is_date32(self._type(e.expression)):
                raise _Untranslatable("EXTRACT")
            return lambda t: part(f(t)).cast(out)
        raise _Untranslatable(type(e).__name__)

    def _shifted(self, e: exp.Add | exp.Sub, out: pa.DataType) -> Compiled:
        """A timestamp plus or minus a day-time interval of whole units: Spark adds its
        microseconds, whatever the time zone."""
        interval = e.expression
        unit = interval.args.get("unit")
        micros = _INTERVAL_MICROS.get(unit.name.upper()) if unit is not None else None
        count = interval.this
        if (micros is None or not isinstance(count, exp.Literal) or not re.fullmatch(r"-?\d{1,9}", count.this)
                or not pa.types.is_timestamp(self._type(e.this)) or self._type(e.this) != out):
            raise _Untranslatable("an interval that is not whole days, hours, minutes or seconds")
        shift = pa.scalar(int(count.this) * micros, pa.duration("us"))
        f, op = self.value(e.this), pc.add_checked if isinstance(e, exp.Add) else pc.subtract_checked
        return lambda t: op(f(t), shift).cast(out)

    def _ints(self, *es: exp.Expr) -> list[Compiled]:
        """Operands that must be integers."""
        if not all(pa.types.is_integer(self._type(x)) for x in es):
            raise _Untranslatable("an operand that is not an integer")
        return [self.value(x) for x in es]

    def _string(self, e: exp.Expr) -> Compiled:
        if _kind(self._type(e)) != "str":
            raise _Untranslatable("a string function of another type")
        return self.value(e)

    def _timestamp(self, e: exp.Expr) -> Compiled:
        """A timestamp whose wall clock is read: in UTC only."""
        if not self.utc or not pa.types.is_timestamp(self._type(e)):
            raise _Untranslatable("a timestamp read in a time zone other than UTC")
        return self.value(e)

    def _split_element(self, e: exp.Bracket) -> Compiled:
        """The n-th piece of a string split on one character that is not a regex operator
        (Spark splits on a Java regex, keeping empty pieces), NULL past the last piece."""
        split = e.this
        if not (e.args.get("safe") and e.args.get("offset") == 1 and len(e.expressions) == 1
                and isinstance(split, exp.RegexpSplit) and not split.args.get("limit")):
            raise _Untranslatable("an array element")
        sep, n = split.expression, _count(e.expressions[0])
        if not (isinstance(sep, exp.Literal) and sep.is_string and len(sep.this) == 1
                and sep.this not in _REGEX_OPERATORS) or n < 1:
            raise _Untranslatable("SPLIT on a pattern")
        f, char = self._string(split.this), sep.this

        def element(t: pa.Table) -> pa.Array:
            pieces = pc.split_pattern(as_column(f(t), t.num_rows), pattern=char)
            there = pc.greater_equal(pc.list_value_length(pieces), n)  # NULL for a NULL string
            padded = pc.if_else(there.fill_null(False), pieces, pa.scalar([None] * n, pieces.type))
            return pc.if_else(there, pc.list_element(padded, n - 1), pa.scalar(None, pa.string()))
        return element

    def _date_format(self, e: exp.TimeToStr, out: pa.DataType) -> Compiled:
        """DATE_FORMAT with a pattern of whole-number fields, for years of four digits."""
        inner = e.this.this if isinstance(e.this, exp.TimeStrToTime) else e.this
        java = re.fullmatch(r"DATE_FORMAT\(.*, '([^'\\]*)'\)", e.sql(DIALECT), re.S)
        tokens = _FORMAT_TOKENS.findall(java.group(1)) if java else []
        if not java or "".join(tokens) != java.group(1) or _kind(out) != "str":
            raise _Untranslatable("DATE_FORMAT")
        pattern = "".join(_FORMAT.get(x, x) for x in tokens)
        f = self._timestamp(inner)

        def date_format(t: pa.Table) -> pa.Array:
            v = as_column(f(t), t.num_rows)
            years = pc.min_max(pc.year(v))
            if years["min"].is_valid and (years["min"].as_py() < 1000 or years["max"].as_py() > 9999):
                raise pa.ArrowInvalid("a year Spark writes with other than four digits")
            seconds = pc.floor_temporal(v, unit="second").cast(pa.timestamp("s", tz=v.type.tz))
            return pc.strftime(seconds, format=pattern)
        return date_format

    def _day_cast(self, e: exp.Expr, out: pa.DataType) -> Compiled:
        """A cast between DATE and TIMESTAMP (or TIMESTAMP_NTZ), as Spark's in the session's
        time zone: by the zone's midnights, asked of Spark once when the zone is not UTC."""
        f = self.value(e)
        zoned = not self.utc and any(pa.types.is_timestamp(t) and t.tz is not None for t in (self._type(e), out))
        if zoned and self.midnights is None:
            raise _Untranslatable("a cast between DATE and TIMESTAMP in a time zone other than UTC")
        calendar = self.midnights() if zoned and self.midnights is not None else None
        return lambda t: kernels.day_cast(as_column(f(t), t.num_rows), out, calendar)

    def _days_added(self, date: exp.Expr, days: exp.Expr, arith: Callable[..., Any]) -> Compiled:
        """A DATE plus or minus whole days (``+``, ``-``, ``date_add``, ``date_sub``): days
        since the epoch as integers; past DATE's range Arrow raises and Spark decides."""
        if not pa.types.is_date32(self._type(date)) or _kind(self._type(days)) != "int":
            raise _Untranslatable("date arithmetic")
        f, n = self.value(date), self.value(days)
        return lambda t: arith(pc.cast(f(t), pa.int32()), pc.cast(n(t), pa.int32())).cast(pa.date32())

    def _leaf(self, e: exp.Expr) -> Compiled:
        """A column or a literal, typed as Spark types it."""
        out = self._type(e)
        if isinstance(e, exp.Column) and e.table:  # a struct's field: the planner's columns are never qualified
            struct, field = e.table, e.name
            if e.args.get("db") or struct not in self.schema.names \
                    or field not in getattr(self.schema.field(struct).type, "names", ()):
                raise _Untranslatable(e.sql(DIALECT))
            return lambda t: pc.struct_field(t.column(struct), field).cast(out)
        if isinstance(e, exp.Column):
            name = e.name
            return lambda t: t.column(name).cast(out)
        s = pa.scalar(e.this if e.is_string else _number(e.this).as_py(), out)
        return lambda t: s

    @staticmethod
    def _cast(f: Compiled, out: pa.DataType) -> Compiled:
        return lambda t: f(t).cast(out)

    # --- predicates ------------------------------------------------------------------

    def boolean(self, e: exp.Expr) -> Compiled:
        f = self._positive(e)
        if e.args.get("negate"):  # x NOT LIKE / NOT IN / NOT BETWEEN
            return lambda t: pc.invert(f(t))
        return f

    def _same(self, *es: exp.Expr) -> tuple[list[Compiled], str]:
        """Operands to compare and their kind: of one kind, integers and decimals compared
        exactly, or integers and floats as floats (Spark casts the integer to DOUBLE)."""
        compiled = [self.operand(x) for x in es]
        kinds = {k for _, k in compiled}
        if kinds == {"int", "dec"}:
            return [cast(Compiled, lambda t, f=f: _as_decimal(f(t))) for f, _ in compiled], "dec"
        if kinds == {"int", "float"}:
            return [cast(Compiled, lambda t, f=f: pc.cast(f(t), pa.float64())) for f, _ in compiled], "float"
        if len(kinds) != 1:
            raise _Untranslatable("values of different kinds")
        return [f for f, _ in compiled], kinds.pop()

    def _positive(self, e: exp.Expr) -> Compiled:
        if isinstance(e, exp.Paren):
            return self.boolean(e.this)
        if isinstance(e, (exp.And, exp.Or)):
            a, b = self.boolean(e.left), self.boolean(e.right)
            op = pc.and_kleene if isinstance(e, exp.And) else pc.or_kleene
            return lambda t: op(a(t), b(t))
        if isinstance(e, exp.Not):
            f = self.boolean(e.this)
            return lambda t: pc.invert(f(t))
        if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
            x, _ = self.operand(e.this)
            return lambda t: pc.is_null(as_column(x(t), t.num_rows))
        if type(e) in _COMPARE:
            (a, b), kind = self._same(cast(exp.Binary, e).left, cast(exp.Binary, e).right)
            cmp = _float_compare(_COMPARE[type(e)]) if kind == "float" else getattr(pc, _COMPARE[type(e)])
            return lambda t: cmp(a(t), b(t))
        if isinstance(e, exp.Between):
            (x, low, high), kind = self._same(e.this, e.args["low"], e.args["high"])
            ge, le = ((_float_compare("greater_equal"), _float_compare("less_equal")) if kind == "float"
                      else (pc.greater_equal, pc.less_equal))
            return lambda t: pc.and_kleene(ge(x(t), low(t)), le(x(t), high(t)))
        if isinstance(e, exp.In) and not e.args.get("query") and not e.args.get("unnest"):
            x, kind = self.operand(e.this)
            items = pa.array([_item(v, kind) for v in e.expressions])

            def isin(t: pa.Table) -> pa.Array:
                v = as_column(x(t), t.num_rows)
                found = pc.is_in(v, value_set=items.cast(v.type))
                return pc.if_else(pc.is_valid(v), found, pa.scalar(None, pa.bool_()))  # NULL IN (…) is NULL
            return isin
        if isinstance(e, exp.Like) and isinstance(e.expression, exp.Literal) and e.expression.is_string:
            x, kind = self.operand(e.this)
            if kind != "str":
                raise _Untranslatable("LIKE")
            pattern = e.expression.this
            return lambda t: pc.match_like(as_column(x(t), t.num_rows), pattern)
        if isinstance(e, exp.Boolean):
            b = pa.scalar(bool(e.this))
            return lambda t: as_column(b, t.num_rows)
        if isinstance(e, exp.Column):
            x, kind = self.operand(e)
            if kind == "bool":
                return x
        raise _Untranslatable(type(e).__name__)


def _float_compare(name: str) -> Callable[[object, object], pa.Array]:
    """A comparison of floats as Spark makes it: NaN equals NaN and is above every other
    number (IEEE's NaN compares false with everything); NULL where an operand is NULL."""
    def nan(x: object) -> pa.Array:
        return pc.is_nan(x)

    def eq(a: object, b: object) -> pa.Array:
        return pc.or_kleene(pc.equal(a, b), pc.and_kleene(nan(a), nan(b)))

    def lt(a: object, b: object) -> pa.Array:
        return pc.or_kleene(pc.less(a, b), pc.and_kleene(pc.invert(nan(a)), nan(b)))

    return {"equal": eq, "not_equal": lambda a, b: pc.invert(eq(a, b)), "less": lt,
            "greater": lambda a, b: lt(b, a), "less_equal": lambda a, b: pc.or_kleene(lt(a, b), eq(a, b)),
            "greater_equal": lambda a, b: pc.or_kleene(lt(b, a), eq(a, b))}[name]


def _exact_cast(source: pa.DataType, target: pa.DataType) -> None:
    """Whether Arrow's safe cast gives Spark's value or raises: between integers and
    decimals (Arrow raises where Spark would round, truncate or overflow), from integers to
    floats (Arrow raises past the integers a float holds exactly, where Spark rounds), from
    NULL, or to the type a value already has."""
    numbers = {"int", "dec"}
    if pa.types.is_null(source):
        return
    try:
        kinds = _kind(source), _kind(target)
        if set(kinds) <= numbers or kinds == ("int", "float"):
            return
    except _Untranslatable:
        pass
    if source != target:
        raise _Untranslatable(f"CAST from {source} to {target}")


def _named_groups(pattern: str) -> tuple[str, int]:
    """A Java regular expression as RE2 (Arrow's) with its groups named, and how many
    groups it has, for the patterns both read alike: no escapes, no ``$`` (Java's also
    matches before a final line break), no ``.`` outside a class (Java's excludes more
    line breaks), no flags or special groups, no nested classes."""
    if any(c in pattern for c in "\\$") or "(?" in pattern or "&&" in pattern:
        raise _Untranslatable("a pattern RE2 may read differently")
    out, groups, in_class, i = [], 0, False, 0
    while i < len(pattern):
        c = pattern[i]
        if in_class:
            if c == "[":
                raise _Untranslatable("a nested character class")
            in_class = c != "]"
        elif c == "[":
            if pattern.startswith(("]", "^]"), i + 1):  # a literal ] (Java) or an empty class
                raise _Untranslatable("a class that starts with ]")
            in_class = True
        elif c == ".":
            raise _Untranslatable("a . outside a character class")
        elif c == "(":
            groups += 1
            out.append(f"(?P<g{groups}>")
            i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        raise _Untranslatable("an unclosed character class")
    return "".join(out), groups


def _nonzero(v: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.ChunkedArray | pa.Scalar:
    """``v``, or ArrowInvalid where it holds a zero (Spark's ANSI division raises)."""
    if pc.any(pc.equal(v, 0)).as_py():
        raise pa.ArrowInvalid("division by zero")
    return v


def _ascii(v: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.ChunkedArray | pa.Scalar:
    if not pc.all(pc.string_is_ascii(v)).as_py():
        raise pa.ArrowInvalid("a string that is not ASCII")
    return v


def _floor_div(v: pa.Array | pa.ChunkedArray, k: int) -> pa.Array | pa.ChunkedArray:
    """``v // k`` rounded toward negative infinity (Arrow's integer division truncates)."""
    q = pc.divide(v, k)
    return pc.subtract(q, pc.less(pc.subtract(v, pc.multiply(q, k)), 0).cast(v.type))


def _number(text: str) -> pa.Scalar:
    """A numeric literal as Spark reads it: digits an integer (a DECIMAL(n, 0) past
    BIGINT's range), a point a decimal."""
    if text.isdigit():
        n, digits = int(text), len(text.lstrip("0"))
        if n < 1 << 63:
            return pa.scalar(n)
        if digits > 38:
            raise _Untranslatable(text)
        return pa.scalar(Decimal(n), pa.decimal128(digits, 0))
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise _Untranslatable(text) from None
    if "e" in text.lower() or not d.is_finite():
        raise _Untranslatable(text)  # a double literal
    digits, exponent = len(d.as_tuple().digits), int(d.as_tuple().exponent)
    scale = max(0, -exponent)
    return pa.scalar(d, pa.decimal128(max(digits, scale, 1), scale))


def literal(e: exp.Expr) -> Any:
    """A string or numeric literal's value as Spark reads it (:func:`_number`: digits an
    int, a point a Decimal), negated where written ``-x``; None for anything else (a
    double's exponent included)."""
    negative = isinstance(e, exp.Neg)
    inner = e.this if negative else e
    if not isinstance(inner, exp.Literal):
        return None
    if inner.is_string:
        return None if negative else inner.this
    try:
        value = _number(inner.this).as_py()
    except _Untranslatable:
        return None
    return -value if negative else value


def _count(e: exp.Expr | None) -> int:
    """A non-negative integer literal."""
    if isinstance(e, exp.Literal) and not e.is_string and str(e.this).isdigit():
        return int(e.this)
    raise _Untranslatable("a position that is not a literal")


def _item(e: exp.Expr, kind: str) -> object:
    """An IN-list item of the kind of the value tested."""
    if kind == "str" and isinstance(e, exp.Literal) and e.is_string:
        return e.this
    if kind == "int" and isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)
    raise _Untranslatable("IN list")


def _as_decimal(v: pa.Array | pa.ChunkedArray | pa.Scalar) -> pa.Array | pa.ChunkedArray | pa.Scalar:
    return v.cast(_wide(v.type))


def as_column(v: pa.Array | pa.ChunkedArray | pa.Scalar, n: int) -> pa.Array | pa.ChunkedArray:
    return pa.repeat(v, n) if isinstance(v, pa.Scalar) else v
