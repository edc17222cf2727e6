/** The three-broker Kafka cluster's faults (`--kafka-cluster`, plan.ts): on the broker that leads the sale's partition. */
import type { SaleLayout } from '../../src/reservation/layout';
import { killBroker, leaderOf, moveLeader } from '../../test/support/kafkaCluster';
import { untilDone } from './faults';
import { services } from './fleet';
import type { PlannedFault } from './plan';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The leadership move under way, if any: a reassignment started over another would leave fewer replicas. */
let moving: Promise<void> = Promise.resolve();

/**
 * Injects a Kafka cluster fault and repairs it forMs later (`services.sh up` starts the killed brokers again):
 * the leader of the partition of one of the sale's items (the events' key) SIGKILLed; its leadership moved by a
 * reassignment (no repair: the old leader stays a follower); or it and another broker SIGKILLed.
 * @returns whether the fault was one of these
 */
export async function kafkaFault(fault: PlannedFault, topic: string, layout: SaleLayout): Promise<boolean> {
  const items = [...layout.itemShards.keys()];
  const key = String(items[fault.target % items.length]);
  switch (fault.kind) {
    case 'kafka-broker-kill':
      killBroker(await leaderOf(topic, key));
      break;
    case 'kafka-leader-move':
      // One move at a time, tried again while the cluster cannot finish it (two brokers down for another fault).
      moving = moving.then(() => untilDone(async () => void (await moveLeader(topic, key))));
      await moving;
      return true;
    case 'kafka-brokers-down': {
      const leader = await leaderOf(topic, key);
      killBroker(leader);
      killBroker(leader === 1 ? 2 : 1);
      break;
    }
    default:
      return false;
  }
  await sleep(fault.forMs);
  await services('up');
  return true;
}
