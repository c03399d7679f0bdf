"""``gregor lag-report``: a Spark job over the broker's consumption telemetry
(``__gregor_telemetry``) and ``__consumer_offsets``, producing lag and time-lag series,
consumption rates, Burrow-style statuses (:mod:`gregor.lagreport.rules`), Parquet tables, a
self-contained HTML report and a terminal summary."""
