// The sale page's entry module (page.js, format.js, render.js and order.js beside it): no build step, no
// framework. It reads the public sale view (cacheable: a CDN may
// answer it), keeps a countdown on the server's clock (offset measured against /api/flash-sales/time, never
// cached), enables "Buy" only while the sale is on, the item not sold out and the buyer holds no order in the
// sale (one action at a time; a disabled Buy says why), purchases with the sale's gate (handed out by the view
// from the start), then polls the order with backoff and says in words what the buyer has. In development (the
// development sign-in) a reserved order has a "Pay" button, which pays it through /api/dev/orders/{id}/payment.
import { retryAfterS, sleep } from './format.js';
import { follow } from './order.js';
import { $, holdOrder, orderKey, saleId, say, serverNow, state } from './page.js';
import { phase, render, renderClock, showSignedIn, signOut } from './render.js';

/** The server's clock offset: of three round trips to /time, the shortest, taken at its middle. */
async function syncClock() {
  let best;
  for (let i = 0; i < 3; i++) {
    const sent = Date.now();
    const res = await fetch('/api/flash-sales/time', { cache: 'no-store' });
    const { serverTime } = await res.json();
    const received = Date.now();
    if (!best || received - sent < best.rttMs) best = { rttMs: received - sent, offsetMs: Date.parse(serverTime) - (sent + received) / 2 };
  }
  state.offsetMs = best.offsetMs;
}

class NoSuchSale extends Error {}

/**
 * Reads the sale view (from a cache if one holds a fresh copy; revalidated when `fresh`, after the buyer's own
 * purchase changed it). @throws NoSuchSale on 404, Error otherwise
 */
async function readView(fresh = false) {
  const res = await fetch(`/api/flash-sales/sales/${saleId}`, fresh ? { cache: 'no-cache' } : {});
  if (res.status === 404 || res.status === 400) throw new NoSuchSale();
  if (!res.ok) throw new Error(`sale view answered ${res.status}`);
  state.view = await res.json();
  render(buy);
}

async function buy(itemId) {
  state.busy = true;
  renderClock();
  say('processing', 'Processing…');
  let gateRetried = false;
  let took = false;
  try {
    for (;;) {
      // The gate comes with the view from the start on; a copy read just before has none yet.
      if (!state.view.gate) await readView();
      const headers = { authorization: `Bearer ${state.token}`, ...(state.view.gate && { 'sale-gate': state.view.gate }) };
      const res = await fetch(`/api/flash-sales/items/${itemId}/purchase`, { method: 'POST', headers });
      const body = await res.json().catch(() => ({}));
      if (res.status === 202) {
        took = true;
        holdOrder(body.orderId, 'PENDING');
        return void follow(body.orderId);
      }
      if (res.status === 409 && body.error === 'ALREADY_PURCHASED') {
        // An order this page did not know of (another tab, a reload): follow it, so the page says what it is.
        holdOrder(body.orderId, 'PENDING');
        say('already-purchased', 'You already purchased in this sale: your order', body.orderId, follow);
        return void follow(body.orderId);
      }
      if (res.status === 410) {
        state.view.items.find((i) => i.itemId === itemId).soldOut = true;
        return say('sold-out', 'Sold out');
      }
      if (res.status === 401) return signOut();
      if (res.status === 403 && body.error === 'SALE_GATE_INVALID' && !gateRetried) {
        // Our gate is stale or missing: read the view again, once.
        gateRetried = true;
        delete state.view.gate;
        continue;
      }
      if (res.status === 403) return say('not-active', 'The sale is not open');
      if (body.error === 'SALE_PAUSED') {
        state.view.state = 'PAUSED';
        return say('paused', 'Purchases are paused by the shop: press again once they resume');
      }
      if (res.status !== 429 && res.status !== 503) return say('error', `Something went wrong (${body.error ?? res.status})`);
      const wait = retryAfterS(res);
      say(res.status === 429 ? 'rate-limited' : 'unavailable', res.status === 429 ? `Too many requests: retrying in ${wait} s` : `The shop is busy: retrying in ${wait} s`);
      await sleep(wait * 1000);
    }
  } catch {
    say('unavailable', 'Could not reach the shop: press again in a moment');
  } finally {
    state.busy = false;
    // The answer told of a change (410: sold out; 202: one unit fewer, which only a fresh view shows now).
    await readView(took).catch(() => renderClock());
  }
}

