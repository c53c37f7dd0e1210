-- A DLQ record that cannot be sent (larger than the DLQ topic accepts, refused by the broker) is
-- parked with its reason instead of failing the sweep on every run (issue 12): the rows behind
-- it keep flowing. A parked row stays until an operator deals with it or a re-prepare of the
-- same wait id (a new attempt) clears the two columns.

ALTER TABLE wait
    ADD COLUMN dlq_failed_at timestamptz,
    ADD COLUMN dlq_error     text;

-- The sweep claims rows neither sent nor parked.
DROP INDEX wait_open_expiration_idx;
CREATE INDEX wait_open_expiration_idx
    ON wait (wait_topic, wait_expiration_time)
    WHERE dlq_sent_at IS NULL AND dlq_failed_at IS NULL;

COMMENT ON COLUMN wait.dlq_failed_at IS
    'When the expiry sweep gave up on this row''s DLQ record because Kafka refused that record '
    '(too large, invalid); NULL otherwise. A parked row is never claimed again.';
COMMENT ON COLUMN wait.dlq_error IS
    'Why Kafka refused the DLQ record (the producer''s error, first line), set with dlq_failed_at.';
