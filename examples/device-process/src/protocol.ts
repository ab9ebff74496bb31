/** What a worker process prints on stdout, one JSON object per line, for the orchestrator (`main.ts`). */
export type WorkerLine =
  | { t: 'ready'; worker: string; pid: number }
  | { t: 'feed'; worker: string; state: string; resumed: boolean; position: string | null }
  | { t: 'call'; worker: string; device: string; state: string; key: string; attempt: number; applied: boolean }
  | { t: 'event'; worker: string; type: string; device: string; state: string; detail: string }
  | { t: 'cursor'; worker: string; state: string; position: string }
  | { t: 'stopped'; worker: string; handedBack: number };
