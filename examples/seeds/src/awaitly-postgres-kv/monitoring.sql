-- awaitly-postgres docs (key-value store), "Monitoring": verbatim.
-- Check table size
SELECT pg_size_pretty(pg_total_relation_size('awaitly_workflow_state'));

-- Check index usage
SELECT * FROM pg_stat_user_indexes 
WHERE indexrelname = 'idx_awaitly_workflow_state_expires_at';
