/**
 * Audit of one sale event against the invariants of docs/design.md, reading every store: PostgreSQL (truth),
 * Redis (stock, buyers, reservations), Temporal (one workflow per order, all closed) and the Kafka topic (an
 * event per state change). Meant for a sale at rest (no order PENDING); a live sale reports what is in flight.
 */
import type { Client } from '@temporalio/client';
import type { Kafka } from 'kafkajs';
import type { Pool } from 'pg';
import type { ReservationStore } from '../reservation/store';
import { conservation, eventsOnKafka, everyOrderEnds, noOversell, oneLiveOrderPerBuyer, unitsReturned, type Check } from './checks';
import { readSaleEvents, saleEventsSince, unrelayedEvents } from './events';
import { readFacts } from './facts';

export type { Check } from './checks';
export { readSaleEvents, saleEventsSince, unrelayedEvents } from './events';

export interface AuditReport {
  saleId: number;
  ok: boolean;
  checks: Check[];
}

export interface AuditDeps {
  pool: Pool;
  store: ReservationStore;
  temporal: Client;
  kafka: Kafka;
  topic: string;
}

/**
 * Audits one sale: passes when every check does.
 * @param acceptedOrderIds orderIds the caller saw answered 202, when known (the demo passes them)
 * @param options.relayWaitMs how long to wait for the outbox to relay the sale's events before reading the topic
 *   (default 30 s; 0 for an audit of Redis and PostgreSQL alone, where no relay runs)
 */
export async function auditSale(deps: AuditDeps, saleId: number, acceptedOrderIds?: readonly string[], options: { relayWaitMs?: number } = {}): Promise<AuditReport> {
  const facts = await readFacts(deps, saleId);
  const unrelayed = await unrelayedEvents(deps.pool, saleId, options.relayWaitMs);
  const events = { ...(await readSaleEvents(deps.kafka, deps.topic, saleId, await saleEventsSince(deps.pool, saleId))), unrelayed };
  const checks = [noOversell(facts), conservation(facts), oneLiveOrderPerBuyer(facts), everyOrderEnds(facts, acceptedOrderIds), unitsReturned(facts), eventsOnKafka(facts, events)];
  return { saleId, ok: checks.every((c) => c.ok), checks };
}

/** Renders a report as lines of text: one line per check with its figures, offending examples below. */
export function formatAudit(report: AuditReport): string {
  const lines = [`Audit of sale ${report.saleId}: ${report.ok ? 'PASS' : 'FAIL'}`];
  for (const c of report.checks) {
    const figures = Object.entries(c.figures)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    lines.push(`  [${c.ok ? 'ok' : 'FAIL'}] ${c.invariant.padEnd(6)} ${c.name}\n         ${figures}`);
    if (!c.ok && c.examples?.length) lines.push(`         e.g. ${c.examples.join(', ')}`);
  }
  return lines.join('\n');
}
