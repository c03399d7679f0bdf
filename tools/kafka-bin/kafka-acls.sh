#!/usr/bin/env bash
# kafka-acls.sh for scripts and test suites written for Kafka's tool (librdkafka's 0109, 0115,
# 0119): the same flags, run by `gregor acls` (docs/security.md). GREGOR: the gregor command
# (default: the checkout's .venv/bin/gregor, else gregor on the PATH).
here="$(cd "$(dirname "$0")" && pwd)"
gregor="${GREGOR:-$here/../../.venv/bin/gregor}"
[ -x "$gregor" ] || gregor=gregor
exec "$gregor" acls "$@"
