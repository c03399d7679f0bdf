"""One thin module per Kafka API: validate the request, call one service, build the response.

Responses are plain dicts with kio's field names; ``gregor.protocol.codec.build`` fits them to
the negotiated version."""
