/**
 * The READMEs are part of the product: every TypeScript or JavaScript code block in every
 * README of the repository compiles (`tsc --strict` against the built packages, awaitly, `pg`
 * and `mongodb`), and the blocks marked `<!-- runs: memory | postgres | mongo -->` also run, as
 * a user would paste them, against a real database.
 *
 * How a block is read:
 * - It is a module of its own. A block without `import` continues the README's package: it sees
 *   every value that package exports (the README imported them in an earlier block).
 * - The names of the user's application (`fetchUser`, `loadUser`, a `pool`, a `url`, …) are the
 *   globals of ../readme/application.ts, which the runnable blocks get preloaded.
 * - A block that is deliberately not code a user can compile as it stands (a document's shape,
 *   a mongosh command, a skeleton whose bodies are comments) says so on the line before its
 *   fence: `<!-- fragment: why -->`. Nothing else is skipped.
 *
 * Besides the code, the root README's examples table lists every package in examples/.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { MongoClient } from 'mongodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMongoServer, startEmbeddedPostgres, type FoundBackend } from '@stowage/test-env';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../', import.meta.url));
const integration = fileURLToPath(new URL('../', import.meta.url));
const work = join(integration, '.tmp', 'readme-code');
const tsc = join(integration, 'node_modules', 'typescript', 'bin', 'tsc');
const application = join(integration, 'readme', 'application.ts');

/** The package a README documents: what a block without imports continues. */
const README_PACKAGES: Record<string, string> = {
  'packages/core/README.md': '@stowage/core',
  'packages/postgres/README.md': '@stowage/postgres',
  'packages/mongo/README.md': '@stowage/mongo',
};

const CODE_LANGUAGES = new Set(['ts', 'typescript', 'js', 'javascript', 'mjs', 'cjs']);

interface Block {
  readme: string;
  /** 1-based line of the block's first code line in the README. */
  line: number;
  code: string;
  fragment?: string;
  runs?: 'memory' | 'postgres' | 'mongo';
}

function readmes(): string[] {
  const found = ['README.md'];
  for (const dir of ['packages', 'examples', 'tools']) {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      if (entry.isDirectory() && existsSync(join(root, dir, entry.name, 'README.md'))) found.push(`${dir}/${entry.name}/README.md`);
    }
  }
  for (const dir of ['bench', 'reliability']) if (existsSync(join(root, dir, 'README.md'))) found.push(`${dir}/README.md`);
  return found;
}

function codeBlocks(readme: string): Block[] {
  const lines = readFileSync(join(root, readme), 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\S*)\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const [, indent, language] = open;
    let end = i + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++;
    if (CODE_LANGUAGES.has(language!)) {
      let previous = i - 1;
      while (previous >= 0 && lines[previous]!.trim() === '') previous--;
      const marker = /^\s*<!--\s*(fragment|runs):\s*(.*?)\s*-->\s*$/.exec(lines[previous] ?? '');
      const code = lines.slice(i + 1, end).map((line) => (line.startsWith(indent!) ? line.slice(indent!.length) : line));
      const block: Block = { readme, line: i + 2, code: code.join('\n') };
      if (marker?.[1] === 'fragment') block.fragment = marker[2];
      if (marker?.[1] === 'runs') block.runs = marker[2] as Block['runs'];
      blocks.push(block);
    }
    i = end;
  }
  return blocks;
}

interface WrittenBlock extends Block {
  file: string;
  /** Lines added before the block's code. */
  header: number;
}

