/** The demo's report as Markdown. */
import { formatAudit } from '../../src/audit';
import type { DemoResult, LagSummary, LatencyWithMax, WaveSummary } from './types';

/** The route's answers: paid, refused late, then any other refusal by its code. */
function routeLine(route: Record<string, number>): string {
  const { PAID: paid = 0, PAYMENT_WINDOW_CLOSED: late = 0, ...other } = route;
  const rest = Object.entries(other).map(([code, n]) => `${code} ${n}`);
  return [`paid ${paid}`, `refused because late (PAYMENT_WINDOW_CLOSED) ${late}`, ...rest].join(', ');
}

/** The real server's figures per order, or why there are none. */
function serverLine(server: DemoResult['server']): string {
  if (server === undefined) return '';
  if (typeof server === 'string') return ` Real server's counters: none (${server}).`;
  const pairs = (figures: Record<string, number>) => Object.entries(figures).map(([k, v]) => `${k} ${v}`).join(', ');
  return ` On the real server, per accepted order (both waves): ${server.actions} actions (${pairs(server.actionsByType)}), ${server.persistenceRequests} persistence requests (all namespaces, background work included), CPU ms ${pairs(server.cpuMsByService)}.`;
}

const lag = (l: LagSummary) => (l.count ? `${l.count} orders, p50 ${l.p50}, p99 ${l.p99}, max ${l.max}` : 'none');

/** The report as Markdown: waves, latencies, timings, final counts, audit. */
/** A tally as `CODE n, …`, or none. */
const codes = (tally: Record<string, number>) => Object.entries(tally).map(([code, n]) => `${code} ${n}`).join(', ') || 'none';

