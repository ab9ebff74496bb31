-- awaitly-postgres docs (key-value store), "Table Maintenance": verbatim.
DELETE FROM awaitly_workflow_state 
WHERE expires_at IS NOT NULL 
  AND expires_at < NOW();
