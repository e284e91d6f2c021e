"""What a failed condition says: celpy's errors put in the expression's own terms.

celpy reports a syntax error with the expression repeated and a caret under it, and an
operator applied to the wrong types by its grammar rule and Python classes; a workflow
author reads these in a log line, an API error or a stored history reason, so each is
rewritten here into one line that names the operator, the types or the place as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from celpy.evaluation import CELEvalError

#: Words and signs other languages use where CEL has an operator of its own.
_FOREIGN_OPERATORS = {"and": "&&", "or": "||", "not": "!", "=": "=="}

#: Closing brackets the parser may still expect when an expression ends too early.
_CLOSERS = {"RPAR": ")", "RSQB": "]", "RBRACE": "}"}


def syntax_error(expression: str, exc: Exception) -> str:
    """Where the parser stopped, in one line. celpy's own text repeats the expression with a
    caret under it, which lands in the wrong column once the message is prefixed, and
    across lines in a log or a JSON reason."""
    cause = exc.__cause__ or exc.__context__ or exc
    token = getattr(cause, "token", None)
    if token is not None and token.type == "$END":
        closers = sorted(
            _CLOSERS[name] for name in getattr(cause, "expected", ()) if name in _CLOSERS
        )
        return "it ends too early" + (f": {' or '.join(closers)} expected" if closers else "")
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    lines = expression.split("\n")
    if not (isinstance(line, int) and isinstance(column, int) and 0 < line <= len(lines)):
        return "a syntax error"
    where = f"line {line}, column {column}" if len(lines) > 1 else f"column {column}"
    rest = lines[line - 1][max(column - 1, 0) :]
    first = rest.split()[0] if rest.split() else rest
    foreign = "=" if first.startswith("=") and not first.startswith("==") else first
    hint = (
        f"; CEL writes {foreign} as {_FOREIGN_OPERATORS[foreign]}"
        if foreign in _FOREIGN_OPERATORS
        else ""
    )
    return f"unexpected {rest[:24]!r} at {where}{hint}"


#: celpy's grammar rules for the operators, as a user writes them.
_OPERATORS = {
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_in": "in",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
    "unary_neg": "-",
    "unary_not": "!",
}
_NO_OVERLOAD = re.compile(r"found no matching overload for Token\('RULE', '(\w+)'\) applied to")
_CEL_TYPE = re.compile(r"<class 'celpy\.celtypes\.(\w+)Type'>")


def describe(exc: CELEvalError) -> str:
    message = str(exc.args[0] if exc.args else exc)
    # celpy names an operator applied to the wrong types by its grammar rule and Python
    # classes (Token('RULE', 'relation_eq'), <class 'celpy.celtypes.StringType'>), which
    # tells a workflow author nothing; say it in the expression's own terms.
    if (rule := _NO_OVERLOAD.match(message)) and rule[1] in _OPERATORS:
        types = " and ".join(name.lower() for name in _CEL_TYPE.findall(message))
        return f"{_OPERATORS[rule[1]]} cannot be applied to {types}"
    # An undeclared-reference message embeds the whole activation; keep the useful head.
    return message.split(" (in activation", 1)[0]


#: The most node names a failed lookup lists: the reason is stored in the history.
_NAMES_SHOWN = 10


def node_names(exc: CELEvalError, states: Mapping[str, str]) -> str:
    """The workflow's node names after a lookup of one it does not have (most likely a
    misspelt ``completed.<name>`` or ``states['<name>']``), so the reason shows the fix."""
    if not str(exc.args[0] if exc.args else "").startswith("no such member in mapping"):
        return ""
    names = sorted(states)
    shown = ", ".join(names[:_NAMES_SHOWN]) + (", …" if len(names) > _NAMES_SHOWN else "")
    return f" (the workflow's nodes: {shown})" if names else ""
