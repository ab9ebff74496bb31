import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { SECTIONS, type Backend, type InspectQuery, type Page, type RowOf, type Section } from './model.js';
import { duration, print } from './output.js';
import { redact } from './redact.js';
import { COLUMNS } from './views.js';

/*
 * `stowage ui`: one read-only page on 127.0.0.1 with the views of `inspect`. The server renders
 * every table into the HTML (it works without JavaScript, and a test reads it from the DOM);
 * a few lines of inline script count lease expiries down each second and reload the page's
 * data every 5 s. No external assets, no build step, GET only.
 */

const PAGE_SIZE = 100;

export async function serve(backend: Backend, options: { port: number; host?: string }): Promise<number> {
  const server = createServer((request, response) => {
    handle(backend, request, response).catch((error: unknown) => {
      if (!response.headersSent) response.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      response.end(redact(`error: ${(error as Error).message}`));
    });
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => resolve());
  });
  const { port } = server.address() as { port: number };
  print(`stowage ui: http://${host}:${port}/ (read-only; Ctrl-C to stop)`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => resolve());
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return 0;
}

async function handle(backend: Backend, request: IncomingMessage, response: ServerResponse): Promise<void> {
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    response.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('read-only');
    return;
  }
  const url = new URL(request.url ?? '/', 'http://localhost');
  const query: InspectQuery = { limit: PAGE_SIZE, prefix: url.searchParams.get('prefix') ?? undefined };
  if (url.pathname === '/') {
    const pages = await Promise.all(SECTIONS.map(async (section) => [section, await backend.inspect(section, query)] as const));
    send(response, 200, 'text/html; charset=utf-8', page(backend.kind, pages));
  } else if (url.pathname.startsWith('/api/') && SECTIONS.includes(url.pathname.slice(5) as Section)) {
    send(response, 200, 'application/json', JSON.stringify(await backend.inspect(url.pathname.slice(5) as Section, query)));
  } else if (url.pathname === '/api/workflow') {
    const snapshot = await backend.workflow(url.searchParams.get('namespace') ?? '', url.searchParams.get('id') ?? '');
    send(response, snapshot === null ? 404 : 200, 'application/json', JSON.stringify(snapshot));
  } else if (url.pathname === '/workflow') {
    const namespace = url.searchParams.get('namespace') ?? '';
    const id = url.searchParams.get('id') ?? '';
    send(response, 200, 'text/html; charset=utf-8', timeline(namespace, id, await backend.workflow(namespace, id)));
  } else {
    send(response, 404, 'text/plain', 'not found');
  }
}

function send(response: ServerResponse, status: number, type: string, body: string): void {
  // No external assets: the policy forbids every source but this page's own inline code.
  response.writeHead(status, {
    'content-type': type,
    'cache-control': 'no-store',
    'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'",
  });
  response.end(redact(body));
}

const escape = (text: string) => text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);

const STYLE = `body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#222}h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.5rem}
table{border-collapse:collapse;min-width:40rem}th,td{text-align:left;padding:.25rem .6rem;border-bottom:1px solid #ddd;font-family:ui-monospace,monospace;font-size:13px}
th{background:#f3f3f3}.note{color:#777}.s-running,.s-open,.s-in-flight,.s-held{color:#b36b00}.s-failed{color:#b00020}.s-completed,.s-closed{color:#1a7f37}
.step{display:flex;gap:.6rem;align-items:baseline;border-left:3px solid #1a7f37;padding:.2rem .6rem;margin:.2rem 0}.step.failed{border-color:#b00020}`;

/** Counts `data-expires-in` cells down from the moment the page was rendered, every second. */
const SCRIPT = `const start=Date.now();function fmt(ms){if(ms<=0)return'expired';let s=Math.floor(ms/1000);const d=[[86400,'d'],[3600,'h'],[60,'m'],[1,'s']];const out=[];for(const[n,u]of d){if(s>=n){out.push(Math.floor(s/n)+u);s%=n}if(out.length===2)break}return out.join(' ')||'0s'}
function tick(){for(const el of document.querySelectorAll('[data-expires-in]')){el.textContent=fmt(Number(el.dataset.expiresIn)-(Date.now()-start))}}
tick();setInterval(tick,1000);setTimeout(()=>location.reload(),5000);document.body.dataset.script='ran';`;

