/** Operations that mean a worker executed workflow code (a workflow task or a query task). */
export const workflowTaskOperations = [
  'RespondWorkflowTaskCompleted',
  'RespondWorkflowTaskFailed',
  'RespondQueryTaskCompleted',
] as const;

/**
 * Reads the Temporal server's `service_requests` counters of the frontend, for namespace
 * `default`, by gRPC operation. The server's own system workflows (namespace temporal-system) and
 * the history/matching services' internal calls are left out. Counting on the server means a
 * replay is judged by what the server saw, not by what the client believes it sent.
 */
export async function readServiceRequests(metricsUrl: string): Promise<Map<string, number>> {
  const response = await fetch(metricsUrl, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`metrics endpoint answered ${response.status}`);
  const counts = new Map<string, number>();
  for (const line of (await response.text()).split('\n')) {
    if (!line.startsWith('service_requests{')) continue;
    if (!line.includes('namespace="default"') || !line.includes('service_name="frontend"')) continue;
    const operation = /operation="([^"]+)"/.exec(line)?.[1];
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (operation === undefined || !Number.isFinite(value)) continue;
    counts.set(operation, (counts.get(operation) ?? 0) + value);
  }
  return counts;
}

/**
 * The server reports its counters every second or so, not as requests happen: a reading right
 * after a phase can miss that phase's last requests and charge them to the next one. Reads until
 * two readings a reporting interval apart agree (at most `maxReadings` times).
 */
export async function readSettledServiceRequests(metricsUrl: string, maxReadings = 10): Promise<Map<string, number>> {
  let previous = await readServiceRequests(metricsUrl);
  for (let reading = 1; reading < maxReadings; reading++) {
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const current = await readServiceRequests(metricsUrl);
    const settled = [...current].every(([op, n]) => op.startsWith('Poll') || previous.get(op) === n);
    if (settled) return current;
    previous = current;
  }
  return previous;
}

/** How many workflow or query tasks workers completed between two readings. */
export function workflowTasksBetween(before: Map<string, number>, after: Map<string, number>): number {
  return workflowTaskOperations.reduce((sum, op) => sum + (after.get(op) ?? 0) - (before.get(op) ?? 0), 0);
}

/** Every frontend call between two readings except workers' long polls: what the callers cost Temporal. */
export function callsBetween(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const calls: Record<string, number> = {};
  for (const [operation, count] of after) {
    if (operation.startsWith('Poll')) continue;
    const delta = count - (before.get(operation) ?? 0);
    if (delta > 0) calls[operation] = delta;
  }
  return calls;
}
