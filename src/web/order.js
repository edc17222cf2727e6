// The buyer's order followed until it is final: polled with back-off, said in words.
import { duration, localTime, retryAfterS, sleep } from './format.js';
import { holdOrder, orderKey, saleId, say, serverNow, state } from './page.js';
import { renderClock, signOut } from './render.js';

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

/** @returns what a CANCELLED order says, by who cancelled it */
export function cancelledText(reason) {
  if (reason === 'PAYMENT_FAILED') return 'Cancelled — the payment was declined and the unit went back on sale';
  if (reason === 'OPERATOR') return 'Cancelled by the shop — nothing was charged';
  return 'Cancelled — the unit went back on sale; you may buy again';
}

/** Polls an order until it is final: 0.5 s, then ×1.5 up to 5 s, and at once on the payment deadline. */
export async function follow(orderId) {
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
      // Only an order of this sale says what the buyer holds here. An EXPIRED, CANCELLED or REJECTED one holds nothing:
      // the buyer may buy again (one live order per buyer, I3). A PAID one the page saw stays paid (a poll
      // answered before the payment can arrive after it).
      if (String(order.saleId) === saleId) {
        if (order.status === 'EXPIRED' || order.status === 'REJECTED' || order.status === 'CANCELLED') {
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
      if (order.status === 'CANCELLED') return say('cancelled', cancelledText(order.reason));
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