function page(kind: string, pages: ReadonlyArray<readonly [Section, Page<RowOf[Section]>]>): string {
  const sections = pages.map(([section, data]) => {
    const columns = COLUMNS[section] as unknown as { title: string; value: (row: RowOf[Section]) => string }[];
    const body =
      data.note !== undefined
        ? `<p class="note">${escape(data.note)}</p>`
        : data.items.length === 0
          ? '<p class="note">none</p>'
          : `<table id="${section}"><thead><tr>${columns.map((column) => `<th>${escape(column.title)}</th>`).join('')}</tr></thead><tbody>${data.items
              .map((row) => `<tr>${columns.map((column) => cell(section, column.title, row, column.value(row))).join('')}</tr>`)
              .join('')}</tbody></table>${data.nextCursor ? `<p class="note">first ${PAGE_SIZE} shown; \`stowage inspect ${section} --all\` lists every one</p>` : ''}`;
    return `<section><h2>${section}</h2>${body}</section>`;
  });
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stowage (${kind})</title><style>${STYLE}</style></head>
<body><h1>stowage — ${escape(kind)} (read-only)</h1>${sections.join('\n')}<script>${SCRIPT}</script></body></html>`;
}

/** A cell; status columns get a class, expiry columns count down, workflow ids link to their timeline. */
function cell(section: Section, title: string, row: RowOf[Section], text: string): string {
  if (section === 'workflows' && title === 'ID') {
    const workflow = row as RowOf['workflows'];
    return `<td><a href="/workflow?namespace=${encodeURIComponent(workflow.namespace)}&amp;id=${encodeURIComponent(workflow.id)}">${escape(text)}</a></td>`;
  }
  if (title === 'STATUS' || title === 'STATE') return `<td class="s-${escape(text)}">${escape(text)}</td>`;
  if (section === 'locks' && title === 'EXPIRES IN') {
    return `<td data-expires-in="${(row as RowOf['locks']).expiresInMs}">${escape(text)}</td>`;
  }
  if (section === 'workflows' && title === 'LEASE') {
    const workflow = row as RowOf['workflows'];
    if (workflow.leaseOwner !== null) {
      return `<td>${escape(workflow.leaseOwner)} (<span data-expires-in="${workflow.leaseExpiresInMs}">${duration(workflow.leaseExpiresInMs)}</span> left)</td>`;
    }
  }
  return `<td>${escape(text)}</td>`;
}

/** One workflow's steps in order, each with its outcome and value or error (truncated). */
function timeline(namespace: string, id: string, snapshot: unknown): string {
  const doc = (snapshot ?? {}) as { execution?: { status?: string; currentStepId?: string }; steps?: Record<string, { ok?: boolean; value?: unknown; error?: unknown }> };
  const steps = Object.entries(doc.steps ?? {}).map(([step, result]) => {
    const detail = JSON.stringify(result?.ok ? result.value : result?.error) ?? '';
    return `<div class="step ${result?.ok ? 'ok' : 'failed'}"><b>${escape(step)}</b><span>${result?.ok ? 'ok' : 'failed'}</span><code>${escape(detail.length > 200 ? `${detail.slice(0, 197)}...` : detail)}</code></div>`;
  });
  const status = snapshot === null ? 'not found' : (doc.execution?.status ?? 'unknown');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(id)}</title><style>${STYLE}</style></head>
<body><p><a href="/">all workflows</a></p><h1>${escape(namespace)}${escape(id)}: <span class="s-${escape(status)}">${escape(status)}</span></h1>
${doc.execution?.currentStepId ? `<p>current step: <b>${escape(doc.execution.currentStepId)}</b></p>` : ''}${steps.join('\n')}</body></html>`;
}

