"""``--log-format json``: one JSON object per log record, for log pipelines (Loki, Elasticsearch, Cloud Logging).

Each line is ``{"time", "level", "logger", "message"}`` plus ``"exception"``
when the record carries a traceback; ``time`` is RFC 3339 UTC with
milliseconds. The text format stays ``time LEVEL logger: message``.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from railtrain.crds.times import format_time

FORMATS = ("text", "json")
"""Values of ``--log-format``."""


class JsonFormatter(logging.Formatter):
    """Format a :class:`logging.LogRecord` as one line of JSON (``ensure_ascii=False``: names stay readable)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": format_time(datetime.fromtimestamp(record.created, timezone.utc), 3),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
