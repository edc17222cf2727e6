// The sale page's script: no build step, no framework. It reads the public sale view (cacheable: a CDN may
// answer it), keeps a countdown on the server's clock (offset measured against /api/flash-sales/time, never
// cached), enables "Buy" only while the sale is on, the item not sold out and the buyer holds no order in the
// sale (one action at a time; a disabled Buy says why), purchases with the sale's gate (handed out by the view
// from the start), then polls the order with backoff and says in words what the buyer has. In development (the
// development sign-in) a reserved order has a "Pay" button, which pays it through /api/dev/orders/{id}/payment.
'use strict';

const saleId = location.pathname.split('/').filter(Boolean)[1];
const $ = (id) => document.getElementById(id);
const state = {
  view: undefined,
  offsetMs: 0,
  token: sessionStorage.getItem('buyerToken'),
  buyerId: sessionStorage.getItem('buyerId'),
  busy: false,
  /** The buyer's order in this sale, { orderId, status }: while it is live or paid, Buy stays disabled (one unit per buyer). */
  order: undefined,
  /** Signed in through the development sign-in: the API serves the development "Pay" too. */
  dev: sessionStorage.getItem('devSignIn') === 'yes',
  /** The order follow() polls, so that a second call for it starts no second loop. */
  following: undefined,
};
const orderKey = () => `order:${saleId}:${state.buyerId}`;
function holdOrder(orderId, status) {
  state.order = { orderId, status };
  sessionStorage.setItem(orderKey(), orderId);
}

const serverNow = () => Date.now() + state.offsetMs;
const pad = (n) => String(n).padStart(2, '0');
/** ms → HH:MM:SS (or MM:SS under an hour). */
function duration(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const hms = [Math.floor(s / 3600), Math.floor(s / 60) % 60, s % 60];
  return (hms[0] ? hms : hms.slice(1)).map(pad).join(':');
}
/** An instant in the buyer's own time zone and language, with its date and zone: "3 Dec 2026, 14:05:09 CET". */
const localTime = (iso) =>
  new Date(iso).toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false, timeZoneName: 'short' });
/** Minor units → the currency's own format (JPY has no minor digits, EUR two, KWD three). */
function price(item) {
  const format = new Intl.NumberFormat('en', { style: 'currency', currency: item.currency });
  return format.format(item.priceMinor / 10 ** format.resolvedOptions().maximumFractionDigits);
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** follow()'s wait between polls, which a payment cuts short (nudge) so that "Paid" shows at once. */
let nudge = () => undefined;
const nap = (ms) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    nudge = () => {
      clearTimeout(timer);
      resolve();
    };
  });

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

/**
 * Reads the sale view (from a cache if one holds a fresh copy; revalidated when `fresh`, after the buyer's own
 * purchase changed it). @throws NoSuchSale on 404, Error otherwise
 */
