/** The demo's figures: the waves' summaries, CPU per order, the worker's task metrics, the real server's counters. */
import type { Pool } from 'pg';
import type { Config } from '../../src/config';
import { MACHINE_PARTS, onRealServer, realServerMetrics, realServerPids, treesCpuMs, type MachineCpu } from '../shared/procCpu';
import type { PressResult } from '../../test/support/crowd';
import { bucketQuantile, countAbove, counter, counterBy, histogram } from '../../test/support/promText';
import { latencySummary, percentile } from '../../test/support/stats';
import type { LagSummary, LatencyWithMax, PaymentTally, ServerFigures, WaveSummary, WorkflowTaskFigures } from './types';

/** The machine's CPU by part (/proc), and when it was read (ms since the epoch). */
export type StackCpu = MachineCpu & { atMs: number };

/**
 * What became of the signalled payments (their paymentId is `pay-<orderId>`), from the orders' final rows: a row
 * made at or after its deadline was stored by a workflow that first ran after it.
 */
export async function signalFates(pool: Pool, orderIds: readonly string[]): Promise<PaymentTally['signal']> {
  const res = await pool.query<PaymentTally['signal']>(
    `SELECT count(*) FILTER (WHERE paid)::int AS paid,
            count(*) FILTER (WHERE NOT paid)::int AS "handledAfterDeadline"
       FROM (SELECT created_at, deadline_at, status = 'PAID' AND payment_id = 'pay-' || id::text AS paid
               FROM orders WHERE id = ANY($1::uuid[])) o`,
    [orderIds],
  );
  return res.rows[0];
}

/** A reading of the real server's counters so far, and the processes they were read from. */
export interface ServerReading extends ServerFigures {
  pids: Record<string, number>;
}

/**
 * @returns the real server's counters so far, summed over its services; undefined when the run is on the dev server
 * @throws when a service's metrics endpoint does not answer
 */
export async function serverCounters(config: Config): Promise<ServerReading | undefined> {
  if (!onRealServer(config.TEMPORAL_PORT)) return undefined;
  const texts = await Promise.all(realServerMetrics().map(async (url) => (await fetch(url)).text()));
  // The server's metrics name the namespace with Prometheus' characters only.
  const namespace = config.TEMPORAL_NAMESPACE.replace(/[^a-zA-Z0-9_]/g, '_');
  const actionsByType: Record<string, number> = {};
  for (const [type, n] of texts.flatMap((t) => Object.entries(counterBy(t, 'action', 'action_type', { namespace })))) actionsByType[type] = (actionsByType[type] ?? 0) + n;
  const pids = realServerPids();
  return {
    actions: Object.values(actionsByType).reduce((a, b) => a + b, 0),
    actionsByType,
    persistenceRequests: texts.reduce((n, t) => n + counter(t, 'persistence_requests'), 0),
    cpuMsByService: treesCpuMs(pids),
    pids,
  };
}

/**
 * @returns the server's figures per accepted order between two readings, or why there are none: a service that
 *   restarted in between started its counters again
 */
export function serverFigures(start: ServerReading, end: ServerReading, orders: number): ServerFigures | string {
  const restarted = Object.keys(start.pids).filter((service) => start.pids[service] !== end.pids[service]);
  if (restarted.length) return `the server's ${restarted.join(', ')} restarted during the run: its counters started again`;
  const per = (n: number) => Math.round((n / Math.max(1, orders)) * 100) / 100;
  const perKey = (a: Record<string, number>, b: Record<string, number>) => Object.fromEntries(Object.entries(b).map(([k, v]) => [k, per(v - (a[k] ?? 0))]).filter(([, v]) => v !== 0));
  return {
    actions: per(end.actions - start.actions),
    actionsByType: perKey(start.actionsByType, end.actionsByType),
    persistenceRequests: per(end.persistenceRequests - start.persistenceRequests),
    cpuMsByService: perKey(start.cpuMsByService, end.cpuMsByService),
  };
}

export const withMax = (values: number[]): LatencyWithMax => ({ ...latencySummary(values), max: Math.round(values.reduce((m, v) => Math.max(m, v), 0)) });

/** @returns per-order CPU ms of Temporal, the worker and PostgreSQL between two snapshots of the machine's CPU */
export function perOrder(before: StackCpu, after: StackCpu, orders: number) {
  type Part = (typeof MACHINE_PARTS)[number];
  const per = (k: Part) => Math.round(((after[k] - before[k]) / Math.max(1, orders)) * 100) / 100;
  const temporal = per('temporal');
  const worker = per('worker');
  const postgres = per('postgres');
  return { temporal, worker, postgres, total: Math.round((temporal + worker + postgres) * 100) / 100 };
}

/** The worker's Core metrics: workflow task latencies, failures and sticky cache misses. */
export function workerTaskMetrics(text: string): Omit<WorkflowTaskFigures, 'historiesScanned' | 'timedOutInHistory' | 'failedInHistory' | 'unhandledCommandBy' | 'perOrder' | 'returnLagMs'> {
  const execution = histogram(text, 'temporal_workflow_task_execution_latency');
  const toStart = histogram(text, 'temporal_workflow_task_schedule_to_start_latency');
  return {
    executed: execution.count,
    executionMs: { p50: bucketQuantile(execution, 0.5), p99: bucketQuantile(execution, 0.99) },
    slowExecutions: countAbove(execution, 5000),
    scheduleToStartMs: { p50: bucketQuantile(toStart, 0.5), p99: bucketQuantile(toStart, 0.99) },
    executionFailed: counter(text, 'temporal_workflow_task_execution_failed'),
    stickyCacheMisses: counter(text, 'temporal_sticky_cache_miss'),
  };
}

export function lagSummary(values: number[]): LagSummary {
  const sorted = [...values].sort((a, b) => a - b);
  return { count: sorted.length, p50: Math.round(percentile(sorted, 50)), p99: Math.round(percentile(sorted, 99)), max: Math.round(sorted[sorted.length - 1] ?? Number.NaN) };
}

export function summarize(results: readonly PressResult[], startMs: number, endMs: number, saleStartMs: number, units: number): WaveSummary {
  const statusCounts: Record<string, number> = {};
  for (const r of results) statusCounts[r.status || 'network error'] = (statusCounts[r.status || 'network error'] ?? 0) + 1;
  const accepted = results.filter((r) => r.status === 202);
  const durationMs = Math.max(1, endMs - startMs);
  const lastAnswer = results.reduce((m, r) => Math.max(m, r.answeredAtMs), startMs);
  const acceptedAt = accepted.map((r) => r.answeredAtMs).sort((a, b) => a - b);
  return {
    requests: results.length,
    durationMs,
    offeredRate: Math.round((results.length / durationMs) * 1000),
    servedRate: Math.round((results.filter((r) => r.status > 0).length / Math.max(1, lastAnswer - startMs)) * 1000),
    statusCounts,
    latencyAcceptedMs: latencySummary(accepted.map((r) => r.latencyMs)),
    latencySoldOutMs: latencySummary(results.filter((r) => r.status === 410).map((r) => r.latencyMs)),
    accepted: accepted.length,
    msToLastAccepted: acceptedAt.length ? acceptedAt[acceptedAt.length - 1] - saleStartMs : null,
    msToSoldOut: units > 0 && acceptedAt.length >= units ? acceptedAt[units - 1] - saleStartMs : null,
  };
}
