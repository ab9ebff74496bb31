/**
 * Sees every command a MongoClient sends, through the driver's command monitoring. Only
 * clients created with `monitorCommands: true` report, and the monitoring itself costs time
 * (the driver decodes every reply for the succeeded event), so measured clients never have
 * it on: the bench counts and captures on a separate, observed client.
 */
import type { CommandStartedEvent, MongoClient } from 'mongodb';

export interface MongoCommand {
  name: string;
  databaseName: string;
  command: Record<string, unknown>;
}

export class MongoRecorder {
  #active: MongoCommand[] | null = null;

  /** Reports the commands of `client` (created with `monitorCommands: true`) while recording. */
  attach(client: MongoClient): void {
    client.on('commandStarted', (event: CommandStartedEvent) => {
      this.#active?.push({
        name: event.commandName,
        databaseName: event.databaseName,
        command: event.command as Record<string, unknown>,
      });
    });
  }

  /** Runs `fn` and returns every command sent while it ran (nothing else may run meanwhile). */
  async record<T>(fn: () => Promise<T>): Promise<{ result: T; commands: MongoCommand[] }> {
    if (this.#active !== null) throw new Error('MongoRecorder.record does not nest');
    const commands: MongoCommand[] = [];
    this.#active = commands;
    try {
      const result = await fn();
      return { result, commands };
    } finally {
      this.#active = null;
    }
  }
}
