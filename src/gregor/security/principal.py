"""Principals: ``User:<name>`` as Kafka's KafkaPrincipal, and Kafka's SSL principal mapping
(``ssl.principal.mapping.rules``: ``DEFAULT`` keeps the distinguished name;
``RULE:pattern/replacement/[LU]`` rewrites a name the Java pattern matches wholly, optionally
lower- or upper-cased; the first rule that matches wins, none matching is an error)."""

from __future__ import annotations

import re
from dataclasses import dataclass

USER = "User"
ANONYMOUS = "ANONYMOUS"


@dataclass(frozen=True, slots=True)
class Principal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS_USER = Principal(USER, ANONYMOUS)


class MappingRuleError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""


def _java_replacement(replacement: str) -> str:
    """Java's $1 group references as Python's \\g<1>; backslash escapes kept literal."""
    out, i = [], 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            out.append(f"\\g<{replacement[i + 1:j]}>")
            i = j
        else:
            out.append(c.replace("\\", "\\\\"))
            i += 1
    return "".join(out)


def parse_rules(text: str) -> list[_Rule]:
    """Kafka's rule list: rules separated by commas (inside a pattern or replacement, a slash or
    backslash is escaped with a backslash)."""
    rules: list[_Rule] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\n,":
            i += 1
        if i >= n:
            break
        if text.startswith("DEFAULT", i):
            rules.append(_Rule(True))
            i += len("DEFAULT")
            continue
        if not text.startswith("RULE:", i):
            raise MappingRuleError(f"ssl.principal.mapping.rules: expected DEFAULT or RULE: at {text[i:]!r}")
        i += len("RULE:")
        parts = []
        for _ in range(2):
            start, buf = i, []
            while i < n and text[i] != "/":
                if text[i] == "\\" and i + 1 < n:
                    buf.append(text[i:i + 2])
                    i += 2
                    continue
                buf.append(text[i])
                i += 1
            if i >= n:
                raise MappingRuleError(f"ssl.principal.mapping.rules: unterminated rule at {text[start:]!r}")
            parts.append("".join(buf))
            i += 1  # the slash
        case = ""
        if i < n and text[i] in "LU":
            case = text[i]
            i += 1
        try:
            pattern = re.compile(parts[0].replace("\\/", "/"))
        except re.error as e:
            raise MappingRuleError(f"ssl.principal.mapping.rules: bad pattern {parts[0]!r}: {e}") from None
        rules.append(_Rule(False, pattern, _java_replacement(parts[1].replace("\\/", "/")), case))
    return rules or [_Rule(True)]


class SslPrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = parse_rules(rules)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            if rule.default:
                return distinguished_name
            assert rule.pattern is not None
            if rule.pattern.fullmatch(distinguished_name):
                out = rule.pattern.sub(rule.replacement, distinguished_name, count=1)
                return out.lower() if rule.case == "L" else out.upper() if rule.case == "U" else out
        raise MappingRuleError(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")