$('sign-in').addEventListener('submit', async (event) => {
  event.preventDefault();
  const buyerId = $('buyer-id').value.trim();
  const res = await fetch('/api/dev/token', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ buyerId }) });
  if (!res.ok) return say('error', res.status === 404 ? 'Sign-in is not available here' : 'Not a valid buyer id');
  state.token = (await res.json()).token;
  state.buyerId = buyerId;
  state.dev = true;
  sessionStorage.setItem('buyerToken', state.token);
  sessionStorage.setItem('buyerId', buyerId);
  sessionStorage.setItem('devSignIn', 'yes');
  showSignedIn();
  renderClock();
  const order = heldOrderId();
  if (order) void follow(order);
});

/** The order named in the address, or the one this buyer last held in this sale (this tab's session). */
const heldOrderId = () => new URLSearchParams(location.search).get('order') ?? sessionStorage.getItem(orderKey());

$('pay').addEventListener('click', async () => {
  const { orderId } = state.order;
  $('pay').disabled = true;
  say('paying', 'Paying…');
  const res = await fetch(`/api/dev/orders/${encodeURIComponent(orderId)}/payment`, { method: 'POST', headers: { authorization: `Bearer ${state.token}` } }).catch(() => undefined);
  $('pay').disabled = false;
  if (!res) return say('unavailable', 'Could not reach the shop: press Pay again');
  const body = await res.json().catch(() => ({}));
  if (res.ok) {
    holdOrder(orderId, 'PAID');
    say('paid', 'Paid — the item is yours');
    renderClock();
  }
  if (res.ok || res.status === 409) return void follow(orderId); // the order says what it is now, paid or not
  if (res.status === 401) return signOut();
  say('error', `The payment was refused (${body.error ?? res.status})`);
});

// The buyer's own cancel (POST /api/flash-sales/orders/{id}/cancel): the unit goes back and they may buy again.
$('cancel').addEventListener('click', async () => {
  const { orderId } = state.order;
  $('cancel').disabled = true;
  say('cancelling', 'Cancelling…');
  const res = await fetch(`/api/flash-sales/orders/${encodeURIComponent(orderId)}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${state.token}` } }).catch(() => undefined);
  $('cancel').disabled = false;
  if (!res) return say('unavailable', 'Could not reach the shop: press Cancel again');
  if (res.status === 401) return signOut();
  if (res.ok || res.status === 409) return void follow(orderId); // the order says what it is now, cancelled or not
  const body = await res.json().catch(() => ({}));
  say('error', `The cancel was refused (${body.error ?? res.status})`);
});

async function main() {
  showSignedIn();
  for (;;) {
    try {
      await syncClock();
      await readView();
      break;
    } catch (err) {
      if (err instanceof NoSuchSale) return say('error', 'There is no such sale');
      say('unavailable', 'The shop is busy: retrying');
      await sleep(1000);
    }
  }
  const order = heldOrderId();
  if (order && state.token) void follow(order);
  setInterval(renderClock, 250);
  // Sold-out marks and a pause come from the view; read it again at the start and every second while the sale
  // is on, so that a pause or an end shows within about a second (the view's cache age) of the next read.
  setInterval(() => {
    if (phase() !== 'ended') readView().catch(() => undefined);
  }, 1000);
  const untilStart = Date.parse(state.view.startsAt) - serverNow();
  if (untilStart > 0) setTimeout(() => readView().catch(() => undefined), untilStart + 50);
}

void main();
