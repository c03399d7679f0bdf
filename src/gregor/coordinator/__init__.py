"""The group coordinator: a state machine over records in ``__consumer_offsets``.

- ``runtime/``: per-shard serial execution, keyed timers, loading (replay) and the write path.
- ``group/``: the state machines (classic group membership, offsets) and their record formats.
Nothing here knows about sockets.
"""
