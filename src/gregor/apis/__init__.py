"""One thin module per Kafka API: validate the request, call one service, build the response.

Responses are plain dicts with kio's field names; ``gregor.protocol.encoder`` encodes them for
the negotiated version. Each module registers its handlers with ``@handles`` (``handler.py``)
when it is imported; this package imports them all, by name, so that the registry is complete
and every handler can be found by reading this list. A new API: a module here, added below.
"""

from gregor.apis import (  # noqa: F401 - imported for their registrations
    acls,
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    api_versions,
    consumer_groups,
    controlled_shutdown,
    delete_records,
    describe_cluster,
    describe_configs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    end_txn,
    fetch,
    find_coordinator,
    groups_admin,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl,
    scram_credentials,
    share_fetch,
    share_groups,
    share_state,
    sync_group,
    topics_admin,
    txn_offset_commit,
    write_txn_markers,
)
from gregor.apis.handler import REGISTRY, Registration

__all__ = ["REGISTRY", "Registration"]
