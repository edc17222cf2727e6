/** A sale's one stock shard loses its data with orders in flight, then rebuilt (test/lostShard.ts), on one Redis. */
import { testConfig } from '../helpers';
import { lostShardSuite } from '../lostShard';

// Workflows wait for no worker until the rebuild: the starter's backlog gate must not hold their starts.
lostShardSuite(testConfig({ STARTER_MAX_BACKLOG: '10000' }), 1, 0);
