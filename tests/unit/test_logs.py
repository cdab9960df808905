"""JSON log lines: extra fields never replace the record's own."""

from __future__ import annotations

import logging

import orjson

from extender.logs import JsonFormatter


def test_an_extra_field_named_like_a_record_field_is_kept_beside_it() -> None:
    record = logging.LogRecord("extender.gang.queue", logging.INFO, __file__, 1, "claim made", None, None)
    record.__dict__.update({"level": "rack", "gang": "ml/big"})
    doc = orjson.loads(JsonFormatter().format(record))
    assert doc["level"] == "info"
    assert doc["extra.level"] == "rack"
    assert doc["gang"] == "ml/big"
    assert doc["msg"] == "claim made"
