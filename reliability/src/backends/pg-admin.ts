import pg from 'pg';

/** Every connection the battery opens names itself with this prefix (see pg_stat_activity). */
export const APPLICATION_NAME = 'stowage-reliability';

/** One short-lived raw `pg` connection for set-up, checks and clean-up (never through stowage). */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-admin` });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}
