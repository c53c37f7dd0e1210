-- The console's "message contains" filter over a large DLQ index: a trigram index on
-- dlq_record.message (pg_trgm), where the extension is available and may be created (it is a
-- trusted extension since PostgreSQL 13). Without it the filter still works and reads the
-- topic's rows in time order until a page is full: fast for common text, slow for rare text
-- (docs/BENCHMARKS.md, "Console").
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        BEGIN
            CREATE EXTENSION pg_trgm;
        EXCEPTION WHEN insufficient_privilege OR undefined_file OR feature_not_supported THEN
            RAISE NOTICE 'pg_trgm not installed (%): the DLQ index''s message filter scans', SQLERRM;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX IF NOT EXISTS dlq_record_message_trgm_idx
            ON dlq_record USING gin (message gin_trgm_ops);
    END IF;
END
$$;
