import type { Backend } from './model.js';

export async function serve(_backend: Backend, _options: { port: number }): Promise<number> {
  return 0;
}
