-- A traced record's wait record carries its record span's W3C trace headers (`traceparent`,
-- `tracestate`; dispatcher/tracing.py `traced_prepare`). The mirror keeps them on the row, and
-- the expiry sweep's DLQ record carries them in place of the original's trace headers, so the
-- record's trace shows its expiry, as it shows the pod's own DLQ records. A nullable column
-- without a default: adding it rewrites no row, and untraced rows stay NULL.

ALTER TABLE wait ADD COLUMN trace_headers json;

COMMENT ON COLUMN wait.trace_headers IS
    'The W3C trace headers (traceparent, tracestate) of the wait record this row came from, in '
    'ORIGINAL_HEADERS form: the record span''s, when the pod traced the record and it was '
    'sampled. The expiry DLQ record carries them in place of the original''s trace headers. '
    'NULL: the record was not traced (tracing off, or not sampled).';
