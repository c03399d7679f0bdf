"""Exactly-once consume-transform-produce (KIP-447) in a separate process, SIGKILLed and started
again with the same transactional id: the read_committed output holds each input record exactly
once, and the group's committed offsets equal the input's end."""

from tests.support.exactly_once import run_with_kills


def test_a_processor_sigkilled_again_and_again_outputs_each_record_once(broker_factory, tmp_path):
    broker = broker_factory(**{"group.initial.rebalance.delay.ms": "0"})
    run_with_kills(broker.bootstrap, tmp_path, kills=4)
