-- Console sessions end on more than logout and expiry (dispatcher/console/sessions.py): after
-- WAITLINE_CONSOLE_SESSION_IDLE_MINUTES without a request (`last_seen_at`, renewed by each
-- request), and when their person's credential changes (`credential_check`: an HMAC of the role
-- and the secret keyed by the session id, which only the browser holds; a session from before
-- this column has none and ends at its next request).

ALTER TABLE console_session
    ADD COLUMN last_seen_at     timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN credential_check bytea CHECK (octet_length(credential_check) = 32);

COMMENT ON COLUMN console_session.last_seen_at IS
    'The last request of the session; idle longer than the console allows, it ends.';
COMMENT ON COLUMN console_session.credential_check IS
    'HMAC-SHA256 of the role and secret the session was opened with, keyed by the session id.';
