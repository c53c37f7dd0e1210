"""Wire formats of DESIGN.md: wait records, tombstones, DLQ records and their header encodings."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher import wire
from dispatcher.errors import WireFormatError
from dispatcher.wire import Failure, Headers, SourceRecord

pytestmark = pytest.mark.unit

OUR_NAMES = [
    wire.ORIGINAL_TOPIC,
    wire.ORIGINAL_PARTITION,
    wire.ORIGINAL_OFFSET,
    wire.ORIGINAL_KEY,
    wire.ORIGINAL_TIMESTAMP,
    wire.ORIGINAL_HEADERS,
    wire.WAIT_EXPIRATION_UUID,
    wire.WAIT_EXPIRATION_TIME,
    wire.EXCEPTION,
    wire.EXCEPTION_MESSAGE,
    wire.STACKTRACE,
    wire.DISPATCHER_GROUP,
]
EXPIRES_AT = datetime(2025, 3, 1, 12, 30, 45, 123000, tzinfo=UTC)

keys = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.text(max_size=20).map(str.encode),
    st.text(max_size=20).map(lambda text: f"base64:{text}".encode()),
)
header_values = st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=20).map(str.encode))
header_names = st.one_of(st.text(max_size=12), st.sampled_from(OUR_NAMES))
header_lists = st.lists(st.tuples(header_names, header_values), max_size=8).map(tuple)
topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789._-", min_size=1, max_size=30)


@st.composite
def sources(draw: st.DrawFn, *, values: st.SearchStrategy[bytes | None]) -> SourceRecord:
    return SourceRecord(
        topic=draw(topics),
        partition=draw(st.integers(0, 2**31 - 1)),
        offset=draw(st.integers(0, 2**63 - 1)),
        key=draw(keys),
        value=draw(values),
        headers=draw(header_lists),
        timestamp_ms=draw(st.integers(-1, 2**63 - 1)),
    )


failures = st.builds(
    Failure,
    exception=st.text(min_size=1, max_size=30),
    message=st.text(max_size=60),
    stacktrace=st.none() | st.text(max_size=200),
)


def make_source(
    *,
    key: bytes | None = b"order-7",
    value: bytes | None = b'{"amount": 12}',
    headers: Headers = (("trace", b"abc"),),
) -> SourceRecord:
    return SourceRecord(
        topic="orders",
        partition=2,
        offset=1041,
        key=key,
        value=value,
        headers=headers,
        timestamp_ms=1_740_000_000_000,
    )


def header_names_of(headers: Headers) -> list[str]:
    return [name for name, _ in headers]


def without(headers: Headers, name: str) -> Headers:
    return tuple(header for header in headers if header[0] != name)


def replaced(headers: Headers, name: str, raw: bytes | None) -> Headers:
    return tuple((n, raw if n == name else value) for n, value in headers)


# --- ORIGINAL_KEY -------------------------------------------------------------------------------


@given(keys)
def test_original_key_round_trips(key: bytes | None) -> None:
    assert wire.decode_original_key(wire.encode_original_key(key)) == key


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (None, None),
        (b"", ""),
        (b"order-7", "order-7"),
        ("zürich-ü".encode(), "zürich-ü"),
        (b"\xff\x00", "base64:/wA="),
        (b"base64:abc", "base64:YmFzZTY0OmFiYw=="),
    ],
)
def test_original_key_is_text_unless_binary_or_base64_lookalike(
    key: bytes | None, text: str | None
) -> None:
    assert wire.encode_original_key(key) == text


def test_original_key_with_invalid_base64_is_rejected() -> None:
    with pytest.raises(WireFormatError, match="ORIGINAL_KEY has invalid base64"):
        wire.decode_original_key("base64:not base64!")


# --- ORIGINAL_HEADERS ---------------------------------------------------------------------------


@given(header_lists)
def test_original_headers_round_trip(headers: Headers) -> None:
    assert wire.decode_original_headers(wire.encode_original_headers(headers)) == headers


def test_no_original_headers_are_an_empty_object() -> None:
    assert wire.encode_original_headers(()) == "{}"
    assert wire.decode_original_headers("{}") == ()


def test_original_headers_are_an_object_when_lossless() -> None:
    headers = (("trace", b"abc"), ("city", "Zürich".encode()))
    assert wire.encode_original_headers(headers) == '{"trace":"abc","city":"Zürich"}'
    assert wire.encode_original_headers(()) == "{}"


@pytest.mark.parametrize(
    ("headers", "text"),
    [
        ((("a", b"1"), ("a", b"2")), '[["a","1"],["a","2"]]'),
        ((("bin", b"\xff"), ("t", b"x")), '[["bin",{"base64":"/w=="}],["t","x"]]'),
        ((("nul", None),), '[["nul",null]]'),
    ],
)
def test_original_headers_are_pairs_when_an_object_would_lose_data(
    headers: Headers, text: str
) -> None:
    assert wire.encode_original_headers(headers) == text


def test_original_headers_object_with_repeated_names_keeps_every_value() -> None:
    assert wire.decode_original_headers('{"a":"1","a":"2","b":null}') == (
        ("a", b"1"),
        ("a", b"2"),
        ("b", None),
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('"a string"', "must be a JSON object or array"),
        ('[["a"]]', r"\[name, value\] pairs"),
        ('[{"a":"1","b":"2"}]', r"\[name, value\] pairs"),
        ('[[1,"x"]]', r"\[name, value\] pairs"),
        ('{"a":1}', "must be a string"),
        ('[["a",{"base64":"@@"}]]', "invalid base64"),
        ('[["a",{"hex":"ff"}]]', "must be a string"),
    ],
)
def test_malformed_original_headers_are_rejected_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(WireFormatError, match=reason):
        wire.decode_original_headers(text)


# --- WAIT_EXPIRATION_TIME -----------------------------------------------------------------------


def test_expiration_is_iso_utc_with_z_and_milliseconds() -> None:
    at = datetime(2025, 3, 1, 14, 30, 45, 123999, tzinfo=timezone(timedelta(hours=2)))
    assert wire.format_expiration(at) == "2025-03-01T12:30:45.123Z"


def test_naive_expiration_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        wire.format_expiration(datetime(2025, 3, 1, 12, 0))


@pytest.mark.parametrize(
    "text",
    ["2025-03-01T12:30:45.123Z", "2025-03-01T12:30:45.123", "2025-03-01T14:30:45.123+02:00"],
)
def test_expiration_parses_z_zoneless_and_offsets_as_utc(text: str) -> None:
    parsed = wire.parse_expiration(text)
    assert parsed == EXPIRES_AT
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    ["", "tomorrow", "2025-13-01T00:00:00Z", "1740000000000", "9999-12-31T23:59:59-05:00"],
)
def test_unparseable_expiration_is_rejected(text: str) -> None:
    with pytest.raises(WireFormatError, match="WAIT_EXPIRATION_TIME is not an ISO-8601 time"):
        wire.parse_expiration(text)


@given(st.datetimes(timezones=st.just(UTC)))
def test_expiration_round_trips_at_millisecond_precision(at: datetime) -> None:
    expected = at.replace(microsecond=at.microsecond // 1000 * 1000)
    assert wire.parse_expiration(wire.format_expiration(at)) == expected


@given(st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(0)),
                                                timezone(timedelta(hours=-3, minutes=-30))])))
def test_expiration_in_utc_is_written_as_any_zone_converted_to_utc(at: datetime) -> None:
    converted = at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert wire.format_expiration(at) == converted
    assert wire.format_expiration(at.astimezone(UTC)) == converted


# --- wait id ------------------------------------------------------------------------------------


@given(st.text(max_size=8), topics, st.integers(0, 1000), st.integers(0, 2**40))
def test_the_wait_ids_text_is_the_uuid5s(group: str, topic: str, partition: int,
                                          offset: int) -> None:
    assert wire.wait_id_text(group, topic, partition, offset) == str(
        wire.wait_id_for(group, topic, partition, offset))


def test_wait_id_is_uuid5_over_the_coordinates_and_never_changes() -> None:
    wait_id = wire.wait_id_for("g", "orders", 3, 42)
    assert wait_id == uuid.uuid5(wire.WAIT_ID_NAMESPACE, "g/orders/3/42")
    assert wait_id.version == 5
    # Pinned: a different id for the same record would orphan every open wait record.
    assert wait_id == uuid.UUID("1d054860-3107-5c1c-ab47-e39d577f4997")
    assert wire.wait_id_for("g", "orders", 3, 42) == wait_id


@pytest.mark.parametrize(
    "other",
    [
        ("h", "orders", 3, 42),
        ("g", "orders2", 3, 42),
        ("g", "orders", 4, 42),
        ("g", "orders", 3, 43),
    ],
)
def test_wait_id_differs_when_any_coordinate_differs(other: tuple[str, str, int, int]) -> None:
    assert wire.wait_id_for(*other) != wire.wait_id_for("g", "orders", 3, 42)


@given(
    st.lists(
        st.tuples(st.text(max_size=8), topics, st.integers(0, 5), st.integers(0, 5)),
        unique=True,
        max_size=30,
    )
)
def test_distinct_coordinates_give_distinct_wait_ids(
    coordinates: list[tuple[str, str, int, int]],
) -> None:
    ids = {wire.wait_id_for(*c) for c in coordinates}
    assert len(ids) == len(coordinates)


# --- wait records and tombstones ----------------------------------------------------------------


def test_wait_record_carries_exactly_the_design_headers() -> None:
    source = make_source()
    wait_id = wire.wait_id_for("payments", "orders", 2, 1041)
    record = wire.wait_record(source, "payments", EXPIRES_AT)
    assert record.key == str(wait_id).encode()
    assert record.value == source.value
    assert record.headers == (
        (wire.ORIGINAL_TOPIC, b"orders"),
        (wire.ORIGINAL_PARTITION, b"2"),
        (wire.ORIGINAL_OFFSET, b"1041"),
        (wire.ORIGINAL_KEY, b"order-7"),
        (wire.ORIGINAL_TIMESTAMP, b"1740000000000"),
        (wire.ORIGINAL_HEADERS, b'{"trace":"abc"}'),
        (wire.WAIT_EXPIRATION_UUID, str(wait_id).encode()),
        (wire.WAIT_EXPIRATION_TIME, b"2025-03-01T12:30:45.123Z"),
    )


def test_wait_record_of_a_null_key_omits_original_key() -> None:
    record = wire.wait_record(make_source(key=None), "payments", EXPIRES_AT)
    assert wire.ORIGINAL_KEY not in header_names_of(record.headers)
    assert wire.parse_wait_record(record.key, record.value, record.headers).source.key is None


def test_wait_record_of_an_empty_key_keeps_an_empty_original_key() -> None:
    record = wire.wait_record(make_source(key=b""), "payments", EXPIRES_AT)
    assert (wire.ORIGINAL_KEY, b"") in record.headers
    assert wire.parse_wait_record(record.key, record.value, record.headers).source.key == b""


def test_tombstone_has_the_prepares_key_and_headers_and_a_null_value() -> None:
    source = make_source()
    prepare = wire.wait_record(source, "payments", EXPIRES_AT)
    tombstone = wire.wait_tombstone(source, "payments", EXPIRES_AT)
    assert tombstone.key == prepare.key
    assert tombstone.headers == prepare.headers
    assert tombstone.value is None
    entry = wire.parse_wait_record(tombstone.key, tombstone.value, tombstone.headers)
    assert entry.is_tombstone
    assert entry.source == SourceRecord(
        topic=source.topic,
        partition=source.partition,
        offset=source.offset,
        key=source.key,
        value=None,
        headers=source.headers,
        timestamp_ms=source.timestamp_ms,
    )


def test_a_prepare_carries_its_writers_generation_and_its_tombstone_too() -> None:
    prepare = wire.wait_record(make_source(), "payments", EXPIRES_AT, generation=12)
    assert prepare.headers[-1] == (wire.WRITER_GENERATION, b"12")
    for record in (prepare, wire.tombstone_of(prepare)):
        entry = wire.parse_wait_record(record.key, record.value, record.headers)
        assert (entry.generation, entry.withdrawn) == (12, False)
    bare = wire.wait_record(make_source(), "payments", EXPIRES_AT)
    assert wire.WRITER_GENERATION not in dict(bare.headers)
    assert wire.parse_wait_record(bare.key, bare.value, bare.headers).generation is None


def test_a_withdrawal_is_the_tombstone_of_its_generation_marked_withdrawn() -> None:
    prepare = wire.wait_record(make_source(), "payments", EXPIRES_AT, generation=3)
    withdrawal = wire.withdrawal_of(prepare)
    assert (withdrawal.key, withdrawal.value) == (prepare.key, None)
    assert withdrawal.headers == (*prepare.headers, (wire.WITHDRAWN, b"true"))
    entry = wire.parse_wait_record(withdrawal.key, withdrawal.value, withdrawal.headers)
    assert (entry.is_tombstone, entry.withdrawn, entry.generation) == (True, True, 3)


@pytest.mark.parametrize(("extra", "message"), [
    (((wire.WRITER_GENERATION, b"-1"),), "is not a group generation"),
    (((wire.WRITER_GENERATION, b"2147483648"),), "is not a group generation"),
    (((wire.WRITER_GENERATION, b"7"), (wire.WITHDRAWN, b"yes")), 'is only "true"'),
    (((wire.WITHDRAWN, b"true"),), "needs its WAITLINE_GENERATION"),
])
def test_a_bad_generation_or_withdrawal_is_named(extra: Headers, message: str) -> None:
    tombstone = wire.wait_tombstone(make_source(), "payments", EXPIRES_AT)
    with pytest.raises(WireFormatError, match=message):
        wire.parse_wait_record(tombstone.key, None, (*tombstone.headers, *extra))


def test_a_withdrawn_prepare_with_a_value_is_refused() -> None:
    prepare = wire.wait_record(make_source(), "payments", EXPIRES_AT, generation=3)
    with pytest.raises(WireFormatError, match='is only "true", on a null value'):
        wire.parse_wait_record(prepare.key, prepare.value,
                               (*prepare.headers, (wire.WITHDRAWN, b"true")))


def test_a_null_value_cannot_be_prepared() -> None:
    with pytest.raises(ValueError, match="null value"):
        wire.wait_record(make_source(value=None), "payments", EXPIRES_AT)


@given(sources(values=st.binary(max_size=60)), st.text(max_size=20))
def test_wait_record_round_trips(source: SourceRecord, group: str) -> None:
    record = wire.wait_record(source, group, EXPIRES_AT)
    entry = wire.parse_wait_record(record.key, record.value, list(record.headers))
    assert entry.source == source
    assert entry.wait_id == wire.wait_id_for(group, source.topic, source.partition, source.offset)
    assert entry.expires_at == EXPIRES_AT
    assert not entry.is_tombstone


def test_wait_record_parse_ignores_headers_that_are_not_ours() -> None:
    record = wire.wait_record(make_source(), "payments", EXPIRES_AT)
    entry = wire.parse_wait_record(
        record.key, record.value, (*record.headers, ("traceparent", None))
    )
    assert entry.source == make_source()


@pytest.mark.parametrize(
    "name",
    [
        wire.ORIGINAL_TOPIC,
        wire.ORIGINAL_PARTITION,
        wire.ORIGINAL_OFFSET,
        wire.ORIGINAL_TIMESTAMP,
        wire.ORIGINAL_HEADERS,
        wire.WAIT_EXPIRATION_UUID,
        wire.WAIT_EXPIRATION_TIME,
    ],
)
def test_wait_record_missing_a_required_header_is_rejected(name: str) -> None:
    record = wire.wait_record(make_source(), "payments", EXPIRES_AT)
    with pytest.raises(WireFormatError, match=f"wait record: header {name} is missing"):
        wire.parse_wait_record(record.key, record.value, without(record.headers, name))


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "null key"),
        (b"not-a-uuid", "key is not a UUID"),
        (b"\xff", "key is not valid UTF-8"),
        (b"{1d054860-3107-5c1c-ab47-e39d577f4997}", "not a canonical lowercase UUID"),
        (b"1D054860-3107-5C1C-AB47-E39D577F4997", "not a canonical lowercase UUID"),
    ],
)
def test_wait_record_with_a_bad_key_is_rejected(key: bytes | None, reason: str) -> None:
    record = wire.wait_record(make_source(), "payments", EXPIRES_AT)
    with pytest.raises(WireFormatError, match=reason):
        wire.parse_wait_record(key, record.value, record.headers)


@pytest.mark.parametrize(
    ("name", "raw", "reason"),
    [
        (wire.WAIT_EXPIRATION_UUID, b"nope", "WAIT_EXPIRATION_UUID is not a UUID"),
        (wire.WAIT_EXPIRATION_UUID, str(uuid.UUID(int=7)).encode(), "differs from its"),
        (wire.WAIT_EXPIRATION_TIME, b"soon", "WAIT_EXPIRATION_TIME is not an ISO-8601"),
        (wire.ORIGINAL_OFFSET, b"12a", "ORIGINAL_OFFSET is not a non-negative integer"),
        (wire.ORIGINAL_PARTITION, b"-1", "ORIGINAL_PARTITION is not a non-negative integer"),
        (wire.ORIGINAL_TIMESTAMP, b"1.5", "ORIGINAL_TIMESTAMP is not an integer"),
        (wire.ORIGINAL_TOPIC, b"\xff", "ORIGINAL_TOPIC is not valid UTF-8"),
        (wire.ORIGINAL_TOPIC, None, "ORIGINAL_TOPIC is null"),
        (wire.ORIGINAL_HEADERS, b"[1]", r"\[name, value\] pairs"),
    ],
)
def test_wait_record_with_a_bad_header_value_is_rejected(
    name: str, raw: bytes | None, reason: str
) -> None:
    record = wire.wait_record(make_source(), "payments", EXPIRES_AT)
    with pytest.raises(WireFormatError, match=reason):
        wire.parse_wait_record(record.key, record.value, replaced(record.headers, name, raw))


def test_wait_record_with_a_repeated_header_is_rejected() -> None:
    record = wire.wait_record(make_source(), "payments", EXPIRES_AT)
    headers = (*record.headers, (wire.ORIGINAL_OFFSET, b"7"))
    with pytest.raises(WireFormatError, match="ORIGINAL_OFFSET appears more than once"):
        wire.parse_wait_record(record.key, record.value, headers)


# --- DLQ records --------------------------------------------------------------------------------


def test_dlq_record_has_the_original_then_the_design_headers() -> None:
    original_headers: Headers = (("trace", b"abc"), (wire.EXCEPTION, b"\xfe"))
    source = make_source(headers=original_headers)
    wait_id = wire.wait_id_for("payments", "orders", 2, 1041)
    failure = Failure("TimeoutError", "no answer within 60 s", "Traceback ...")
    record = wire.dlq_record(source, "payments", failure)
    assert record.key == source.key
    assert record.value == source.value
    assert record.headers == (
        *original_headers,
        (wire.ORIGINAL_TOPIC, b"orders"),
        (wire.ORIGINAL_PARTITION, b"2"),
        (wire.ORIGINAL_OFFSET, b"1041"),
        (wire.ORIGINAL_KEY, b"order-7"),
        (wire.ORIGINAL_TIMESTAMP, b"1740000000000"),
        (wire.ORIGINAL_HEADERS, b'[["trace","abc"],["Exception",{"base64":"/g=="}]]'),
        (wire.WAIT_EXPIRATION_UUID, str(wait_id).encode()),
        (wire.EXCEPTION, b"TimeoutError"),
        (wire.EXCEPTION_MESSAGE, b"no answer within 60 s"),
        (wire.STACKTRACE, b"Traceback ..."),
        (wire.DISPATCHER_GROUP, b"payments"),
    )


def test_dlq_record_without_a_stacktrace_omits_the_header() -> None:
    record = wire.dlq_record(make_source(), "payments", Failure("HTTPStatusError", "HTTP 400"))
    assert wire.STACKTRACE not in header_names_of(record.headers)
    entry = wire.parse_dlq_record(record.key, record.value, record.headers)
    assert entry.failure == Failure("HTTPStatusError", "HTTP 400", None)


@pytest.mark.parametrize("value", [None, b""])
def test_dlq_record_keeps_a_null_or_empty_value_as_is(value: bytes | None) -> None:
    source = make_source(value=value)
    record = wire.dlq_record(source, "payments", wire.NULL_VALUE_FAILURE)
    assert record.value == value
    assert wire.parse_dlq_record(record.key, record.value, record.headers).source == source


@given(sources(values=st.none() | st.binary(max_size=60)), st.text(max_size=20), failures)
def test_dlq_record_rebuilds_the_original_record_exactly(
    source: SourceRecord, group: str, failure: Failure
) -> None:
    record = wire.dlq_record(source, group, failure)
    entry = wire.parse_dlq_record(record.key, record.value, list(record.headers))
    assert entry.source == source
    assert entry.group == group
    assert entry.failure == failure
    assert entry.wait_id == wire.wait_id_for(group, source.topic, source.partition, source.offset)


@given(sources(values=st.none() | st.binary(max_size=60)), st.text(max_size=20), failures)
def test_a_reference_dlq_record_names_the_original_without_copying_it(
    source: SourceRecord, group: str, failure: Failure
) -> None:
    record = wire.dlq_reference_record(source, group, failure)
    assert (record.key, record.value) == (None, None)
    entry = wire.parse_dlq_record(record.key, record.value, list(record.headers))
    assert entry.original_omitted
    assert (entry.source.topic, entry.source.partition, entry.source.offset,
            entry.source.timestamp_ms) == (source.topic, source.partition, source.offset,
                                           source.timestamp_ms)
    assert (entry.source.key, entry.source.value, entry.source.headers) == (None, None, ())
    assert entry.failure == Failure(failure.exception, failure.message, None)
    assert entry.wait_id == wire.wait_id_for(group, source.topic, source.partition, source.offset)
    assert not wire.parse_dlq_record(*_parts(wire.dlq_record(source, group, failure))
                                     ).original_omitted


def test_record_sizes_names_every_part() -> None:
    source = make_source(key=b"kk", value=b"v" * 10, headers=(("a", b"12"), ("b", None)))
    assert wire.record_sizes(source) == "key 2 bytes, value 10 bytes, 2 headers of 4 bytes"


def _parts(record: wire.OutgoingRecord) -> tuple[bytes | None, bytes | None, Headers]:
    return record.key, record.value, record.headers


def test_dlq_failure_texts_are_capped_keeping_the_innermost_frames() -> None:
    long_message = "m" * (wire.MAX_FAILURE_TEXT_CHARS + 10)
    long_trace = "outer\n" + "x" * wire.MAX_FAILURE_TEXT_CHARS + "\ninnermost"
    record = wire.dlq_record(make_source(), "g", Failure("E", long_message, long_trace))
    entry = wire.parse_dlq_record(record.key, record.value, record.headers)
    assert len(entry.failure.message) == wire.MAX_FAILURE_TEXT_CHARS
    assert entry.failure.message.startswith("mmm")
    assert entry.failure.stacktrace is not None
    assert len(entry.failure.stacktrace) == wire.MAX_FAILURE_TEXT_CHARS
    assert entry.failure.stacktrace.endswith("\ninnermost")


def test_dlq_failure_message_with_a_lone_surrogate_is_still_written() -> None:
    message = b"bad byte \xff".decode("utf-8", "surrogateescape")
    record = wire.dlq_record(make_source(), "g", Failure("UnicodeError", message))
    entry = wire.parse_dlq_record(record.key, record.value, record.headers)
    assert entry.failure.message == "bad byte \\udcff"


def test_dlq_record_without_dispatcher_headers_has_no_group_or_wait_id() -> None:
    record = wire.dlq_record(make_source(), "g", Failure("E", "m"))
    headers = without(without(record.headers, wire.DISPATCHER_GROUP), wire.WAIT_EXPIRATION_UUID)
    entry = wire.parse_dlq_record(record.key, record.value, headers)
    assert entry.group is None
    assert entry.wait_id is None
    assert entry.source == make_source()


@pytest.mark.parametrize("name", [wire.ORIGINAL_HEADERS, wire.EXCEPTION, wire.EXCEPTION_MESSAGE])
def test_dlq_record_missing_a_required_header_is_rejected(name: str) -> None:
    record = wire.dlq_record(make_source(), "g", Failure("E", "m"))
    with pytest.raises(WireFormatError, match=f"DLQ record: header {name} is missing"):
        wire.parse_dlq_record(record.key, record.value, without(record.headers, name))


def test_dlq_record_whose_original_headers_were_altered_is_rejected() -> None:
    record = wire.dlq_record(make_source(), "g", Failure("E", "m"))
    headers = (("trace", b"changed"), *record.headers[1:])
    with pytest.raises(WireFormatError, match="leading headers differ from ORIGINAL_HEADERS"):
        wire.parse_dlq_record(record.key, record.value, headers)


def test_dlq_record_whose_key_disagrees_with_original_key_is_rejected() -> None:
    record = wire.dlq_record(make_source(), "g", Failure("E", "m"))
    with pytest.raises(WireFormatError, match="key differs from its ORIGINAL_KEY"):
        wire.parse_dlq_record(b"other", record.value, record.headers)


@given(sources(values=st.binary(max_size=60)))
def test_tombstone_of_a_prepare_equals_the_tombstone_built_from_the_source(
    source: SourceRecord,
) -> None:
    prepare = wire.wait_record(source, "payments", EXPIRES_AT)
    assert wire.tombstone_of(prepare) == wire.wait_tombstone(source, "payments", EXPIRES_AT)
