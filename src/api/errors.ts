/**
 * The one place that maps outcomes to HTTP: every refusal answers `{ "error": CODE, ...details }` with the
 * status below (I7: a refused request changes nothing and says why). Replies are values, not exceptions,
 * so the hot sold-out path captures no stack traces.
 */
import { STATUS_CODES } from 'node:http';
import type { Context } from 'koa';
import { isOutcomeUnknown } from '../reservation/client';

export const STATUS_OF = {
  INVALID_ITEM_ID: 400,
  INVALID_SALE_ID: 400,
  INVALID_BODY: 400,
  INVALID_QUERY: 400,
  BAD_REQUEST: 400,
  TOKEN_MISSING: 401,
  TOKEN_INVALID: 401,
  TOKEN_EXPIRED: 401,
  FORBIDDEN: 403,
  SALE_NOT_ACTIVE: 403,
  SALE_GATE_INVALID: 403,
  NOT_FOUND: 404,
  ITEM_NOT_FOUND: 404,
  ORDER_NOT_FOUND: 404,
  SALE_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  REQUEST_TIMEOUT: 408,
  ALREADY_PURCHASED: 409,
  PAYMENT_WINDOW_CLOSED: 409,
  ORDER_NOT_PENDING: 409,
  ORDER_CANCELLED: 409,
  ORDER_ALREADY_PAID: 409,
  PAYMENT_ID_USED: 409,
  REBUILD_REFUSED: 409,
  REBUILD_NEEDED: 409,
  SALE_ENDED: 409,
  SOLD_OUT: 410,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  AMOUNT_MISMATCH: 422,
  INVALID_SALE: 422,
  RATE_LIMITED: 429,
  HEADERS_TOO_LARGE: 431,
  INTERNAL_ERROR: 500,
  SERVICE_UNAVAILABLE: 503,
  STOCK_NOT_LOADED: 503,
  SALE_PAUSED: 503,
  RESERVATION_NOT_REPLICATED: 503,
  RELEASE_PENDING: 503,
} as const;

export type ErrorCode = keyof typeof STATUS_OF;

/** @returns a validation failure's issues as `path: message` lines, the `details` of an INVALID_BODY answer */
export function issuesOf(error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] }): string[] {
  return error.issues.map((i) => `${i.path.map(String).join('.')}: ${i.message}`);
}

/** Seconds a client should wait before retrying a 503. */
export const RETRY_AFTER_S = 1;
/** Seconds a buyer should wait before pressing again in a paused sale: a pause is an operator's, not a blip. */
export const PAUSED_RETRY_AFTER_S = 5;

// A reply without details is a constant: serialized once, not on every sold-out answer. A string, so that Node
// writes headers and body as one piece (tools/bench/soldout.ts could not tell it from a Buffer's two pieces).
const BODY_OF = new Map(Object.keys(STATUS_OF).map((code) => [code, JSON.stringify({ error: code })]));

/** Where reply leaves its code for middleware that reports on answers (the purchase metrics). */
export interface AnsweredState {
  outcome?: ErrorCode | 'PENDING';
}

/** Sets status and JSON body `{ "error": code, ...details }` for code (kept in ctx.state.outcome); 503s carry Retry-After. */
export function reply(ctx: Context, code: ErrorCode, details?: Record<string, unknown>): void {
  (ctx.state as AnsweredState).outcome = code;
  ctx.status = STATUS_OF[code];
  if (details) {
    ctx.body = { error: code, ...details };
  } else {
    ctx.type = 'application/json';
    ctx.body = BODY_OF.get(code);
  }
  if (ctx.status === 503) ctx.set('Retry-After', String(RETRY_AFTER_S));
}

/**
 * The raw HTTP/1.1 answer to a request Node's parser refused before Koa saw it (the server's `clientError`
 * event), so that those refusals are JSON with a code too (I7).
 * @param err the parser's error: HPE_HEADER_OVERFLOW (headers over Node's 16 KB) → 431 HEADERS_TOO_LARGE,
 *   ERR_HTTP_REQUEST_TIMEOUT → 408 REQUEST_TIMEOUT, anything else → 400 BAD_REQUEST
 * @returns the response bytes; the connection is closed after them
 */
export function clientErrorResponse(err: { code?: unknown }): string {
  const code: ErrorCode =
    err.code === 'HPE_HEADER_OVERFLOW' ? 'HEADERS_TOO_LARGE' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'REQUEST_TIMEOUT' : 'BAD_REQUEST';
  const status = STATUS_OF[code];
  const body = JSON.stringify({ error: code });
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

const PG_CONNECTION_LOST = /^(Connection terminated|timeout exceeded when trying to connect)/;

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P03']);

/**
 * A Redis Cluster reconfiguring: no master serves the slot yet (CLUSTERDOWN, during a failover), a key moving
 * (TRYAGAIN), or ioredis giving up after following redirections; the command did not run.
 */
const REDIS_CLUSTER_MOVING = /^(CLUSTERDOWN|TRYAGAIN|Too many Cluster redirections|Failed to refresh slots cache)/;

/**
 * @returns whether err means a dependency is unreachable or overloaded (socket errors, PostgreSQL shutting
 *   down or its connection lost or timing out, ioredis giving up or disconnected, a Redis Cluster reconfiguring
 *   (a failover, a slot moving), Temporal's gRPC UNAVAILABLE /
 *   DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED), which deserves a 503 and a retry
 */
export function isUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; name?: unknown };
  if (typeof e?.code === 'string' && CONNECTION_CODES.has(e.code)) return true;
  // ioredis: a command that got no answer (refused while disconnected, cut off by a dropped connection, timed out).
  if (isOutcomeUnknown(err)) return true;
  if (err instanceof Error && REDIS_CLUSTER_MOVING.test(err.message)) return true;
  // node-postgres reports a dropped or timed-out connection by message only, without a code.
  if (err instanceof Error && PG_CONNECTION_LOST.test(err.message)) return true;
  return e?.name === 'ServiceError' && /UNAVAILABLE|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED/.test(`${err} ${(err as Error).message}`);
}
