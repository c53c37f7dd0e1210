-- Drop-in for the reference design (DESIGN.md "Reconciliation job", issue 12): its wait records
-- are keyed by random UUIDs, not by Waitline's UUIDv5 of group and source coordinates. Such rows
-- are mirrored like any other; this flag lets `waitline registry stats` count them.

ALTER TABLE wait ADD COLUMN wait_id_derived boolean NOT NULL DEFAULT true;

COMMENT ON COLUMN wait.wait_id_derived IS
    'True when wait_id is the UUIDv5 of dispatcher_group/original topic/partition/offset; false '
    'for a wait id chosen otherwise (e.g. a random UUID from the reference design), which is '
    'mirrored and expired all the same and carried as is into the DLQ record.';
