"""The connector's decoding of JSON record values into Arrow batches (spark/kafka_io.py), which
needs no Spark session: the lag report reads telemetry this way."""

from __future__ import annotations

import json

from gregor.lagreport.fields import TELEMETRY_FIELDS
from gregor.spark.kafka_io import arrow_schema_of, json_batches


def test_telemetry_values_that_are_not_records_are_skipped():
    def parse(values):
        return [r for b in json_batches([v for v in values if v is not None], arrow_schema_of(TELEMETRY_FIELDS))
                for r in b.to_pylist()]

    good = {"ts": 5, "broker": 0, "broker_start": 1, "group": "g", "topic": "t", "partition": 2, "messages": 9,
            "bytes": 90, "committed": 7, "log_end": 9, "lag": 2, "time_lag_s": 0.5, "state": "Stable", "members": 1,
            "commit_ts": 4, "added_later": True}
    older = {k: v for k, v in good.items() if k not in ("members", "commit_ts", "added_later")}
    rows = parse([json.dumps(good).encode(), None, json.dumps(older).encode()])
    # fields a record does not carry (older writers; the share groups' on consumer rows) are null
    assert rows[0] == {**dict.fromkeys(name for name, _ in TELEMETRY_FIELDS),
                       **{k: v for k, v in good.items() if k != "added_later"}}
    assert rows[0]["kind"] is None and rows[0]["redelivered"] is None
    assert rows[1]["members"] is None and rows[1]["commit_ts"] is None and rows[1]["lag"] == 2
    rows = parse([b"not json", json.dumps(good).encode(), b'{"ts": "soon"}', b"[1]"])
    assert [r["group"] for r in rows] == ["g"]
