"""The transaction coordinator: transactional ids' state machine over records in
``__transaction_state`` (metadata.py), the shard on the generic runtime (shard.py) and its
contract (api.py). See docs/transactions.md, "The transaction coordinator"."""
