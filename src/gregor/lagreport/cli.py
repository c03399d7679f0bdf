"""``gregor lag-report``: the Spark job, the HTML report and the terminal summary.

Runs Spark in local mode by default (``--master local[*]``); ``--master spark://host:7077``
runs the same job on a cluster. Exit codes: 0 after writing the report, 2 for bad arguments,
1 when the job fails (the cluster cannot be read, Spark cannot start).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from gregor.lagreport.job import OFFSETS_TOPIC, JobOptions
from gregor.protocol.telemetry_records import TELEMETRY_TOPIC

AGO = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def point_in_time(text: str) -> int:
    """Epoch ms from epoch ms, an ISO 8601 time (UTC when no zone is given), or ``<n>s|m|h|d`` ago."""
    if text.isdigit():
        return int(text)
    m = AGO.match(text)
    if m:
        return int((time.time() - int(m.group(1)) * UNITS[m.group(2)]) * 1000)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (epoch ms, ISO 8601, or 30m / 2h / 7d ago)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def window_size(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        raise argparse.ArgumentTypeError(f"the window is a number of samples, at least 2 (got {text!r})")
    return n


DURATION = re.compile(r"^(\d+)(ms|s|m|h)?$")
DURATION_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def duration_ms(text: str) -> int:
    """Milliseconds from ``500ms``, ``10s``, ``1m``, ``1h`` or a bare number of milliseconds."""
    m = DURATION.match(text.strip())
    ms = int(m.group(1)) * DURATION_MS[m.group(2)] if m else 0
    if ms < 1:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (for example 500ms, 10s, 1m)")
    return ms


def spark_conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_parser(sub: Any) -> None:
    p = sub.add_parser("lag-report", help="Spark job: lag, statuses and throughput from the telemetry history")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--command-config", type=Path, metavar="FILE",
                   help="Kafka client properties for the connections (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--out", type=Path, default=Path("lag-report"), help="output directory (default ./lag-report)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--window", type=window_size, default=10, help="samples per status window (default 10)")
    p.add_argument("--top", type=int, default=10, help="how many top lagging groups to list (default 10)")
    p.add_argument("--since", type=point_in_time, help="first sample: epoch ms, ISO 8601, or 30m/2h/7d ago")
    p.add_argument("--until", type=point_in_time, help="last sample: epoch ms, ISO 8601, or 30m/2h/7d ago")
    p.add_argument("--bucket", type=duration_ms, metavar="DURATION",
                   help="time grid of the timelines, e.g. 10s (default: the telemetry interval found in the data)")
    p.add_argument("--telemetry-topic", default=TELEMETRY_TOPIC)
    p.add_argument("--offsets-topic", default=OFFSETS_TOPIC)
    p.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g)")
    p.add_argument("--conf", type=spark_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark configuration, may be repeated")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def preflight(opts: JobOptions) -> str | None:
    """Why the job cannot run, found before Spark starts (unreachable cluster, missing topic)."""
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient({"bootstrap.servers": opts.bootstrap, "log_level": 0, **opts.client})
        topics = admin.list_topics(timeout=10).topics
    except Exception as e:  # noqa: BLE001 - KafkaException and friends: report, don't trace
        return f"cannot reach {opts.bootstrap}: {e}"
    if opts.telemetry_topic not in topics:
        return (f"{opts.bootstrap} has no topic {opts.telemetry_topic}: is telemetry on there "
                "(telemetry.interval.ms > 0 on a Gregor broker)?")
    return None


def cause(e: BaseException) -> str:
    """The innermost error message in a Spark exception (which carries Python and JVM traces)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)(: |$)", line)]
    return errors[-1] if errors else (lines[0] if lines else type(e).__name__)


def session(args: argparse.Namespace) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import gregor.spark

    builder = (SparkSession.builder.master(args.master).appName("gregor-lag-report")
               .config("spark.driver.memory", args.driver_memory).config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in args.conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    gregor.spark.register(spark)
    return spark


def run(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("gregor lag-report: needs PySpark: pip install 'gregor[spark]'", file=sys.stderr)
        return 2
    from gregor.lagreport import job, report

    client: dict[str, str] = {}
    if args.command_config is not None:
        from gregor.config import ConfigError, read_properties
        from gregor.security.librdkafka import ClientPropertiesError, librdkafka_config

        try:
            client = librdkafka_config(read_properties(args.command_config))
        except (ConfigError, ClientPropertiesError) as e:
            print(f"gregor lag-report: --command-config {args.command_config}: {e}", file=sys.stderr)
            return 2
    opts = JobOptions(args.bootstrap_server, args.out, args.window, args.top, args.since, args.until,
                      args.telemetry_topic, args.offsets_topic, args.bucket, client)
    if opts.since_ms is not None and opts.until_ms is not None and opts.since_ms > opts.until_ms:
        print("gregor lag-report: --since is after --until", file=sys.stderr)
        return 2
    problem = preflight(opts)
    if problem:
        print(f"gregor lag-report: {problem}", file=sys.stderr)
        return 1
    started = time.monotonic()
    spark = session(args)
    try:
        paths = job.run(spark, opts)
        summary = report.summarise(paths, opts)
        frames = report.chart_frames(paths, summary)
    except Exception as e:  # Spark wraps the connector's errors; show the cause, not the JVM trace
        print(f"gregor lag-report: the job failed: {cause(e)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    html_path = opts.out / "report.html"
    html_path.write_text(report.render_html(summary, frames, opts), encoding="utf-8")
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps({**summary.as_json(), "report": str(html_path), "tables": {k: str(v) for k, v in
                                                                                   paths.items()},
                          "seconds": round(elapsed, 1)}, indent=2, default=str))
    else:
        print(report.terminal_summary(summary, html_path, opts.out / "tables"))
        print(f"({elapsed:.1f} s)")
    return 0
