/**
 * Imported first by a worker that runs a package's TypeScript sources in a child process with
 * Node's type stripping (`node worker.ts`): the sources import each other as `./x.js`, as they
 * are compiled, and this hook finds `./x.ts` where no `./x.js` exists. The worker then loads
 * the sources with a dynamic `import()`, which runs after this module.
 */
import { registerHooks } from 'node:module';

registerHooks({
  resolve(specifier, context, nextResolve) {
    try {
      return nextResolve(specifier, context);
    } catch (error) {
      if (specifier.startsWith('.') && specifier.endsWith('.js')) return nextResolve(`${specifier.slice(0, -3)}.ts`, context);
      throw error;
    }
  },
});
