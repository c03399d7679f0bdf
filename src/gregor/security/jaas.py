"""Kafka's JAAS configuration strings (``sasl.jaas.config``):
``<LoginModule class> <required|requisite|sufficient|optional> key="value" ... ;``. Values are
quoted (backslash escapes) or bare words."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<semi>;)|(?P<key>[A-Za-z0-9_.\-]+)\s*=\s*'
                    r'(?:"(?P<q>(?:\\.|[^"\\])*)"|(?P<bare>[^\s;"]+)))')


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas(text: str) -> list[LoginModule]:
    modules: list[LoginModule] = []
    s = text.strip()
    i = 0
    while i < len(s):
        m = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+([A-Za-z]+)").match(s, i)
        if not m:
            if s[i:].strip():
                raise JaasError(f"sasl.jaas.config: expected '<LoginModule> required ...;' at {s[i:][:40]!r}")
            break
        name, flag = m.group(1), m.group(2).lower()
        if flag not in _FLAGS:
            raise JaasError(f"sasl.jaas.config: {flag!r} is not one of {', '.join(_FLAGS)}")
        i = m.end()
        options: dict[str, str] = {}
        while True:
            t = _TOKEN.match(s, i)
            if not t:
                raise JaasError(f"sasl.jaas.config: expected key=\"value\" or ';' at {s[i:][:40]!r}")
            i = t.end()
            if t.group("semi"):
                break
            value = t.group("q")
            if value is not None:
                value = re.sub(r"\\(.)", r"\1", value)
            else:
                value = t.group("bare")
            options[t.group("key")] = value
        modules.append(LoginModule(name, flag, options))
        while i < len(s) and s[i].isspace():
            i += 1
    if not modules:
        raise JaasError("sasl.jaas.config: no login module")
    return modules
