"""Broker metrics and their Prometheus exposition (``metrics.listener``).

The hot paths only bump plain counters: a fetch adds messages and bytes per (group, topic,
partition), a request adds one to its API's count and its latency to a sum. Everything else is
computed when Prometheus scrapes: group state, members, generation, committed offsets, log end
offsets and lag come from the coordinator's and the logs' own state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from gregor.coordinator.group.api import CommittedOffset, GroupPhase, GroupSteering, GroupSummary
from gregor.metrics.attribution import ConnectionTally, GroupAttribution, MembersView
from gregor.metrics.share_groups import ShareMetrics
from gregor.metrics.time_lag import OffsetHistory
from gregor.metrics.transactions import TransactionMetrics
from gregor.protocol.api_keys import ApiKey

FetchPosition = tuple[str, int, int]  # topic, partition, fetch offset


class GroupsView(MembersView, Protocol):
    """What metrics read of the coordinator (GroupCoordinatorService provides it)."""

    def group_summaries(self, include_followed: bool = False) -> Iterable[GroupSummary]: ...
    def committed_offsets(self) -> Iterable[CommittedOffset]: ...
    def load_seconds(self) -> dict[int, float]: ...
    def group_phases(self) -> Iterable[GroupPhase]: ...
    def group_steerings(self) -> Iterable[GroupSteering]: ...


class LogsView(Protocol):
    """What metrics read of the logs (LogManager provides it)."""

    def high_watermark(self, topic: str, partition: int) -> int | None: ...
    def high_watermarks(self) -> Iterable[tuple[str, int, int]]: ...


class BrokerMetrics(Collector):
    """``connections()`` counts the open client connections; ``transactions``: the transaction
    coordinator's and the last stable offsets' series (metrics/transactions.py)."""

    def __init__(self, groups: GroupsView, logs: LogsView, connections: Callable[[], int],
                 transactions: TransactionMetrics | None = None) -> None:
        self.groups = groups
        self.logs = logs
        self.connections = connections
        self.transactions = transactions
        self.shares: ShareMetrics | None = None  # set once share delivery is built (metrics/share_groups.py)
        self.attribution = GroupAttribution(groups)
        self.requests: dict[int, list[float]] = {}  # api key -> [count, seconds]
        self.history = OffsetHistory()
        self.bytes_out = 0
        self.authentications = [0, 0]  # SASL: [succeeded, failed]
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- hot-path hooks ----------------------------------------------------------------------
    def attribute_fetch(self, client_id: str, host: str, positions: list[FetchPosition],
                        connection: dict[Any, Any]) -> ConnectionTally | None:
        """A consumer's fetch of ``positions`` arrives on a connection: binds the connection to a
        group member (metrics/attribution.py); its tally counts what the fetch serves."""
        if not positions:
            return None
        tally = self.attribution.connection(client_id, host, connection)
        self.attribution.attribute(tally, positions)
        return tally

    def account_fetch(self, tally: ConnectionTally | None, positions: list[FetchPosition],
                      served: Iterable[tuple[str, int, int, int]]) -> None:
        """Count what a fetch served ((topic, partition, messages, bytes)) on its connection."""
        if tally is None:
            return
        starts = {(t, p): offset for t, p, offset in positions}
        account = self.attribution.account
        for topic, partition, messages, nbytes in served:
            offset = starts.get((topic, partition))
            if offset is None:  # not attributed (an internal topic)
                continue
            account(tally, topic, partition, offset, messages, nbytes)
            self.bytes_out += nbytes

    @property
    def consumed(self) -> dict[tuple[str, str, int], list[int]]:
        """(group, topic, partition) -> [messages, bytes] fetched since the broker started."""
        return self.attribution.consumed()

    def authentication(self, succeeded: bool) -> None:
        self.authentications[0 if succeeded else 1] += 1

    def request(self, api_key: int, seconds: float) -> None:
        r = self.requests.get(api_key)
        if r is None:
            self.requests[api_key] = [1, seconds]
        else:
            r[0] += 1
            r[1] += seconds

    def sample_offsets(self) -> None:
        """Called every second: the log end offsets that time lag is estimated from."""
        now = time.time()
        for topic, partition, hw in self.logs.high_watermarks():
            if not topic.startswith("__"):
                self.history.sample((topic, partition), hw, now)

    # -- scrape ------------------------------------------------------------------------------
    def _phases(self, now: float) -> Iterator[Any]:
        phase = GaugeMetricFamily("gregor_group_phase", "1 for the consumer-protocol group's phase (Stable, "
                                  "Closing: members still revoking, Starting: members not yet holding or "
                                  "confirming what they were given, Assigning, Empty)", labels=["group", "phase"])
        phase_s = GaugeMetricFamily("gregor_group_state_seconds", "Seconds since the consumer-protocol group's "
                                    "state last changed", labels=["group"])
        holding = GaugeMetricFamily("gregor_group_member_holding_seconds", "Seconds a member has held its group "
                                    "outside Stable, with what it has not done yet",
                                    labels=["group", "member", "client_id", "waiting_for"])
        for p in self.groups.group_phases():
            phase.add_metric([p.group_id, p.phase], 1)
            if p.since_ms >= 0:
                phase_s.add_metric([p.group_id], max(now - p.since_ms / 1000, 0.0))
            for member, client, why, since in p.holders:
                holding.add_metric([p.group_id, member, client, why], max(now - since / 1000, 0.0) if since >= 0 else 0)
        yield from (phase, phase_s, holding)

    def _steerings(self) -> Iterator[Any]:
        pins = GaugeMetricFamily("gregor_group_steering_pins", "Pinned partitions of the consumer-protocol group "
                                 "by what its last target assignment made of them (pinned: held by their member; "
                                 "waiting: unassigned until their member is back; fell_back: given to the others "
                                 "meanwhile)", labels=["group", "state"])
        isolated = GaugeMetricFamily("gregor_group_steering_isolated_members", "Members of the group isolated by "
                                     "its operator: in the group, assigned nothing", labels=["group"])
        frozen = GaugeMetricFamily("gregor_group_steering_frozen", "1 while the group's assignment is frozen",
                                   labels=["group"])
        held = GaugeMetricFamily("gregor_group_steering_held_back_members", "Members that joined the frozen group "
                                 "and get nothing until it is unfrozen", labels=["group"])
        for st in self.groups.group_steerings():
            for state, n in (("pinned", st.pinned), ("waiting", st.waiting), ("fell_back", st.fell_back)):
                pins.add_metric([st.group_id, state], n)
            isolated.add_metric([st.group_id], st.isolated)
            frozen.add_metric([st.group_id], 1 if st.frozen else 0)
            held.add_metric([st.group_id], st.held_back)
        yield from (pins, isolated, frozen, held)

    def collect(self) -> Iterator[Any]:
        auth = CounterMetricFamily("gregor_sasl_authentications", "SASL authentications, by result",
                                   labels=["result"])
        auth.add_metric(["success"], self.authentications[0])
        auth.add_metric(["failure"], self.authentications[1])
        yield auth
        labels = ["group", "topic", "partition"]
        msgs = CounterMetricFamily("gregor_group_consumed_messages", "Messages fetched by consumer groups "
                                   "(group __no_group__: consumers outside any group)", labels=labels)
        byts = CounterMetricFamily("gregor_group_consumed_bytes", "Bytes fetched by consumer groups", labels=labels)
        for (gid, topic, partition), (m, b) in sorted(self.consumed.items()):
            msgs.add_metric([gid, topic, str(partition)], m)
            byts.add_metric([gid, topic, str(partition)], b)
        yield msgs
        yield byts
        corrections = CounterMetricFamily("gregor_group_attribution_corrections", "Connections whose fetches "
                                          "were moved to another group as the evidence grew (their counts "
                                          "moved with them)")
        corrections.add_metric([], self.attribution.corrections)
        yield corrections
        committed = GaugeMetricFamily("gregor_group_committed_offset", "Committed offset", labels=labels)
        end = GaugeMetricFamily("gregor_group_log_end_offset", "Log end offset of committed partitions", labels=labels)
        lag = GaugeMetricFamily("gregor_group_lag", "Messages between the committed offset and the log end",
                                labels=labels)
        time_lag = GaugeMetricFamily("gregor_group_time_lag_seconds", "How long ago the log end passed the "
                                     "committed offset (interpolated from log end history)", labels=labels)
        now = time.time()
        state = GaugeMetricFamily("gregor_group_state", "1 for the group's current state", labels=["group", "state"])
        members = GaugeMetricFamily("gregor_group_members", "Members of the group", labels=["group"])
        generation = GaugeMetricFamily("gregor_group_generation", "Generation of the group", labels=["group"])
        rebalances = CounterMetricFamily("gregor_group_rebalances", "Rebalances completed since the group was "
                                         "loaded on this broker", labels=["group"])
        rebalance_s = GaugeMetricFamily("gregor_group_last_rebalance_seconds", "Duration of the last completed "
                                        "rebalance (PreparingRebalance to the new generation)", labels=["group"])
        for g in self.groups.group_summaries():
            state.add_metric([g.group_id, g.state], 1)
            members.add_metric([g.group_id], g.members)
            generation.add_metric([g.group_id], g.generation)
            rebalances.add_metric([g.group_id], g.rebalances)
            if g.last_rebalance_ms >= 0:
                rebalance_s.add_metric([g.group_id], g.last_rebalance_ms / 1000)
        for c in self.groups.committed_offsets():
            lv = [c.group_id, c.topic, str(c.partition)]
            committed.add_metric(lv, c.offset)
            hw = self.logs.high_watermark(c.topic, c.partition)
            if hw is not None:
                end.add_metric(lv, hw)
                lag.add_metric(lv, max(hw - c.offset, 0))
                time_lag.add_metric(lv, self.history.time_lag((c.topic, c.partition), c.offset, hw, now))
        yield from (committed, end, lag, time_lag, state, members, generation, rebalances, rebalance_s)
        yield from self._phases(now)
        yield from self._steerings()
        reqs = SummaryMetricFamily("gregor_request_seconds", "Requests handled, by API", labels=["api"])
        for api, (count, seconds) in sorted(self.requests.items()):
            name = ApiKey(api).name if api in ApiKey._value2member_map_ else str(api)
            reqs.add_metric([name], int(count), seconds)
        yield reqs
        conns = GaugeMetricFamily("gregor_connections", "Open client connections")
        conns.add_metric([], self.connections())
        yield conns
        out = CounterMetricFamily("gregor_fetch_bytes", "Record bytes served by Fetch")
        out.add_metric([], self.bytes_out)
        yield out
        loads = GaugeMetricFamily("gregor_coordinator_load_seconds", "Time the last load of each "
                                  "__consumer_offsets partition took", labels=["partition"])
        for p, seconds in self.groups.load_seconds().items():
            loads.add_metric([str(p)], seconds)
        yield loads
        if self.transactions is not None:
            yield from self.transactions.collect()
        if self.shares is not None:
            yield from self.shares.collect()
