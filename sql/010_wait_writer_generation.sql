-- The consumer group generation in which a wait record's writer owned the source partition
-- (the WAITLINE_GENERATION header; DESIGN.md "Rebalances"). A prepare with a lower generation
-- than the row's never replaces it: it comes from an owner of the record before the one that
-- wrote the row, and landed late. A withdrawal deletes the row only if its own generation wrote
-- it. NULL for rows written without the header (pods from before it, other writers): between
-- them and any row the offsets decide, as before.

ALTER TABLE wait ADD COLUMN writer_generation integer CHECK (writer_generation >= 0);

COMMENT ON COLUMN wait.writer_generation IS
    'WAITLINE_GENERATION of the record this row came from: the group generation in which its '
    'writer owned the source partition; NULL when the record had none.';
