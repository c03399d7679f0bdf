"""The columns of the records the lag report reads: telemetry samples (the broker's JSON, see
:mod:`gregor.metrics.telemetry`) and offset commits (decoded from ``__consumer_offsets``), as
(name, Spark type) pairs and as Spark DDL."""

TELEMETRY_FIELDS = (("ts", "long"), ("broker", "int"), ("broker_start", "long"), ("group", "string"),
                    ("topic", "string"), ("partition", "int"), ("messages", "long"), ("bytes", "long"),
                    ("committed", "long"), ("log_end", "long"), ("lag", "long"), ("time_lag_s", "double"),
                    ("state", "string"), ("members", "int"), ("commit_ts", "long"), ("kind", "string"),
                    ("redelivered", "long"), ("stuck", "long"), ("in_flight", "long"), ("archived", "long"),
                    ("dead_lettered", "long"))
COMMITS_FIELDS = (("group", "string"), ("topic", "string"), ("partition", "int"), ("offset", "long"),
                  ("commit_ts", "long"), ("metadata", "string"))
TELEMETRY_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in TELEMETRY_FIELDS)
COMMITS_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in COMMITS_FIELDS)
