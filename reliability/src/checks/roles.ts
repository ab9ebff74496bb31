/**
 * Login roles for the checks that run stowage with less than a superuser's rights (errors,
 * least privilege). Roles are cluster-wide, so each is named after the run's namespace and
 * dropped, with whatever was granted to it, when the check ends.
 */
import { withClient } from '../backends/pg-admin.ts';

export interface Role {
  name: string;
  /** The server URL with this role as the user (the test server trusts local connections). */
  url: string;
}

export class Roles {
  readonly #url: string;
  readonly #namespace: string;
  readonly #created: string[] = [];

  constructor(url: string, namespace: string) {
    this.#url = url;
    this.#namespace = namespace;
  }

  /** Creates `<namespace>_<suffix>` with LOGIN and nothing else, then runs `setup` (grants, settings) as the admin. */
  async create(suffix: string, setup: (name: string) => string[] = () => []): Promise<Role> {
    const name = `${this.#namespace}_${suffix}`;
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`bad role name ${name}`);
    await withClient(this.#url, async (client) => {
      await client.query(`CREATE ROLE ${name} LOGIN`);
      this.#created.push(name);
      for (const statement of setup(name)) await client.query(statement);
    });
    const url = new URL(this.#url);
    url.username = name;
    url.password = '';
    return { name, url: url.toString() };
  }

  /** Drops every role created here, with its privileges and settings. */
  async dropAll(): Promise<void> {
    await withClient(this.#url, async (client) => {
      for (const name of this.#created.splice(0)) {
        // Sessions of the role that a failed check left open would block DROP ROLE.
        await client.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [name]);
        await client.query(`DROP OWNED BY ${name}`);
        await client.query(`DROP ROLE ${name}`);
      }
    });
  }
}
