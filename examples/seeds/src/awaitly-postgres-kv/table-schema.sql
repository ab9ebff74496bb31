-- awaitly-postgres docs (key-value store), "Table Schema": verbatim.
CREATE TABLE awaitly_workflow_state (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  expires_at TIMESTAMP
);

CREATE INDEX idx_awaitly_workflow_state_expires_at 
ON awaitly_workflow_state(expires_at) 
WHERE expires_at IS NOT NULL;
