/**
 * awaitly-mongo 37 imports five helpers from `awaitly/durable` that arrived in awaitly 6;
 * the registry serves awaitly 1.35.0 only, so they are missing there. The bench supplies them
 * to awaitly-mongo (and only to it, through a resolve hook in awaitly-shim.ts). For the
 * WorkflowSnapshot objects the bench saves they only classify the value (a plain snapshot is
 * neither a ResumeState nor a serialized one), so awaitly-mongo sends exactly the commands it
 * would send with awaitly 6.
 */
export * from 'awaitly/durable';

interface SerializedResumeState {
  kind: 'awaitly-resume-state';
  steps: [string, unknown][];
}

export function isResumeState(value: unknown): value is { steps: Map<string, unknown> } {
  return typeof value === 'object' && value !== null && (value as { steps?: unknown }).steps instanceof Map;
}

export function isSerializedResumeState(value: unknown): value is SerializedResumeState {
  return typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'awaitly-resume-state';
}

export function serializeResumeState(state: { steps: Map<string, unknown> }): SerializedResumeState {
  return { kind: 'awaitly-resume-state', steps: [...state.steps.entries()] };
}

export function deserializeResumeState(serialized: SerializedResumeState): { steps: Map<string, unknown> } {
  return { steps: new Map(serialized.steps) };
}

export function isWorkflowSnapshot(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { formatVersion?: unknown }).formatVersion === 1;
}
