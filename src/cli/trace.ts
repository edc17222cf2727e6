/**
 * `npm run trace -- [--order ID | --slowest] [FILE...]`: prints one order's timeline (src/tracing/timeline.ts)
 * from span files written with OTEL_TRACES_EXPORTER=jsonl (default: OTEL_TRACES_FILE). Without --order, the
 * slowest order to be placed. Exits 1 when no such order is in the files, 2 on bad arguments.
 */
import { parseArgs } from 'node:util';
import { loadConfig } from '../config';
import { formatTimeline, orderTraces, readSpanFiles, slowestOrder } from '../tracing/timeline';

function main(): number {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { order: { type: 'string' }, slowest: { type: 'boolean', default: false } } });
  if (values.order !== undefined && values.slowest) {
    console.error('--order and --slowest: give one');
    return 2;
  }
  const files = positionals.length ? positionals : [loadConfig().OTEL_TRACES_FILE];
  let spans;
  try {
    spans = readSpanFiles(files);
  } catch (err) {
    const hint = positionals.length ? '' : ` (OTEL_TRACES_FILE; give the span files: npm run trace -- FILE...)`;
    console.error(`cannot read spans: ${(err as Error).message}${hint}`);
    return 2;
  }
  const traces = orderTraces(spans);
  const trace = values.order === undefined ? slowestOrder(traces) : traces.find((t) => t.orderId === values.order);
  if (!trace) {
    console.error(values.order === undefined ? `no placed order in ${files.join(', ')}` : `order ${values.order} is not in ${files.join(', ')}`);
    return 1;
  }
  console.log(formatTimeline(trace));
  return 0;
}

process.exitCode = main();
