"""Subscriptions by regular expression (KIP-848's SubscribedTopicRegex): validation with RE2/J's
verdicts and descriptions, resolution against the topic catalogue and its cache, the
ConsumerGroupRegularExpression records, and, once ``subscriptions.py`` is integrated in the
consumer-group manager, groups on a shard without network: a member's regex resolved by a refresh
after its heartbeat, new topics picked up without the clients doing anything, refreshes batched,
unused regexes tombstoned, reload equality."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from gregor.coordinator.group import subscriptions
from gregor.coordinator.group.api import ConsumerHeartbeatRequest
from gregor.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember
from gregor.coordinator.group.subscriptions import (
    REFRESH_INTERVAL_MS,
    REFRESH_MIN_INTERVAL_MS,
    CatalogueSnapshot,
    RegexResolver,
    ResolvedRegex,
    TopicCatalogue,
    catalogue_version,
    regex_record,
    regex_tombstone,
    resolved_from,
    subscribed_topic_ids,
    subscribed_topics,
    syntax_error,
    validate,
)
from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.protocol.consumer_offsets import (
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from tests.coordinator.consumer_clients import Client, ConsumerHarness, assert_disjoint, converge

# -- RE2/J 1.8 (Kafka 4.x's engine) on a corpus of patterns ----------------------------------------
# What com.google.re2j.Pattern.compile(p) said of each pattern: "= i,j" the indexes in NAMES of the
# names matcher(name).matches() accepts, "! d" the PatternSyntaxException's getDescription().
# Produced by running RE2/J 1.8 itself; the pattern is everything before the tab.
NAMES = ['foo', 'bar', 'foo1', 'foo-1', 'bar-22', 'FOO', 'Foo', 'foobar', 'foo.bar', 'foo_bar', 'foo-bar', 'a',
         'ab', 'abc', 'aab', 'b', 'bb', '', '__consumer_offsets', '__transaction_state', '_foo', 'x', 'xx', 'xxx',
         'xxxx', '1', '12', 'a.b', 'a-b', 'aaab', 'abbbc', 'ac', 'AbC', 'caf', 'cafe', 'café']
RE2J = r"""
foo.*	= 0,2,3,7,8,9,10
foo	= 0
.*	= 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35
^foo.*$	= 0,2,3,7,8,9,10
foo|bar	= 0,1
(foo|bar)-[0-9]+	= 3,4
a(b	! missing closing )
(a)\1	! invalid escape sequence
(?=a)	! invalid or unsupported Perl syntax
(?!a)	! invalid or unsupported Perl syntax
(?<=a)b	! invalid named capture
(?<!a)b	! invalid named capture
[z-a]	! invalid character class range
a**	! invalid nested repetition operator
a++	! invalid nested repetition operator
a*?	= 11,17
a+?	= 11
x{2,1}	! invalid repeat count
x{2,}	= 22,23,24
x{,3}	=
x{3}	= 23
a{1001}	! invalid repeat count
a{1000}	=
\8	! invalid escape sequence
\0	=
\01	=
\123	=
\C	! invalid escape sequence
\Qa.b\E	= 27
\Qa.b	= 27
(?i)FOO	= 0,5,6
(?i:FOO)-.*	= 3,10
(?m)^foo$	= 0
(?U)a+	= 11
(?x) foo	! invalid or unsupported Perl syntax
(?#comment)foo	! invalid or unsupported Perl syntax
(?P<n>foo)	= 0
(?<n>foo)	= 0
(?P=n)	! invalid or unsupported Perl syntax
(?P<n>a)(?P<n>b)	! duplicate capture group name
(?P<>a)	! invalid named capture
(?P<1a>a)	= 11
\pL+	= 0,1,5,6,7,11,12,13,14,15,16,21,22,23,24,29,30,31,32,33,34,35
\p{L}+	= 0,1,5,6,7,11,12,13,14,15,16,21,22,23,24,29,30,31,32,33,34,35
\p{Greek}	=
\p{Foo}	! invalid character class range
\PL	= 25
\pN+	= 25,26
[[:alpha:]]+	= 0,1,5,6,7,11,12,13,14,15,16,21,22,23,24,29,30,31,32,33,34
[[:word:]]+	= 0,1,2,5,6,7,9,11,12,13,14,15,16,18,19,20,21,22,23,24,25,26,29,30,31,32,33,34
[[:foo:]]	! invalid character class range
[[:^alpha:]]+	= 25,26
\d+	= 25,26
\D	= 11,15,21
\w+	= 0,1,2,5,6,7,9,11,12,13,14,15,16,18,19,20,21,22,23,24,25,26,29,30,31,32,33,34
\W	=
\s	=
\S	= 11,15,21,25
\b	=
\B	= 17
\A	= 17
\z	= 17
\Z	! invalid escape sequence
\G	! invalid escape sequence
\x41	=
\x{41}	=
\x{110000}	! invalid escape sequence
\x{zz}	! invalid escape sequence
\cA	! invalid escape sequence
\e	! invalid escape sequence
\a	=
\f	=
\v	=
\t	=
\n	=
\r	=
\R	! invalid escape sequence
\h	! invalid escape sequence
\H	! invalid escape sequence
\X	! invalid escape sequence
\K	! invalid escape sequence
\N	! invalid escape sequence
\l	! invalid escape sequence
\u0041	! invalid escape sequence
\uFFFF	! invalid escape sequence
a\	! trailing backslash at end of expression
\	! trailing backslash at end of expression
(	! missing closing )
)	! regexp/syntax: internal error
a)	! regexp/syntax: internal error
(a))	! regexp/syntax: internal error
(a)b)	! regexp/syntax: internal error
[a	! missing closing ]
]a	=
[]a]	= 11
[^]a]	= 15,21,25
[a-]	= 11
[-a]	= 11
[\d-z]	= 25
[a-\d]	! invalid escape sequence
a|	= 11,17
|a	= 11,17
()	= 17
(?:)	= 17
(?)	= 17
(?i	! invalid or unsupported Perl syntax
(?z)	! invalid or unsupported Perl syntax
(?i)(?-i)foo	= 0
(?-i:FOO)	= 5
*a	! missing argument to repetition operator
+a	! missing argument to repetition operator
?a	! missing argument to repetition operator
{1}a	! missing argument to repetition operator
a{1	=
a{a}	=
a{1,2	=
.{0}	= 17
x*+	! invalid nested repetition operator
x?*	! invalid nested repetition operator
(?:a*)*	= 11,17
(a*)+	= 11,17
[\Q]\E]	! invalid escape sequence
\Q\E	= 17
\Qab\Efoo	=
^	= 17
$	= 17
^$	= 17
.	= 11,15,21,25
..	= 12,16,22,26,31
a.b	= 14,27,28
foo\.bar	= 8
foo\-bar	= 10
foo\_bar	= 9
foo\@bar	=
foo\ bar	=
foo\#	=
\/	=
\"	=
\'	=
\%	=
\&	=
\~	=
\`	=
\=	=
\<	=
\>	=
\!	=
\,	=
\:	=
\;	=
\}	=
\{	=
\]	=
\[	=
\|	=
\^	=
\$	=
\*	=
\+	=
\?	=
\(	=
\)	=
\.	=
\\	=
[[:alpha:]-z]	= 11,15,21
[a-[:digit:]]	! invalid character class range
[\p{L}]	= 11,15,21
[\pL-z]	= 11,15,21
(?i)[a-z]+	= 0,1,5,6,7,11,12,13,14,15,16,21,22,23,24,29,30,31,32,33,34
[[.a.]]	=
[[=a=]]	=
(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10	=
ab{0,}c	= 13,30,31
a{0}	= 17
a{,}	=
a{}	=
x{1}{2}	! invalid nested repetition operator
x{1}*	! invalid nested repetition operator
(?:x{1})*	= 17,21,22,23,24
é	=
caf[é]	= 35
\p{Han}	=
\p{^Greek}	= 11,15,21,25
\P{^Greek}	=
\pZ	=
\p	! invalid character class range
\p{	! invalid character class range
[	! missing closing ]
[^	! missing closing ]
[]	! missing closing ]
[^]	! missing closing ]
a[]b	! missing closing ]
[a-z]{1000}[a-z]{1000}[a-z]{1000}	=
(\w+\s*){1000}	=
\Cfoo	! invalid escape sequence
\\C	=
\Q\C\E	=
(?i)\C	! invalid escape sequence
(?P<n>a)\Q(?P<n>\E	=
(?P<n>a)[(?P<n>b)]	= 12
(?P<n>a)\(?P<n>b)	! regexp/syntax: internal error
\\(?P<n>a)(?P<n>b)	! duplicate capture group name
x{1000,}	=
x{0,1000}	= 17,21,22,23,24
(?U)x*?	= 17,21,22,23,24
\z\A	= 17
\pN{2}	= 26
[[:word:][:^space:]]	= 11,15,21,25
\p{Braille}	=
\p{Zzzz}	! invalid character class range
\p{Any}	= 11,15,21,25
\P{Any}	=
(?i)é	=
\x{FFFF}	=
\x{D800}	=
(?P<n_1>x)	= 21
(?P<N>x)(?P<n>y)	=
(?P<_>x)	= 21
(?P<1>x)	= 21
(?P<n>x)(?:(?P<n>y))	! duplicate capture group name
(?P<ab>x)(?P<a>y)	=
a{2}{3}	! invalid nested repetition operator
(a{500}){3}	=
(a{100}){10}	=
(a{100}){11}	=
(?:a{10}){100}	=
(?:a{10}){101}	=
[a-z]{1,1000}[0-9]{1,1000}	= 2
(?i)(?P<x>\pL{1,500}){2}	= 0,1,5,6,7,12,13,14,16,22,23,24,29,30,31,32,33,34,35
[\C]	! invalid escape sequence
((a{1000}){1000})	=
(?:a{1000}){2}	=
(?P<n>a)|(?<n>b)	! duplicate capture group name
\Q(?P<n>\E(?P<n>a)	=
[(?P<n>](?P<n>a)	=
(?P<n>a)(?P<m>b)	= 12
(?<n>a)(?P<n>b)	! duplicate capture group name
(?P<a-b>x)	! invalid named capture
(?P<é>x)	! invalid named capture
"""
# RE2/J compiles these; RE2 refuses nested counted repetitions over 1,000 in total and programs
# over its memory budget (RE2/J runs out of heap on (?:(?:a{1000}){1000}){1000})
RE2_STRICTER = {"(a{500}){3}", "(a{100}){11}", "(?:a{10}){101}", r"(?i)(?P<x>\pL{1,500}){2}", "((a{1000}){1000})",
                "(?:a{1000}){2}"}


def _reference() -> list[tuple[str, str | None, set[str] | None]]:
    rows = []
    for line in RE2J.strip("\n").split("\n"):
        pattern, _, verdict = line.partition("\t")
        if verdict.startswith("!"):
            rows.append((pattern, verdict[2:], None))
        else:
            indexes = verdict[2:]
            rows.append((pattern, None, {NAMES[int(i)] for i in indexes.split(",")} if indexes else set()))
    return rows


@pytest.mark.parametrize(("pattern", "description", "matches"), _reference())
def test_same_verdict_description_and_matches_as_re2j(pattern, description, matches):
    if pattern in RE2_STRICTER:
        assert description is None and syntax_error(pattern) is not None
        return
    assert syntax_error(pattern) == description
    if matches is not None:
        match = subscriptions.matcher(pattern)
        assert match is not None
        assert {n for n in NAMES if match(n)} == matches


def test_invalid_regex_is_refused_with_kafkas_message():
    with pytest.raises(KafkaError) as e:
        validate("foo(")
    assert e.value.code == ErrorCode.invalid_regular_expression
    assert e.value.message == "SubscribedTopicRegex `foo(` is not a valid regular expression: missing closing )."
    for refused in [r"(a)\1", "(?=x)", r"\C", "(?P<n>a)(?P<n>b)"]:  # backreference, lookaround, RE2/J's own
        with pytest.raises(KafkaError):
            validate(refused)
    validate("orders-.*")  # fine


def test_a_regex_matches_whole_names_only():
    match = subscriptions.matcher("orders")
    assert match is not None and match("orders") and not match("orders-eu") and not match("old-orders")


# -- the catalogue and the resolver -------------------------------------------------------------------
def test_catalogue_leaves_internal_topics_out_and_versions_by_content():
    topics = {"a": 1, "b": 1, "__consumer_offsets": 1, "__gregor_telemetry": 1}
    cat = TopicCatalogue(topics.keys, recheck_ms=0)
    snap = cat.snapshot()
    assert snap.names == {"a", "b"} and snap.version == catalogue_version(["b", "a"])
    assert cat.snapshot() is snap  # nothing changed: the same snapshot
    topics["__transaction_state"] = 1
    assert cat.snapshot().version == snap.version  # internal topics do not count
    topics["c"] = 1
    assert cat.snapshot().names == {"a", "b", "c"} and cat.snapshot().version != snap.version
    del topics["c"]
    assert cat.snapshot().version == snap.version  # a version is what the names are, not a counter


def test_catalogue_looks_again_only_after_recheck_ms():
    now = [0.0]
    topics = {"a": 1}
    cat = TopicCatalogue(topics.keys, recheck_ms=1000, clock=lambda: now[0])
    assert cat.snapshot().names == {"a"}
    topics["b"] = 1
    assert cat.snapshot().names == {"a"}
    now[0] = 1.0
    assert cat.snapshot().names == {"a", "b"}


def test_resolver_evaluates_a_regex_once_per_catalogue_and_then_only_new_topics():
    resolver = RegexResolver()
    names = frozenset(f"orders-{i}" for i in range(1000)) | frozenset(f"payments-{i}" for i in range(1000))
    snap = CatalogueSnapshot(catalogue_version(names), names)
    for _ in range(1000):  # a thousand members (or groups) with one regex: one evaluation
        topics = resolver.resolve("orders-.*", snap)
    assert len(topics) == 1000 and resolver.matched == 2000
    grown = names | {"orders-new", "other"}
    topics = resolver.resolve("orders-.*", CatalogueSnapshot(catalogue_version(grown), grown))
    assert "orders-new" in topics and len(topics) == 1001 and resolver.matched == 2002
    shrunk = grown - {"orders-0"}
    topics = resolver.resolve("orders-.*", CatalogueSnapshot(catalogue_version(shrunk), shrunk))
    assert "orders-0" not in topics and len(topics) == 1000 and resolver.matched == 2002


def test_resolver_cache_is_bounded_and_ignores_regexes_it_cannot_compile(caplog):
    resolver = RegexResolver(max_entries=2)
    snap = CatalogueSnapshot(1, frozenset({"a", "b"}))
    for regex in ["a", "b", ".*"]:
        resolver.resolve(regex, snap)
    assert len(resolver._cache) == 2
    assert resolver.resolve("(a{100}){11}", snap) == frozenset()  # RE2/J would take it (a record Kafka wrote)
    assert "Couldn't parse regular expression" in caplog.text


# -- records and subscriptions ------------------------------------------------------------------------
def test_records_are_kafkas_and_read_back():
    resolved = ResolvedRegex(frozenset({"b", "a"}), -42, 1_700_000_000_000)
    key, value = regex_record("g", "^a.*", resolved)
    assert key == ConsumerGroupRegularExpressionKey("g", "^a.*")
    assert value == ConsumerGroupRegularExpressionValue(topics=["a", "b"], version=-42, timestamp=1_700_000_000_000)
    k = decode_key(encode_key(key))
    assert k == key and resolved_from(decode_value(k, encode_value(value))) == resolved
    assert regex_tombstone("g", "^a.*") == (key, None)


def test_members_subscribe_to_their_names_and_their_regexs_topics_counted_once():
    ids = {name: (uuid.UUID(int=i + 1), 3) for i, name in enumerate(["a1", "a2", "b", "c"])}
    resolved = {"a.*": ResolvedRegex(frozenset({"a1", "a2"}), 1, 0)}
    members = {"m1": ConsumerMember("m1", subscribed_topic_regex="a.*"),
               "m2": ConsumerMember("m2", subscribed_topic_names=("b",), subscribed_topic_regex="a.*"),
               "m3": ConsumerMember("m3", subscribed_topic_names=("c",)),
               "m4": ConsumerMember("m4", subscribed_topic_regex="z.*")}  # not resolved yet: nothing
    assert subscribed_topics(members.values(), resolved) == {"a1", "a2", "b", "c"}
    subscribed = subscribed_topic_ids(members, resolved, ids)
    assert subscribed == {"m1": {ids["a1"][0], ids["a2"][0]}, "m2": {ids["a1"][0], ids["a2"][0], ids["b"][0]},
                          "m3": {ids["c"][0]}, "m4": frozenset()}
    many = {f"m{i}": ConsumerMember(f"m{i}", subscribed_topic_regex="a.*") for i in range(100)}
    assert len({id(s) for s in subscribed_topic_ids(many, resolved, ids).values()}) == 1  # one shared set


# -- on a shard (needs subscriptions.py integrated in the consumer-group manager) ----------------------
INTEGRATED = "resolved_regexes" in getattr(ConsumerGroup, "__dataclass_fields__", {})
on_shard = pytest.mark.skipif(not INTEGRATED, reason="subscriptions.py is not integrated in the manager yet")

CATALOGUE = {"orders-eu": (uuid.UUID(int=11), 4), "orders-us": (uuid.UUID(int=12), 2),
             "payments": (uuid.UUID(int=13), 3), "__consumer_offsets": (uuid.UUID(int=14), 50)}


class RegexHarness(ConsumerHarness):
    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]] | None = None, **config: Any) -> None:
        self.resolver = RegexResolver()
        super().__init__(dict(CATALOGUE) if topics is None else topics, **config)

    def _collaborators(self) -> Any:
        from dataclasses import replace

        return replace(super()._collaborators(), catalogue=TopicCatalogue(self.catalogue.keys, recheck_ms=0))

    def _new_shard(self, timer: Any) -> Any:
        shard = super()._new_shard(timer)
        shard.consumer_mgr.regexes.resolver = self.resolver
        return shard

    def refresh(self) -> list[Any]:
        """Run the refresh a heartbeat scheduled (a timer with delay 0); the records it wrote."""
        return self.sleep(0)

    def regex_records(self, records: list[Any]) -> dict[str, Any]:
        return {k.regular_expression: v for k, v in records if isinstance(k, ConsumerGroupRegularExpressionKey)}


class RegexClient(Client):
    def __init__(self, h: ConsumerHarness, regex: str | None, topics: list[str] | None = None, **kw: Any) -> None:
        super().__init__(h, topics or [], **kw)
        self.regex = regex

    def request(self, epoch: int | None = None, full: bool = False, **changes: Any) -> ConsumerHeartbeatRequest:
        req = super().request(epoch, full, **changes)
        if (epoch == 0 or self.epoch == 0 or full) and "subscribed_topic_regex" not in changes:
            req.subscribed_topic_regex = self.regex if self.regex is not None else ""
        return req


def partitions_of(*topics: str, catalogue: dict[str, tuple[uuid.UUID, int]] = CATALOGUE) -> set[tuple[uuid.UUID, int]]:
    return {(catalogue[t][0], p) for t in topics for p in range(catalogue[t][1])}


def owned(clients: list[Client]) -> set[tuple[uuid.UUID, int]]:
    out: set[tuple[uuid.UUID, int]] = set()
    for c in clients:
        out |= c.partitions()
    return out


def regex_state(h: RegexHarness) -> tuple:
    g = h.group()
    return (g.group_epoch, g.assignment_epoch, dict(g.regex_subscribers), dict(g.resolved_regexes),
            dict(g.subscription_metadata), dict(g.target),
            {m.member_id: (m.member_epoch, m.assigned, m.pending_revocation, m.subscribed_topic_regex)
             for m in g.members.values()})


@on_shard
def test_a_regex_is_resolved_after_the_heartbeat_that_brings_it():
    h = RegexHarness()
    c = RegexClient(h, "orders-.*")
    r = c.beat()
    assert r.error == 0 and r.member_epoch == 1 and c.partitions() == set()  # Kafka: resolved asynchronously
    assert h.regex_records(h.last_records) == {}
    written = h.refresh()
    value = h.regex_records(written)["orders-.*"]
    assert value.topics == ["orders-eu", "orders-us"] and value.timestamp == h.clock.now_ms
    assert value.version == catalogue_version(["orders-eu", "orders-us", "payments"])
    assert [v.epoch for k, v in written if isinstance(k, ConsumerGroupMetadataKey)] == [2]  # a rebalance
    c.beat()
    assert c.epoch == 2 and c.partitions() == partitions_of("orders-eu", "orders-us")


@on_shard
def test_internal_topics_never_match():
    h = RegexHarness()
    c = RegexClient(h, ".*")
    c.beat()
    h.refresh()
    c.beat()
    assert h.group().resolved_regexes[".*"].topics == {"orders-eu", "orders-us", "payments"}
    assert c.partitions() == partitions_of("orders-eu", "orders-us", "payments")


@on_shard
def test_an_invalid_regex_is_refused_and_nothing_is_written():
    h = RegexHarness()
    c = RegexClient(h, "orders-(")
    r = c.beat()
    assert r.error == ErrorCode.invalid_regular_expression
    assert r.error_message == "SubscribedTopicRegex `orders-(` is not a valid regular expression: missing closing )."
    assert h.last_records == [] and "g" not in h.shard.consumer_groups
    ok = RegexClient(h, "orders-.*")
    ok.beat()
    bad = RegexClient(h, "orders-.*", member_id=ok.member_id)
    r = bad.beat(epoch=ok.epoch, subscribed_topic_regex="x{2,1}")  # a member that changes to an invalid one
    assert r.error == ErrorCode.invalid_regular_expression and "invalid repeat count" in r.error_message
    assert h.group().members[ok.member_id].subscribed_topic_regex == "orders-.*"


@on_shard
def test_a_thousand_members_with_one_regex_cost_one_evaluation():
    h = RegexHarness()
    clients = [RegexClient(h, "orders-.*") for _ in range(1000)]
    for c in clients:
        assert c.beat().error == 0
    h.refresh()
    for c in clients[:10]:
        c.beat()
    assert h.resolver.matched == 3  # the three visible topics, once
    g = h.group()
    assert g.regex_subscribers == {"orders-.*": 1000} and list(g.resolved_regexes) == ["orders-.*"]
    assert set(g.subscription_metadata) == {"orders-eu", "orders-us"}


@on_shard
def test_new_topics_are_picked_up_without_the_clients_doing_anything():
    h = RegexHarness()
    a, b = RegexClient(h, "orders-.*"), RegexClient(h, "orders-.*")
    a.beat()
    b.beat()
    h.refresh()
    converge([a, b])
    assert owned([a, b]) == partitions_of("orders-eu", "orders-us")
    h.catalogue["orders-apac"] = (uuid.UUID(int=15), 6)
    epoch = h.group().group_epoch
    h.clock.now_ms += REFRESH_MIN_INTERVAL_MS - 1
    a.beat()  # not yet: refreshes are at least 10 s apart
    assert h.refresh() == [] and h.group().group_epoch == epoch
    h.clock.now_ms += 2
    a.beat()  # an ordinary heartbeat: the catalogue changed, so a refresh is due
    written = h.refresh()
    assert h.regex_records(written)["orders-.*"].topics == ["orders-apac", "orders-eu", "orders-us"]
    assert h.group().group_epoch == epoch + 1
    converge([a, b])
    assert owned([a, b]) == partitions_of("orders-eu", "orders-us", "orders-apac", catalogue=h.catalogue)
    del h.catalogue["orders-us"]  # deleted topics leave at the next refresh
    h.clock.now_ms += REFRESH_MIN_INTERVAL_MS + 1
    b.beat()
    assert h.regex_records(h.refresh())["orders-.*"].topics == ["orders-apac", "orders-eu"]
    converge([a, b])
    assert owned([a, b]) == partitions_of("orders-eu", "orders-apac", catalogue=h.catalogue)


@on_shard
def test_refreshes_are_batched_and_repeat_after_the_refresh_interval():
    h = RegexHarness()
    a = RegexClient(h, "orders-.*")
    a.beat()
    h.refresh()
    b = RegexClient(h, "payments")
    b.beat()  # a new regex 0 s after the last refresh: it waits for the batch
    assert h.refresh() == [] and "payments" not in h.group().resolved_regexes
    h.clock.now_ms += REFRESH_MIN_INTERVAL_MS + 1
    a.beat()  # anyone's heartbeat past the mark resolves every regex of the group, in one write
    assert set(h.regex_records(h.refresh())) == {"orders-.*", "payments"}
    converge([a, b])
    assert b.partitions() == partitions_of("payments")
    h.clock.now_ms += REFRESH_MIN_INTERVAL_MS + 1
    a.beat()
    assert h.refresh() == []  # nothing changed
    h.clock.now_ms += REFRESH_INTERVAL_MS
    epoch = h.group().group_epoch
    b.beat()
    a.beat()
    written = h.refresh()  # the periodic refresh: records rewritten, no rebalance
    assert set(h.regex_records(written)) == {"orders-.*", "payments"} and h.group().group_epoch == epoch


@on_shard
def test_changing_to_a_resolved_regex_rebalances_at_once_and_the_old_one_is_tombstoned():
    h = RegexHarness()
    a, b = RegexClient(h, "orders-.*"), RegexClient(h, "payments")
    a.beat()
    b.beat()
    h.refresh()
    converge([a, b])
    epoch = h.group().group_epoch
    b.regex = "orders-.*"
    r = b.beat(full=True)
    assert r.error == 0 and h.group().group_epoch == epoch + 1
    assert h.regex_records(h.last_records) == {"payments": None}  # its last member left it
    assert list(h.group().resolved_regexes) == ["orders-.*"]
    converge([a, b])
    assert owned([a, b]) == partitions_of("orders-eu", "orders-us")
    assert_disjoint([a, b])


@on_shard
def test_names_and_a_regex_together_and_dropping_the_regex():
    h = RegexHarness()
    a = RegexClient(h, "orders-eu", topics=["payments"])
    a.beat()
    h.refresh()
    a.beat()
    assert a.partitions() == partitions_of("orders-eu", "payments")
    epoch = h.group().group_epoch
    a.regex = None  # sends "" : no regex any more
    a.beat(full=True)
    assert h.group().group_epoch == epoch + 1 and h.regex_records(h.last_records) == {"orders-eu": None}
    converge([a])
    assert a.partitions() == partitions_of("payments")


@on_shard
def test_leaving_and_fenced_members_take_their_unused_regex_with_them():
    h = RegexHarness()
    a, b, c = RegexClient(h, "orders-.*"), RegexClient(h, "orders-.*"), RegexClient(h, "payments")
    for x in (a, b, c):
        x.beat()
    h.refresh()
    converge([a, b, c])
    a.leave()
    assert h.regex_records(h.last_records) == {}  # b still uses it
    b.leave()
    assert h.regex_records(h.last_records) == {"orders-.*": None}
    h.sleep(60_000)  # c's session times out
    assert "payments" not in h.group().resolved_regexes and not h.group().members
    assert h.group().regex_subscribers == {}


@on_shard
def test_a_static_member_back_under_a_new_id_keeps_its_regex():
    h = RegexHarness()
    a = RegexClient(h, "orders-.*", instance="i1")
    a.beat()
    h.refresh()
    converge([a])
    held = a.partitions()
    a.leave(static=True)
    back = RegexClient(h, "orders-.*", instance="i1")
    r = back.beat()
    assert r.error == 0 and back.partitions() == held
    assert h.group().regex_subscribers == {"orders-.*": 1} and h.regex_records(h.last_records) == {}


@on_shard
def test_deleting_the_group_tombstones_its_regexes_before_its_metadata():
    h = RegexHarness()
    a = RegexClient(h, "orders-.*")
    a.beat()
    h.refresh()
    a.leave()
    h.run(CoordinatorResult([regex_record("g", "left-over", ResolvedRegex(frozenset(), 0, 0))]))
    result = h.shard.delete_groups(["g"])
    keys = [type(k).__name__ for k, _ in result.records]
    assert keys.index("ConsumerGroupRegularExpressionKey") < keys.index("ConsumerGroupMetadataKey")
    h.run(result)
    assert "g" not in h.shard.consumer_groups


@on_shard
def test_loading_the_records_gives_back_the_regexes():
    h = RegexHarness()
    cs = [RegexClient(h, "orders-.*"), RegexClient(h, "orders-.*", instance="s"), RegexClient(h, "payments")]
    for c in cs:
        c.beat()
    h.refresh()
    converge(cs)
    live = regex_state(h)
    h.reload()
    assert regex_state(h) == live
    h.catalogue["orders-new"] = (uuid.UUID(int=16), 1)
    h.clock.now_ms += REFRESH_MIN_INTERVAL_MS + 1
    cs[0].beat()  # the loaded records' version says the catalogue changed
    assert "orders-new" in h.regex_records(h.refresh())["orders-.*"].topics


@on_shard
@pytest.mark.parametrize("seed", range(8))
def test_random_regex_histories_never_give_a_partition_to_two_members(seed):
    rnd = random.Random(seed)
    h = RegexHarness()
    regexes = ["orders-.*", "payments", ".*", "orders-(eu|apac)", None]
    clients = [RegexClient(h, rnd.choice(regexes[:-1]), topics=rnd.choice([[], ["payments"]])) for _ in range(4)]
    next_topic = 20
    for _ in range(60):
        op = rnd.random()
        c = rnd.choice(clients)
        if op < 0.15:
            c.regex = rnd.choice(regexes)
            if c.regex is None and not c.topics:
                c.topics = ["payments"]
            c.beat(full=True)
        elif op < 0.25:
            h.catalogue[f"orders-{next_topic}"] = (uuid.UUID(int=next_topic), rnd.randint(1, 3))
            next_topic += 1
        elif op < 0.3:
            c.leave()
        elif op < 0.45:
            h.clock.now_ms += rnd.choice([1000, REFRESH_MIN_INTERVAL_MS + 1])
            h.refresh()
        else:
            c.beat()
        assert_disjoint(clients)
    h.clock.now_ms += REFRESH_MIN_INTERVAL_MS + 1
    for c in clients:
        c.beat()
    h.refresh()
    converge(clients, rounds=40)
    g = h.group()
    wanted = set()
    for c in clients:
        names = set(c.topics) | (g.resolved_regexes[c.regex].topics if c.regex else set())
        wanted |= {(h.catalogue[t][0], p) for t in names for p in range(h.catalogue[t][1])}
    assert owned(clients) == wanted
    assert set(g.resolved_regexes) == {c.regex for c in clients if c.regex}
    live = regex_state(h)
    h.reload()
    assert regex_state(h) == live
