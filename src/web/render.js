// The sale page drawn from its state: the items, the clock and what Buy says, the signed-in buyer.
import { duration, localTime, price } from './format.js';
import { $, say, serverNow, state } from './page.js';

export function phase() {
  // Ended early by the shop (an operator's "end now"): as ended as a sale past its end.
  if (state.view.state === 'ENDED') return 'ended';
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
  if (state.view.state === 'PAUSED') return 'Paused by the shop — back shortly';
  if (!state.token) return 'Sign in to buy';
  return undefined;
}

export function renderClock() {
  const view = state.view;
  const p = phase();
  $('clock').textContent =
    p === 'before'
      ? `Starts in ${duration(Date.parse(view.startsAt) - serverNow())}`
      : p !== 'on'
        ? 'The sale has ended'
        : view.state === 'PAUSED'
          ? 'Paused by the shop — purchases resume shortly'
          : `On sale — ends in ${duration(Date.parse(view.endsAt) - serverNow())}`;
  $('clock').dataset.phase = p === 'on' && view.state === 'PAUSED' ? 'paused' : p;
  for (const button of document.querySelectorAll('button[data-item]')) {
    const item = view.items.find((i) => String(i.itemId) === button.dataset.item);
    const why = whyNot(item, p);
    button.disabled = why !== undefined;
    button.textContent = item.soldOut ? 'Sold out' : 'Buy';
    const reason = button.parentElement.querySelector('.why');
    reason.textContent = why && why !== 'Sold out' ? why : '';
  }
  const reserved = state.order?.status === 'PENDING' && $('status').dataset.state === 'reserved';
  $('pay').hidden = !(state.dev && reserved);
  $('cancel').hidden = !reserved;
}

/** Draws the sale view; `onBuy(itemId)` runs when a Buy is pressed. */
export function render(onBuy) {
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
        button.addEventListener('click', () => void onBuy(item.itemId));
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

/** A token the API no longer takes (expired): forget it and show the sign-in again. */
export function signOut() {
  state.token = undefined;
  state.order = undefined;
  sessionStorage.removeItem('buyerToken');
  showSignedIn();
  renderClock();
  say('signed-out', 'Your sign-in has expired: sign in again');
}

export function showSignedIn() {
  $('sign-in').hidden = Boolean(state.token);
  $('signed-in').hidden = !state.token;
  $('signed-in').textContent = state.token ? `Signed in as ${state.buyerId}` : '';
}