/** Writes a block as a module under `work`; relative imports are resolved from its README's directory. */
async function writeBlock(block: Block, index: number): Promise<WrittenBlock> {
  const readmeDir = dirname(join(root, block.readme));
  let code = block.code.replace(/(from\s+|import\s*\(\s*)(['"])(\.{1,2}\/[^'"]+)\2/g, (_match, lead: string, quote: string, specifier: string) =>
    `${lead}${quote}${resolve(readmeDir, specifier)}${quote}`,
  );
  const header: string[] = [];
  const pkg = README_PACKAGES[block.readme];
  if (pkg !== undefined && !/^\s*import\s/m.test(code)) {
    const declared = new Set([...code.matchAll(/\b(?:const|let|var|function|class)\s+([A-Za-z_$][\w$]*)/g)].map((m) => m[1]));
    const names = Object.keys(await import(pkg)).filter((name) => !declared.has(name));
    header.push(`import { ${names.join(', ')} } from '${pkg}';`);
  }
  code = `${header.join('\n')}${header.length > 0 ? '\n' : ''}${code}\nexport {};\n`;
  const file = join(work, `${block.readme.replaceAll('/', '_').replace(/\.md$/, '')}_L${block.line}_${index}.ts`);
  writeFileSync(file, code);
  return { ...block, file, header: header.length };
}

const blocks = readmes().flatMap(codeBlocks);
let written: WrittenBlock[] = [];

beforeAll(async () => {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  written = await Promise.all(blocks.filter((block) => block.fragment === undefined).map(writeBlock));
});

describe('README code blocks', () => {
  it('finds the code blocks, and every fragment says why it is one', () => {
    expect(blocks.length).toBeGreaterThan(40);
    for (const block of blocks.filter((b) => b.fragment !== undefined)) {
      expect(block.fragment, `${block.readme}:${block.line}`).not.toBe('');
    }
  });

  it('compile under tsc --strict', async () => {
    writeFileSync(
      join(work, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: 'es2022',
          lib: ['es2024', 'esnext.disposable'],
          module: 'nodenext',
          moduleResolution: 'nodenext',
          types: ['node'],
          skipLibCheck: true,
          allowImportingTsExtensions: true,
        },
        files: [...written.map((block) => block.file), application, join(integration, 'types', 'go-go-scope.d.ts')],
      }),
    );
    const output = await run(process.execPath, [tsc, '-p', join(work, 'tsconfig.json'), '--pretty', 'false'], { cwd: work, maxBuffer: 1 << 24 }).then(
      ({ stdout }) => stdout,
      (error: { stdout: string }) => error.stdout,
    );
    // Each error at its line in the README.
    const errors = output
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => {
        const at = /^(.*?)\((\d+),(\d+)\): (.*)$/.exec(line);
        const block = at && written.find((b) => resolve(work, at[1]!) === b.file);
        if (!at || !block) return line;
        return `${block.readme}:${block.line + Number(at[2]) - 1 - block.header}: ${at[4]}`;
      });
    expect(errors).toEqual([]);
  });
});

describe('README code blocks that run', () => {
  let postgresServer: FoundBackend;
  let mongoServer: FoundBackend | null;
  let mongoDatabase: string;

  beforeAll(async () => {
    postgresServer = await startEmbeddedPostgres(); // a database of its own: the quick starts use the default table names
    mongoServer = await findMongoServer();
    mongoDatabase = `readme_${process.pid}_${Date.now()}`;
  });
  afterAll(async () => {
    await postgresServer?.stop();
    if (mongoServer) {
      const client = await new MongoClient(mongoServer.url).connect();
      await client.db(mongoDatabase).dropDatabase().catch(() => {});
      await client.close();
      await mongoServer.stop();
    }
  });

  const runnable = blocks.filter((block) => block.runs !== undefined);

  it('include the quick start of every package', () => {
    expect(runnable.map((block) => `${block.readme} ${block.runs}`)).toEqual(
      expect.arrayContaining([
        'packages/core/README.md memory',
        'packages/postgres/README.md postgres',
        'packages/mongo/README.md mongo',
      ]),
    );
  });

  for (const block of runnable) {
    it(`${block.readme}:${block.line} runs on ${block.runs}`, async (context) => {
      const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: postgresServer.url };
      if (block.runs === 'mongo') {
        if (mongoServer === null) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
        const url = new URL(mongoServer.url);
        url.pathname = `/${mongoDatabase}`;
        env.MONGODB_URI = url.toString();
      }
      const { file } = written.find((b) => b.readme === block.readme && b.line === block.line)!;
      const { stdout, stderr } = await run(process.execPath, ['--import', application, file], { cwd: work, env, timeout: 60_000 });
      expect(stderr.replace(/^.*ExperimentalWarning.*\n?|^.*--trace-warnings.*\n?/gm, '')).toBe('');
      return stdout;
    });
  }
});

describe('the root README', () => {
  it('lists every example in its examples table', () => {
    const text = readFileSync(join(root, 'README.md'), 'utf8');
    const listed = [...text.matchAll(/^\| \[([\w-]+)\]\(examples\/([\w-]+)\)/gm)].map((m) => m[2]);
    const examples = readdirSync(join(root, 'examples'), { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && existsSync(join(root, 'examples', entry.name, 'package.json')))
      .map((entry) => entry.name);
    expect([...listed].sort()).toEqual([...examples].sort());
  });
});
