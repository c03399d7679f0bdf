"""Consumer groups: records, model, group and offset managers, the shard that composes them."""
