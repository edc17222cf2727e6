// What every part of the sale page shares: the sale's id, the page's state, the status line, the server's clock.

export const saleId = location.pathname.split('/').filter(Boolean)[1];
export const $ = (id) => document.getElementById(id);
export const state = {
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
export const orderKey = () => `order:${saleId}:${state.buyerId}`;
export function holdOrder(orderId, status) {
  state.order = { orderId, status };
  sessionStorage.setItem(orderKey(), orderId);
}
export const serverNow = () => Date.now() + state.offsetMs;

/** Says what the buyer has in the status line; `link`, an order id, is shown as a link that runs `onLink`. */
export function say(stateName, text, link, onLink) {
  const status = $('status');
  status.dataset.state = stateName;
  status.textContent = text;
  if (link) {
    const a = document.createElement('a');
    a.href = `?order=${encodeURIComponent(link)}`;
    a.textContent = link;
    a.addEventListener('click', (event) => {
      event.preventDefault();
      onLink?.(link);
    });
    status.append(' ', a);
  }
}
