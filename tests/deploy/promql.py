"""Metric names a PromQL expression reads: enough of PromQL's lexical rules to find them, not a full parser.

What is removed before looking for names: string literals (label values, regexes), label matchers `{...}`, range and
subquery brackets `[...]`, and the label lists of `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
What is left that looks like an identifier is a metric name unless it calls a function (`name(`), is a keyword, or
sits inside a number (`1e3`).
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_BRACES = re.compile(r"\{[^}]*\}")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*(?![\w:])")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "start", "end"}


def metric_names(expr: str) -> set[str]:
    """The metric names (and recorded series names) that `expr` selects."""
    text = _STRING.sub('""', expr)
    text = _LABEL_LIST.sub(" ", text)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name = match.group(0)
        if name.lower() in _KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(name)
    return names
