"""Commit each completed micro-batch's end offsets to the consumer group named by the option
``groupId``, so lag tools see Spark pipelines. Done from query progress events (one per
completed batch, the last batch of an availableNow run or a stopped query included), because
Spark calls a stream reader's ``commit`` only when it plans the next batch."""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from gregor.spark import kafka_io
from gregor.spark.source import META

log = logging.getLogger("gregor.spark")


class GroupCommitListener(StreamingQueryListener):
    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        for source in event.progress.sources:
            try:
                end = json.loads(source.endOffset) if isinstance(source.endOffset, str) else source.endOffset
            except (TypeError, ValueError):
                continue
            if not isinstance(end, dict) or not isinstance(end.get(META), dict):
                continue
            meta = end[META]
            if not meta.get("groupId"):
                continue
            offsets = kafka_io.from_json(end)
            try:
                kafka_io.commit_group({"bootstrap.servers": meta["bootstrap"]}, meta["groupId"], offsets)
            except Exception as e:  # noqa: BLE001 - a failed commit must not stop the query; the next batch retries
                log.warning("committing batch offsets to group %s failed: %s", meta["groupId"], e)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
