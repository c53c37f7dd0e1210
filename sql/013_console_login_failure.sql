-- Failed console logins (dispatcher/console/throttle.py), shared by every console replica so
-- that N replicas allow no more guesses than one and a restart forgets none. A key is a user
-- name, a bucket of unknown names or a bucket of client addresses; only its SHA-256 is kept
-- (a password typed into the name field must not be stored). Times are epoch seconds of the
-- consoles' clocks.

CREATE TABLE console_login_failure (
    key_digest     bytea            PRIMARY KEY CHECK (octet_length(key_digest) = 32),
    failures       integer          NOT NULL,
    last_failed_at double precision NOT NULL,
    locked_until   double precision NOT NULL
);
CREATE INDEX console_login_failure_age_idx
    ON console_login_failure (greatest(last_failed_at, locked_until));

COMMENT ON TABLE console_login_failure IS
    'Failed console logins per key (SHA-256 of a name or address bucket) and its lock-out.';
