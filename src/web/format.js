// Durations, instants and prices as the buyer reads them; waits.

const pad = (n) => String(n).padStart(2, '0');
/** ms → HH:MM:SS (or MM:SS under an hour). */
export function duration(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const hms = [Math.floor(s / 3600), Math.floor(s / 60) % 60, s % 60];
  return (hms[0] ? hms : hms.slice(1)).map(pad).join(':');
}
/** An instant in the buyer's own time zone and language, with its date and zone: "3 Dec 2026, 14:05:09 CET". */
export const localTime = (iso) =>
  new Date(iso).toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false, timeZoneName: 'short' });
/** Minor units → the currency's own format (JPY has no minor digits, EUR two, KWD three). */
export function price(item) {
  const format = new Intl.NumberFormat('en', { style: 'currency', currency: item.currency });
  return format.format(item.priceMinor / 10 ** format.resolvedOptions().maximumFractionDigits);
}
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** A 429's or 503's Retry-After, in seconds (at least 1). */
export const retryAfterS = (res) => Math.max(1, Number(res.headers.get('retry-after')) || 1);
