import type { AdoptionPlanItem, Backend, DoctorOptions, Finding, InspectQuery, OpenOptions, Page, RowOf, Section } from '../model.js';
import { loadPeer } from '../peers.js';
import type { MongoSession } from './session.js';
import { adopt, adoptionPlan } from './adopt.js';
import { doctor } from './doctor.js';
import * as views from './inspect.js';

export class MongoBackend implements Backend {
  readonly kind = 'mongo';

  private constructor(
    private readonly session: MongoSession,
    private readonly options: OpenOptions,
  ) {}

  static async open(url: string, options: OpenOptions): Promise<MongoBackend> {
    const { MongoClient } = await loadPeer<typeof import('mongodb')>('mongodb');
    const adapter = await loadPeer<typeof import('@stowage/mongo')>('@stowage/mongo');
    // Reads go to the primary whatever the URL says: the views show what the stores see.
    const client = new MongoClient(url, { appName: 'stowage-cli', serverSelectionTimeoutMS: 10_000, readPreference: 'primary' });
    await client.connect();
    const db = client.db(options.database);
    const collections: Record<string, string> = { ...adapter.DEFAULT_COLLECTIONS, ...options.names };
    // The claim tickets follow the process collection unless named (as the process backend names them).
    if (options.names?.process !== undefined && options.names.processClaims === undefined) collections.processClaims = `${options.names.process}_claims`;
    const now = async () => {
      const hello = await db.admin().command({ hello: 1 }).catch(() => ({}) as { localTime?: Date });
      return hello.localTime instanceof Date ? hello.localTime : new Date();
    };
    return new MongoBackend({ client, db, url, collections, now }, options);
  }

  inspect<S extends Section>(section: S, query: InspectQuery): Promise<Page<RowOf[S]>> {
    return views[section](this.session, query) as Promise<Page<RowOf[S]>>;
  }

  workflow(namespace: string, id: string): Promise<unknown> {
    return views.workflow(this.session, namespace, id);
  }

  doctor(options: DoctorOptions): Promise<Finding[]> {
    return doctor(this.session, options);
  }

  adoptionPlan(): Promise<AdoptionPlanItem[]> {
    return adoptionPlan(this.session);
  }

  adopt(plan: AdoptionPlanItem[], progress: (line: string) => void): Promise<void> {
    return adopt(this.session, this.options, plan, progress);
  }

  close(): Promise<void> {
    return this.session.client.close();
  }
}
