/** Loads awaitly-mongo with the `awaitly/durable` helpers it expects (see shims/awaitly-durable.ts). */
import { registerHooks } from 'node:module';

let registered = false;

export async function importAwaitlyMongo(): Promise<typeof import('awaitly-mongo')> {
  if (!registered) {
    registered = true;
    const shim = new URL('./shims/awaitly-durable.ts', import.meta.url).href;
    registerHooks({
      resolve(specifier, context, nextResolve) {
        if (specifier === 'awaitly/durable' && context.parentURL?.includes('/awaitly-mongo/')) {
          return { url: shim, shortCircuit: true };
        }
        return nextResolve(specifier, context);
      },
    });
  }
  return import('awaitly-mongo');
}
