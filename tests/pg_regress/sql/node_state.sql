-- The state of a registry row from its times, by the claim's own rules (idgen_node_state), and
-- how idgen names a node (idgen_node_name). With the default settings: a 1-hour lease less the
-- 5-minute margin, take-backs after 7 days, 1 day and 1 hour idle, a 1-minute cooldown.
CREATE EXTENSION idgen;
\set SHOW_CONTEXT never
SELECT label, idgen_node_state(last_seen, released_at, lease_until, takeover_at) AS state
  FROM (VALUES
    ('seen a minute ago, inside its lease', now() - interval '1 minute', NULL::timestamptz,
     now() + interval '54 minutes', now() + interval '59 minutes'),
    ('past its lease, not yet an hour idle', now() - interval '58 minutes', NULL,
     now() - interval '3 minutes', now() + interval '2 minutes'),
    ('idle for 2 hours', now() - interval '2 hours', NULL, now() - interval '65 minutes', now() - interval '1 hour'),
    ('idle for 2 days', now() - interval '2 days', NULL, now() - interval '47 hours', now() - interval '47 hours'),
    ('idle for 8 days', now() - interval '8 days', NULL, now() - interval '191 hours', now() - interval '191 hours'),
    ('released 10 seconds ago', now() - interval '1 hour', now() - interval '10 seconds', NULL, NULL),
    ('released an hour ago', now() - interval '2 hours', now() - interval '1 hour', NULL, NULL)
  ) AS t(label, last_seen, released_at, lease_until, takeover_at);
SELECT idgen_node_state(NULL, NULL, NULL, NULL);
\echo :LAST_ERROR_SQLSTATE

SELECT idgen_node_name('10.0.0.5', 8080, NULL) AS service_node,
       idgen_node_name('2001:db8::6', 8080, NULL) AS v6,
       idgen_node_name('127.0.0.1', 5432, 7) AS backend,
       idgen_node_name(NULL, 8080, NULL) AS no_host;
DROP EXTENSION idgen CASCADE;