export function renderMarkdown(r: DemoResult): string {
  const d = r.drain;
  const st = r.stampede;
  const w = r.workflowTasks;
  const latency = (l: LatencyWithMax) => (l.count ? `${l.p50} / ${l.p99} / ${l.max}` : '-');
  const ratio = (a: number, b: number) => (b ? Math.round((a / b) * 100) / 100 : '-');
  const waveRow = (name: string, w: WaveSummary) =>
    `| ${name} | ${w.requests} | ${w.offeredRate} | ${w.servedRate} | ${Object.entries(w.statusCounts)
      .map(([s, n]) => `${s}: ${n}`)
      .join(', ')} | ${w.latencyAcceptedMs.p50} / ${w.latencyAcceptedMs.p95} / ${w.latencyAcceptedMs.p99} | ${w.latencySoldOutMs.p50} / ${w.latencySoldOutMs.p95} / ${w.latencySoldOutMs.p99} | ${w.msToSoldOut ?? '-'} | ${w.msToLastAccepted ?? '-'} |`;
  return [
    `# Flash sale demo — sale ${r.saleId}`,
    '',
    `Machine: ${r.machine.cores} cores, Node ${r.machine.node}. Buyers: ${r.options.buyers} + ${r.options.secondWaveBuyers}; units: ${r.options.items} × ${r.options.quantity}; payment window ${r.options.paymentWindowMs} ms.`,
    '',
    `Processes: ${r.processes.join(', ')}; Temporal: ${r.temporal}.`,
    '',
    '| wave | requests | offered req/s | served req/s | statuses | 202 latency p50/p95/p99 ms | 410 latency p50/p95/p99 ms | ms to sold out | ms to last 202 |',
    '|---|---|---|---|---|---|---|---|---|',
    waveRow('1 (stampede)', r.waves[0]),
    waveRow('2 (units back)', r.waves[1]),
    '',
    `Stages: setup ${(r.stagesMs.setup / 1000).toFixed(1)} s → sale until every order settled ${(r.stagesMs.sale / 1000).toFixed(1)} s → audit and history scan ${(r.stagesMs.checks / 1000).toFixed(1)} s (whole run ${((r.stagesMs.setup + r.stagesMs.sale + r.stagesMs.checks) / 1000).toFixed(1)} s, without the shell's install and service checks).`,
    '',
    `Wave 1, from the sale's start: sold out (the ${r.finalCounts.units}th 202) ${r.waves[0].msToSoldOut ?? '-'} ms, last 202 ${r.waves[0].msToLastAccepted ?? '-'} ms (later 202s resold units whose payment window ended during the wave) → last workflow started ${r.msFromStartToLastStarted} ms → last order persisted ${r.msFromStartToLastPersisted ?? '-'} ms. A 202 is answered once Redis holds the reservation and its start queue entry; the starter starts the workflows at Temporal's pace.`,
    '',
    `Stampede, first press → the CPU sample after the sold-out 202 (${st.ms} ms, ${st.answered} presses answered): CPU ms ${Object.entries(st.cpuMs)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}; ${Math.round((Object.values(st.cpuMs).reduce((a, b) => a + b, 0) / Math.max(1, st.ms)) * 100) / 100} of ${r.machine.cores} cores busy.`,
    '',
    `Payments (the payment service pays ${Math.round(r.options.payShare * 100)}% of wave 1's orders, half by each path, and every order of wave 2 by the route), by what became of them:`,
    `- **route** (\`POST /orders/{id}/payment\`: the payment service's own call, decided by PostgreSQL from the 202 on, whether or not the order's workflow has run): ${routeLine(r.payments.route)}.`,
    `- **\`paid\` signal** (how a payment service that talks to Temporal reports a payment; its buyer pays a think time after the 202, as the route's do; when the drain has not started the order, its signal-with-start creates the run, which waits for the drain's turn or the deadline): paid ${r.payments.signal.paid}, refused because the workflow handled it after the deadline ${r.payments.signal.handledAfterDeadline} (each refused signal is a PaymentRefundRequired event).`,
    `- buyers back after the checkout closed at their order's deadline (nothing charged, nothing sent): route ${r.payments.checkoutClosed.route}, signal ${r.payments.checkoutClosed.signal}.`,
    `- declined charges reported (\`POST /orders/{id}/payment-failure\`, ${Math.round(r.options.declineShare * 100)}% of route checkouts): ${codes(r.payments.declined)}.`,
    `- buyers who cancelled (\`POST /orders/{id}/cancel\`, ${Math.round(r.options.cancelShare * 100)}% of wave 1's orders): ${codes(r.cancels.cancels)}; then pressed Buy again: ${codes(r.cancels.boughtAgain)} (a 202 is paid by the route).`,
    `- retried after a 503 or a network error ${r.payments.retried} (503s ${r.payments.unavailable}, ${r.payments.unavailableWithRetryAfter} with Retry-After), given up ${r.payments.failed}. Answered in (ms, per attempt, p50 / p99 / max): route ${latency(r.paymentLatencyMs.route)} (sent during wave 1's presses ${latency(r.paymentLatencyMs.routeDuringStampede)}, after them ${latency(r.paymentLatencyMs.routeAfterStampede)}), signal ${latency(r.paymentLatencyMs.signal)}.`,
    '',
    `Drain of wave 1: ${d.orders} orders final ${d.msToAllFinal} ms after the start, ${d.ordersPerS} orders/s; CPU per order ${d.cpuMsPerOrder.total} ms (Temporal ${d.cpuMsPerOrder.temporal}, worker ${d.cpuMsPerOrder.worker}, PostgreSQL ${d.cpuMsPerOrder.postgres}); the API process ${d.apiCpuMs} ms in all.`,
    d.baseline
      ? `Baseline, tools/bench/drain.ts of ${d.baseline.date} (load ${String(d.baseline.loadavg1m)}): minimal workflow ${d.baseline.totalCpuMs} ms CPU, ${d.baseline.completedPerS} completed/s; this drain's order costs ${ratio(d.cpuMsPerOrder.total, d.baseline.totalCpuMs)}× its CPU at ${ratio(d.ordersPerS, d.baseline.completedPerS)}× its rate${d.baseline.orderTotalCpuMs ? ` (the bench's own order: ${d.baseline.orderTotalCpuMs} ms)` : ''}.`
      : 'Baseline: none on this machine yet. `npm run bench -- drain` measures it (a few minutes) and appends it to reports/bench.jsonl; the next demo reports this drain beside it.',
    '',
    `Workflow tasks: ${w.executed} executed, p50 ≤ ${w.executionMs.p50} ms, p99 ≤ ${w.executionMs.p99} ms, ${w.slowExecutions.count} over ${w.slowExecutions.bound} ms; schedule-to-start p50 ≤ ${w.scheduleToStartMs.p50} ms, p99 ≤ ${w.scheduleToStartMs.p99} ms; ${w.executionFailed} failed, ${w.stickyCacheMisses} sticky cache misses. In ${w.historiesScanned} order histories: ${w.timedOutInHistory} workflow task timeouts; workflow task failures by cause: ${Object.entries(w.failedInHistory).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}.`,
    `Per order: ${w.perOrder.events} history events, ${w.perOrder.workflowTasks} workflow tasks, ${w.perOrder.stateTransitions} state transitions.${serverLine(r.server)} UNHANDLED_COMMAND by payment path and first run: ${Object.entries(w.unhandledCommandBy).map(([k, v]) => `${k} ${v}`).join('; ') || 'none'}.`,
    `Unpaid units back in stock after their deadline (EXPIRED orders; ms): workflow started before the deadline ${lag(w.returnLagMs.startedBeforeDeadline)}; workflow first ran after it ${lag(w.returnLagMs.firstRanAfterDeadline)}.`,
    '',
    `Final orders: ${Object.entries(r.finalCounts)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    '',
    '```',
    formatAudit(r.audit),
    '```',
    '',
  ].join('\n');
}
