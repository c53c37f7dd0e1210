-- Console browser sessions (dispatcher/console/sessions.py), kept in PostgreSQL so that they
-- survive a restart of the console and every replica behind a balancer knows them. Only a
-- SHA-256 digest of the session id is stored (the id itself lives in the browser's cookie);
-- the session's CSRF token is derived from the id, so it is not stored either.

CREATE TABLE console_session (
    id_digest   bytea       PRIMARY KEY CHECK (octet_length(id_digest) = 32),
    name        text        NOT NULL,
    role        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX console_session_expiry_idx ON console_session (expires_at);

COMMENT ON TABLE console_session IS
    'Console browser sessions: the SHA-256 of each session id, who it is, when it expires.';
