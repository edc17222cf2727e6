/** Shard 1 of a hot item's 3 stock shards loses its data with orders in flight, then rebuilt (test/support/lostShard.ts), on the local Redis Cluster. */
import { lostShardSuite } from '../support/lostShard';
import { clusterConfig } from '../support/cluster';

// Workflows wait for no worker until the rebuild: the starter's backlog gate must not hold their starts.
lostShardSuite(clusterConfig({ STARTER_MAX_BACKLOG: '10000' }), 3, 1);
