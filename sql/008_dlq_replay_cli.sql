-- `waitline dlq replay` records its runs where the console's redrives are recorded
-- (dispatcher/dlq/audit.py): one `dlq_redrive` row per run (role 'cli', the operating-system
-- user as actor, no rate cap) and one `dlq_replay` row per replayed record, so the console's
-- "replayed" filter and record detail show every replay, whichever tool made it.

COMMENT ON TABLE dlq_redrive IS
    'Every replay run, a console redrive or `waitline dlq replay` (role cli): who asked, when, '
    'the filter, the target, the counts, its state.';
COMMENT ON TABLE dlq_replay IS
    'Each record a replay run committed (console or CLI), and where it landed in the target '
    'topic.';
