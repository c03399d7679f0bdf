"""A token validator plugged in by name (listener.name.<l>.oauthbearer.sasl.server.callback.handler.class)."""


def always_dave(token: str) -> tuple[str, int]:
    return "dave", 1000
