"""A row condition a person writes (the ``reread`` parameter) as a typed tree, and the SQL the provider writes from it.

The text is parsed (sqlglot's MySQL dialect) and every part of it checked against a short list: the table's own
columns, literals, comparisons, BETWEEN, IN over literals, IS [NOT] NULL, LIKE, AND, OR, NOT and parentheses. Anything
else (a function, a subquery, a variable, another table's column, arithmetic, a comment, a second statement) is
refused, naming what was found. The SQL sent to the server is then written from the tree (``to_sql``): names quoted
by ``quote_identifier``, every literal a bound value; nothing of the person's text reaches the server as SQL.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from airflow_cdc_provider.core.errors import BadRereadCondition
from airflow_cdc_provider.core.identifiers import TableName, quote_identifier

if TYPE_CHECKING:  # sqlglot is imported when a condition is parsed: it takes half a second, DAG parsing needs none
    from sqlglot import exp

# A condition is a line or a few, never a program: these bound what parsing and checking a text can cost.
MAX_TEXT = 4000  # characters
MAX_NODES = 1000  # parts of the parsed tree
MAX_NESTING = 20  # parentheses within parentheses (sqlglot's parser recurses about twenty frames for each)

EXAMPLE = "id BETWEEN 100 AND 200 AND status IN ('paid', 'sent')"
ACCEPTED = ("the table's own columns (by name, or qualified by the table's name), literals (numbers, 'strings', NULL, "
            "TRUE, FALSE; a date as a string such as '2026-03-01'), comparisons (= <> != < <= > >= <=>), BETWEEN, "
            "IN (a list of literals), IS [NOT] NULL, [NOT] LIKE, AND, OR, NOT and parentheses")

SqlValue = None | bool | int | Decimal | float | str


@dataclass(frozen=True)
class Clause:
    """SQL with ``%s`` placeholders (its own ``%`` doubled, as PyMySQL's format style wants) and the values bound
    to them, in their order."""

    sql: str
    args: tuple[SqlValue, ...] = ()


def literal_percent(sql: str) -> str:
    """SQL the provider wrote, made safe to put into a ``Clause``: its ``%`` doubled, so that no placeholder is read
    where there is none."""
    return sql.replace("%", "%%")


# --- the tree ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str  # as the table spells it


@dataclass(frozen=True)
class Literal:
    value: SqlValue


Operand = Column | Literal

COMPARISONS = ("=", "<>", "<", "<=", ">", ">=", "<=>")


@dataclass(frozen=True)
class Comparison:
    left: Operand
    op: str  # one of COMPARISONS
    right: Operand


@dataclass(frozen=True)
class Between:
    subject: Operand
    low: Operand
    high: Operand
    negated: bool = False


@dataclass(frozen=True)
class InList:
    subject: Operand
    values: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    subject: Operand
    negated: bool = False


@dataclass(frozen=True)
class Like:
    subject: Operand
    pattern: Operand
    negated: bool = False


@dataclass(frozen=True)
class And:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Not:
    part: Condition


Condition = Comparison | Between | InList | IsNull | Like | And | Or | Not


# --- the SQL written from it ------------------------------------------------------------------------------------


def to_sql(condition: Condition) -> Clause:
    """The condition as the provider writes it: quoted names, ``%s`` for every literal, parentheses around every
    AND, OR and NOT (so that no server setting such as HIGH_NOT_PRECEDENCE reads it otherwise)."""
    args: list[SqlValue] = []
    return Clause(_render(condition, args), tuple(args))


def _render(condition: Condition, args: list[SqlValue]) -> str:
    def operand(o: Operand) -> str:
        if isinstance(o, Column):
            return literal_percent(quote_identifier(o.name))
        args.append(o.value)
        return "%s"

    def neg(negated: bool) -> str:
        return "NOT " if negated else ""

    if isinstance(condition, Comparison):
        if condition.op not in COMPARISONS:
            raise ValueError(f"not a comparison: {condition.op!r}")
        return f"{operand(condition.left)} {condition.op} {operand(condition.right)}"
    if isinstance(condition, Between):
        subject = operand(condition.subject)
        return f"{subject} {neg(condition.negated)}BETWEEN {operand(condition.low)} AND {operand(condition.high)}"
    if isinstance(condition, InList):
        subject = operand(condition.subject)
        return f"{subject} {neg(condition.negated)}IN ({', '.join(operand(v) for v in condition.values)})"
    if isinstance(condition, IsNull):
        return f"{operand(condition.subject)} IS {neg(condition.negated)}NULL"
    if isinstance(condition, Like):
        return f"{operand(condition.subject)} {neg(condition.negated)}LIKE {operand(condition.pattern)}"
    if isinstance(condition, Not):
        return f"(NOT ({_render(condition.part, args)}))"
    joint = " AND " if isinstance(condition, And) else " OR "
    return "(" + joint.join(_render(part, args) for part in condition.parts) + ")"


# --- parsing ----------------------------------------------------------------------------------------------------


def parse_condition(text: str, table: TableName, columns: Collection[str]) -> Condition:
    """The condition ``text`` on ``table`` (whose columns are ``columns``), as a tree of the accepted forms only;
    anything else raises ``BadRereadCondition`` naming what was found."""
    return _Parser(text, table, columns).parse()


class _Parser:
    def __init__(self, text: str, table: TableName, columns: Collection[str]) -> None:
        self.text, self.table = text, table
        # MySQL compares column names without regard to case.
        self.columns = {name.casefold(): name for name in columns}

    def refuse(self, what: str) -> BadRereadCondition:
        text = str(self.text)
        shown = text if len(text) <= 200 else text[:200] + "…"
        return BadRereadCondition(
            f"The reread condition {shown!r} on {self.table} {what}. A reread condition takes only {ACCEPTED}; for "
            f"example `{EXAMPLE}`. Trigger the run again with such a condition; nothing was read or changed.")

    def parse(self) -> Condition:
        import sqlglot.errors
        from sqlglot import exp
        from sqlglot.dialects.dialect import Dialect

        if not isinstance(self.text, str) or not self.text.strip():
            raise self.refuse("is empty (to read the whole table again, give the table with an empty condition)")
        if len(self.text) > MAX_TEXT:
            raise self.refuse(f"is {len(self.text)} characters long; at most {MAX_TEXT} are read")
        mysql = Dialect.get_or_raise("mysql")
        try:
            tokens = mysql.tokenize(self.text)
        except sqlglot.errors.TokenError:
            raise self.refuse("cannot be read: a quote (' \" `) or a comment is not closed") from None
        self.check_tokens(tokens)
        try:
            (tree,) = mysql.parser().parse_into(exp.Condition, tokens, self.text)
        except sqlglot.errors.SqlglotError as exc:
            found = exc.errors[0] if isinstance(exc, sqlglot.errors.ParseError) and exc.errors else {}
            at = f" at `{found['highlight']}` (column {found['col']})" if found.get("highlight") else ""
            raise self.refuse(f"is not one condition as after WHERE: it does not read as one{at}") from None
        except RecursionError:
            raise self.refuse("is nested too deeply") from None
        if tree is None:
            raise self.refuse("is not one condition as after WHERE")
        nodes = sum(1 for _ in tree.walk())
        if nodes > MAX_NODES:
            raise self.refuse(f"has {nodes} parts; at most {MAX_NODES} are read (split the rows over several runs)")
        return self.condition(tree)

    def check_tokens(self, tokens: list[Any]) -> None:
        """What the parser would drop or could not name: comments, statement ends, variables, assignments; and
        the nesting, bounded before the parser recurses into it."""
        from sqlglot import TokenType

        depth = 0
        for n, token in enumerate(tokens):
            if token.comments:
                raise self.refuse("holds a comment (-- # /* */): a condition is the expression alone")
            kind = token.token_type
            if kind == TokenType.SEMICOLON:
                raise self.refuse("holds `;`: a condition is one expression, not statements")
            if kind == TokenType.COLON_EQ:
                raise self.refuse("holds the assignment `:=`")
            if kind in (TokenType.PARAMETER, TokenType.SESSION_PARAMETER):
                name = tokens[n + 1].text if n + 1 < len(tokens) else ""
                raise self.refuse(f"holds the variable `{token.text}{name}`")
            if kind == TokenType.L_PAREN:
                depth += 1
                if depth > MAX_NESTING:
                    raise self.refuse(f"nests parentheses more than {MAX_NESTING} deep")
            elif kind == TokenType.R_PAREN:
                depth -= 1

    # The tree, node by node. Each accepted node's arguments are listed: one it does not expect (a later sqlglot's
    # addition, BETWEEN SYMMETRIC, IN (SELECT …)) is refused rather than dropped.

    def condition(self, node: exp.Expr) -> Condition:
        from sqlglot import exp

        node = self.unwrap(node)
        if isinstance(node, (exp.And, exp.Or)):
            kind = type(node)
            parts = [self.condition(p) for p in self.chain(node, kind)]
            return And(tuple(parts)) if kind is exp.And else Or(tuple(parts))
        if isinstance(node, exp.Not):
            self.expect(node, "this")
            inner = self.unwrap(node.this)
            negatable = (exp.Between, exp.In, exp.Is, exp.Like)
            if isinstance(inner, negatable) and not inner.args.get("negate"):
                return self.predicate(inner, negated=True)
            return Not(self.condition(inner))
        return self.predicate(node, negated=False)

    def predicate(self, node: exp.Expr, negated: bool) -> Condition:
        from sqlglot import exp

        comparisons: dict[type[exp.Expr], str] = {
            exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.NullSafeEQ: "<=>"}
        op = comparisons.get(type(node))
        if op is not None:
            self.expect(node, "this", "expression")
            return Comparison(self.operand(node.this), op, self.operand(node.expression))
        if isinstance(node, exp.Between):
            self.expect(node, "this", "low", "high")
            return Between(self.operand(node.this), self.operand(node.args["low"]), self.operand(node.args["high"]),
                           negated)
        if isinstance(node, exp.In):
            self.expect(node, "this", "expressions")
            values = [self.operand(v) for v in node.expressions]
            if not values:
                raise self.refuse("has an empty IN list")
            if any(isinstance(v, Column) for v in values):
                raise self.refuse("has a column in an IN list, which takes literals only")
            return InList(self.operand(node.this), tuple(v for v in values if isinstance(v, Literal)), negated)
        if isinstance(node, exp.Is):
            self.expect(node, "this", "expression")
            if not isinstance(node.expression, exp.Null):
                raise self.refuse(f"has `{self.snippet(node)}`: IS takes only NULL or NOT NULL")
            return IsNull(self.operand(node.this), negated)
        if isinstance(node, exp.Like):
            self.expect(node, "this", "expression", "negate")
            return Like(self.operand(node.this), self.operand(node.expression),
                        negated != bool(node.args.get("negate")))
        if isinstance(node, (exp.Column, exp.Literal, exp.Boolean, exp.Null)):
            raise self.refuse(f"has `{self.snippet(node)}` where a condition belongs: compare it, for example "
                              f"`{self.snippet(node)} = 1`")
        raise self.refuse(f"holds {self.describe(node)}")

    def operand(self, node: exp.Expr) -> Operand:
        from sqlglot import exp

        node = self.unwrap(node)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Null):
            return Literal(None)
        if isinstance(node, exp.Boolean):
            return Literal(bool(node.this))
        if isinstance(node, exp.Literal):
            self.expect(node, "this", "is_string")
            return Literal(str(node.this) if node.is_string else self.number(str(node.this)))
        if isinstance(node, exp.Neg):
            self.expect(node, "this")
            inner = node.this
            if isinstance(inner, exp.Literal) and not inner.is_string:
                return Literal(-self.number(str(inner.this)))
        raise self.refuse(f"holds {self.describe(node)}")

    def column(self, node: exp.Column) -> Column:
        from sqlglot import exp

        self.expect(node, "this", "table", "db")
        if not isinstance(node.this, exp.Identifier):
            raise self.refuse(f"holds {self.describe(node)}")
        schema, table = node.args.get("db"), node.args.get("table")
        # The table's own name, as MySQL reads it on a server that ignores the case of table names: only the
        # table's columns are in the statement written, so a qualifier serves nothing else.
        if (table is not None and table.name.casefold() != self.table.table.casefold()) or (
                schema is not None and schema.name.casefold() != self.table.schema.casefold()):
            raise self.refuse(f"names `{self.snippet(node)}`, a column of another table: only the columns of "
                              f"{self.table} can be named")
        name = self.columns.get(node.name.casefold())
        if name is None:
            known = sorted(self.columns.values())
            listed = ", ".join(known[:30]) + (f" and {len(known) - 30} more" if len(known) > 30 else "")
            raise self.refuse(f"names the column {node.name!r}, which {self.table} does not have (its columns: "
                              f"{listed})")
        return Column(name)

    def number(self, text: str) -> int | Decimal | float:
        """A numeric literal as MySQL reads it: an integer, an exact DECIMAL, or a DOUBLE (with an exponent)."""
        if re.fullmatch(r"\d+", text):
            return int(text)
        if re.fullmatch(r"\d+\.\d*|\.\d+", text):
            return Decimal(text)
        if re.fullmatch(r"(\d+\.?\d*|\.\d+)[eE][+-]?\d+", text):
            value = float(text)
            if value not in (float("inf"), float("-inf")):
                return value
        raise self.refuse(f"has the number {text!r}, which is out of range or not a plain number")

    # --- helpers ---

    def unwrap(self, node: exp.Expr) -> exp.Expr:
        from sqlglot import exp

        while isinstance(node, exp.Paren):
            self.expect(node, "this")
            node = node.this
        return node

    def chain(self, node: exp.Expr, kind: type[exp.Expr]) -> list[exp.Expr]:
        """The operands of a run of ANDs (or ORs), in order, without recursing once per operand: sqlglot nests
        ``a AND b AND c`` to the left."""
        parts: list[exp.Expr] = []
        pending = [node]
        while pending:
            current = pending.pop()
            if isinstance(current, kind):
                self.expect(current, "this", "expression")
                pending.extend((current.expression, current.this))  # popped left first
            else:
                parts.append(current)
        return parts

    def expect(self, node: exp.Expr, *names: str) -> None:
        unexpected = [key for key, value in node.args.items() if key not in names and value not in (None, False, [])]
        if unexpected:
            raise self.refuse(f"holds {self.describe(node)}")

    def describe(self, node: exp.Expr) -> str:
        """What a refused part is, in a person's words."""
        from sqlglot import exp

        if isinstance(node, (exp.Subquery, exp.Query, exp.Exists)) or node.find(exp.Query) is not None:
            return f"a subquery (`{self.snippet(node)}`)"
        if isinstance(node, exp.Xor):
            return "XOR: use AND, OR and NOT"
        if isinstance(node, exp.Anonymous):
            return f"the function {node.name.upper()}()"
        if isinstance(node, exp.Func):
            return f"the function {node.sql_name()}() (`{self.snippet(node)}`)"
        if isinstance(node, (exp.HexString, exp.BitString, exp.National, exp.Introducer, exp.ByteString)):
            return f"the literal `{self.snippet(node)}`: write a number or a 'string' instead"
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.Neg, exp.BitwiseNot,
                             exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseLeftShift,
                             exp.BitwiseRightShift)):
            return f"arithmetic (`{self.snippet(node)}`): compare a column with a literal instead"
        return f"`{self.snippet(node)}`"

    @staticmethod
    def snippet(node: exp.Expr) -> str:
        text = node.sql(dialect="mysql")
        return text if len(text) <= 80 else text[:80] + "…"
