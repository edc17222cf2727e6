/**
 * `npm run demo [-- options]`: runs a whole flash sale on the real stack (see tools/demo/run.ts), prints live
 * progress, the report and the audit; exits 1 when the audit fails. Options (defaults in DEFAULT_DEMO):
 *   --buyers N  --quantity N  --items N  --pay-share 0..1  --payment-window-ms MS  --second-wave N
 *   --impatient-share 0..1  --concurrency N  --rate REQ_PER_S  --port N  --stock-shards S
 *   --payments-api own|shared (the payment service's own API process, the default, or the buyers')
 * On the local Redis Cluster: REDIS_CLUSTER_NODES=… (README, Past one machine); API_PROCESSES=N runs N API processes.
 * OTEL_TRACES_EXPORTER=jsonl traces it: each process writes its spans beside its log, and the slowest order's
 * timeline is printed at the end.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { formatTimeline, orderTraces, readSpanFiles, slowestOrder } from '../../src/tracing/timeline';
import { renderMarkdown } from './report';
import { DEFAULT_DEMO, runDemo, type DemoOptions } from './run';

const FLAGS: Record<string, keyof typeof DEFAULT_DEMO> = {
  buyers: 'buyers',
  quantity: 'quantity',
  items: 'items',
  'pay-share': 'payShare',
  'cancel-share': 'cancelShare',
  'decline-share': 'declineShare',
  'payment-window-ms': 'paymentWindowMs',
  'second-wave': 'secondWaveBuyers',
  'impatient-share': 'impatientShare',
  concurrency: 'concurrency',
  rate: 'rate',
  port: 'apiPort',
  'stock-shards': 'stockShards',
};

function options(): DemoOptions {
  const { values } = parseArgs({ options: Object.fromEntries([...Object.keys(FLAGS), 'payments-api'].map((f) => [f, { type: 'string' as const }])) });
  const chosen: DemoOptions = { ...DEFAULT_DEMO, print: (line) => console.log(line) };
  const paymentsApi = values['payments-api'] ?? DEFAULT_DEMO.paymentsApi;
  if (paymentsApi !== 'own' && paymentsApi !== 'shared') {
    console.error(`--payments-api ${paymentsApi}: expected own or shared`);
    process.exit(2);
  }
  chosen.paymentsApi = paymentsApi;
  for (const [flag, key] of Object.entries(FLAGS)) {
    const text = values[flag];
    if (text === undefined) continue;
    const value = Number(text);
    const isShare = key === 'payShare' || key === 'impatientShare' || key === 'cancelShare' || key === 'declineShare';
    if (!Number.isFinite(value) || value < 0 || (isShare ? value > 1 : !Number.isInteger(value))) {
      console.error(`--${flag} ${text}: expected ${isShare ? 'a number from 0 to 1' : 'a whole number >= 0'}`);
      process.exit(2);
    }
    (chosen as unknown as Record<string, number>)[key] = value;
  }
  return chosen;
}

/** With tracing on (jsonl), the slowest order's timeline, as `npm run trace` prints it from the processes' span files. */
function slowestTimeline(files: string[]): string | undefined {
  if (!files.length) return undefined;
  const slowest = slowestOrder(orderTraces(readSpanFiles(files.filter((f) => existsSync(f)))));
  return `The slowest order to be placed (npm run trace -- ${files.join(' ')}):\n${slowest ? formatTimeline(slowest) : 'none placed'}`;
}

runDemo(options()).then(
  (result) => {
    console.log(`\n${renderMarkdown(result)}`);
    const timeline = slowestTimeline(result.traceFiles);
    if (timeline) console.log(`\n${timeline}\n`);
    console.log(`Report written to ${result.reportFiles.join(' and ')}`);
    process.exit(result.audit.ok ? 0 : 1);
  },
  (err) => {
    console.error(`demo failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
