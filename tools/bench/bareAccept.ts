/**
 * The ceiling of tools/bench/accept.ts: a bare Koa server (its own process, API_PORT) that answers every purchase 202
 * with a body of the real one's shape (`{orderId, status: "PENDING", paymentDeadline}`) and does nothing else —
 * no token check, no Redis, no starter. Driven by the same crowd as the API, its rate is what any Koa accepting
 * path could reach on this machine with that crowd beside it. Prints "bare accept listening" once it serves.
 */
import { randomUUID } from 'node:crypto';
import Koa from 'koa';

const PURCHASE_PATH = /^\/api\/flash-sales\/items\/[^/]+\/purchase$/;
const WINDOW_MS = 600_000;

const app = new Koa();
app.use((ctx) => {
  if (ctx.method !== 'POST' || !PURCHASE_PATH.test(ctx.path)) return;
  ctx.status = 202;
  ctx.body = { orderId: randomUUID(), status: 'PENDING', paymentDeadline: new Date(Date.now() + WINDOW_MS).toISOString() };
});
const server = app.listen(Number(process.env.API_PORT), '127.0.0.1', () => console.log('bare accept listening'));
server.keepAliveTimeout = 65_000;
process.once('SIGTERM', () => server.close(() => process.exit(0)));
