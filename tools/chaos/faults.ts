/** Each fault injected and repaired: processes killed, Redis' faults, Temporal's relay, the stack's services. */
import { readFileSync } from 'node:fs';
import type { Child } from '../../test/support/processes';
import calculateSlot from 'cluster-key-slot';
import { shardKeys, type SaleLayout } from '../../src/reservation/layout';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { clusterNodesInfo, dropReplicaLinks, masterOf, migrateSlot, nodePid, replicaPort } from '../../test/support/localCluster';
import { dropConnections } from '../../test/support/connectionDrops';
import { loadSale } from '../../src/sale/sales';
import { Fleet, livePid, onStack, services } from './fleet';
import type { PlannedFault } from './plan';
import type { Clients, Observed } from './traffic';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Injects one fault and repairs it forMs later (the repair is awaited, so a run's faults end before it settles). */
export async function inject(fault: PlannedFault, fleet: Fleet, clients: Clients, layout: SaleLayout, seen: Observed): Promise<void> {
  const handled = (await processFault(fault, fleet)) || (await redisFault(fault, fleet, clients, layout, seen)) || (await relayFault(fault, fleet)) || (await serviceFault(fault));
  if (!handled) throw new Error(`no injection for the fault ${fault.kind}`);
}

/** An API or a worker SIGKILLed, then started again. @returns whether the fault was one of these */
async function processFault(fault: PlannedFault, fleet: Fleet): Promise<boolean> {
  // A process still starting (the repair of an earlier fault on it) is killed once it is up: killing it before
  // would fail that repair, not the product (two kills of one worker seconds apart).
  const kill = async (slot: string, children: Child[]) => {
    await fleet.settled(slot);
    const child = children[fault.target];
    if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
  };
  switch (fault.kind) {
    case 'api-kill':
      await kill(`api-${fault.target}`, fleet.apis);
      await sleep(fault.forMs);
      await fleet.startApi(fault.target);
      return true;
    case 'worker-kill':
      await kill(`worker-${fault.target}`, fleet.workers);
      await sleep(fault.forMs);
      await fleet.startWorker(fault.target);
      return true;
    default:
      return false;
  }
}

/** Redis' faults: a node killed, scripts flushed, a slot moved, connections dropped, a shard's data lost. */
async function redisFault(fault: PlannedFault, fleet: Fleet, clients: Clients, layout: SaleLayout, seen: Observed): Promise<boolean> {
  const tag = layout.tags[fault.target % layout.tags.length];
  switch (fault.kind) {
    case 'redis-kill':
      await onStack(async () => {
        const pid = livePid('redis/redis.pid', 'redis-server');
        if (pid) process.kill(pid, 'SIGKILL');
      });
      await sleep(fault.forMs);
      await services('up');
      return true;
    case 'redis-script-flush':
      await clients.redis.script('FLUSH');
      return true;
    case 'redis-master-kill':
      await onStack(async () => {
        const master = masterOf(tag);
        if (master) process.kill(nodePid(Number(master.split(':')[1])), 'SIGKILL');
      });
      await sleep(fault.forMs);
      // Back as a replica of its successor; `up` returns once every replica is in sync.
      await services('up');
      return true;
    case 'redis-reshard':
      await reshard(tag, fault.forMs);
      return true;
    case 'redis-failover-lost-writes':
      await failoverLosingWrites(tag, fault.forMs);
      // The killed master back, as a replica of the promoted one.
      await services('up');
      return true;
    case 'redis-connections-drop': {
      const storm = dropConnections(clusterNodesInfo().filter((n) => n.master && !n.failed).map((n) => n.port), 20);
      await sleep(fault.forMs);
      await storm.stop();
      return true;
    }
    case 'redis-shard-loss':
      await loseShard(clients, layout, fault.target % layout.tags.length, seen);
      await sleep(fault.forMs);
      await rebuild(clients, layout.saleId);
      return true;
    case 'shard-loss-workers-stopped':
      await Promise.all(fleet.workers.map((_, i) => killWorker(fleet, i)));
      await sleep(fault.forMs);
      // Redis may be down for another fault of the run (SIGKILLed): the loss waits until it is back.
      await untilDone(() => loseShard(clients, layout, fault.target % layout.tags.length, seen));
      await rebuild(clients, layout.saleId);
      await Promise.all(fleet.workers.map((_, i) => fleet.startWorker(i)));
      return true;
    default:
      return false;
  }
}

/**
 * A failover that loses writes, on the master serving a shard's tag: its replica stopped (SIGSTOP) and its
 * replication link closed, so that what the master writes for forMs reaches no replica (nor the stopped one's
 * socket); then the master SIGKILLed, the replica resumed and promoted at once (CLUSTER FAILOVER TAKEOVER), before
 * anything could teach it those writes: reservations, releases, claims and marks of that stretch are gone from the
 * shard, while PostgreSQL keeps what it was told.
 */
async function failoverLosingWrites(tag: string, forMs: number): Promise<void> {
  await onStack(async () => {
    const master = masterOf(tag);
    const masterPort = master && Number(master.split(':')[1]);
    const replica = masterPort ? replicaPort(masterPort) : undefined;
    if (!masterPort || replica === undefined) return;
    const replicaPid = nodePid(replica);
    process.kill(replicaPid, 'SIGSTOP');
    try {
      dropReplicaLinks(masterPort);
      await sleep(forMs);
      process.kill(nodePid(masterPort), 'SIGKILL');
    } finally {
      process.kill(replicaPid, 'SIGCONT');
    }
    await promisify(execFile)('redis-cli', ['-h', '127.0.0.1', '-p', String(replica), 'CLUSTER', 'FAILOVER', 'TAKEOVER']);
  });
}

/** Moves the slot of a shard's tag to another master, and back forMs later. */
async function reshard(tag: string, forMs: number): Promise<void> {
  const slot = calculateSlot(tag);
  const moved = await onStack(async () => {
    const from = masterOf(tag);
    const to = clusterNodesInfo().find((n) => n.master && !n.failed && n.address !== from);
    if (!from || !to) return undefined;
    await migrateSlot(slot, to.port);
    return Number(from.split(':')[1]);
  });
  await sleep(forMs);
  if (moved !== undefined) await onStack(() => migrateSlot(slot, moved));
}

/** Temporal reached through the relay: frozen, cut, or slowed. */
async function relayFault(fault: PlannedFault, fleet: Fleet): Promise<boolean> {
  switch (fault.kind) {
    case 'temporal-freeze':
      fleet.relay.freeze();
      await sleep(fault.forMs);
      fleet.relay.thaw();
      return true;
    case 'temporal-drop':
      await fleet.relay.cut();
      await sleep(fault.forMs);
      await fleet.relay.restore();
      return true;
    case 'temporal-latency':
      fleet.relay.delay(200);
      await sleep(fault.forMs);
      fleet.relay.delay(0);
      return true;
    default:
      return false;
  }
}

/** A service of the stack stopped or killed, then brought up again by services.sh. */
async function serviceFault(fault: PlannedFault): Promise<boolean> {
  // Stopped through services.sh (`stop NAME [MODE]`) for forMs, then started again by `up`.
  const outage = async (...stop: string[]) => {
    await services('stop', ...stop);
    await sleep(fault.forMs);
    await services('up');
  };
  switch (fault.kind) {
    case 'kafka-stop':
      await outage('kafka');
      return true;
    case 'postgres-restart-fast':
    case 'postgres-restart-immediate':
      await outage('postgres', fault.kind === 'postgres-restart-fast' ? 'fast' : 'immediate');
      return true;
    case 'temporal-restart':
      await outage('temporal');
      return true;
    case 'temporal-frontend-restart':
      await outage('temporal-frontend');
      return true;
    case 'temporal-history-kill':
      await onStack(async () => {
        const pid = livePid('temporal-server/history.pid', 'server');
        // Every service of the server is a process named `server`: its command line says which.
        if (pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--service\0history')) process.kill(pid, 'SIGKILL');
      });
      await sleep(fault.forMs);
      await services('up');
      return true;
    default:
      return false;
  }
}

/** SIGKILLs worker i once any start of it in progress has ended, and waits until it has exited. */
export async function killWorker(fleet: Fleet, i: number): Promise<void> {
  await fleet.settled(`worker-${i}`);
  const child = fleet.workers[i];
  if (child.process.exitCode !== null || child.process.signalCode !== null) return;
  const exited = new Promise((resolve) => child.process.once('exit', resolve));
  child.process.kill('SIGKILL');
  await exited;
}

/**
 * Deletes every key of the sale's shard k at once (one MULTI: one slot), as a master restarted without its data
 * loses them, and records the orders whose reservations went with them.
 */
export async function loseShard(clients: Clients, layout: SaleLayout, k: number, seen: Observed): Promise<void> {
  const keys = shardKeys(layout.tags[k]);
  const items = [...layout.itemShards].filter(([, shards]) => shards > k).map(([itemId]) => itemId);
  const replies = await onStack(() =>
    clients.redis
      .multi()
      .hkeys(keys.reservations)
      .del(keys.buyers, keys.reservations, keys.claims, keys.startQueue, keys.loaded, keys.released, ...items.flatMap((id) => [keys.stock(id), keys.returns(id)]))
      .exec(),
  );
  const [err, held] = replies?.[0] ?? [new Error('MULTI without replies')];
  if (err) throw err;
  for (const orderId of held as string[]) seen.lostWithShard.add(orderId);
}

/** The operator's repair after a shard lost its data: a forced rebuild (only the lost shard is rewritten), retried while Redis or PostgreSQL is down. */
export function rebuild(clients: Clients, saleId: number): Promise<void> {
  return untilDone(() => onStack(() => loadSale(clients.pool, clients.store, saleId, true, true)).then(() => undefined));
}

/** Runs action again, every second for up to 2 minutes, while it fails (a service it needs is down for another fault). */
export async function untilDone(action: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      return await action();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(1000);
    }
  }
}

/** The campaign's shared clients, for set-up and the checks. */
