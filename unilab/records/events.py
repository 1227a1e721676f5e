"""events.jsonl: one JSON object per line through structlog, bound with run_id and rank, so a
log shipper and a person read the same record. Every event carries a UTC timestamp and level."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import structlog


class EventLog:
    """A structlog logger writing JSON lines to one file, flushed per event (a crash loses nothing
    already said)."""

    def __init__(self, path: Path, run_id: str, rank: int) -> None:
        self.path = path
        self._file: IO[str] = open(path, "a", encoding="utf-8", buffering=1)
        self._log = structlog.wrap_logger(
            structlog.WriteLogger(self._file),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.dict_tracebacks,
                structlog.processors.JSONRenderer(sort_keys=False),
            ],
        ).bind(run_id=run_id, rank=rank)

    def info(self, event: str, **kw: Any) -> None:
        self._log.info(event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._log.error(event, **kw)

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._file.close()
