-- Waitline wait registry (DESIGN.md "Registry").
--
-- The `wait` table mirrors the compacted wait topics: one row per open wait id per wait topic.
-- The mirror (connectors/sink.py, or the Spark job through it) upserts a row for each prepare
-- and deletes it for each tombstone; the expiry sweep (connectors/source.py) turns rows whose
-- expiration time has passed into DLQ records and stamps `dlq_sent_at`. `wait_reject` keeps the
-- wait-topic records the mirror could not parse, so a bad record is neither fatal nor lost.
--
-- Offsets order the versions of one wait id: a record is applied only over a row with a lower
-- wait offset, which makes applying the same batch twice, or an older batch late, a no-op.

CREATE TABLE wait (
    wait_topic            text        NOT NULL CHECK (wait_topic <> ''),
    wait_id               uuid        NOT NULL,
    wait_partition        integer     NOT NULL CHECK (wait_partition >= 0),
    wait_offset           bigint      NOT NULL CHECK (wait_offset >= 0),
    original_topic        text        NOT NULL CHECK (original_topic <> ''),
    original_partition    integer     NOT NULL CHECK (original_partition >= 0),
    original_offset       bigint      NOT NULL CHECK (original_offset >= 0),
    original_key          bytea,
    original_timestamp_ms bigint      NOT NULL,
    original_headers      json        NOT NULL,
    body                  bytea       NOT NULL,
    wait_expiration_time  timestamptz NOT NULL,
    dlq_topic             text        NOT NULL CHECK (dlq_topic <> ''),
    dispatcher_group      text        NOT NULL CHECK (dispatcher_group <> ''),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    dlq_sent_at           timestamptz,
    PRIMARY KEY (wait_topic, wait_id),
    CHECK (updated_at >= created_at)
);

-- The expiry sweep: `WHERE wait_topic = $1 AND wait_expiration_time <= now()
-- AND dlq_sent_at IS NULL ORDER BY wait_expiration_time`. Rows already sent leave the index.
CREATE INDEX wait_open_expiration_idx
    ON wait (wait_topic, wait_expiration_time)
    WHERE dlq_sent_at IS NULL;

COMMENT ON TABLE wait IS
    'One row per open wait id per wait topic: a prepared record whose tombstone the mirror has '
    'not seen yet. Rows past wait_expiration_time become DLQ records (ExpiredRecordException).';
COMMENT ON COLUMN wait.wait_topic IS
    'The wait topic the row mirrors; one table serves many wait topics, each sweep only its own.';
COMMENT ON COLUMN wait.wait_id IS
    'The wait record key: UUIDv5 of group/topic/partition/offset of the original record.';
COMMENT ON COLUMN wait.wait_partition IS 'Wait-topic partition of the record this row came from.';
COMMENT ON COLUMN wait.wait_offset IS
    'Wait-topic offset of the record this row came from; only a higher offset replaces the row '
    'and only a tombstone at a higher offset deletes it.';
COMMENT ON COLUMN wait.original_topic IS 'Topic of the original (input) record.';
COMMENT ON COLUMN wait.original_partition IS 'Partition of the original record.';
COMMENT ON COLUMN wait.original_offset IS 'Offset of the original record.';
COMMENT ON COLUMN wait.original_key IS 'Key bytes of the original record; NULL for a null key.';
COMMENT ON COLUMN wait.original_timestamp_ms IS
    'Kafka timestamp of the original record, epoch milliseconds, kept exact for the DLQ record '
    '(view it with to_timestamp(original_timestamp_ms / 1000.0)).';
COMMENT ON COLUMN wait.original_headers IS
    'The ORIGINAL_HEADERS JSON text as the dispatcher wrote it: an object name->text, or an '
    'array of [name, value] pairs with {"base64": ...} for binary and null values. Stored as '
    'json, not jsonb, because jsonb reorders object members and rejects \u0000, and the DLQ '
    'record must rebuild the original headers exactly; cast to jsonb to query it.';
COMMENT ON COLUMN wait.body IS
    'Value bytes of the original record (never NULL: a null-value input is not prepared).';
COMMENT ON COLUMN wait.wait_expiration_time IS
    'WAIT_EXPIRATION_TIME: after this instant an open row is sent to the DLQ.';
COMMENT ON COLUMN wait.dlq_topic IS 'The DLQ topic this row''s expiry record goes to.';
COMMENT ON COLUMN wait.dispatcher_group IS
    'Consumer group of the dispatcher that prepared the record (DLQ DispatcherGroup header); '
    'the mirror checks that the wait id derives from it.';
COMMENT ON COLUMN wait.created_at IS
    'When the mirror first saw this wait id open; a re-prepare keeps it, so age = now() - created_at.';
COMMENT ON COLUMN wait.updated_at IS 'When the mirror or the sweep last changed the row.';
COMMENT ON COLUMN wait.dlq_sent_at IS
    'When the expiry DLQ record was acknowledged by Kafka; NULL while the row is open. A '
    're-prepare (the dispatcher processing the record again) resets it to NULL.';

CREATE TABLE wait_reject (
    wait_topic       text        NOT NULL,
    wait_partition   integer     NOT NULL CHECK (wait_partition >= 0),
    wait_offset      bigint      NOT NULL CHECK (wait_offset >= 0),
    record_key       bytea,
    record_value     bytea,
    record_headers   json        NOT NULL,
    reason           text        NOT NULL,
    dispatcher_group text,
    rejected_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (wait_topic, wait_partition, wait_offset)
);

COMMENT ON TABLE wait_reject IS
    'Wait-topic records the mirror could not turn into a row or a delete (malformed key or '
    'headers, wait id not derived from the group). Kept verbatim for inspection; the mirror '
    'skips them and carries on. Re-mirroring the same record keeps the first reject.';
COMMENT ON COLUMN wait_reject.record_key IS 'The wait record key bytes as read from Kafka.';
COMMENT ON COLUMN wait_reject.record_value IS 'The wait record value bytes as read from Kafka.';
COMMENT ON COLUMN wait_reject.record_headers IS
    'The wait record headers in ORIGINAL_HEADERS JSON form (lossless for binary and null values).';
COMMENT ON COLUMN wait_reject.reason IS 'Why the record was rejected, in one sentence.';
COMMENT ON COLUMN wait_reject.dispatcher_group IS 'The group the mirror was configured with.';
