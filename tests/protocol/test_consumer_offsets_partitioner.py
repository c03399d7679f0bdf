import pytest

from gregor.protocol.consumer_offsets import java_string_hashcode, kafka_abs, partition_for


@pytest.mark.parametrize("s,expected", [
    ("", 0),
    ("hello", 99162322),                       # "hello".hashCode()
    ("polygenelubricants", -(2**31)),          # hashes to Integer.MIN_VALUE
    ("console-consumer-12345", 158455506),
    ("groupé", -1237460406),                   # non-ASCII, one UTF-16 unit
    ("😀", 1772899),                            # a surrogate pair: two UTF-16 units
    ("日本語グループ", -305235731),
])
def test_java_hashcode(s, expected):
    # expected values: the polynomial sum(u[i] * 31^(n-1-i)) over UTF-16 code units, wrapped to int32
    assert java_string_hashcode(s) == expected


def test_kafka_abs_of_min_int_is_zero():
    assert kafka_abs(-(2**31)) == 0
    assert partition_for("polygenelubricants", 50) == 0


def test_partition_for_known_values():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("console-consumer-12345", 50) == 158455506 % 50
    assert partition_for("groupé", 50) == 1237460406 % 50  # abs() before the modulo, as Kafka
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(1000))
