-- Waitline DLQ index (docs/DESIGN.md "Console").
--
-- `dlq_record` mirrors each DLQ topic the reconciliation job owns, one row per DLQ record: its
-- coordinates and time, the failure (class and message), where the original came from, its
-- wait id, sizes, and short text previews of key and value. The record's bytes stay in Kafka;
-- the console reads them by coordinates on demand. The Spark job writes rows from its executors
-- (spark_jobs/dlq_index.py through connectors/dlq_index.py); applying a batch twice changes
-- nothing. `reconcile_cycle` is the job's last cycle per wait topic, for the console.

CREATE TABLE dlq_record (
    dlq_topic          text        NOT NULL CHECK (dlq_topic <> ''),
    dlq_partition      integer     NOT NULL CHECK (dlq_partition >= 0),
    dlq_offset         bigint      NOT NULL CHECK (dlq_offset >= 0),
    dlq_timestamp      timestamptz NOT NULL,
    exception          text,
    message            text        NOT NULL DEFAULT '',
    original_topic     text,
    original_partition integer,
    original_offset    bigint,
    original_key       bytea,
    wait_id            uuid,
    key_preview        text        NOT NULL,
    value_preview      text        NOT NULL,
    key_bytes          integer,
    value_bytes        integer,
    headers_bytes      integer     NOT NULL,
    problem            text,
    indexed_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset)
);

-- The browser's pages: newest first by (time, partition, offset), keyset-paginated, with or
-- without an error class or original coordinates; a record's wait id history.
CREATE INDEX dlq_record_time_idx
    ON dlq_record (dlq_topic, dlq_timestamp DESC, dlq_partition DESC, dlq_offset DESC);
CREATE INDEX dlq_record_exception_idx
    ON dlq_record (dlq_topic, exception, dlq_timestamp DESC, dlq_partition DESC, dlq_offset DESC);
CREATE INDEX dlq_record_original_idx
    ON dlq_record (dlq_topic, original_topic, original_partition, dlq_timestamp DESC);
CREATE INDEX dlq_record_key_idx ON dlq_record (dlq_topic, original_key);
CREATE INDEX dlq_record_wait_idx ON dlq_record (wait_id) WHERE wait_id IS NOT NULL;

COMMENT ON TABLE dlq_record IS
    'One row per record of a DLQ topic, mirrored by the reconciliation job: the console''s index.';
COMMENT ON COLUMN dlq_record.dlq_timestamp IS 'Kafka timestamp of the DLQ record.';
COMMENT ON COLUMN dlq_record.exception IS
    'The failure''s class (Exception header); NULL for a record that breaks the wire format.';
COMMENT ON COLUMN dlq_record.message IS 'The failure''s message, its first 2,000 characters.';
COMMENT ON COLUMN dlq_record.original_key IS
    'Key of the original record when at most 1 KiB (the key filter); NULL otherwise.';
COMMENT ON COLUMN dlq_record.key_preview IS
    'Printable one-line text of the key, or 0x and hex, cut to 120 characters.';
COMMENT ON COLUMN dlq_record.value_preview IS
    'Printable one-line text of the original value, or 0x and hex, cut to 200 characters.';
COMMENT ON COLUMN dlq_record.problem IS 'Why the record breaks the wire format; NULL when it follows it.';

-- DLQ depth per topic, error class and hour of the DLQ timestamp: the overview's counts without
-- scanning millions of rows. Kept by the same transaction as `dlq_record` (connectors/
-- dlq_index.py): +1 per new row, -1 per row replaced by a record of a re-created topic.
CREATE TABLE dlq_hourly (
    dlq_topic text        NOT NULL,
    hour      timestamptz NOT NULL,
    exception text        NOT NULL,
    records   bigint      NOT NULL,
    PRIMARY KEY (dlq_topic, hour, exception)
);

COMMENT ON TABLE dlq_hourly IS
    'dlq_record rows per DLQ topic, hour (date_trunc of dlq_timestamp) and error class '
    '(''(malformed)'' for records breaking the wire format).';

CREATE TABLE reconcile_cycle (
    wait_topic     text             PRIMARY KEY,
    dlq_topic      text             NOT NULL,
    ended_at       timestamptz      NOT NULL,
    events_in      bigint           NOT NULL,
    expired_sent   bigint           NOT NULL,
    parked         bigint           NOT NULL,
    dlq_indexed    bigint           NOT NULL,
    mirror_lag_s   double precision
);

COMMENT ON TABLE reconcile_cycle IS
    'The reconciliation job''s last cycle per wait topic: when it ended, what it did, its lag.';
