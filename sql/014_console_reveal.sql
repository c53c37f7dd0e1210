-- Reveals of redacted DLQ records (dispatcher/console/reveals.py): the console redacts payloads
-- by its rules for everyone, and an operator may show one record whole; each time is kept here
-- (who, when, which record, what part), and the record's page lists them.

CREATE TABLE console_reveal (
    revealed_at   timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL,
    role          text        NOT NULL,
    dlq_topic     text        NOT NULL,
    dlq_partition integer     NOT NULL,
    dlq_offset    bigint      NOT NULL,
    part          text        NOT NULL CHECK (part IN ('record', 'key', 'value')),
    client        text
);
CREATE INDEX console_reveal_record_idx
    ON console_reveal (dlq_topic, dlq_partition, dlq_offset, revealed_at);

COMMENT ON TABLE console_reveal IS
    'Each time an operator showed a redacted DLQ record (or its key or value) whole.';
