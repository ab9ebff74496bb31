-- awaitly-postgres docs (key-value store), "Automatic Table Creation": verbatim.
CREATE TABLE IF NOT EXISTS awaitly_workflow_state (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  expires_at TIMESTAMP
);

CREATE INDEX IF NOT EXISTS idx_awaitly_workflow_state_expires_at 
ON awaitly_workflow_state(expires_at) 
WHERE expires_at IS NOT NULL;
