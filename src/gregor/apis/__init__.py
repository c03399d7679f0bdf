"""One thin module per Kafka API: validate the request, call one service, build the response.

Responses are plain dicts with kio's field names; ``gregor.protocol.encoder`` encodes them for
the negotiated version."""
