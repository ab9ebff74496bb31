-- awaitly-postgres docs (snapshot store), "Monitoring": verbatim.
-- Check table size
SELECT pg_size_pretty(pg_total_relation_size('awaitly_snapshots'));

-- Count by status
SELECT (snapshot->'execution')->>'status' AS status, COUNT(*)
FROM awaitly_snapshots
GROUP BY 1;
