-- A wait topic whose partition count grows can hold one wait id's records in two partitions
-- (a retry prepared after the growth hashes elsewhere), and offsets of different partitions do
-- not compare (issue 12). The row keeps the Kafka timestamp of the record it came from: within
-- a partition the offset orders a wait id's records, across partitions this timestamp does.
-- Rows from before this column read as oldest (0), so any record from another partition wins.

ALTER TABLE wait ADD COLUMN wait_timestamp_ms bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN wait.wait_timestamp_ms IS
    'Kafka timestamp (epoch ms) of the wait-topic record this row came from. A record of the same '
    'wait id replaces or deletes the row when it is in the same partition at a higher offset, or '
    'in another partition with a later (timestamp, partition).';
COMMENT ON COLUMN wait.wait_offset IS
    'Wait-topic offset of the record this row came from; in the same partition only a higher '
    'offset replaces the row and only a tombstone at a higher offset deletes it.';
