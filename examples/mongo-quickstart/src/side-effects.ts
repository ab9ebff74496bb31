import type { Db } from 'mongodb';

interface SideEffect {
  _id: { workflowId: string; step: string };
  calls: number;
}

/** Every call of a step's function adds one here: how the demo counts what really ran. */
export class SideEffects {
  readonly #collection;

  constructor(db: Db) {
    this.#collection = db.collection<SideEffect>('checkout_side_effects');
  }

  async record(workflowId: string, step: string): Promise<void> {
    await this.#collection.updateOne({ _id: { workflowId, step } }, { $inc: { calls: 1 } }, { upsert: true });
  }

  async calls(workflowId: string): Promise<Record<string, number>> {
    const rows = await this.#collection.find({ '_id.workflowId': workflowId }).toArray();
    return Object.fromEntries(rows.map((row) => [row._id.step, row.calls]).sort());
  }
}
