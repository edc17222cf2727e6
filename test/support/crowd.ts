/**
 * The crowd: simulated buyers pressing "buy" over real HTTP with keep-alive connections (undici Pool),
 * bounded in count (the presses given) and time (deadlineMs). Concurrency caps the requests in flight;
 * an optional rate (requests/s) paces them, as an open-loop load would.
 */
import { Pool, request } from 'undici';

/**
 * RATE_LIMIT_PER_IP for an API that a simulated crowd calls: every simulated buyer comes from loopback, one
 * client IP, so that limit is lifted (counted, never reached); the per-buyer limit stays as configured.
 */
export const CROWD_IP_LIMIT = 1_000_000_000;

/** One press of the buy button. */
export interface Press {
  token: string;
  buyer: string;
  itemId: number;
}

/** What one press got back; latency in ms. */
export interface PressResult {
  buyer: string;
  status: number;
  latencyMs: number;
  /** ms since the epoch when the answer arrived. */
  answeredAtMs: number;
  orderId?: string;
  /** A 202's payment deadline (ms since the epoch), as the buyer was shown it; absent when the 202 had none. */
  paymentDeadlineMs?: number;
  error?: string;
}

export interface CrowdOptions {
  baseUrl: string;
  presses: readonly Press[];
  /** The sale's purchase gate (saleGateOf), sent as the Sale-Gate header; none before the sale has started. */
  gate?: string;
  concurrency: number;
  /** Requests per second across the crowd; 0 = as fast as the connections allow. */
  rate: number;
  /** Stop sending at this time (ms since the epoch); presses not sent by then are dropped. */
  deadlineMs: number;
  /** Called with every answer, e.g. to start paying for accepted orders at once. */
  onResult?: (result: PressResult) => void;
}

/**
 * Reads the sale's purchase gate from its public view, as the sale page does at the start: again every 100 ms
 * until the view carries it (the sale has started) or deadlineMs passed.
 * @throws Error when no gate came by deadlineMs
 */
export async function saleGateOf(baseUrl: string, saleId: number, deadlineMs: number): Promise<string> {
  for (;;) {
    try {
      const res = await request(`${baseUrl}/api/flash-sales/sales/${saleId}`, { headersTimeout: 5000, bodyTimeout: 5000 });
      const view = (await res.body.json()) as { gate?: string };
      if (res.statusCode === 200 && view.gate) return view.gate;
    } catch {
      // The API not answering yet (or killed): ask again.
    }
    if (Date.now() >= deadlineMs) throw new Error(`sale ${saleId}: no purchase gate in its view by the deadline`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Presses every button once, in order; resolves when all answers are in or the deadline passed. */
export async function pressAll(options: CrowdOptions): Promise<PressResult[]> {
  const pool = new Pool(options.baseUrl, { connections: options.concurrency, pipelining: 1, keepAliveTimeout: 30_000 });
  const results: PressResult[] = [];
  const startedMs = Date.now();
  let next = 0;

  const pressOne = async (press: Press): Promise<PressResult> => {
    const t0 = process.hrtime.bigint();
    try {
      const res = await pool.request({
        method: 'POST',
        path: `/api/flash-sales/items/${press.itemId}/purchase`,
        headers: { authorization: `Bearer ${press.token}`, ...(options.gate && { 'sale-gate': options.gate }) },
      });
      const body = (await res.body.json()) as { orderId?: string; paymentDeadline?: string };
      const latencyMs = Number(process.hrtime.bigint() - t0) / 1e6;
      const deadlineMs = Date.parse(body.paymentDeadline ?? '');
      return { buyer: press.buyer, status: res.statusCode, latencyMs, answeredAtMs: Date.now(), ...(res.statusCode === 202 && { orderId: body.orderId, ...(Number.isFinite(deadlineMs) && { paymentDeadlineMs: deadlineMs }) }) };
    } catch (err) {
      return { buyer: press.buyer, status: 0, latencyMs: Number(process.hrtime.bigint() - t0) / 1e6, answeredAtMs: Date.now(), error: String(err) };
    }
  };

  const lane = async (): Promise<void> => {
    while (next < options.presses.length && Date.now() < options.deadlineMs) {
      const index = next++;
      if (options.rate > 0) {
        const due = startedMs + (index * 1000) / options.rate;
        if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
      }
      const result = await pressOne(options.presses[index]);
      results.push(result);
      options.onResult?.(result);
    }
  };

  await Promise.all(Array.from({ length: options.concurrency }, lane));
  await pool.close();
  return results;
}
