/**
 * `npm run chaos [-- --runs N --seed S --keep-logs --cluster | --temporal-server | --kafka-cluster]`: the randomized fault campaign
 * (tools/chaos/campaign.ts) on the local stack, or with --cluster on its Redis Cluster (3 stock shards per item,
 * WAIT for a replica, a master killed or a slot migrated among the faults), or with --temporal-server on the real
 * Temporal server (its history service killed, its frontend restarted), or with --kafka-cluster on the three-broker
 * Kafka cluster (a broker killed, a partition's leader moved, two brokers down): N runs (default 10) with seeds S, S+1, …
 * (default: from the clock, printed), one line each
 * and a summary table; exits 1 when a run found a violation (its seed, replay command and logs are printed),
 * 2 on bad arguments.
 */
import { parseArgs } from 'node:util';
import { runCampaign } from './campaign';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '10' }, seed: { type: 'string' }, 'keep-logs': { type: 'boolean', default: false }, cluster: { type: 'boolean', default: false }, 'temporal-server': { type: 'boolean', default: false }, 'kafka-cluster': { type: 'boolean', default: false } },
});
const runs = Number(values.runs);
const seed = values.seed === undefined ? Date.now() % 1_000_000 : Number(values.seed);
if (!Number.isSafeInteger(runs) || runs < 1 || !Number.isSafeInteger(seed) || seed < 0) {
  console.error('--runs and --seed take whole numbers (runs >= 1, seed >= 0)');
  process.exit(2);
}
const temporalServer = values['temporal-server'];
const kafkaCluster = values['kafka-cluster'];
if ([values.cluster, temporalServer, kafkaCluster].filter(Boolean).length > 1) {
  console.error('--cluster, --temporal-server and --kafka-cluster: choose one');
  process.exit(2);
}
const on = values.cluster ? ' on the Redis Cluster' : temporalServer ? ' on the real Temporal server' : kafkaCluster ? ' on the Kafka cluster' : '';
console.log(`chaos campaign: ${runs} run(s) from seed ${seed}${on}`);
runCampaign({ seeds: Array.from({ length: runs }, (_, i) => seed + i), reportDir: 'reports', keepLogs: values['keep-logs'], cluster: values.cluster, temporalServer, kafkaCluster, print: (line) => console.log(line) }).then(
  (results) => process.exit(results.some((r) => r.violations.length) ? 1 : 0),
  (err) => {
    console.error(`chaos campaign failed: ${err instanceof Error ? err.stack : String(err)}`);
    process.exit(1);
  },
);
