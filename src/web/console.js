// The operators' console of one sale: its live figures every second (GET /api/admin/sales/{id}/live) and its
// controls (pause, resume, end, cancel an order), each asked for again before it is sent and logged with what
// the service answered. The admin token stays in this tab's session storage.
const $ = (id) => document.getElementById(id);
const saleId = location.pathname.split('/').pop();
const REFRESH_MS = 1000;
let token = sessionStorage.getItem('adminToken');

/** Sends an admin request; @returns the answer's status and JSON body (null when the service could not be reached). */
async function call(method, path, body) {
  const headers = { authorization: `Bearer ${token}`, ...(body && { 'content-type': 'application/json' }) };
  const res = await fetch(path, { method, headers, body: body && JSON.stringify(body), cache: 'no-store' }).catch(() => undefined);
  if (!res) return { status: 0, body: null };
  return { status: res.status, body: await res.json().catch(() => null) };
}

function log(text, refused) {
  const line = document.createElement('li');
  line.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  if (refused) line.className = 'refused';
  $('log').prepend(line);
}

/** Fills a table from rows of cells (the first row as its header); numbers are right-aligned. */
function table(id, rows) {
  const el = $(id);
  for (const row of [...el.querySelectorAll('tr')]) row.remove();
  rows.forEach((cells, i) => {
    const tr = el.insertRow();
    for (const cell of cells) {
      const td = document.createElement(i === 0 ? 'th' : 'td');
      td.textContent = cell === null || cell === undefined ? '–' : String(cell);
      if (typeof cell === 'number') td.className = 'n';
      tr.append(td);
    }
  });
}

function render(live) {
  $('title').textContent = `Sale ${live.saleId}: ${live.name}`;
  $('state').textContent = `Purchases ${live.state === 'OPEN' ? 'open' : live.state === 'PAUSED' ? 'paused' : 'ended'} — as of ${new Date(live.at).toLocaleTimeString()}`;
  $('state').dataset.state = live.state;
  $('pause').disabled = live.state !== 'OPEN';
  $('resume').disabled = live.state !== 'PAUSED';
  $('end').disabled = live.state === 'ENDED';
  const shards = Math.max(...live.items.map((i) => i.freeByShard.length));
  table('items', [
    ['item', 'quantity', 'held by live orders', ...Array.from({ length: shards }, (_, k) => `free on shard ${k}`)],
    ...live.items.map((i) => [`${i.itemId} ${i.name}`, i.quantity, i.live, ...Array.from({ length: shards }, (_, k) => i.freeByShard[k])]),
  ]);
  table('orders', [['state', 'orders'], ...['PENDING', 'PAID', 'EXPIRED', 'CANCELLED', 'REJECTED'].map((s) => [s, live.orders[s] ?? 0])]);
  const oldest = live.startQueue.oldestAgeMs;
  table('flow', [
    ['figure', 'value'],
    ['accepted, workflow not started', live.startQueue.waiting],
    ['oldest of them, s', oldest === null ? null : Math.round(oldest / 100) / 10],
    [`orders stored per second (last ${live.drain.storedLastS} s)`, live.drain.perSecond],
    ['payments stored', live.payments.stored],
    ...Object.entries(live.payments.thisProcessRoute).map(([code, n]) => [`payment route: ${code}`, n]),
  ]);
  table('presses', [['answer', 'count'], ...Object.entries(live.presses.thisProcess).map(([code, n]) => [code, n])]);
}

async function refresh() {
  const live = await call('GET', `/api/admin/sales/${saleId}/live`);
  if (live.status === 200) return render(live.body);
  if (live.status === 401 || live.status === 403) return signOut();
  $('state').textContent = live.status === 0 ? 'The service could not be reached: retrying' : `The figures could not be read (${live.body?.error ?? live.status}): retrying`;
}

function signOut() {
  sessionStorage.removeItem('adminToken');
  token = null;
  $('console').hidden = true;
  $('sign-in').hidden = false;
}

/** Asks, sends, logs what the service did or why it refused, and refreshes the figures. */
async function act(question, method, path, body, said) {
  if (!confirm(question)) return log(`Not sent: ${question}`, false);
  const answer = await call(method, path, body);
  if (answer.status === 200) log(said(answer.body), false);
  else log(`Refused (${answer.status} ${answer.body?.error ?? 'no answer'}): ${question}`, true);
  await refresh();
}

const control = (action, question) => () =>
  act(question, 'POST', `/api/admin/sales/${saleId}/${action}`, undefined, (b) => `${action}: sale ${b.saleId} is ${b.state}${b.changed ? '' : ' (it was already)'}`);
$('pause').addEventListener('click', control('pause', `Pause purchases of sale ${saleId}? Buyers will hear 503 SALE_PAUSED until you resume.`));
$('resume').addEventListener('click', control('resume', `Resume purchases of sale ${saleId}?`));
$('end').addEventListener('click', control('end', `End sale ${saleId} now, for good? Pending orders stay payable until their deadlines.`));

$('cancel-order').addEventListener('submit', (event) => {
  event.preventDefault();
  const orderId = $('order-id').value.trim();
  const note = $('note').value.trim();
  void act(`Cancel order ${orderId} (${note})? Its unit goes back on sale.`, 'POST', `/api/admin/orders/${encodeURIComponent(orderId)}/cancel`, { note }, (b) => `cancel: order ${b.orderId} is ${b.status} (${b.reason})`);
});

$('sign-in').addEventListener('submit', (event) => {
  event.preventDefault();
  token = $('admin-token').value;
  sessionStorage.setItem('adminToken', token);
  start();
});

function start() {
  $('sign-in').hidden = true;
  $('console').hidden = false;
  void refresh();
}

setInterval(() => {
  if (token) void refresh();
}, REFRESH_MS);
if (token) start();
else $('sign-in').hidden = false;
