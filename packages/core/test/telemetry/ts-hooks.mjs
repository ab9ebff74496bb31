// `node --import ./ts-hooks.mjs`: runs the TypeScript sources as they are (their `.js` specifiers
// name `.ts` files) and records every module specifier the process resolves, in
// `globalThis.resolvedSpecifiers`, so a test can tell which packages a run loaded.
import { existsSync, readFileSync } from 'node:fs';
import { registerHooks, stripTypeScriptTypes } from 'node:module';
import { fileURLToPath } from 'node:url';

globalThis.resolvedSpecifiers = [];

registerHooks({
  resolve(specifier, context, nextResolve) {
    globalThis.resolvedSpecifiers.push(specifier);
    if (specifier.startsWith('.') && specifier.endsWith('.js') && context.parentURL?.endsWith('.ts')) {
      const source = new URL(specifier.replace(/\.js$/, '.ts'), context.parentURL);
      if (existsSync(fileURLToPath(source))) return nextResolve(source.href, context);
    }
    return nextResolve(specifier, context);
  },
  load(url, context, nextLoad) {
    if (!url.startsWith('file:') || !url.endsWith('.ts')) return nextLoad(url, context);
    const code = readFileSync(fileURLToPath(url), 'utf8');
    return { format: 'module', source: stripTypeScriptTypes(code, { mode: 'transform', sourceUrl: url }), shortCircuit: true };
  },
});
