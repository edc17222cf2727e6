// The sale page's script: no build step, no framework. It reads the public sale view (cacheable: a CDN may
// answer it), keeps a countdown on the server's clock (offset measured against /api/flash-sales/time, never
// cached), enables "Buy" only while the sale is on and the item is
// not sold out, purchases with the sale's gate (handed out by the view from the start), then polls the order with backoff and says in words what the buyer has.
'use strict';

const saleId = location.pathname.split('/').filter(Boolean)[1];
const $ = (id) => document.getElementById(id);
const state = { view: undefined, offsetMs: 0, token: sessionStorage.getItem('buyerToken'), buyerId: sessionStorage.getItem('buyerId'), busy: false };

const serverNow = () => Date.now() + state.offsetMs;
const pad = (n) => String(n).padStart(2, '0');
/** ms → HH:MM:SS (or MM:SS under an hour). */
function duration(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const hms = [Math.floor(s / 3600), Math.floor(s / 60) % 60, s % 60];
  return (hms[0] ? hms : hms.slice(1)).map(pad).join(':');
}
const clockTime = (iso) => new Date(iso).toLocaleTimeString('en-GB', { hour12: false });
/** Minor units → the currency's own format (JPY has no minor digits, EUR two, KWD three). */
function price(item) {
  const format = new Intl.NumberFormat('en', { style: 'currency', currency: item.currency });
  return format.format(item.priceMinor / 10 ** format.resolvedOptions().maximumFractionDigits);
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function say(stateName, text, link) {
  const status = $('status');
  status.dataset.state = stateName;
  status.textContent = text;
  if (link) {
    const a = document.createElement('a');
    a.href = `?order=${encodeURIComponent(link)}`;
    a.textContent = link;
    a.addEventListener('click', (event) => {
      event.preventDefault();
      void follow(link);
    });
    status.append(' ', a);
  }
}

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

/** Reads the sale view (from a cache if one holds a fresh copy). @throws NoSuchSale on 404, Error otherwise */
async function readView() {
  const res = await fetch(`/api/flash-sales/sales/${saleId}`);
  if (res.status === 404 || res.status === 400) throw new NoSuchSale();
  if (!res.ok) throw new Error(`sale view answered ${res.status}`);
  state.view = await res.json();
  render();
}

function phase() {
  const now = serverNow();
  if (now < Date.parse(state.view.startsAt)) return 'before';
  return now < Date.parse(state.view.endsAt) ? 'on' : 'ended';
}

function renderClock() {
  const view = state.view;
  const p = phase();
  $('clock').textContent =
    p === 'before' ? `Starts in ${duration(Date.parse(view.startsAt) - serverNow())}` : p === 'on' ? `On sale — ends in ${duration(Date.parse(view.endsAt) - serverNow())}` : 'The sale has ended';
  $('clock').dataset.phase = p;
  for (const button of document.querySelectorAll('button[data-item]')) {
    const item = view.items.find((i) => String(i.itemId) === button.dataset.item);
    button.disabled = !state.token || p !== 'on' || item.soldOut || state.busy;
    button.textContent = item.soldOut ? 'Sold out' : 'Buy';
  }
}

function render() {
  const view = state.view;
  document.title = view.name;
  $('sale-name').textContent = view.name;
  const list = $('items');
  if (list.children.length !== view.items.length) {
    list.replaceChildren(
      ...view.items.map((item) => {
        const li = document.createElement('li');
        const name = document.createElement('span');
        name.textContent = item.productId;
        const cost = document.createElement('span');
        cost.className = 'price';
        cost.textContent = price(item);
        const button = document.createElement('button');
        button.dataset.item = String(item.itemId);
        button.addEventListener('click', () => void buy(item.itemId));
        li.append(name, cost, button);
        return li;
      }),
    );
  }
  renderClock();
  const status = $('status');
  if (view.items.every((i) => i.soldOut) && (!status.dataset.state || status.dataset.state === 'sold-out')) say('sold-out', 'Sold out — every unit is taken');
}

const retryAfterS = (res) => Math.max(1, Number(res.headers.get('retry-after')) || 1);

async function buy(itemId) {
  state.busy = true;
  renderClock();
  say('processing', 'Processing…');
  let gateRetried = false;
  try {
    for (;;) {
      // The gate comes with the view from the start on; a copy read just before has none yet.
      if (!state.view.gate) await readView();
      const headers = { authorization: `Bearer ${state.token}`, ...(state.view.gate && { 'sale-gate': state.view.gate }) };
      const res = await fetch(`/api/flash-sales/items/${itemId}/purchase`, { method: 'POST', headers });
      const body = await res.json().catch(() => ({}));
      if (res.status === 202) return void follow(body.orderId);
      if (res.status === 409 && body.error === 'ALREADY_PURCHASED') return say('already-purchased', 'You already purchased in this sale: your order', body.orderId);
      if (res.status === 410) {
        state.view.items.find((i) => i.itemId === itemId).soldOut = true;
        return say('sold-out', 'Sold out');
      }
      if (res.status === 401) return say('signed-out', 'Your sign-in has expired: sign in again');
      if (res.status === 403 && body.error === 'SALE_GATE_INVALID' && !gateRetried) {
        // Our gate is stale or missing: read the view again, once.
        gateRetried = true;
        delete state.view.gate;
        continue;
      }
      if (res.status === 403) return say('not-active', 'The sale is not open');
      if (res.status !== 429 && res.status !== 503) return say('error', `Something went wrong (${body.error ?? res.status})`);
      const wait = retryAfterS(res);
      say(res.status === 429 ? 'rate-limited' : 'unavailable', res.status === 429 ? `Too many requests: retrying in ${wait} s` : `The shop is busy: retrying in ${wait} s`);
      await sleep(wait * 1000);
    }
  } catch {
    say('unavailable', 'Could not reach the shop: press again in a moment');
  } finally {
    state.busy = false;
    // The answer changed the stock (or told of a change): the view says which items are left.
    await readView().catch(() => renderClock());
  }
}

/** Polls an order until it is final: 0.5 s, then ×1.5 up to 5 s, and at once on the payment deadline. */
async function follow(orderId) {
  history.replaceState(null, '', `?order=${encodeURIComponent(orderId)}`);
  let delayMs = 500;
  for (;;) {
    const res = await fetch(`/api/flash-sales/orders/${encodeURIComponent(orderId)}`, { headers: { authorization: `Bearer ${state.token}` }, cache: 'no-store' }).catch(() => undefined);
    if (!res) {
      say('unavailable', 'Could not reach the shop: retrying');
      await sleep(delayMs);
    } else if (res.ok) {
      const order = await res.json();
      if (order.status === 'PAID') return say('paid', 'Paid — the item is yours');
      if (order.status === 'EXPIRED') return say('expired', 'Expired — the payment window closed and the unit went back on sale');
      if (order.status === 'REJECTED') return say('rejected', 'Rejected — the order could not be placed; nothing was charged');
      const left = Date.parse(order.paymentDeadline) - serverNow();
      if (left > 0) {
        say('reserved', `Reserved — pay by ${clockTime(order.paymentDeadline)} (${duration(left)} left)`);
        await sleep(Math.min(delayMs, Math.max(250, left)));
      } else {
        // No payment is taken past the deadline; the order turns EXPIRED once its workflow settles it, which
        // may be up to a window later in a backlog: keep backing off meanwhile.
        say('closing', 'Payment window closed — the unit goes back on sale shortly');
        await sleep(delayMs);
      }
    } else if (res.status === 429 || res.status === 503) {
      const wait = retryAfterS(res);
      say(res.status === 429 ? 'rate-limited' : 'unavailable', res.status === 429 ? `Too many requests: retrying in ${wait} s` : `The shop is busy: retrying in ${wait} s`);
      await sleep(wait * 1000);
    } else if (res.status === 404) {
      return say('error', 'No such order for this buyer');
    } else {
      return say('signed-out', 'Your sign-in has expired: sign in again');
    }
    delayMs = Math.min(5000, delayMs * 1.5);
  }
}

function showSignedIn() {
  $('sign-in').hidden = Boolean(state.token);
  $('signed-in').hidden = !state.token;
  $('signed-in').textContent = state.token ? `Signed in as ${state.buyerId}` : '';
}

$('sign-in').addEventListener('submit', async (event) => {
  event.preventDefault();
  const buyerId = $('buyer-id').value.trim();
  const res = await fetch('/api/dev/token', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ buyerId }) });
  if (!res.ok) return say('error', res.status === 404 ? 'Sign-in is not available here' : 'Not a valid buyer id');
  state.token = (await res.json()).token;
  state.buyerId = buyerId;
  sessionStorage.setItem('buyerToken', state.token);
  sessionStorage.setItem('buyerId', buyerId);
  showSignedIn();
  renderClock();
  const order = new URLSearchParams(location.search).get('order');
  if (order) void follow(order);
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
  const order = new URLSearchParams(location.search).get('order');
  if (order && state.token) void follow(order);
  setInterval(renderClock, 250);
  // Sold-out marks come from the view; read it again at the start and every few seconds while the sale is on.
  setInterval(() => {
    if (phase() !== 'ended') readView().catch(() => undefined);
  }, 5000);
  const untilStart = Date.parse(state.view.startsAt) - serverNow();
  if (untilStart > 0) setTimeout(() => readView().catch(() => undefined), untilStart + 50);
}

void main();
