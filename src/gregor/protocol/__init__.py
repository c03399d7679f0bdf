"""Kafka wire protocol: framing, headers, API keys, errors, record batches. No I/O here."""
