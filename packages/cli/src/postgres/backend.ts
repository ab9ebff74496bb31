import type { AdoptionPlanItem, Backend, DoctorOptions, Finding, InspectQuery, OpenOptions, Page, RowOf, Section } from '../model.js';
import { PgSession } from './connection.js';
import * as views from './inspect.js';
import { doctor } from './doctor.js';
import { adopt, adoptionPlan } from './adopt.js';

export class PostgresBackend implements Backend {
  readonly kind = 'postgres';

  private constructor(
    private readonly session: PgSession,
    private readonly url: string,
    private readonly options: OpenOptions,
  ) {}

  static async open(url: string, options: OpenOptions): Promise<PostgresBackend> {
    return new PostgresBackend(await PgSession.open(url, { schema: options.schema, tables: options.names }), url, options);
  }

  inspect<S extends Section>(section: S, query: InspectQuery): Promise<Page<RowOf[S]>> {
    return views[section](this.session, query) as Promise<Page<RowOf[S]>>;
  }

  workflow(namespace: string, id: string): Promise<unknown> {
    return views.workflow(this.session, namespace, id);
  }

  doctor(options: DoctorOptions): Promise<Finding[]> {
    return doctor(this.session, this.url, { ...options, schema: this.options.schema, names: this.options.names });
  }

  adoptionPlan(): Promise<AdoptionPlanItem[]> {
    return adoptionPlan(this.session, this.options);
  }

  adopt(plan: AdoptionPlanItem[], progress: (line: string) => void): Promise<void> {
    return adopt(this.session, this.url, this.options, plan, progress);
  }

  close(): Promise<void> {
    return this.session.close();
  }
}