async function readView(fresh = false) {
  const res = await fetch(`/api/flash-sales/sales/${saleId}`, fresh ? { cache: 'no-cache' } : {});
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

/** Why Buy is disabled for this item now, or undefined when it may be pressed. */
function whyNot(item, p) {
  // The buyer's own order first: it is why they cannot buy, whatever else is true.
  if (state.order?.status === 'PAID') return 'You bought your unit in this sale';
  if (state.order) return 'One unit per buyer: you hold an order in this sale';
  if (state.busy) return 'Processing your purchase…';
  if (item.soldOut) return 'Sold out';
  if (p === 'before') return `On sale from ${localTime(state.view.startsAt)}`;
  if (p === 'ended') return 'The sale has ended';
  if (!state.token) return 'Sign in to buy';
  return undefined;
}

function renderClock() {
  const view = state.view;
  const p = phase();
  $('clock').textContent =
    p === 'before' ? `Starts in ${duration(Date.parse(view.startsAt) - serverNow())}` : p === 'on' ? `On sale — ends in ${duration(Date.parse(view.endsAt) - serverNow())}` : 'The sale has ended';
  $('clock').dataset.phase = p;
  for (const button of document.querySelectorAll('button[data-item]')) {
    const item = view.items.find((i) => String(i.itemId) === button.dataset.item);
    const why = whyNot(item, p);
    button.disabled = why !== undefined;
    button.textContent = item.soldOut ? 'Sold out' : 'Buy';
    const reason = button.parentElement.querySelector('.why');
    reason.textContent = why && why !== 'Sold out' ? why : '';
  }
  $('pay').hidden = !(state.dev && state.order?.status === 'PENDING' && $('status').dataset.state === 'reserved');
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
        li.dataset.item = String(item.itemId);
        const product = document.createElement('div');
        product.className = 'product';
        const name = document.createElement('span');
        name.className = 'name';
        name.textContent = item.name;
        const left = document.createElement('span');
        left.className = 'left';
        product.append(name, left);
        const cost = document.createElement('span');
        cost.className = 'price';
        cost.textContent = price(item);
        const action = document.createElement('div');
        action.className = 'action';
        const button = document.createElement('button');
        button.dataset.item = String(item.itemId);
        button.addEventListener('click', () => void buy(item.itemId));
        const why = document.createElement('small');
        why.className = 'why';
        action.append(button, why);
        li.append(product, cost, action);
        return li;
      }),
    );
  }
  for (const item of view.items) {
    const left = list.querySelector(`li[data-item="${item.itemId}"] .left`);
    left.textContent = item.soldOut ? 'none left' : `${item.unitsLeft.toLocaleString()} left`;
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
        say('already-purchased', 'You already purchased in this sale: your order', body.orderId);
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

/** Polls an order until it is final: 0.5 s, then ×1.5 up to 5 s, and at once on the payment deadline. */
async function follow(orderId) {
  history.replaceState(null, '', `?order=${encodeURIComponent(orderId)}`);
  if (state.following === orderId) return nudge();
  state.following = orderId;
  try {
    await poll(orderId);
  } finally {
    if (state.following === orderId) state.following = undefined;
  }
}

async function poll(orderId) {
  let delayMs = 500;
  for (;;) {
    const res = await fetch(`/api/flash-sales/orders/${encodeURIComponent(orderId)}`, { headers: { authorization: `Bearer ${state.token}` }, cache: 'no-store' }).catch(() => undefined);
    if (!res) {
      say('unavailable', 'Could not reach the shop: retrying');
      await sleep(delayMs);
    } else if (res.ok) {
      const order = await res.json();
      // Only an order of this sale says what the buyer holds here. An EXPIRED or REJECTED one holds nothing:
      // the buyer may buy again (one live order per buyer, I3). A PAID one the page saw stays paid (a poll
      // answered before the payment can arrive after it).
      if (String(order.saleId) === saleId) {
        if (order.status === 'EXPIRED' || order.status === 'REJECTED') {
          if (state.order?.orderId === orderId) {
            state.order = undefined;
            sessionStorage.removeItem(orderKey());
          }
        } else if (!(state.order?.orderId === orderId && state.order.status === 'PAID')) {
          holdOrder(orderId, order.status);
        }
      }
      renderClock();
      if (state.order?.orderId === orderId && state.order.status === 'PAID') return say('paid', 'Paid — the item is yours');
      if (order.status === 'PAID') return say('paid', 'Paid — the item is yours');
      if (order.status === 'EXPIRED') return say('expired', 'Expired — the payment window closed and the unit went back on sale');
      if (order.status === 'REJECTED') return say('rejected', 'Rejected — the order could not be placed; nothing was charged');
      const left = Date.parse(order.paymentDeadline) - serverNow();
      if (left > 0) {
        say('reserved', `Reserved — pay by ${localTime(order.paymentDeadline)} (${duration(left)} left)`);
        renderClock();
        await nap(Math.min(delayMs, Math.max(250, left)));
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
      return signOut();
    }
    delayMs = Math.min(5000, delayMs * 1.5);
  }
}

/** A token the API no longer takes (expired): forget it and show the sign-in again. */
function signOut() {
  state.token = undefined;
  state.order = undefined;
  sessionStorage.removeItem('buyerToken');
  showSignedIn();
  renderClock();
  say('signed-out', 'Your sign-in has expired: sign in again');
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
  // Sold-out marks come from the view; read it again at the start and every few seconds while the sale is on.
  setInterval(() => {
    if (phase() !== 'ended') readView().catch(() => undefined);
  }, 5000);
  const untilStart = Date.parse(state.view.startsAt) - serverNow();
  if (untilStart > 0) setTimeout(() => readView().catch(() => undefined), untilStart + 50);
}

void main();
