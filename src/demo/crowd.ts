/**
 * The crowd: simulated buyers pressing "buy" over real HTTP with keep-alive connections (undici Pool),
 * bounded in count (the presses given) and time (deadlineMs). Concurrency caps the requests in flight;
 * an optional rate (requests/s) paces them, as an open-loop load would.
 */
import { Pool } from 'undici';

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
  error?: string;
}

export interface CrowdOptions {
  baseUrl: string;
  presses: readonly Press[];
  concurrency: number;
  /** Requests per second across the crowd; 0 = as fast as the connections allow. */
  rate: number;
  /** Stop sending at this time (ms since the epoch); presses not sent by then are dropped. */
  deadlineMs: number;
  /** Called with every answer, e.g. to start paying for accepted orders at once. */
  onResult?: (result: PressResult) => void;
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
        headers: { authorization: `Bearer ${press.token}` },
      });
      const body = (await res.body.json()) as { orderId?: string };
      const latencyMs = Number(process.hrtime.bigint() - t0) / 1e6;
      return { buyer: press.buyer, status: res.statusCode, latencyMs, answeredAtMs: Date.now(), orderId: res.statusCode === 202 ? body.orderId : undefined };
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
