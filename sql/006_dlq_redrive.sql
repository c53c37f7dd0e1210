-- Waitline console redrives (docs/DESIGN.md "Console"): the audit of every redrive and the
-- replays each committed. The replay ledger topic (`<dlq>.replayed`) stays the source of truth
-- for what was replayed (`waitline dlq replay` reads it); these rows are what the console shows.

CREATE TABLE dlq_redrive (
    replay_id     uuid        PRIMARY KEY,
    dlq_topic     text        NOT NULL,
    actor         text        NOT NULL,
    role          text        NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    filter        jsonb       NOT NULL,
    target_topic  text,
    forced        boolean     NOT NULL DEFAULT false,
    rate_cap      double precision,
    planned       integer     NOT NULL,
    sent          integer     NOT NULL DEFAULT 0,
    state         text        NOT NULL CHECK (state IN
                              ('running', 'paused', 'aborted', 'done', 'failed')),
    detail        text        NOT NULL DEFAULT ''
);
CREATE INDEX dlq_redrive_time_idx ON dlq_redrive (dlq_topic, requested_at DESC);

CREATE TABLE dlq_replay (
    dlq_topic        text        NOT NULL,
    dlq_partition    integer     NOT NULL,
    dlq_offset       bigint      NOT NULL,
    target_topic     text        NOT NULL,
    target_partition integer     NOT NULL,
    target_offset    bigint      NOT NULL,
    replayed_at      timestamptz NOT NULL,
    replay_id        uuid        NOT NULL REFERENCES dlq_redrive (replay_id),
    PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset, target_topic, target_partition,
                 target_offset)
);
CREATE INDEX dlq_replay_replay_idx ON dlq_replay (replay_id);

COMMENT ON TABLE dlq_redrive IS
    'Every console redrive: who asked, when, the filter, the target, the counts, its state.';
COMMENT ON COLUMN dlq_redrive.sent IS
    'Records replayed and committed with their ledger entries (acknowledged by the broker).';
COMMENT ON TABLE dlq_replay IS
    'Each record a console redrive committed, and where it landed in the target topic.';
