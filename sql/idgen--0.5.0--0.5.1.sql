-- idgen 0.5.0 -> 0.5.1: the comments of the history's machine id name every event that records
-- none (refused_no_standby too). No object but these comments changes; the 0.5.1 library also
-- runs against 0.5.0's objects.
\echo Use "ALTER EXTENSION idgen UPDATE TO '0.5.1'" to load this file. \quit

COMMENT ON COLUMN idgen_private.idgen_history.machine_id IS 'The machine id concerned; NULL for a claim refused because the service is full or no synchronous standby streams (refused_full, refused_no_standby).';
COMMENT ON COLUMN idgen_events.machine_id IS 'The machine id; NULL for refused_full and refused_no_standby.';
